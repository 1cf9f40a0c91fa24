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
};

// The parts analyze runs on the random initialisation (a jacobian of DIR/init/model, and its topology in
// DIR/init/topology) are the controls' source, never the model's own jacobian or topology part.
inline constexpr const char* kInitPart = "init";
inline constexpr const char* kInitTopologyPart = "init/topology";

// The parts under `dir`: its own results.json when that is a single analysis, else every subdirectory with a
// results.json (the analyze layout; the order power, jacobian, topology, particles, then others by name). Throws
// Error when there are none.
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
