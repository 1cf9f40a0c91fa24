// Wall-clock seconds of the named phases of a run, in the order they ran: results.json's "timings".
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace tdyn {

using PhaseTimes = std::vector<std::pair<std::string, double>>;

// Appends the seconds from its construction to its end to `times` under `phase`.
class PhaseClock {
 public:
  PhaseClock(PhaseTimes& times, std::string phase)
      : times_(times), phase_(std::move(phase)), start_(std::chrono::steady_clock::now()) {}
  ~PhaseClock() { times_.emplace_back(phase_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count()); }
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;

 private:
  PhaseTimes& times_;
  std::string phase_;
  std::chrono::steady_clock::time_point start_;
};

// Runs `work`, timed as `phase`, and returns what it returns.
template <typename Work>
auto timed(PhaseTimes& times, std::string phase, Work&& work) {
  PhaseClock clock(times, std::move(phase));
  return work();
}

}  // namespace tdyn
