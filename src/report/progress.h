// Progress of long loops (samples, layers, iterations) on stderr. On a terminal: one line redrawn in place
// with a bar, count, rate and ETA (at most 10 redraws a second). Otherwise (logs, CI): a plain line every
// 10 % or 30 s. Nothing when quiet (set_progress_quiet(true), the CLI's --quiet).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

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
  int last_decile_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace tdyn
