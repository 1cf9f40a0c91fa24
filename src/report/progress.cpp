#include "report/progress.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

namespace tdyn {
namespace {

std::atomic<bool> g_quiet{false};

std::string format_seconds(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

}  // namespace

void set_progress_quiet(bool quiet) { g_quiet = quiet; }
bool progress_quiet() { return g_quiet; }

Progress::Progress(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), tty_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

Progress::~Progress() { finish(); }

void Progress::advance(int64_t n) {
  done_ += n;
  if (g_quiet || finished_) return;
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_draw_).count();
  if (since >= (tty_ ? 0.1 : 10.0)) {
    last_draw_ = now;
    draw(false);
  }
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (!g_quiet && done_ > 0) draw(true);
}

void Progress::draw(bool final_line) {
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = elapsed > 0 ? done_ / elapsed : 0;
  double eta = rate > 0 && total_ > done_ ? (total_ - done_) / rate : 0;
  std::string count = total_ > 0 ? fmt::format("{}/{}", done_, total_) : fmt::format("{}", done_);
  std::string timing = final_line ? fmt::format("{:.3g} {}/s, {}", rate, unit_, format_seconds(elapsed))
                                  : fmt::format("{:.3g} {}/s, ETA {}", rate, unit_, format_seconds(eta));
  if (tty_) {
    const int width = 24;
    int filled = total_ > 0 ? static_cast<int>(width * std::min<int64_t>(done_, total_) / total_) : 0;
    std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
    std::fprintf(stderr, "\r%s [%s] %s %s\033[K%s", label_.c_str(), bar.c_str(), count.c_str(), timing.c_str(),
                 final_line ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s: %s %s\n", label_.c_str(), count.c_str(), timing.c_str());
  }
  std::fflush(stderr);
}

void StderrProgress::note(const std::string& line) {
  if (!g_quiet) std::cerr << prefix_ << ": " << line << "\n";
}

void StderrProgress::loop(const std::string& label, int64_t done, int64_t total, const std::string& unit) {
  if (!bar_ || label != label_) {
    bar_ = std::make_unique<Progress>(prefix_ + ": " + label, total, unit);
    label_ = label;
    done_ = 0;
  }
  bar_->advance(done - done_);
  done_ = done;
  if (done >= total) bar_.reset();  // draws the final line
}

}  // namespace tdyn
