// The results directories a report is built from, and defensive reading of their results.json: the analyses
// grow new keys and old directories lack them, so every lookup may fail; a failed lookup becomes "not computed"
// on the page, never an exception.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/files.h"

namespace tdyn {

// One results directory shown in the report.
struct ReportPart {
  std::string name;       // subdirectory name ("power"), or the command for a single results directory
  std::string rel_dir;    // path relative to the report's directory, "" for the directory itself
  nlohmann::json json;    // its results.json; null when missing or unreadable
  std::string error;      // why results.json could not be read, or why the part did not run
  // ≥ 0: a part analyze ran on the random initialisation of this seed, a control of the claims about training and
  // never the model's own part: of kind "init" (the family's rule, DIR/init/seed-S/PART) or "scaled" (that rule at
  // the model's own weight scale, DIR/init/scaled-S/PART).
  int64_t init_seed = -1;
  std::string control_kind = {};
  // ≥ 0: analyze's jacobian of this disjoint subset of the samples (DIR/subsets/subset-g), the evidence behind the
  // intervals of the statistics of mean Jacobians; never the model's own part.
  int64_t subset = -1;
  // 4 or 2: analyze's part on the first ⌈S/4⌉ or ⌈S/2⌉ samples (DIR/nested/quarter/PART, DIR/nested/half/PART),
  // the statistic's stability in sample count; never the model's own part.
  int64_t nested = 0;
  fs::path dir = {};  // the directory itself (where its .npy files are)
  bool is_control() const { return init_seed >= 0; }
  bool is_subset() const { return subset >= 0; }
  bool is_nested() const { return nested > 0; }
  bool is_model_part() const { return !is_control() && !is_subset() && !is_nested(); }
};

// The parts under `dir`: its own results.json when that is a single analysis, else every subdirectory with a
// results.json (the analyze layout; the order power, jacobian, topology, particles, then others by name) and the
// init control's parts, DIR/init/{seed,scaled}-S/{power,jacobian,topology} for every seed in order (a directory of
// the one-seed layout, DIR/init as seed 0's jacobian and DIR/init/topology as its topology, reads as one seed).
// Then the sample subsets' parts, DIR/subsets/subset-g for every g in order. A comparison among them (analyze's
// DIR/side-by-side, written by tdyn compare) comes first, and the model's own parts before every control's, subset's
// and nested set's. Throws Error when there are none.
std::vector<ReportPart> load_report_parts(const fs::path& dir);

// The parsed file, or null with `error` saying why it could not be read.
nlohmann::json read_json(const fs::path& file, std::string* error);

// Lookups in a results.json, by JSON pointer.
namespace json_lookup {

// The value at a JSON pointer ("/a/0/b"); nullptr when any step is missing or of the wrong type.
const nlohmann::json* find(const nlohmann::json& root, std::string_view pointer);
// A finite number, or nothing (absent, null — how NaN is stored — or not a number).
std::optional<double> number(const nlohmann::json& root, std::string_view pointer);
// The array at `pointer`, or an empty one.
const nlohmann::json& array_at(const nlohmann::json& root, std::string_view pointer);
// The value as text: strings as they are, floats to 4 significant digits, "" when absent or null.
std::string text_at(const nlohmann::json& root, std::string_view pointer);

}  // namespace json_lookup
}  // namespace tdyn
