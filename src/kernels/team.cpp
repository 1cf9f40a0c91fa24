#include "kernels/team.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include "kernels/serial_blas.h"

namespace tdyn {
namespace {

// How long a waiting thread spins before it sleeps: far longer than the gaps between a decoding step's products
// (tens of microseconds), far shorter than anything a user would see.
constexpr auto kSpin = std::chrono::milliseconds(2);

void pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() holds, checking the clock every 1024 turns; false when kSpin passed first.
template <class Done>
bool spin_until(Done done) {
  const auto start = std::chrono::steady_clock::now();
  for (unsigned turn = 1;; ++turn) {
    if (done()) return true;
    pause();
    if (turn % 1024 == 0 && std::chrono::steady_clock::now() - start > kSpin) return false;
  }
}

// Waits until `counter` is no longer `seen` and returns its new value: spins, then sleeps on it.
uint32_t wait_for_change(const std::atomic<uint32_t>& counter, uint32_t seen) {
  if (!spin_until([&] { return counter.load(std::memory_order_acquire) != seen; })) counter.wait(seen, std::memory_order_acquire);
  return counter.load(std::memory_order_acquire);
}

struct Team {
  int threads = 1;
  const void* job = nullptr;
  detail::JobFunction run = nullptr;
  bool closing = false;              // set, with a last bump of `jobs`, when with_team's function has returned
  std::atomic<uint32_t> jobs{0};     // bumped for every job handed out
  std::atomic<int> busy{0};          // threads other than the leader still on the current job
  std::atomic<int> arrived{0};       // threads at the current barrier
  std::atomic<uint32_t> barriers{0}; // barriers passed
};

// How this thread runs the job it is on, if any: job_barrier() and nested on_threads calls go by it.
enum class Running { NoJob, Alone, OwnRegion, InTeam };
thread_local Running running = Running::NoJob;
thread_local Team* job_team = nullptr;   // the team of an InTeam job
thread_local Team* led_team = nullptr;   // the team this thread leads (inside with_team)

// Runs this thread's part of a job, then puts back how the thread was running before. noexcept: an exception
// from a job ends the program, as one leaving an OpenMP region does (the other threads could not be told).
void run_job(Running how, Team* team, const void* job, detail::JobFunction run, int thread, int threads) noexcept {
  const Running outer = running;
  Team* const outer_team = job_team;
  running = how;
  job_team = team;
  run(job, thread, threads);
  running = outer;
  job_team = outer_team;
}

// A team member other than the leader: runs each job handed out until the team closes.
void serve(Team& team, int thread) {
  uint32_t seen = 0;
  for (;;) {
    seen = wait_for_change(team.jobs, seen);
    if (team.closing) return;
    run_job(Running::InTeam, &team, team.job, team.run, thread, team.threads);
    team.busy.fetch_sub(1, std::memory_order_release);
  }
}

void run_in_team(Team& team, const void* job, detail::JobFunction run) {
  team.job = job;
  team.run = run;
  team.busy.store(team.threads - 1, std::memory_order_relaxed);
  team.jobs.fetch_add(1, std::memory_order_release);
  team.jobs.notify_all();
  run_job(Running::InTeam, &team, job, run, 0, team.threads);
  // The others are running the job right now, not asleep: spin, yielding the core once the job runs long.
  const auto finished = [&] { return team.busy.load(std::memory_order_acquire) == 0; };
  while (!spin_until(finished)) std::this_thread::yield();
}

}  // namespace

namespace detail {

void on_threads(bool parallel, const void* job, JobFunction run) {
  if (running == Running::NoJob && parallel && led_team && led_team->threads > 1) {
    run_in_team(*led_team, job, run);
  } else if (running == Running::NoJob && parallel && !led_team && !omp_in_parallel() && omp_get_max_threads() > 1) {
#pragma omp parallel
    run_job(Running::OwnRegion, nullptr, job, run, omp_get_thread_num(), omp_get_num_threads());
  } else {
    run_job(Running::Alone, nullptr, job, run, 0, 1);
  }
}

}  // namespace detail

void job_barrier() {
  if (running == Running::OwnRegion) {
#pragma omp barrier
  } else if (running == Running::InTeam) {
    Team& team = *job_team;
    const uint32_t passed = team.barriers.load(std::memory_order_acquire);
    if (team.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == team.threads) {
      team.arrived.store(0, std::memory_order_relaxed);
      team.barriers.fetch_add(1, std::memory_order_release);
      team.barriers.notify_all();
    } else {
      wait_for_change(team.barriers, passed);
    }
  }
}

int available_threads() {
  if (running != Running::NoJob) return 1;
  if (led_team) return led_team->threads;
  return omp_in_parallel() ? 1 : omp_get_max_threads();
}

void with_team(const std::function<void()>& fn) {
  if (running != Running::NoJob || led_team || omp_in_parallel() || omp_get_max_threads() < 2) {
    fn();
    return;
  }
  Team team;
  SerialBlas serial_blas;
  std::exception_ptr error;
#pragma omp parallel
  {
    if (omp_get_thread_num() == 0) {
      team.threads = omp_get_num_threads();
      led_team = &team;
      try {
        fn();
      } catch (...) {
        error = std::current_exception();
      }
      led_team = nullptr;
      team.closing = true;
      team.jobs.fetch_add(1, std::memory_order_release);
      team.jobs.notify_all();
    } else {
      serve(team, omp_get_thread_num());
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace tdyn
