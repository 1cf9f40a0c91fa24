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

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "report/report_parts.h"
#include "report/verdicts.h"

namespace tdyn {

// The full page for `dir`.
std::string render_html_report(const fs::path& dir);

// Renders and writes DIR/index.html atomically; returns its path.
fs::path write_html_report(const fs::path& dir);

// Helpers, public for the tests.
std::string html_escape(std::string_view text);
std::string figure_caption(const std::string& figure_stem);  // "" when no pattern matches
std::string shell_command(const nlohmann::json& argv);        // argv as a copy-pasteable POSIX shell line

// What the comparison page shares with the report: its CSS and the class that colours a verdict.
const char* report_style();
const char* verdict_class(Verdict v);

}  // namespace tdyn
