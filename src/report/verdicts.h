// The three papers' claims judged on a model: each rule reads a few numbers the analyses wrote to results.json and
// compares them with a control, the way the paper states its claim (docs/report.md lists the rules and why each
// control). The HTML report shows them; analyze writes them to its results.json.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "report/report_parts.h"

namespace tdyn {

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

inline constexpr const char* kNotComputed = "not computed";

// "pass", "differs", "shown" or "not computed".
const char* verdict_text(Verdict v);

// The papers' summary tables, computed from the parts by the rules in verdicts.cpp (docs/report.md): all three for
// an analyze directory, the command's own paper for one command's results directory.
std::vector<PaperSummary> summarize_claims(const std::vector<ReportPart>& parts);

// The verdicts as analyze writes them to results.json ("verdicts"): one object per check, {paper, claim (the id),
// verdict ("pass", "differs", "shown", "not computed"), value, control {value, what}, rule}; NaN is written as null.
nlohmann::json verdicts_json(const std::vector<PaperSummary>& papers);

}  // namespace tdyn
