// The index.html report of a results directory (SPEC §5): a summary of each paper's claims against this model's
// numbers, every figure with a caption saying what to look for, the command line that reproduces each part, and
// the options and timings. It is rebuilt from the results.json files alone, so `tdyn report DIR` works on any
// results directory, old or new, and on an `analyze` directory whose parts live in subdirectories
// (DIR/power, DIR/jacobian, DIR/topology, DIR/particles).
//
// The page is self-contained: inline CSS, no scripts, no network; figures are <img> elements pointing at the
// .svg files beside results.json by relative path, so the directory can be moved or archived as a whole.
// Everything read from files is HTML-escaped. Keys the analyses did not write show as "not computed".
#pragma once

#include <cmath>
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

enum class Verdict { kPass, kDiffers, kNotComputed, kInfo };

// One row of a paper's summary table. `value` and `control_value` are the two numbers the rule compares (NaN when
// the rule has no single number, or the number is missing); `control` says what the control is. A check without a
// control says why in `control` ("none: ...").
struct ClaimCheck {
  std::string claim;     // what the paper says
  std::string observed;  // what this model shows ("not computed" when the numbers are absent)
  Verdict verdict = Verdict::kNotComputed;
  std::string rule;      // how the verdict follows from results.json
  std::string id = {};   // stable short name of the claim ("bottleneck", "surgery", "gamma", ...)
  double value = NAN;    // the number judged
  double control_value = NAN;
  std::string control = {};  // what the number is judged against
};

struct PaperSummary {
  std::string seed, title;
  std::vector<ClaimCheck> checks;
};

// The parts under `dir`: its own results.json when that is a single analysis, else every subdirectory with a
// results.json (the analyze layout; the order power, jacobian, topology, particles, then others by name).
std::vector<ReportPart> load_report_parts(const fs::path& dir);

// The three papers' summary tables, computed from the parts by the rules in html_report.cpp (docs/report.md).
std::vector<PaperSummary> summarize_claims(const std::vector<ReportPart>& parts);

// The verdicts as analyze writes them to results.json ("verdicts"): one object per check, {paper, claim (the id),
// verdict ("pass", "differs", "shown", "not computed"), value, control {value, what}, rule}; NaN is written as null.
nlohmann::json verdicts_json(const std::vector<PaperSummary>& papers);

// The full page for `dir`.
std::string render_html_report(const fs::path& dir);

// Renders and writes DIR/index.html atomically; returns its path.
fs::path write_html_report(const fs::path& dir);

// Helpers, public for the tests.
std::string html_escape(std::string_view text);
std::string figure_caption(const std::string& figure_stem);  // "" when no pattern matches
std::string shell_command(const nlohmann::json& argv);        // argv as a copy-pasteable POSIX shell line

}  // namespace tdyn
