// Progress of long loops (samples, layers, iterations) on stderr. On a terminal: one line redrawn in place
// with a bar, count, rate and ETA (at most 10 redraws a second). Otherwise (logs, CI): a plain line at most
// every 10 s while the loop runs, and one when it ends, so a short stage is one line. Nothing when quiet
// (set_progress_quiet(true), the CLI's --quiet).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/progress.h"

namespace tdyn {

void set_progress_quiet(bool quiet);
bool progress_quiet();

class Progress {
 public:
  Progress(std::string label, int64_t total, std::string unit = "it");
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(int64_t n = 1);  // thread-compatible: call from one thread
  void finish();                // final line; called by the destructor if not called before

 private:
  void draw(bool final_line);
  std::string label_, unit_;
  int64_t total_, done_ = 0;
  bool tty_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// The CLI's ProgressSink: notes as "PREFIX: line", loops as a Progress bar each; nothing when quiet. PREFIX is
// "tdyn COMMAND", the same for every line of a command.
class StderrProgress final : public ProgressSink {
 public:
  explicit StderrProgress(std::string prefix) : prefix_(std::move(prefix)) {}
  void note(const std::string& line) override;
  void loop(const std::string& label, int64_t done, int64_t total, const std::string& unit) override;

 private:
  std::string prefix_, label_;
  int64_t done_ = 0;
  std::unique_ptr<Progress> bar_;  // the loop being drawn
};

}  // namespace tdyn
