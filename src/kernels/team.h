// Work shared over the threads, for loops short enough that handing them to the threads is what they cost.
//
// A decoding step runs about four products a layer, each some tens of microseconds on two threads at d = 768
// (docs/performance.md). Opened one OpenMP region each, the step's other thread spends the gaps between them
// waiting the way libgomp waits: a short spin (tdyn sets GOMP_SPINCOUNT=1000, which prefill needs: see
// tools/tdyn/main.cpp), then asleep in the kernel, so nearly every product first wakes it through a futex. `with_team` keeps one region open around such a stretch instead: the calling thread runs it,
// and the other threads spin in their own loop for the jobs `on_threads` hands them, as long as the stretch lasts.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <utility>

namespace tdyn {

namespace detail {
using JobFunction = void (*)(const void* job, int thread, int threads);
void on_threads(bool parallel, const void* job, JobFunction run);
}  // namespace detail

// When `parallel`, runs job(thread, threads) on every thread of the team this thread leads (see with_team), or
// else in an OpenMP region of its own (unless one is open already); otherwise on this thread alone as (0, 1).
// Returns when every thread has finished. A job that throws ends the program, as in an OpenMP region. A job that
// calls on_threads runs that one alone.
template <class Job>
void on_threads(bool parallel, const Job& job) {
  detail::on_threads(parallel, &job, [](const void* j, int thread, int threads) { (*static_cast<const Job*>(j))(thread, threads); });
}

// Thread `thread` of `threads`'s part of [0, n): contiguous blocks, in thread order, as even as they can be.
inline std::pair<int64_t, int64_t> thread_share(int64_t n, int threads, int thread) {
  return {n * thread / threads, n * (thread + 1) / threads};
}

// f(begin, end) on each thread's thread_share of [0, n), through on_threads(parallel, ...).
template <class F>
void on_thread_shares(bool parallel, int64_t n, const F& f) {
  on_threads(parallel, [&](int thread, int threads) {
    const auto [begin, end] = thread_share(n, threads, thread);
    f(begin, end);
  });
}

// [0, n) handed out in chunks to the threads of one on_threads job as each asks for more: the first chunks are
// large and later ones smaller (a 2·threads-th of what is left, at least `grain`), so a thread on a slower or
// busier core takes fewer. Virtual cores can differ by half in memory speed (docs/performance.md), and with equal
// shares every product waits for the slow core. Created before the job, shared by reference.
class SharedRange {
 public:
  SharedRange(int64_t n, int64_t grain) : n_(n), grain_(std::max<int64_t>(grain, 1)) {}
  // The next chunk [begin, end) for one of `threads` threads; empty (begin == end) once all are handed out.
  std::pair<int64_t, int64_t> next(int threads) {
    int64_t begin = next_.load(std::memory_order_relaxed);
    for (;;) {
      if (begin >= n_) return {n_, n_};
      const int64_t end = std::min(n_, begin + std::max(grain_, (n_ - begin) / (2 * threads)));
      if (next_.compare_exchange_weak(begin, end, std::memory_order_relaxed)) return {begin, end};
    }
  }

 private:
  const int64_t n_, grain_;
  alignas(64) std::atomic<int64_t> next_{0};  // a line of its own: every thread writes it
};

// Inside a job of on_threads: waits until every thread running the job has reached it.
void job_barrier();

// The threads a job of on_threads(true, ...) called here would run on.
int available_threads();

// Runs fn on this thread with the other OpenMP threads kept as a team for on_threads (one parallel region for
// all of fn), BLAS single-threaded meanwhile (OpenBLAS's threads would take the cores the team spins on).
// Exceptions from fn pass on to the caller. Inside a parallel region, or with one thread, it just calls fn.
void with_team(const std::function<void()>& fn);

}  // namespace tdyn
