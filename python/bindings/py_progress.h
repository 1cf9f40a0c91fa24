// The `progress=` argument of tdyn's analysis functions: None says nothing; a callable gets each note and, about
// every 10 % of a loop, a line "label: done/total unit". An exception the callable raises stops the callbacks
// and is raised again when the analysis returns (an analysis can call from inside a parallel loop, where no
// exception may pass).
#pragma once

#include <optional>
#include <string>

#include <fmt/format.h>
#include <pybind11/pybind11.h>

#include "core/progress.h"

namespace tdyn::python {

namespace py = pybind11;

class CallbackProgress final : public ProgressSink {
 public:
  explicit CallbackProgress(std::optional<py::function> callback) : callback_(std::move(callback)) {}

  void note(const std::string& line) override { call(line); }

  void loop(const std::string& label, int64_t done, int64_t total, const std::string& unit) override {
    const int64_t decile = total > 0 ? 10 * done / total : 0;
    if (label != label_) label_ = label, last_decile_ = -1;
    if (decile == last_decile_ && done < total) return;
    last_decile_ = decile;
    call(fmt::format("{}: {}/{} {}", label, done, total, unit));
  }

  // Raises the callback's exception, if it raised one; call after the analysis returned.
  void rethrow() {
    if (error_) {
      py::error_already_set error = std::move(*error_);
      error_.reset();
      throw error;
    }
  }

 private:
  void call(const std::string& line) {
    if (!callback_ || error_) return;
    py::gil_scoped_acquire gil;
    try {
      (*callback_)(line);
    } catch (py::error_already_set& e) {
      error_ = std::move(e);
    }
  }

  std::optional<py::function> callback_;
  std::optional<py::error_already_set> error_;
  std::string label_;
  int64_t last_decile_ = -1;
};

}  // namespace tdyn::python
