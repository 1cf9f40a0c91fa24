// The three papers' claims judged on a model: each rule reads a few numbers the analyses wrote to results.json and
// compares them with controls the way the paper states its claim (docs/report.md lists the rules and why each
// control). A claim about training is judged against the same statistic on random initialisations of the
// architecture (analyze's init control, several seeds on the same tokens), and every verdict's p-value is
// Holm-adjusted over all verdicts of the run. The HTML report shows them; analyze writes them to its results.json.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "report/report_parts.h"

namespace tdyn {

// pass: the claim holds, beyond every control, with Holm-adjusted p < 0.05; architectural: it holds, but as much on
// an initialisation (no training needed); differs: it does not hold; inconclusive: it holds, but no control tells it
// from the architecture, or its p-value does not survive the adjustment; shown: reported without a verdict; not
// computed: the numbers are missing.
enum class Verdict { kPass, kArchitectural, kDiffers, kInconclusive, kInfo, kNotComputed };

// A claim's statistic on the random initialisations of one kind, each on the model's tokens: "init", the family's
// published rule (the paper's step 0); "scaled", that rule at the model's own weight scale (what scale alone gives);
// or on the draws of a structure-preserving null of the model itself: "haar", its mean Jacobians with Haar-rotated
// bases (spectra kept).
struct ControlValues {
  std::string kind;
  std::vector<int64_t> seeds;
  std::vector<double> values;  // one per seed
  int64_t holds = 0;           // seeds on which the claim holds by its own criterion
  double p = NAN;              // that the model's statistic lies beyond their distribution, in the claim's direction
};

// "the family's initialisation", "initialisations at the model's weight scale", ...
const char* control_kind_text(const std::string& kind);

// The numbers behind a verdict.
struct Evidence {
  int64_t samples = 0;  // passages behind the model's statistic (0: not sample-based, e.g. particles)
  double lo = NAN, hi = NAN;  // 95 % interval of the statistic over samples (NaN: none for this claim)
  std::string interval;       // how it was computed
  // The statistic on the first ⌈S/4⌉ and ⌈S/2⌉ samples, and whether it lies on the same side of the claim's
  // threshold at S/4, S/2 and S (NaN, true: not computed for this claim).
  double at_quarter = NAN, at_half = NAN;
  bool stable = true;
  int direction = 0;    // +1 / −1: the claim says the model's statistic is above / below the initialisations'; 0: no such claim
  std::vector<ControlValues> controls;
  // The model's statistic on the initialisations' own samples (analyze's first subset: the same tokens, as many),
  // which their p-values compare; NaN when they ran on all the samples, and the statistic itself is compared. The
  // Haar null, drawn from the model's own mean Jacobians, is always compared with the statistic.
  double at_control_samples = NAN;
  int64_t control_samples = 0;
  double p_claim = NAN;  // the claim's own test on the model (permutation, sign test, ...)
  double p = NAN;        // the verdict's: the largest of p_claim and the controls' p (the claim needs all of them)
  double p_holm = NAN;   // p Holm-adjusted over every verdict of the run
};

// One row of a paper's summary table. `value` is the statistic judged and `control_value` the number the claim's
// own rule compares it with (a threshold, the other layers' mean, ...), NaN when there is none or it is missing;
// `control` says what the controls are.
struct ClaimCheck {
  std::string claim;     // what the paper says
  std::string observed;  // what this model shows ("not computed" when the numbers are absent)
  Verdict verdict = Verdict::kNotComputed;
  std::string rule;      // how the verdict follows from results.json
  std::string id = {};   // stable short name of the claim ("bottleneck", "surgery", "gamma", ...)
  double value = NAN;    // the number judged
  double control_value = NAN;
  std::string control = {};  // what the number is judged against
  Evidence evidence = {};
};

struct PaperSummary {
  std::string seed, title;
  std::vector<ClaimCheck> checks;
  bool folded = false;  // a second reading of a paper (its idealisation): folded on the page
};

inline constexpr const char* kNotComputed = "not computed";
inline constexpr double kVerdictLevel = 0.05;  // the family-wise level of the verdicts' Holm-adjusted p-values

// "pass", "architectural", "differs", "inconclusive", "shown" or "not computed".
const char* verdict_text(Verdict v);

// The papers' summary tables, computed from the parts by the rules in verdicts.cpp (docs/report.md): all three for
// an analyze directory, the command's own paper for one command's results directory.
std::vector<PaperSummary> summarize_claims(const std::vector<ReportPart>& parts);

// The verdicts as analyze writes them to results.json ("verdicts"): one object per check, {paper, claim (the id),
// verdict, value, control {value, what}, evidence {samples, interval {lo, hi, method} or null, nested {quarter, half,
// stable} or null, direction, controls
// [{kind, seeds, values, holds, p}], p_claim, p, p_holm}, observed, rule}; NaN is written as null.
nlohmann::json verdicts_json(const std::vector<PaperSummary>& papers);

}  // namespace tdyn
