// The pass file and the files beside it: what the shared sample pass (pass/run.h) writes and what the analyses read.
// The pass file: "TDYNPASS", version, a JSON header (the identity of what is summed: model, samples, spec; the
// rank count) with its checksum, then sections, each (kind, index, count, float64 values, checksum): the sums
// of one boundary or probe, a marker after each finished layer, and a final marker with the totals. Readers
// check a section's checksum when they read it. `tdyn analyze` keeps the file and hands it to the parts
// (--from-pass).
// A section is (kind u32, 0 u32, index i64, count u64, count float64 values, checksum u64); its kind says whose sums
// it holds (PassSectionKind).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/files.h"
#include "linalg/dense.h"

namespace tdyn {

// Section kinds: one per measurement, then the markers.
enum PassSectionKind : uint32_t { kCorrelation = 1, kJacobianSum = 2, kProbe = 3, kLayerDone = 4, kComplete = 5 };

// FNV-1a over bytes: the checksums of the header and sections, and the identity's hashes.
uint64_t fnv1a(const void* data, size_t size, uint64_t hash = 1469598103934665603ull);
std::string hex64(uint64_t v);  // 16 hex digits

// A finished pass, read from its file one section at a time (a d × d float64 sum is 134 MB at d = 4096).
class PassFile {
 public:
  // Opens a finished pass. Throws Error naming the file on a wrong magic, version, header, truncation, damaged
  // section, or a pass that did not finish ("unfinished pass").
  static PassFile open(const fs::path& path);

  // What run_pass returns on an MPI worker rank, whose share went to rank 0: no file, no sums.
  static PassFile worker_share() { return PassFile(); }
  bool is_worker_share() const { return path_.empty(); }

  const fs::path& path() const { return path_; }
  const nlohmann::json& header() const { return header_; }  // {"identity": ..., "spec": ..., "ranks": N}
  const nlohmann::json& identity() const { return header_.at("identity"); }
  int64_t n_samples() const { return n_samples_; }  // samples summed
  int64_t n_tokens() const { return n_tokens_; }    // rows of every correlation accumulator
  int64_t n_pairs() const { return n_pairs_; }      // (sample, position) pairs in every Σ J

  // Where a boundary's sums (by hook) and a probe's values (by name) are: the index of their sections. Each throws
  // Error when the pass does not hold it.
  int64_t boundary_index(const std::string& hook) const;
  int64_t probe_index(const std::string& name) const;
  // The values of the section (kind, index), its checksum checked; `what` names it in an Error (missing, damaged).
  std::vector<double> section(uint32_t kind, const std::string& what, int64_t index) const;

  // Removes the file when the last copy of this PassFile goes (a pass made only for one command).
  void remove_when_done();

  struct Section {
    uint32_t kind = 0;
    int64_t index = 0;
    uint64_t count = 0;   // float64 values
    uint64_t offset = 0;  // of the values in the file
  };

 private:
  fs::path path_;
  nlohmann::json header_;
  int64_t n_samples_ = 0, n_tokens_ = 0, n_pairs_ = 0;
  std::vector<std::string> hooks_, probes_;  // the spec's boundaries and probe names, in section index order
  std::vector<Section> sections_;
  std::shared_ptr<void> remove_;  // shared by copies: removes the file with the last one
};

// What a scan of a pass file finds: its header, its sections, and how far it got.
struct PassScan {
  nlohmann::json header;
  std::vector<PassFile::Section> sections;  // data sections (not the markers)
  int64_t layers_done = 0;
  uint64_t end_of_layers = 0;  // file offset just after the last layer marker (or the header)
  bool complete = false;
  std::vector<double> totals;  // n_samples, n_tokens, n_pairs (complete only)
};

// Reads the header and walks the section prefixes (values are not read: readers check a section's checksum when
// they read it). An unfinished file ends anywhere after its header; `unfinished_ok` says whether that is fine.
PassScan scan_pass(const fs::path& path, bool unfinished_ok);

// The layers a pass file (finished or not) holds; 0 when there is no file or it cannot be read.
int64_t finished_layers(const fs::path& path);

// Appends sections to a pass file (rank 0 only).
class PassWriter {
 public:
  // A new file holding only `header`.
  PassWriter(const fs::path& path, const nlohmann::json& header);
  // An existing file cut back to `end` (after its last finished layer).
  PassWriter(const fs::path& path, uint64_t end);
  PassWriter(const PassWriter&) = delete;
  PassWriter& operator=(const PassWriter&) = delete;
  ~PassWriter();

  void section(uint32_t kind, int64_t index, std::span<const double> values);
  void sync();

 private:
  fs::path path_;
  int fd_ = -1;
};

// A float32 working buffer in a file mapped shared: the samples' residual states between layers. Pages go to
// the file, not to anonymous memory, and survive the process, so that a killed pass resumes from them.
class WorkBuffer {
 public:
  // `existing`: the buffer of an interrupted pass, which must be there with this size.
  WorkBuffer(const fs::path& path, int64_t n_floats, bool existing);
  WorkBuffer(const WorkBuffer&) = delete;
  WorkBuffer& operator=(const WorkBuffer&) = delete;
  ~WorkBuffer();
  float* data() { return data_; }
  void remove();  // unmaps and deletes the file

 private:
  fs::path path_;
  float* data_ = nullptr;
  uint64_t bytes_ = 0;
};

// Removes its paths when it goes, unless kept: a temporary pass's files.
struct RemovedUnlessKept {
  std::vector<fs::path> paths;
  bool kept = false;
  RemovedUnlessKept() = default;
  RemovedUnlessKept(const RemovedUnlessKept&) = delete;
  RemovedUnlessKept& operator=(const RemovedUnlessKept&) = delete;
  ~RemovedUnlessKept();
};

}  // namespace tdyn
