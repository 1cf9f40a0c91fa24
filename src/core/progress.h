// How a long computation tells its caller how far it is: one interface for every analysis. The CLI draws on
// stderr (report/progress.h, StderrProgress), tdyn's Python functions pass each line to a callback, and tests
// and library callers that want nothing pass silent_progress().
#pragma once

#include <cstdint>
#include <string>

namespace tdyn {

class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  // A line of news: a phase began, or a result worth seeing before the run ends ("spectrum of F_3: ...").
  virtual void note(const std::string& line) = 0;
  // `done` of the `total` `unit`s of the loop `label` are finished; `done` only grows and reaches `total` last.
  // Called from one thread at a time.
  virtual void loop(const std::string& label, int64_t done, int64_t total, const std::string& unit) = 0;
};

// Says nothing.
inline ProgressSink& silent_progress() {
  struct Silent final : ProgressSink {
    void note(const std::string&) override {}
    void loop(const std::string&, int64_t, int64_t, const std::string&) override {}
  };
  static Silent silent;
  return silent;
}

// Counts one loop's steps into a sink. Not thread-safe: advance from one thread (or under a lock).
class ProgressLoop {
 public:
  ProgressLoop(ProgressSink& sink, std::string label, int64_t total, std::string unit)
      : sink_(sink), label_(std::move(label)), unit_(std::move(unit)), total_(total) {}
  void advance(int64_t n = 1) {
    done_ += n;
    sink_.loop(label_, done_, total_, unit_);
  }

 private:
  ProgressSink& sink_;
  std::string label_, unit_;
  int64_t total_, done_ = 0;
};

}  // namespace tdyn
