// The results directory every analysis writes (SPEC §5): results.json (schema-versioned: command line, model,
// every option and default actually used, tool version, timings, results, files written), arrays as .npy,
// tables as .csv and figures (see figure.h). Every file is written atomically.
//
// A directory used again holds this run's files only: files that an earlier run's results.json listed and this
// run has not rewritten are removed when results.json is written. A directory this run created is removed again
// when the run fails before anything was written into it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/files.h"
#include "core/npy.h"
#include "report/figure.h"

namespace tdyn {

inline constexpr int kResultsSchemaVersion = 1;

// A file's inode and modification time: an atomic rewrite changes both.
struct FileIdentity {
  uint64_t inode = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

class ResultsDir {
 public:
  // Creates `dir` (and parents) if needed. `command` is the subcommand name ("run", "particles", ...).
  ResultsDir(fs::path dir, std::string command, std::vector<std::string> argv);
  ~ResultsDir();
  ResultsDir(const ResultsDir&) = delete;
  ResultsDir& operator=(const ResultsDir&) = delete;

  const fs::path& path() const { return dir_; }
  // The command line that reproduces this run (results.json's "argv").
  std::vector<std::string> argv() const { return json_.at("argv"); }
  fs::path file(const std::string& name) const { return dir_ / name; }

  // Every option actually used, defaults included; analyses fill `results()` with their numbers.
  nlohmann::json& options() { return json_["options"]; }
  nlohmann::json& results() { return json_["results"]; }
  nlohmann::json& model() { return json_["model"]; }

  template <typename T>
  void npy(const std::string& name, const T* data, const Shape& shape, const std::string& what) {
    write_npy(file(name), data, shape);
    record_file(name, what);
  }
  template <typename T>
  void npy(const std::string& name, const TensorT<T>& t, const std::string& what) {
    npy(name, t.ptr(), t.shape, what);
  }
  // A CSV table: one header row, then rows of numbers (written with full double precision).
  void csv(const std::string& name, const std::vector<std::string>& header,
           const std::vector<std::vector<double>>& rows, const std::string& what);
  // A figure (report/figure.h) written into the directory, its files recorded; returns why it was not rendered
  // (gnuplot missing or failing), or "" when it was.
  std::string figure(const Figure& fig, const std::string& what);
  // From here on figure() draws nothing, and results.json says why under "figures" (a run whose numbers only
  // other results read, such as analyze's controls beyond the first).
  void without_figures(const std::string& why);
  // Records a file written by someone else (figures, per-sample arrays) in results.json's file list.
  void record_file(const std::string& name, const std::string& what);

  // Wall-clock seconds per named phase, reported under "timings".
  void add_timing(const std::string& phase, double seconds);

  // Writes results.json (atomically) and removes the earlier run's files that this run has not written. May be
  // called more than once; the last call wins.
  void write();

 private:
  void remove_stale_files();

  fs::path dir_;
  nlohmann::json json_;
  std::chrono::steady_clock::time_point start_;
  bool created_ = false;  // this run made the directory
  bool written_ = false;  // results.json was written
  bool figures_ = true;
  // The files an earlier run's results.json lists, each with its identity on disk then (a rewritten file differs).
  std::vector<std::pair<std::string, FileIdentity>> earlier_files_;
};

// Measures a phase and reports it to a ResultsDir when it goes out of scope.
class PhaseTimer {
 public:
  PhaseTimer(ResultsDir& out, std::string phase) : out_(out), phase_(std::move(phase)), start_(std::chrono::steady_clock::now()) {}
  ~PhaseTimer() {
    out_.add_timing(phase_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  ResultsDir& out_;
  std::string phase_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tdyn
