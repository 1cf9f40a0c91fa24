// on_threads and with_team (kernels/team.h): every thread of a job runs its part once, barriers hold, nested calls
// run alone, and a team survives thousands of jobs and an exception from the function it serves.
#include <cblas.h>
#include <omp.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/serial_blas.h"
#include "kernels/team.h"

namespace tdyn {
namespace {

// Sets the OpenMP thread count for one test and puts the old one back.
class Threads {
 public:
  explicit Threads(int n) : before_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~Threads() { omp_set_num_threads(before_); }

 private:
  int before_;
};

// Runs a two-phase job `jobs` times: each thread writes its share of a vector, waits at the barrier, then sums
// another thread's share. Returns how many jobs saw a wrong sum, a wrong thread count or a thread twice.
int failed_two_phase_jobs(int jobs, int expected_threads) {
  const int64_t n = 1000;
  std::vector<int64_t> values(n);
  int failures = 0;
  for (int job = 0; job < jobs; ++job) {
    std::atomic<int> ran{0}, wrong{0};
    on_threads(true, [&](int thread, int threads) {
      ran.fetch_or(1 << thread);
      if (threads != expected_threads) wrong.fetch_add(1);
      const auto [begin, end] = thread_share(n, threads, thread);
      for (int64_t i = begin; i < end; ++i) values[i] = job + i;
      job_barrier();
      const auto [other_begin, other_end] = thread_share(n, threads, (thread + 1) % threads);
      for (int64_t i = other_begin; i < other_end; ++i)
        if (values[i] != job + i) wrong.fetch_add(1);
      job_barrier();  // no thread writes the next job's values before all have read these
    });
    if (wrong.load() != 0 || ran.load() != (1 << expected_threads) - 1) ++failures;
  }
  return failures;
}

TEST(Team, JobsRunOnEveryThreadOfTheirOwnRegion) {
  const Threads two(2);
  EXPECT_EQ(available_threads(), 2);
  EXPECT_EQ(failed_two_phase_jobs(50, 2), 0);
}

TEST(Team, ManyJobsInOneTeam) {
  const Threads two(2);
  int failures = -1, inside = 0;
  with_team([&] {
    inside = available_threads();
    failures = failed_two_phase_jobs(5000, 2);
  });
  EXPECT_EQ(inside, 2);
  EXPECT_EQ(failures, 0);
}

TEST(Team, NotParallelOrNestedRunsAlone) {
  const Threads two(2);
  with_team([&] {
    int calls = 0, thread_seen = -1, threads_seen = 0;
    on_threads(false, [&](int thread, int threads) {
      ++calls;
      thread_seen = thread;
      threads_seen = threads;
    });
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(thread_seen, 0);
    EXPECT_EQ(threads_seen, 1);
    std::atomic<int> nested_calls{0}, outer_calls{0};
    on_threads(true, [&](int, int) {
      outer_calls.fetch_add(1);
      EXPECT_EQ(available_threads(), 1);
      on_threads(true, [&](int thread, int threads) {
        EXPECT_EQ(thread, 0);
        EXPECT_EQ(threads, 1);
        job_barrier();  // alone: returns at once
        nested_calls.fetch_add(1);
      });
      job_barrier();  // still the outer job's barrier
    });
    EXPECT_EQ(outer_calls.load(), 2);
    EXPECT_EQ(nested_calls.load(), 2);
  });
}

TEST(Team, OneThreadOrInsideARegionJustCalls) {
  {
    const Threads one(1);
    int threads_seen = 0;
    with_team([&] { on_threads(true, [&](int, int threads) { threads_seen = threads; }); });
    EXPECT_EQ(threads_seen, 1);
  }
  const Threads two(2);
  std::atomic<int> calls{0};
#pragma omp parallel num_threads(2)
  with_team([&] { on_threads(true, [&](int, int threads) { calls.fetch_add(threads); }); });
  EXPECT_EQ(calls.load(), 2);  // each of the region's threads ran its job alone
}

TEST(Team, ExceptionsPassToTheCallerAndTheNextTeamWorks) {
  const Threads two(2);
  EXPECT_THROW(with_team([] {
                 on_threads(true, [](int, int) {});
                 throw std::runtime_error("stop");
               }),
               std::runtime_error);
  int failures = -1;
  with_team([&] { failures = failed_two_phase_jobs(100, 2); });
  EXPECT_EQ(failures, 0);
}

// parallel_tasks runs every task once, on BLAS's single thread while several run, and restores BLAS's threads;
// of several failing tasks, the lowest one's exception reaches the caller, and the tasks after a failure are skipped.
TEST(ParallelTasks, EveryTaskOnceTheLowestFailureRethrown) {
  const Threads two(2);
  const int blas_threads = openblas_get_num_threads();
  std::vector<std::atomic<int>> runs(40);
  std::atomic<int> blas_threads_seen{0};
  parallel_tasks(40, [&](int64_t i) {
    runs[static_cast<size_t>(i)].fetch_add(1);
    blas_threads_seen = std::max(blas_threads_seen.load(), openblas_get_num_threads());
  });
  for (const auto& r : runs) EXPECT_EQ(r.load(), 1);
  EXPECT_EQ(blas_threads_seen.load(), 1);
  EXPECT_EQ(openblas_get_num_threads(), blas_threads);

  std::atomic<int> started{0};
  try {
    parallel_tasks(1000, [&](int64_t i) {
      started.fetch_add(1);
      if (i == 3 || i == 5) throw std::runtime_error(std::to_string(i));
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "3");
  }
  EXPECT_LT(started.load(), 1000);
  EXPECT_EQ(openblas_get_num_threads(), blas_threads);

  // Inside a parallel region: in order, on the calling thread.
  std::vector<int64_t> order;
#pragma omp parallel num_threads(2)
#pragma omp single
  parallel_tasks(5, [&](int64_t i) { order.push_back(i); });
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

// Every index of a SharedRange goes to exactly one thread, in chunks of at least the grain (but the last) and at
// most a quarter of what was left on two threads.
TEST(Team, SharedRangeHandsOutEveryIndexOnce) {
  const Threads two(2);
  int failures = 0;
  with_team([&] {
    for (int job = 0; job < 200; ++job) {
      const int64_t n = 1000 + job;
      std::vector<std::atomic<int>> taken(n);
      std::atomic<int> bad_chunks{0};
      SharedRange range(n, 16);
      on_threads(true, [&](int, int threads) {
        for (auto [begin, end] = range.next(threads); begin < end; std::tie(begin, end) = range.next(threads)) {
          if ((end - begin < 16 && end != n) || (end - begin > 16 && end - begin > (n - begin) / 4)) bad_chunks.fetch_add(1);
          for (int64_t i = begin; i < end; ++i) taken[i].fetch_add(1);
        }
      });
      int64_t wrong = 0;
      for (const auto& t : taken) wrong += t.load() != 1;
      if (wrong != 0 || bad_chunks.load() != 0) ++failures;
    }
  });
  EXPECT_EQ(failures, 0);
  SharedRange empty(0, 16), coarse(10, 16);
  EXPECT_EQ(empty.next(2).first, empty.next(2).second);
  EXPECT_EQ(coarse.next(2), (std::pair<int64_t, int64_t>{0, 10}));
  EXPECT_EQ(coarse.next(2), (std::pair<int64_t, int64_t>{10, 10}));
}

// A thread that stops after its first chunk, until the other has taken everything, ends up with at most that
// chunk: a quarter of the range on two threads. The other takes the rest.
TEST(Team, SharedRangeGivesASlowThreadLess) {
  const Threads two(2);
  const int64_t n = 4096;
  std::atomic<int64_t> slow_rows{-1}, fast_rows{0};
  with_team([&] {
    SharedRange range(n, 16);
    std::atomic<bool> drained{false};
    on_threads(true, [&](int thread, int threads) {
      int64_t mine = 0;
      for (auto [begin, end] = range.next(threads); begin < end; std::tie(begin, end) = range.next(threads)) {
        mine += end - begin;
        if (thread == 1)
          while (!drained.load()) std::this_thread::yield();
      }
      if (thread == 0) {
        drained.store(true);
        fast_rows.store(mine);
      } else {
        slow_rows.store(mine);
      }
    });
  });
  EXPECT_LE(slow_rows.load(), n / 4);
  EXPECT_EQ(slow_rows.load() + fast_rows.load(), n);
}

}  // namespace
}  // namespace tdyn
