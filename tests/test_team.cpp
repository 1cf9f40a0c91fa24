// on_threads and with_team (kernels/team.h): every thread of a job runs its part once, barriers hold, nested calls
// run alone, and a team survives thousands of jobs and an exception from the function it serves.
#include <omp.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tdyn
