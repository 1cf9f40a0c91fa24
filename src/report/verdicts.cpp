#include "report/verdicts.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "analysis/operator_metrics.h"
#include "analysis/particles/diagnostics.h"
#include "analysis/power/iteration.h"
#include "analysis/power/layers.h"
#include "analysis/power/steering.h"
#include "analysis/power/token_dynamics.h"
#include "analysis/stats.h"
#include "analysis/topology/run.h"
#include "core/error.h"
#include "core/json_number.h"
#include "core/npy.h"
#include "report/topology_output.h"

namespace tdyn {
namespace {

using json = nlohmann::json;
using namespace json_lookup;

std::string num(double v) { return fmt::format("{:.3g}", v); }

constexpr double kClaimLevel = 0.05;  // the level of each claim's own test on the model (before the adjustment)
constexpr double kRotationTolerance = 0.1;  // the measured rotation per step within 10 % of arg λ₁
constexpr double kSteeredAlignment = 0.9;   // "almost perfect" alignment of the steered tokens with u

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean(const std::vector<double>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return end > begin ? s / static_cast<double>(end - begin) : NAN;
}

// What a part's results are: its command, and "power-l2" for power in the paper's idealisation (--mode
// attn-only-l2), whose claims are judged apart from the model's own dynamics.
std::string kind_of(const ReportPart& p) {
  const std::string command = text_at(p.json, "/command");
  return command == "power" && text_at(p.json, "/options/mode") == "attn-only-l2" ? "power-l2" : command;
}

// The model's own part of a kind (not a control's).
const ReportPart* part_for(const std::vector<ReportPart>& parts, const std::string& kind) {
  for (const auto& p : parts)
    if (!p.json.is_null() && p.is_model_part() && kind_of(p) == kind) return &p;
  return nullptr;
}

// analyze's part of a kind on the first ⌈S/fraction⌉ samples (DIR/nested/...), if any.
const ReportPart* nested_for(const std::vector<ReportPart>& parts, const std::string& kind, int64_t fraction) {
  for (const auto& p : parts)
    if (!p.json.is_null() && p.nested == fraction && kind_of(p) == kind) return &p;
  return nullptr;
}

// analyze's sample subsets of a kind (DIR/subsets/subset-g), in order.
std::vector<const ReportPart*> subsets_for(const std::vector<ReportPart>& parts, const std::string& kind) {
  std::vector<const ReportPart*> out;
  for (const auto& p : parts)
    if (!p.json.is_null() && p.is_subset() && kind_of(p) == kind) out.push_back(&p);
  return out;
}

// The init control's parts of a kind, one per seed in seed order.
std::vector<const ReportPart*> controls_for(const std::vector<ReportPart>& parts, const std::string& kind) {
  std::vector<const ReportPart*> out;
  for (const auto& p : parts)
    if (!p.json.is_null() && p.is_control() && kind_of(p) == kind) out.push_back(&p);
  return out;
}

// Did analyze run the init control? (A single command's directory has none.)
bool has_init_control(const std::vector<ReportPart>& parts) {
  return std::any_of(parts.begin(), parts.end(), [](const ReportPart& p) { return p.is_control(); });
}

int64_t samples_of(const json& part) {
  return static_cast<int64_t>(number(part, "/results/samples").value_or(number(part, "/results/samples_used").value_or(0)));
}

ClaimCheck not_computed(std::string claim, std::string rule, const std::string& why) {
  return {std::move(claim), why.empty() ? kNotComputed : std::string(kNotComputed) + " (" + why + ")", Verdict::kNotComputed,
          std::move(rule)};
}

std::string num_or_missing(std::optional<double> v) { return v ? num(*v) : std::string(kNotComputed); }

// ---- Measuring a claim on one run -------------------------------------------------------------------------------
// Each rule reads a few numbers the analysis wrote and reduces them to one statistic, whether the claim holds by
// the paper's own criterion, and that criterion's p-value. The same function measures the model and each
// initialisation, so the two are comparable by construction. They are deliberately simple so that a reader can
// redo them from results.json; docs/report.md lists them and says why each control.
struct Measured {
  std::optional<std::string> missing;  // not computed, and why ("" when the reason goes without saying)
  bool shown = false;   // reported without a verdict: the rule cannot test it on this run
  std::string observed;
  double statistic = NAN, reference = NAN;  // the number judged and the rule's own comparison value
  bool holds = false;
  double p = NAN;  // the claim's own test, one-sided
  std::string untested;  // non-empty: the claim's own test could not run here, and why (it cannot pass then)
  bool exact = false;    // a deterministic comparison with a prediction (no sampling, so no p-value): holds is the verdict
  int64_t samples = 0;
};

Measured missing(std::string why) {
  Measured m;
  m.missing = std::move(why);
  return m;
}

Measured shown(std::string observed, double statistic = NAN, double reference = NAN) {
  Measured m;
  m.shown = true, m.observed = std::move(observed), m.statistic = statistic, m.reference = reference;
  return m;
}

Measured measured(std::string observed, double statistic, double reference, bool holds, double p = NAN) {
  Measured m;
  m.observed = std::move(observed), m.statistic = statistic, m.reference = reference, m.holds = holds, m.p = p;
  return m;
}

// A 95 % interval of a statistic over samples, and how it was computed.
struct Interval {
  double lo = NAN, hi = NAN;
  std::string method;
  double at_quarter = NAN, at_half = NAN;  // the statistic on the first ⌈S/4⌉ and ⌈S/2⌉ samples (nested)
};

// A claim with its rule and controls. `direction`: the claim is about training, and says the model's statistic is
// above (+1) or below (−1) that of the random initialisations; 0: judged on its own test alone. `resolution`: the
// smallest spread of the statistic over the initialisations that means anything (1/2 for a count).
struct Claim {
  const char* id;
  std::string claim, rule, control;
  int direction = 0;
  double resolution = 0;
  // The 95 % interval of the model's statistic over samples, where the part's files allow one.
  std::function<std::optional<Interval>(const ReportPart&)> interval = {};
  // A null written in the model's own results.json: the array at this pointer, each element measured by
  // `null_measure`, or else like a run's results (the bottleneck's Haar-rotated draws, results.models[0].haar_null).
  // `null_kind` names it in the evidence: "haar", or "direction" (the steering's random directions).
  const char* null_draws = nullptr;
  const char* null_kind = "haar";
  Measured (*null_measure)(const json& draw) = nullptr;

  ClaimCheck missing(const std::string& why) const {
    ClaimCheck c = not_computed(claim, rule, why);
    c.id = id, c.control = control;
    return c;
  }
};

std::string list(const std::vector<double>& values) {
  std::vector<std::string> texts;
  for (double v : values) texts.push_back(num(v));
  return fmt::format("{}", fmt::join(texts, ", "));
}

// The statistic's interval, and whether the statistic is stable in sample count: on the same side of the claim's
// threshold at S/4, S/2 and S.
void add_interval(const Interval& interval, const Measured& model, ClaimCheck& out) {
  Evidence& e = out.evidence;
  e.lo = interval.lo, e.hi = interval.hi, e.interval = interval.method;
  e.at_quarter = interval.at_quarter, e.at_half = interval.at_half;
  const double r = model.reference;
  auto side = [&](double v) { return v > r ? 1 : v < r ? -1 : 0; };
  if (std::isfinite(r) && std::isfinite(e.at_quarter) && std::isfinite(e.at_half))
    e.stable = side(e.at_quarter) == side(model.statistic) && side(e.at_half) == side(model.statistic);
  if (!e.stable)
    out.observed += fmt::format("; unstable in sample count: {} at S/4, {} at S/2 against {} at S (threshold {})", num(e.at_quarter),
                                num(e.at_half), num(model.statistic), num(r));
}

// The controls' values in the evidence: each kind of initialisation, then the null's draws, each with its p-value,
// and the claim's p (the largest). The initialisations are compared with the model on their own samples, when
// `at_control_samples` gives its statistic there (a statistic of mean Jacobians depends on how many samples are
// averaged); returns the model's statistic they are compared with.
double add_controls(const Claim& c, const Measured& model, const std::vector<std::pair<const ReportPart*, Measured>>& inits,
                    const std::vector<Measured>& null_draws, const std::optional<Measured>& at_control_samples, ClaimCheck& out) {
  Evidence& e = out.evidence;
  double compared = model.statistic;
  if (const Measured* m = at_control_samples ? &*at_control_samples : nullptr; m && !m->missing && !m->shown && std::isfinite(m->statistic))
    compared = e.at_control_samples = m->statistic, e.control_samples = m->samples;
  const bool matched = std::isfinite(e.at_control_samples);
  // Each kind of initialisation is a distribution the model's statistic must lie beyond.
  for (const char* kind : {"init", "scaled"}) {
    ControlValues k{kind, {}, {}};
    for (const auto& [part, m] : inits) {
      if (part->control_kind != kind || m.missing || m.shown || !std::isfinite(m.statistic)) continue;
      k.seeds.push_back(part->init_seed), k.values.push_back(m.statistic);
      k.holds += m.holds;
    }
    if (k.values.empty() || c.direction == 0) continue;
    k.p = prediction_p_value(compared, k.values, c.direction, c.resolution);
    e.controls.push_back(std::move(k));
  }
  if (at_control_samples && !matched && !e.controls.empty())
    out.observed += "; the model's part on the initialisations' samples gave no statistic: they are compared with the "
                    "statistic on all samples";
  ControlValues null{c.null_kind, {}, {}};
  for (size_t j = 0; j < null_draws.size(); ++j)
    if (!null_draws[j].missing && std::isfinite(null_draws[j].statistic))
      null.seeds.push_back(static_cast<int64_t>(j)), null.values.push_back(null_draws[j].statistic), null.holds += null_draws[j].holds;
  if (!null.values.empty() && c.direction != 0) {
    null.p = prediction_p_value(model.statistic, null.values, c.direction, c.resolution);
    e.controls.push_back(std::move(null));
  }
  e.p = e.p_claim;
  for (const ControlValues& k : e.controls) e.p = std::isfinite(e.p) ? std::max(e.p, k.p) : k.p;
  return compared;
}

// A claim that holds, with a distribution of every control and an interval clear of its threshold: pass when the
// statistic and its interval lie beyond every control value, architectural when an initialisation or the null
// reaches it, differs when a control of another kind does (a random steering direction).
void judge_against_controls(const Claim& c, const Measured& model, double compared, ClaimCheck& out) {
  const Evidence& e = out.evidence;
  const bool matched = std::isfinite(e.at_control_samples);
  bool beyond_all = true, interval_beyond = true, reached_by_architecture = false;
  for (const ControlValues& k : e.controls) {
    // The interval is the statistic's on all samples: it is set against the controls drawn on all of them.
    const bool initialisation = k.kind == "init" || k.kind == "scaled", own_samples = !initialisation || !matched;
    for (double v : k.values) {
      const bool beyond = c.direction * ((own_samples ? model.statistic : compared) - v) > 0;
      beyond_all = beyond_all && beyond;
      reached_by_architecture = reached_by_architecture || (!beyond && k.kind != std::string("direction"));
      if (std::isfinite(e.lo) && own_samples) interval_beyond = interval_beyond && (c.direction > 0 ? e.lo > v : e.hi < v);
    }
  }
  out.verdict = beyond_all && interval_beyond ? Verdict::kPass
                : beyond_all                  ? Verdict::kInconclusive
                : reached_by_architecture     ? Verdict::kArchitectural
                                              : Verdict::kDiffers;
  if (out.verdict == Verdict::kArchitectural) out.observed += "; as strong on an initialisation or the null as in the model: architectural";
  if (out.verdict == Verdict::kDiffers) out.observed += "; as strong under a control as in the model";
  else if (!interval_beyond) out.observed += "; inconclusive: the 95 % interval reaches an initialisation's value";
}

// The verdict once the evidence is in: differs when the claim does not hold on the model; inconclusive when part of
// it is untested, when on the initialisations' fewer samples the model does not show it either, when a control has
// fewer than two values, or when the interval straddles the threshold; else judge_against_controls.
void decide(const Claim& c, const Measured& model, double compared, const std::optional<Measured>& at_control_samples, bool init_ran,
            ClaimCheck& out) {
  const Evidence& e = out.evidence;
  const bool matched = std::isfinite(e.at_control_samples);
  if (!model.holds) {
    out.verdict = Verdict::kDiffers;
  } else if (!model.untested.empty()) {
    out.verdict = Verdict::kInconclusive;
    out.observed += "; inconclusive: " + model.untested;
  } else if (matched && !at_control_samples->holds && !e.controls.empty()) {
    // On the initialisations' fewer samples the model itself does not show it: comparing them says nothing.
    out.verdict = Verdict::kInconclusive;
    out.observed += fmt::format("; inconclusive: on the initialisations' {} samples the claim does not hold on the model either "
                                "({}); larger subsets (a smaller --interval-subsets) would say",
                                e.control_samples, num(e.at_control_samples));
  } else if (c.direction == 0) {
    out.verdict = std::isfinite(e.p) || model.exact ? Verdict::kPass : Verdict::kInconclusive;
    if (out.verdict == Verdict::kInconclusive) out.observed += "; inconclusive: the rule has no test of its control here";
  } else if (e.controls.empty() || std::any_of(e.controls.begin(), e.controls.end(),
                                                [](const ControlValues& k) { return k.values.size() < 2; })) {
    out.verdict = Verdict::kInconclusive;
    out.observed += e.controls.empty() && c.null_measure ? fmt::format("; inconclusive: no draws of its control ({}) in results.json", c.control)
                    : e.controls.empty() ? (init_ran ? "; inconclusive: the initialisations did not give this statistic"
                                                   : "; inconclusive: no initialisation control (analyze runs it unless "
                                                     "--no-init-control) to tell it from the architecture")
                                       : "; inconclusive: one initialisation is no distribution (analyze --init-seeds 5)";
  } else if (std::isfinite(e.lo) && std::isfinite(model.reference) &&
             (model.statistic > model.reference ? e.lo <= model.reference : e.hi >= model.reference)) {
    // The claim holds at the estimate, but not across its interval: more samples would say. The interval's
    // half-width shrinks as 1/√S, so S (w/|x − threshold|)² samples would put the threshold at its edge.
    const double half = (e.hi - e.lo) / 2, margin = std::abs(model.statistic - model.reference);
    out.verdict = Verdict::kInconclusive;
    out.observed += fmt::format("; inconclusive: the 95 % interval [{}, {}] straddles {}", num(e.lo), num(e.hi), num(model.reference));
    if (margin > 0 && e.samples > 0)
      out.observed += fmt::format(" (about {} samples would narrow it enough)",
                                  static_cast<int64_t>(std::ceil(static_cast<double>(e.samples) * (half / margin) * (half / margin))));
  } else {
    judge_against_controls(c, model, compared, out);
  }
}

// The verdict of a claim from its measure on the model and on each initialisation (docs/report.md, "Outcomes").
// A pass here is provisional: summarize_claims turns it into inconclusive when its p-value does not survive the
// Holm adjustment over every verdict of the run.
// `at_control_samples` is the measure of the model's part on the initialisations' samples, when they ran on a
// subset of the model's.
ClaimCheck judge(const Claim& c, const Measured& model, const std::optional<Interval>& interval,
                 const std::vector<std::pair<const ReportPart*, Measured>>& inits, const std::vector<Measured>& null_draws,
                 bool init_ran, const std::optional<Measured>& at_control_samples) {
  if (model.missing) {
    ClaimCheck out = c.missing(*model.missing);
    out.value = model.statistic;
    return out;
  }
  ClaimCheck out{c.claim, model.observed, Verdict::kInfo, c.rule, c.id, model.statistic, model.reference, c.control};
  out.evidence.samples = model.samples, out.evidence.direction = c.direction, out.evidence.p_claim = model.p;
  if (interval) add_interval(*interval, model, out);
  if (model.shown) return out;
  const double compared = add_controls(c, model, inits, null_draws, at_control_samples, out);
  decide(c, model, compared, at_control_samples, init_ran, out);
  return out;
}

// A rule on a results.json that lacks what the rule reads (an older or damaged one) leaves its claim not computed,
// saying why.
template <class Rule>
Measured guarded(const Rule& rule, const json& part) {
  try {
    return rule(part);
  } catch (const Error& e) {
    return missing(e.what());
  }
}

// Judges a claim measured by `measure` on the model's part and on each initialisation's part. Its interval is the
// claim's own (a bootstrap), else the spread of the statistic over the sample subsets' parts (random groups).
template <class Measure>
ClaimCheck judge_parts(const Claim& c, const ReportPart* model, const std::vector<const ReportPart*>& inits,
                       const std::vector<const ReportPart*>& subsets, bool init_ran, Measure read_and_measure,
                       const ReportPart* quarter = nullptr, const ReportPart* half = nullptr) {
  const auto measure = [&](const json& part) { return guarded(read_and_measure, part); };
  Measured m = measure(model->json);
  m.samples = samples_of(model->json);
  std::vector<std::pair<const ReportPart*, Measured>> controls;
  for (const ReportPart* p : inits) controls.emplace_back(p, measure(p->json));
  // The subset the initialisations ran on (analyze: the first), if any: the same --data.
  std::optional<Measured> at_control_samples;
  const std::string control_data = inits.empty() ? "" : text_at(inits.front()->json, "/options/samples/data");
  for (const ReportPart* p : subsets)
    if (!control_data.empty() && text_at(p->json, "/options/samples/data") == control_data) {
      at_control_samples = measure(p->json);
      at_control_samples->samples = samples_of(p->json);
    }
  std::vector<Measured> null_draws;
  if (c.null_draws)
    for (const json& draw : array_at(model->json, c.null_draws))
      null_draws.push_back(c.null_measure ? guarded(c.null_measure, draw) : measure(json{{"results", {{"models", json::array({draw})}}}}));
  std::optional<Interval> interval;
  if (!m.missing && !m.shown) {
    if (c.interval) interval = c.interval(*model);
    // A count (a resolution above 0: coupled maps) grows with the samples, so subsets of S/G samples say nothing of
    // its spread at S; every other statistic gets the random groups' interval.
    if (!interval && subsets.size() >= 2 && c.resolution == 0) {
      std::vector<double> values;
      for (const ReportPart* p : subsets) {
        const Measured s = measure(p->json);
        values.push_back(s.missing || s.shown ? NAN : s.statistic);
      }
      const auto [lo, hi] = subset_interval(m.statistic, values);
      if (std::isfinite(lo))
        interval = Interval{lo, hi,
                            fmt::format("random groups: the statistic on {} disjoint subsets of the samples (DIR/subsets), "
                                        "estimate ± t(0.975, G − 1) s/√G",
                                        values.size())};
    }
    // The statistic on the nested first ⌈S/4⌉ and ⌈S/2⌉ samples, where analyze ran the part on them (DIR/nested).
    auto nested_value = [&](const ReportPart* p) -> double {
      if (!p) return NAN;
      const Measured n = measure(p->json);
      return n.missing || n.shown ? NAN : n.statistic;
    };
    if (interval && !std::isfinite(interval->at_quarter) && (quarter || half))
      interval->at_quarter = nested_value(quarter), interval->at_half = nested_value(half);
  }
  return judge(c, m, interval, controls, null_draws, init_ran, at_control_samples);
}

// Why a test over the layers was not judged: too few layers, or one shared F for all of them.
std::string untestable_layers(const json& power, size_t layers) {
  if (boolean_at(object_at(object_at(power, "results"), "cross_layer_alignment"), "shared_weights"))
    return "shared weights: every layer has the same F and v₁";
  if (layers < static_cast<size_t>(kMinTestedLayers)) return fmt::format("{} layers, fewer than {} to test", layers, kMinTestedLayers);
  return "";
}

// ---- The power-method paper (Li & Altafini): layers act like steps of the power method on F_t = O_t V_t ----------

// Each layer's tokens against v₁ of F_t (results.layers[t].dynamics_F).
std::vector<AlignmentStats> layer_dynamics(const json& power) {
  std::vector<AlignmentStats> out;
  for (const json& l : list_at(object_at(power, "results"), "layers")) out.push_back(AlignmentStats::from_json(object_at(l, "dynamics_F")));
  return out;
}

Measured measure_gamma(const json& power) {
  std::vector<double> gamma, before, covariance, baseline, margin;
  long above = 0, counted = 0;
  for (const AlignmentStats& a : layer_dynamics(power)) {
    if (!std::isfinite(a.gamma) || !std::isfinite(a.gamma_before) || !std::isfinite(a.baseline)) continue;
    ++counted;
    gamma.push_back(a.gamma), before.push_back(a.gamma_before), baseline.push_back(a.baseline);
    // gamma_covariance is NaN where no sample's tokens span F's dominant dimension (one-token samples).
    const bool has_covariance = std::isfinite(a.gamma_covariance);
    if (has_covariance) covariance.push_back(a.gamma_covariance);
    const double strongest = std::max({a.gamma_before, a.baseline, has_covariance ? a.gamma_covariance : a.baseline});
    margin.push_back(a.gamma - strongest);
    above += a.gamma > strongest;
  }
  if (counted == 0) return missing("no layer with γ_t, its value before the layer and its baseline in results.json");
  const double p = sign_test_p_value(above, counted);
  return measured(fmt::format("γ_t above every control in {} of {} layers (sign test over the layers p = {}; median γ_t = {}; "
                              "before the layer {}; directions from the tokens {}; isotropic baseline ≈ {}; median margin {})",
                              above, counted, num(p), num(median(gamma)), num(median(before)),
                              covariance.empty() ? std::string(kNotComputed) : num(median(covariance)), num(median(baseline)),
                              num(median(margin))),
                  median(margin), 0, 2 * above > counted, p);
}

Measured measure_rho(const json& power) {
  std::vector<double> rho, p_values;
  long significant = 0;
  for (const AlignmentStats& a : layer_dynamics(power)) {
    if (!std::isfinite(a.rho_unique) || !std::isfinite(a.p_value_samples)) continue;
    rho.push_back(a.rho_unique);
    p_values.push_back(a.rho_unique > 0.5 ? a.p_value_samples : 1.0);
    significant += a.rho_unique > 0.5 && a.p_value_samples < kClaimLevel;
  }
  const long tested = static_cast<long>(rho.size());
  if (tested == 0) return missing("no layer with a sample-level test of ρ_t in results.json");
  // "More than half of the layers significant" holds at level α exactly when the m-th smallest p-value, m the
  // least majority, is below α: that p-value is the claim's.
  std::sort(p_values.begin(), p_values.end());
  const double p = p_values[static_cast<size_t>(tested / 2)];
  return measured(fmt::format("ρ_t > 1/2 significantly over samples in {} of {} layers (median ρ_t over new states = {}; "
                              "the majority's largest p = {})",
                              significant, tested, num(median(rho)), num(p)),
                  median(rho), 0.5, 2 * significant > tested, p);
}

Measured measure_alignment_local(const json& power) {
  const CrossLayerAlignment a = CrossLayerAlignment::from_json(object_at(object_at(power, "results"), "cross_layer_alignment"));
  if (!std::isfinite(a.diagonal) || !std::isfinite(a.off_diagonal)) return missing("one layer: no other layer's v₁ to align with");
  const std::string observed = fmt::format("mean alignment with the own layer's v₁ {} vs the other layers' {}", num(a.diagonal),
                                           num(a.off_diagonal));
  const std::string why = untestable_layers(power, static_cast<size_t>(a.mean.rows()));
  if (!why.empty()) return shown(observed + " (" + why + ")", a.diagonal - a.off_diagonal, 0);
  if (!std::isfinite(a.p_value)) return missing("no permutation p-value in results.json");
  return measured(fmt::format("{}, over {} layers (permutation p = {})", observed, a.mean.rows(), num(a.p_value)), a.diagonal - a.off_diagonal, 0,
                  a.diagonal > a.off_diagonal && a.p_value < kClaimLevel, a.p_value);
}

Measured measure_gamma_gap(const json& power) {
  const GammaGapTest g = GammaGapTest::from_json(object_at(object_at(power, "results"), "gamma_vs_gap"));
  const std::string observed = fmt::format("Spearman(γ_t, 1 − |λ₂|/|λ₁|) over {} layers = {}", g.layers,
                                           std::isfinite(g.rho) ? num(g.rho) : std::string(kNotComputed));
  const std::string why = untestable_layers(power, static_cast<size_t>(g.layers));
  if (!why.empty() || !std::isfinite(g.rho))
    return shown(observed + " (" + (why.empty() ? "γ_t or the gap constant over the layers" : why) + ")", g.rho, 0);
  if (!std::isfinite(g.p_value)) return missing("no permutation p-value in results.json");
  return measured(fmt::format("{} (one-sided permutation p = {})", observed, num(g.p_value)), g.rho, 0, g.rho > 0 && g.p_value < kClaimLevel,
                  g.p_value);
}

Measured measure_dominant(const json& power) {
  int64_t real = 0, spectra = 0;
  std::vector<double> ratio;
  for (const json& l : list_at(object_at(power, "results"), "layers")) {
    const DominantSpectrum f = DominantSpectrum::from_json(object_at(l, "F"));
    ++spectra, real += !f.complex_pair;
    if (std::isfinite(f.modulus_ratio)) ratio.push_back(f.modulus_ratio);
  }
  if (spectra == 0) return missing("");
  return shown(fmt::format("λ₁ real in {} of {} layers, a complex pair in {}; median |λ₂|/|λ₁| = {}", real, spectra, spectra - real,
                           ratio.empty() ? std::string(kNotComputed) : num(median(ratio))),
               ratio.empty() ? NAN : median(ratio));
}

// The shared-weight iteration (ALBERT or --iterate-layer): results.iteration, null when none ran.
const json* iteration_of(const json& power) {
  const json& results = object_at(power, "results");
  const auto it = results.find("iteration");
  return it == results.end() || it->is_null() ? nullptr : &*it;
}

constexpr const char* kNoIteration = "no shared-weight layer iterated; see power --iterate-layer";

Measured measure_regime(const json& power) {
  const json* it = iteration_of(power);
  if (!it) return missing(kNoIteration);
  return shown(RegimeEvidence::from_json(object_at(*it, "regime")).description);
}

// With a complex pair λ₁, λ̄₁ dominating the step matrix, the tokens turn in the pair's plane by arg λ₁ per step.
Measured measure_rotation(const json& power) {
  const json* it = iteration_of(power);
  if (!it) return missing(kNoIteration);
  const DominantSpectrum step = DominantSpectrum::from_json(object_at(*it, "step_matrix_spectrum"));
  const double expected = number_at(*it, "expected_angle_per_step");
  if (!step.complex_pair) return shown("λ₁ of the step matrix is real: no rotation is predicted", NAN, expected);
  const double angle = number_at(*it, "measured_angle_per_step");
  Measured m = measured(fmt::format("the tokens turn {} rad per step against arg λ₁ = {} of the step matrix", num(angle), num(expected)),
                        angle, expected, std::abs(angle - expected) <= kRotationTolerance * std::abs(expected));
  m.exact = true;
  return m;
}

// Rank-1 steering of the last layer at the sweep's largest scale: the final tokens' mean alignment with u.
Measured measure_steering(const json& power) {
  const json& results = object_at(power, "results");
  const auto steering = results.find("steering");
  if (steering == results.end() || list_at(*steering, "points").empty()) return missing("no steering sweep (power --no-steer)");
  const SteeringPoint last = SteeringPoint::from_json(list_at(*steering, "points").back());
  std::vector<double> controls;
  for (const json& k : list_at(*steering, "controls")) controls.push_back(SteeringControl::from_json(k).mean_alignment_with_u);
  return measured(fmt::format("at c = {}·|λ₁| the final tokens' mean alignment with u is {} (least {}); along random directions ⊥ u "
                              "with a perturbation as large: {}",
                              num(last.scale), num(last.mean_alignment), num(last.min_alignment), controls.empty() ? kNotComputed : list(controls)),
                  last.mean_alignment, kSteeredAlignment, last.mean_alignment >= kSteeredAlignment);
}

Measured measure_steering_control(const json& draw) {
  const double a = SteeringControl::from_json(draw).mean_alignment_with_u;
  return measured("", a, kSteeredAlignment, a >= kSteeredAlignment);
}

// The bipartite instability test of the iteration: a state split in two along v_k, run as it is and slightly perturbed.
Measured measure_bipartite(const json& power) {
  const json* it = iteration_of(power);
  if (!it) return missing(kNoIteration);
  const BipartiteTest test = BipartiteTest::from_json(object_at(*it, "bipartite_test"));
  if (!test.ran) return missing("the bipartite test did not run (no v_k to build it on)");
  const std::string observed = fmt::format("a bipartite split along v_{} {} unperturbed and {} when perturbed by {} ({} tokens changed sign)",
                                           test.eigenvector, test.left_unperturbed ? "does not stay" : "stays",
                                           test.left_perturbed ? "leaves" : "stays", num(test.perturbation), test.sign_flips_perturbed);
  if (test.left_unperturbed) return shown(observed + ": it is no fixed point of this layer, so there is no stability to test");
  Measured m = measured(observed, static_cast<double>(test.sign_flips_perturbed), 0, test.left_perturbed);
  m.exact = true;
  return m;
}

// The control column's mention of the initialisations; the summary's introduction says what they are.
// ---- Intervals over samples: a seeded bootstrap over passages of the power part's per-token files -------------

constexpr int kBootstrapRounds = 1000;

// Per sample s and layer t, the sums behind γ_t and ρ_t, from power's alignment_before/after.npy,
// alignment_covariance.npy, token_sample.npy and token_repeated.npy. Nothing when a file is missing or does not fit.
struct PowerSamples {
  int64_t samples = 0, layers = 0;
  std::vector<double> tokens, new_tokens;                   // [s]
  std::vector<double> after, before, increases;             // [t * samples + s]; increases among new tokens
  std::vector<double> covariance, covariance_tokens;        // [t * samples + s], empty without the file
};

std::optional<PowerSamples> power_samples(const ReportPart& part) {
  try {
    const NpyArray before = read_npy(part.dir / "alignment_before.npy"), after = read_npy(part.dir / "alignment_after.npy");
    const std::vector<int64_t> sample = read_npy(part.dir / "token_sample.npy").as_int64(),
                               repeated = read_npy(part.dir / "token_repeated.npy").as_int64();
    if (before.shape.size() != 2 || before.shape != after.shape) return std::nullopt;
    const int64_t L = before.shape[0], T = before.shape[1];
    if (static_cast<int64_t>(sample.size()) != T || static_cast<int64_t>(repeated.size()) != T || T == 0) return std::nullopt;
    std::vector<double> cov;
    if (fs::exists(part.dir / "alignment_covariance.npy")) {
      const NpyArray c = read_npy(part.dir / "alignment_covariance.npy");
      if (c.shape == before.shape) cov = c.as_double();
    }
    const std::vector<double> a0 = before.as_double(), a1 = after.as_double();
    PowerSamples p;
    p.samples = *std::max_element(sample.begin(), sample.end()) + 1, p.layers = L;
    const size_t S = static_cast<size_t>(p.samples), cells = static_cast<size_t>(L) * S;
    p.tokens.assign(S, 0), p.new_tokens.assign(S, 0);
    p.after.assign(cells, 0), p.before.assign(cells, 0), p.increases.assign(cells, 0);
    if (!cov.empty()) p.covariance.assign(cells, 0), p.covariance_tokens.assign(cells, 0);
    for (int64_t i = 0; i < T; ++i) {
      if (sample[i] < 0) return std::nullopt;
      const size_t s = static_cast<size_t>(sample[i]);
      p.tokens[s] += 1, p.new_tokens[s] += repeated[i] == 0;
      for (int64_t t = 0; t < L; ++t) {
        const size_t cell = static_cast<size_t>(t) * S + s, at = static_cast<size_t>(t * T + i);
        p.after[cell] += a1[at], p.before[cell] += a0[at];
        if (repeated[i] == 0) p.increases[cell] += a1[at] > a0[at];
        if (!cov.empty() && !std::isnan(cov[at])) p.covariance[cell] += cov[at], p.covariance_tokens[cell] += 1;
      }
    }
    return p;
  } catch (const std::exception&) {  // a directory from before these files, or a damaged one: no interval
    return std::nullopt;
  }
}

// The 2.5 % and 97.5 % quantiles of statistic(weights) over resamplings of the samples with replacement (weights:
// how often each sample was drawn), seeded so that a report is reproducible.
Interval bootstrap(int64_t samples, const std::function<double(const std::vector<double>&)>& statistic) {
  std::mt19937_64 rng(0);
  std::uniform_int_distribution<int64_t> pick(0, samples - 1);
  std::vector<double> values, weights(static_cast<size_t>(samples));
  for (int r = 0; r < kBootstrapRounds; ++r) {
    std::fill(weights.begin(), weights.end(), 0.0);
    for (int64_t i = 0; i < samples; ++i) weights[static_cast<size_t>(pick(rng))] += 1;
    const double v = statistic(weights);
    if (std::isfinite(v)) values.push_back(v);
  }
  if (values.size() < kBootstrapRounds / 2) return {};
  std::sort(values.begin(), values.end());
  auto at = [&](double q) { return values[static_cast<size_t>(q * static_cast<double>(values.size() - 1))]; };
  auto first = [&](int64_t part) {  // the statistic on the first ⌈S/part⌉ samples
    std::vector<double> prefix(static_cast<size_t>(samples), 0.0);
    std::fill_n(prefix.begin(), (samples + part - 1) / part, 1.0);
    return statistic(prefix);
  };
  return {at(0.025), at(0.975),
          fmt::format("bootstrap over the {} samples as units ({} resamplings, seed 0; per-token files of the power part)", samples,
                      kBootstrapRounds),
          first(4), first(2)};
}

double weighted_ratio(const std::vector<double>& sums, size_t offset, const std::vector<double>& counts, size_t counts_offset,
                      const std::vector<double>& w) {
  double num = 0, den = 0;
  for (size_t s = 0; s < w.size(); ++s) num += w[s] * sums[offset + s], den += w[s] * counts[counts_offset + s];
  return den > 0 ? num / den : NAN;
}

// γ's statistic, the median over layers of γ_t minus its strongest control, on resampled samples.
std::optional<Interval> gamma_interval(const ReportPart& part) {
  const auto p = power_samples(part);
  const std::vector<AlignmentStats> layers = layer_dynamics(part.json);
  if (!p || static_cast<int64_t>(layers.size()) != p->layers || p->samples < 2) return std::nullopt;
  std::vector<double> baseline;
  for (const AlignmentStats& a : layers) baseline.push_back(a.baseline);
  const size_t S = static_cast<size_t>(p->samples);
  return bootstrap(p->samples, [&](const std::vector<double>& w) {
    std::vector<double> margins;
    for (size_t t = 0; t < static_cast<size_t>(p->layers); ++t) {
      const double g = weighted_ratio(p->after, t * S, p->tokens, 0, w), g0 = weighted_ratio(p->before, t * S, p->tokens, 0, w);
      const double gc = p->covariance.empty() ? NAN : weighted_ratio(p->covariance, t * S, p->covariance_tokens, t * S, w);
      margins.push_back(g - std::max({g0, baseline[t], std::isnan(gc) ? baseline[t] : gc}));
    }
    return median(margins);
  });
}

// ρ's statistic, the median over layers of ρ_t over new states, on resampled samples.
std::optional<Interval> rho_interval(const ReportPart& part) {
  const auto p = power_samples(part);
  if (!p || p->samples < 2) return std::nullopt;
  const size_t S = static_cast<size_t>(p->samples);
  return bootstrap(p->samples, [&](const std::vector<double>& w) {
    std::vector<double> rho;
    for (size_t t = 0; t < static_cast<size_t>(p->layers); ++t) rho.push_back(weighted_ratio(p->increases, t * S, p->new_tokens, 0, w));
    return median(rho);
  });
}

std::string initialisations(const std::string& part) { return fmt::format("then the initialisations (DIR/init/*/{})", part); }

// The power-method paper's claims on the model's own dynamics (kind "power"), or on the paper's idealisation
// (kind "power-l2": attention sublayers only with L2 normalisation, power --mode attn-only-l2), where only the
// claims about the token dynamics are judged, with ids ending in "_l2".
PaperSummary power_summary(const std::vector<ReportPart>& parts, const std::string& kind = "power") {
  const bool ideal = kind == "power-l2";
  PaperSummary s{"000",
                 ideal ? "Transformer layers and the power method, in the paper's idealisation (attention only, L2-normalised)"
                       : "Transformer layers and the power method (Li & Altafini)",
                 {}, ideal};
  const std::string learned = "; pass: beyond every initialisation, Holm-adjusted p < 0.05";
  const Claim claims[] = {
      {"gamma", "Tokens leaving layer t align with its dominant eigenvector v₁,t well above chance.",
       "holds when γ_t (mean a(x_i^{t+1}; v₁,t), results.layers[t].dynamics_F.gamma) exceeds the random-direction baseline "
       "E|cos| (dynamics_F.baseline), the same tokens' alignment before the layer (dynamics_F.gamma_before) and their "
       "alignment with random directions drawn from their own second moment (dynamics_F.gamma_covariance) in more than half "
       "of the layers, with the sign test over the layers; statistic: the median over layers of γ_t minus the strongest of "
       "the three" + learned,
       "per layer the strongest of: the same tokens before the layer, a(x_i^t; v₁,t); random directions drawn from the "
       "tokens' own distribution, a(x_i^{t+1}; U); the isotropic baseline; then " + initialisations(kind),
       +1, 0, gamma_interval},
      {"rho", "Each layer moves most tokens toward v₁,t: ρ_t > 1/2, significantly.",
       "holds when ρ_t over the tokens whose state is new (dynamics_F.rho_unique: a state repeated from an earlier sample, "
       "such as BOS, counted once) is > 1/2 with the one-sided sign-flip test over samples p < 0.05 "
       "(dynamics_F.p_value_samples) in more than half of the layers; statistic: the median ρ_t" + learned,
       "1/2, with samples (not tokens) as the units; then " + initialisations(kind), +1, 0, rho_interval},
      {"dominant", "Each F_t has a dominant eigenvalue (real, or a complex pair) standing apart from the rest.",
       "shown, not judged: how many λ₁ are real, and the median |λ₂|/|λ₁| (results.layers[t].F)", "none (not judged)"},
      {"regime", "A shared layer iterated far past the model's depth settles into the regime its spectrum predicts.",
       "shown, not judged: the regime classified by the iteration (results.iteration.regime)", "none (not judged)"},
      {"alignment_local", "Alignment is local: tokens leaving layer t align with v₁,t, not with one global eigenvector shared by the layers.",
       fmt::format("holds when the mean alignment of the tokens leaving each layer with its own v₁,t (the diagonal of "
                   "results.cross_layer_alignment.mean) exceeds their mean alignment with the other layers' v₁,s "
                   "(off_diagonal_mean) and the permutation test over layer labels gives p < {} (p_permutation); shown with "
                   "fewer than {} layers or shared weights; statistic: the difference{}",
                   kClaimLevel, kMinTestedLayers, learned),
       "the same tokens' alignment with the dominant eigenvectors of the other layers, the layer labels permuted; then " +
           initialisations(kind),
       +1},
      {"gamma_gap", "Alignment is weak where the spectral gap is small: γ_t grows with the gap of F_t.",
       fmt::format("holds when the Spearman correlation over layers of γ_t with the relative gap 1 − |λ₂|/|λ₁| of F_t "
                   "(results.gamma_vs_gap.rho) is positive with one-sided permutation p < {} (p_permutation); shown with fewer "
                   "than {} layers or shared weights; statistic: the correlation{}",
                   kClaimLevel, kMinTestedLayers, learned),
       "the layers' gaps permuted (the permutation null of that rank correlation); then " + initialisations(kind), +1},
      {"rotation", "A shared layer whose dominant eigenvalue is a complex pair turns the tokens by arg λ₁ per step.",
       fmt::format("pass when the iteration's measured angle per step (results.iteration.measured_angle_per_step, the last "
                   "quarter of the steps) is within {:.0f} % of arg λ₁ of the step matrix (expected_angle_per_step); shown when "
                   "λ₁ is real",
                   100 * kRotationTolerance),
       "the spectrum's prediction, arg λ₁ (a deterministic comparison: no p-value)"},
      {"bipartite", "A bipartite consensus (the tokens split in two along an eigenvector) is unstable.",
       "pass when the split state stays split run as it is (results.iteration.bipartite_test.left_unperturbed false) and "
       "leaves its split when perturbed (left_perturbed true); shown when it does not even stay unperturbed",
       "the same state unperturbed (a deterministic comparison: no p-value)"},
      {"steering",
       "A large enough rank-1 perturbation of the last layer's output matrix makes u its dominant eigenvector, and every token "
       "aligns with u, whatever the architecture.",
       fmt::format("holds when at the sweep's largest scale the final tokens' mean alignment with u "
                   "(results.steering.points[-1].final_layer_mean_alignment) is at least {}; pass when it is also above that of "
                   "every perturbation of the same Frobenius norm along a random direction orthogonal to u "
                   "(results.steering.controls), with the test that it is one more of them, Holm-adjusted p < 0.05",
                   kSteeredAlignment),
       "rank-1 perturbations as large along random directions orthogonal to u (power --steer-control-draws, default 5): their "
       "tokens' alignment with u",
       +1, 0, {}, "/results/steering/controls", "direction", measure_steering_control},
  };
  Measured (*const measures[])(const json&) = {measure_gamma,           measure_rho,       measure_dominant, measure_regime,
                                               measure_alignment_local, measure_gamma_gap, measure_rotation, measure_bipartite,
                                               measure_steering};
  const ReportPart* model = part_for(parts, kind);
  const std::vector<const ReportPart*> inits = controls_for(parts, kind);
  for (size_t i = 0; i < std::size(claims); ++i) {
    static const std::set<std::string> dynamics = {"gamma", "rho", "alignment_local", "gamma_gap"};
    if (ideal && !dynamics.count(claims[i].id)) continue;
    ClaimCheck c = model ? judge_parts(claims[i], model, inits, subsets_for(parts, kind), has_init_control(parts), measures[i])
                         : claims[i].missing(kind + " did not run");
    if (ideal) c.id += "_l2", c.claim = "In the idealisation: " + c.claim;
    s.checks.push_back(std::move(c));
  }
  return s;
}

// ---- The residual-stream paper: Jacobian spectral geometry (jacobian) and activation-graph topology (topology) ----

// The depths of the first model of a jacobian results.json, each depth's `part` ("mean", "cumulative") read back as
// the analysis wrote it; nullopt where that part was not computed (null). Throws Error (naming the key) on a depth
// that lacks it.
template <class Typed>
std::vector<std::optional<Typed>> depths_read(const json& jacobian, const char* part, Typed (*read)(const json&)) {
  std::vector<std::optional<Typed>> out;
  for (const json& depth : array_at(jacobian, "/results/models/0/depths")) {
    const json& value = value_at(depth, part);
    out.push_back(value.is_null() ? std::nullopt : std::optional<Typed>(read(value)));
  }
  return out;
}

EffectiveRanks cumulative_ranks(const json& cumulative) { return EffectiveRanks::from_json(object_at(cumulative, "effective_rank")); }

// An effective rank written by the surgery (null: not computed).
std::optional<double> roy_vetterli(const json& ranks) {
  if (ranks.is_null()) return std::nullopt;
  return EffectiveRanks::from_json(ranks).roy_vetterli;
}

Measured measure_bottleneck(const json& jacobian) {
  const auto ranks = depths_read(jacobian, "cumulative", cumulative_ranks);
  if (ranks.empty()) return missing("no depths in results.json");
  if (!ranks.front() || !ranks.back() || ranks.front()->roy_vetterli <= 0) return missing("no cumulative effective ranks");
  const double first = ranks.front()->roy_vetterli, last = ranks.back()->roy_vetterli, r = last / first;
  return measured(fmt::format("effective rank of C_k: {} at depth 1 → {} at depth {} (r = {})", num(first), num(last),
                              ranks.size(), num(r)),
                  r, 1, r < 1);
}

Measured measure_normality(const json& jacobian) {
  const auto metrics = depths_read(jacobian, "mean", OperatorMetrics::from_json);
  if (metrics.empty()) return missing("no depths in results.json");
  const size_t K = metrics.size();
  std::vector<double> dep, sym, cplx;
  for (const auto& m : metrics) {
    if (!m || !std::isfinite(m->departure.schur_normalized) || !std::isfinite(m->symmetry_index)) break;
    dep.push_back(m->departure.schur_normalized), sym.push_back(m->symmetry_index), cplx.push_back(m->complex_fraction);
  }
  if (K < 2) return missing("fewer than 2 depths");
  if (dep.size() != K) return missing("departure or symmetry index missing");
  const size_t third = std::max<size_t>(1, K / 3);
  const double dep_early = mean(dep, 0, third), dep_late = mean(dep, K - third, K), sym_early = mean(sym, 0, third),
               sym_late = mean(sym, K - third, K), cplx_early = mean(cplx, 0, third);
  return measured(fmt::format("first {} vs last {} depths: departure {} vs {}, symmetry index {} vs {}; complex eigenvalues early: {}",
                              third, third, num(dep_early), num(dep_late), num(sym_early), num(sym_late),
                              std::isfinite(cplx_early) ? fmt::format("{:.0f} %", 100 * cplx_early) : std::string(kNotComputed)),
                  dep_early - dep_late, 0, dep_early > dep_late && sym_late < sym_early);
}

// At α = 0 the control equals the surgery (both drop N); the control says something at α = 1, where random
// strictly upper triangular N of the same norm replace the real one. If a random N makes as deep a bottleneck,
// the collapse comes from N's size, which any non-normal matrix has, not from the learned N.
Measured measure_surgery(const json& jacobian) {
  std::optional<double> at0, at1;
  std::vector<double> controls;
  for (const json& p : array_at(jacobian, "/results/models/0/surgery")) {
    auto alpha = number(p, "/alpha");
    if (!alpha) continue;
    if (std::abs(*alpha) < 1e-12) at0 = roy_vetterli(p.value("full_depth_surgery", json()));
    if (std::abs(*alpha - 1) < 1e-12) {
      at1 = roy_vetterli(p.value("full_depth_surgery", json()));
      for (const json& draw : array_at(p, "/full_depth_control_draws"))
        if (auto v = roy_vetterli(draw)) controls.push_back(*v);
      if (controls.empty())
        if (auto v = roy_vetterli(p.value("full_depth_control", json()))) controls.push_back(*v);
    }
  }
  const std::string observed = fmt::format("full-depth effective rank {} at α = 0 vs {} unmodified; with random N of the same norm: {}",
                                           num_or_missing(at0), num_or_missing(at1), controls.empty() ? kNotComputed : list(controls));
  if (!at0 || !at1 || controls.empty()) {
    Measured m = missing("no surgery at α = 0 and α = 1; run jacobian --surgery with both in --alphas");
    if (at0 || at1) m.missing = observed + "; " + *m.missing;
    return m;
  }
  // Ranks that agree to round-off are ties: J_1 is J itself, while α = 0 and the controls are rebuilt from the Schur
  // form, so for a normal J all of them are one number computed along different paths.
  const auto below = [](double a, double b) { return a < b * (1 - 1e-9); };
  const bool below_every = std::all_of(controls.begin(), controls.end(), [&](double c) { return below(*at1, c); });
  Measured m = measured(observed, *at1 / median(controls), 1, below(*at1, *at0) && below_every, prediction_p_value(*at1, controls, -1, 0));
  if (controls.size() < 2) m.untested = "one random-N draw is no distribution (jacobian --surgery-control-draws 5)";
  return m;
}

// results.coupling, none when the topology ran without it (--no-coupling).
std::optional<TopologyCoupling> coupling_of(const json& topology) {
  const json* written = find(topology, "/results/coupling");
  if (!written || written->is_null()) return std::nullopt;
  return TopologyCoupling::from_json(*written);
}

Measured measure_coupling(const json& topology) {
  const std::optional<TopologyCoupling> coupling = coupling_of(topology);
  if (!coupling) return missing("no coupling in results.json (topology --no-coupling?)");
  const CouplingResult& c = coupling->test;
  const auto coupled = static_cast<double>(c.n_coupled_column);
  return measured(fmt::format("{} of {} maps coupled ({} significant at q = {}, |ρ| ≥ {})", c.n_coupled_column, c.layers.size(),
                              c.n_significant_column, num(c.fdr_q), num(c.min_effect)),
                  coupled, 1, coupled >= 1);
}

Measured measure_coupling_sign(const json& topology) {
  const std::optional<TopologyCoupling> coupling = coupling_of(topology);
  if (!coupling) return missing("no coupling in results.json (topology --no-coupling?)");
  const topology::SpearmanTest& sign = coupling->test.sign_rule;
  if (!std::isfinite(sign.rho) || !std::isfinite(sign.p_permutation))
    return missing("no sign_rule with a permutation p in results.json (fewer than 3 maps, or --permutations 0)");
  return measured(fmt::format("Spearman(ρ, departure) over {} maps = {} (permutation p = {})", sign.n, num(sign.rho), num(sign.p_permutation)),
                  sign.rho, 0, sign.rho < 0 && sign.p_permutation < kClaimLevel, sign.p_permutation);
}

// The coupling over a series of checkpoints (topology --compare, in the order given: the steps of a training run):
// the maps coupled at the last checkpoint and not at the first against the reverse, a sign test with the maps as
// units, and the trend of the count over the series (Kendall's τ with the checkpoint order).
Measured measure_emergence(const json& topology) {
  std::vector<TopologyCheckpoint> series;
  for (const json& c : array_at(topology, "/results/checkpoints")) series.push_back(TopologyCheckpoint::from_json(c));
  if (series.size() < 2)
    return missing("one checkpoint: run topology with --compare and the training run's checkpoints in order (CACHE@step...)");
  std::vector<double> counts;
  for (const TopologyCheckpoint& c : series) {
    if (!c.has_coupling) return missing("a checkpoint without coupling (topology --no-coupling?)");
    counts.push_back(static_cast<double>(std::count(c.coupling_coupled.begin(), c.coupling_coupled.end(), true)));
  }
  const std::vector<bool>&first = series.front().coupling_coupled, &last = series.back().coupling_coupled;
  if (first.empty() || first.size() != last.size()) return missing("the first and last checkpoints do not couple the same maps");
  long gained = 0, lost = 0;
  for (size_t k = 0; k < first.size(); ++k) gained += last[k] && !first[k], lost += first[k] && !last[k];
  const double tau = order_tau(counts);
  std::vector<std::string> texts;
  for (double n : counts) texts.push_back(num(n));
  return measured(fmt::format("coupled maps over {} checkpoints: {}; from the first to the last {} maps became coupled and {} "
                              "ceased; Kendall τ of the count with the order {}",
                              counts.size(), fmt::join(texts, " → "), gained, lost, num(tau)),
                  counts.back() - counts.front(), 0, gained > lost && tau > 0, sign_test_p_value(gained, gained + lost));
}

Measured measure_communities(const json& topology) {
  std::vector<double> communities;
  for (const json& b : list_at(object_at(topology, "results"), "boundaries"))
    communities.push_back(static_cast<double>(BoundarySummary::from_json(b).communities));
  if (communities.empty()) return missing("");
  return shown(fmt::format("{} to {} communities over {} boundaries (median {})", *std::min_element(communities.begin(), communities.end()),
                           *std::max_element(communities.begin(), communities.end()), communities.size(), num(median(communities))),
               median(communities));
}

Measured measure_communities_architectural(const json& topology) {
  const json* written = find(topology, "/results/community_similarity");
  if (!written || written->is_null())
    return missing("no community_similarity in results.json; analyze compares with its init part, topology with --communities-control");
  const CommunityComparison comparison = CommunityComparison::from_json(*written);
  const topology::CommunitySimilarity& c = comparison.similarity;
  const double nmi = c.mean_nmi, null = c.mean_null, p = c.p_value_mean;
  if (!std::isfinite(nmi) || !std::isfinite(null) || !std::isfinite(p)) return missing("no mean NMI, null or p-value in community_similarity");
  const std::string observed = fmt::format("mean NMI with the control's communities {} vs {} with its units shuffled (p = {}, {} boundaries)",
                                           num(nmi), num(null), num(p), comparison.hooks.size());
  if (comparison.independent_draw)
    return shown(observed + "; the control is an independent random draw, whose units are not this model's: only the same "
                            "run's step-0 checkpoint (topology --communities-control) can test the claim",
                 nmi, null);
  return measured(observed, nmi, null, nmi > null && p < kClaimLevel, p);
}

PaperSummary residual_summary(const std::vector<ReportPart>& parts) {
  PaperSummary s{"003", "Residual-stream Jacobians and network topology", {}};
  const std::string learned = "; pass: beyond every initialisation, Holm-adjusted p < 0.05";
  const Claim jacobian_claims[] = {
      {"bottleneck",
       "The cumulative Jacobian is a learned bottleneck: its effective rank falls with depth (Llama 3.1 8B: ≈436 → ≈7), far more "
       "than at initialisation.",
       "holds when r = erank(C_K)/erank(C_1) (Roy–Vetterli, results.models[0].depths[k].cumulative.effective_rank.roy_vetterli; K "
       "the last depth) is below 1; statistic: r" + learned + "; and beyond the model's own mean Jacobians with Haar-rotated bases "
       "(results.models[0].haar_null)",
       initialisations("jacobian") + "; the structure-preserving null: each J̄_k replaced by Q_k J̄_k Q_kᵀ, Q_k Haar-random per depth",
       -1, 0, {}, "/results/models/0/haar_null"},
      {"normality", "Early layers are non-normal, late layers more nearly symmetric.",
       "holds when, over the first third of the depths versus the last third, the mean normalised Henrici departure "
       "(mean.henrici_departure.schur_normalized) is larger early and the mean symmetry index ‖J − Jᵀ‖/‖J‖ (mean.symmetry_index) "
       "is smaller late; statistic: the early minus the late departure" + learned,
       "the same model's late depths; then " + initialisations("jacobian"), +1},
      {"surgery",
       "Removing the non-normal part N of the Schur form (surgery α = 0) largely dissolves the bottleneck, and it is this N, not "
       "any N of its size, that makes it.",
       "holds when the full-depth effective rank at α = 0 (results.models[0].surgery[α=0].full_depth_surgery.roy_vetterli) "
       "exceeds the unmodified one (α = 1), and the unmodified one is below that of every draw of random N "
       "(surgery[α=1].full_depth_control_draws), with the test that it is one more of those draws; statistic: the "
       "unmodified rank over the draws' median" + learned,
       "each depth's N replaced by random strictly upper triangular N of the same Frobenius norm (α = 1, several seeded draws): "
       "their full-depth effective ranks; then " + initialisations("jacobian") + " (surgery at α = 0 and 1, one draw)",
       -1},
  };
  const Claim topology_claims[] = {
      {"coupling",
       "Boundary nodes of the activation graph couple to the Jacobian gain in trained models (OLMo 3: 0 / 14 / 24 significant "
       "layers at steps 0 / 471k / 1.41M).",
       "holds when at least 1 sublayer map is coupled (Spearman(participation, log gain) significant after Benjamini–Hochberg "
       "and |ρ| ≥ the effect size, results.coupling.coupled_layers); statistic: the coupled maps" + learned,
       initialisations("topology"), +1, 0.5},
      {"coupling_sign", "Near-symmetric layers amplify (ρ > 0) and strongly non-normal layers attenuate (ρ < 0).",
       fmt::format("holds when the Spearman correlation over all maps of the coupling ρ with the normalised departure ‖N‖/‖J̄‖ "
                   "is negative with permutation p < {} (results.coupling.sign_rule); statistic: that correlation{}",
                   kClaimLevel, learned),
       "the layers' departures shuffled (the permutation null of that rank correlation); then " + initialisations("topology"), -1},
      {"communities", "Signed Leiden CPM finds communities in the correlation graph at every boundary.",
       "shown, not judged: communities per boundary (results.boundaries[b].communities)", "none (not judged)"},
      {"communities_architectural",
       "The mesoscale community structure is partly architectural: communities present at initialisation persist in the "
       "trained model.",
       fmt::format("holds when the mean NMI over boundaries of the model's communities with the control's, unit by unit "
                   "(results.community_similarity.mean_nmi), exceeds the shuffled-unit null (null_mean) with permutation p < {} "
                   "(p_permutation); pass at Holm-adjusted p < {}; shown, not judged, when the control is an independent random "
                   "draw (independent_draw: its units are not the model's, so the NMI is at chance by construction)",
                   kClaimLevel, kVerdictLevel),
       "the initialisation's communities with its units shuffled (same community sizes)"},
      {"emergence",
       "The coupling emerges with training: the significantly coupled layers grow over the checkpoints of a training run "
       "(OLMo 3: 0 / 14 / 24).",
       fmt::format("holds when over topology --compare's checkpoints, in the order given (results.checkpoints[i].coupling), more "
                   "maps are coupled at the last checkpoint and not the first than the reverse, and Kendall's τ of the count with "
                   "the order is positive; the sign test over the changed maps gives p; pass at Holm-adjusted p < {}; statistic: the "
                   "maps gained, last minus first",
                   kVerdictLevel),
       "the same maps at the first checkpoint (the maps are the units of the sign test)"},
  };
  Measured (*const jacobian_measures[])(const json&) = {measure_bottleneck, measure_normality, measure_surgery};
  Measured (*const topology_measures[])(const json&) = {measure_coupling, measure_coupling_sign, measure_communities,
                                                        measure_communities_architectural, measure_emergence};
  const bool init_ran = has_init_control(parts);
  const ReportPart* jacobian = part_for(parts, "jacobian");
  const std::vector<const ReportPart*> jacobian_inits = controls_for(parts, "jacobian");
  for (size_t i = 0; i < std::size(jacobian_claims); ++i)
    s.checks.push_back(jacobian ? judge_parts(jacobian_claims[i], jacobian, jacobian_inits, subsets_for(parts, "jacobian"), init_ran,
                                              jacobian_measures[i], nested_for(parts, "jacobian", 4), nested_for(parts, "jacobian", 2))
                                : jacobian_claims[i].missing("jacobian did not run"));
  const ReportPart* topology = part_for(parts, "topology");
  const std::vector<const ReportPart*> topology_inits = controls_for(parts, "topology");
  for (size_t i = 0; i < std::size(topology_claims); ++i)
    s.checks.push_back(topology ? judge_parts(topology_claims[i], topology, topology_inits, subsets_for(parts, "topology"), init_ran,
                                              topology_measures[i])
                                : topology_claims[i].missing("topology did not run"));
  return s;
}

// The clustering paper (Geshkovski et al.): tokens of self-attention dynamics cluster. Which theorem applies depends on the
// run (the spectrum of V, the sphere), so the particles analysis decides the rule and writes its verdicts
// (results.verdicts, analysis/particles/diagnostics.h); the report shows them as written.
PaperSummary particles_summary(const ReportPart* part) {
  PaperSummary s{"004", "Clusters in self-attention dynamics (Geshkovski, Letrouit, Polyanskiy, Rigollet)", {}};
  const std::string c1 = "Tokens moved by self-attention cluster onto the limit the theorem for this V predicts (polytope "
                         "vertices, ≤ 3 hyperplanes per positive direction, one point at 0 for V = −I, clusters on the sphere).";
  const std::string r1 = "the rule of the theorem that applies, decided by the particles analysis (results.verdicts, claim clusters)";
  const std::string c2 = "The attention matrix P(t) becomes Boolean (0/1 rows pointing at a few leaders).";
  const std::string r2 = "the rule written by the particles analysis (results.verdicts, claim boolean)";
  const std::string c3 = "The leaders of the Boolean limit are extreme tokens of the sequence (d = 1).";
  const std::string r3 = "the rule written by the particles analysis (results.verdicts, claim leaders)";
  const std::string c4 = "The attention matrix P(t) tends to low rank (at most 3 for d = 1).";
  const std::string r4 = "the rule written by the particles analysis (results.verdicts, claim rank)";
  const std::string c5 = "Where the tokens cluster depends on where they start: initial tokens moved a little end in clusters "
                         "moved with them.";
  const std::string r5 = "the rule written by the particles analysis (results.verdicts, claim locations; results.perturbed_runs)";
  const std::string control = "the same measure at t = 0, before the dynamics";
  const Claim claims[] = {{"clusters", c1, r1, control}, {"boolean", c2, r2, control}, {"leaders", c3, r3, control},
                          {"rank", c4, r4, control},
                          {"locations", c5, r5, "the move itself (1 at t = 0); a fixed attractor of the weights forgets it"}};
  if (!part) {
    for (const Claim& claim : claims) s.checks.push_back(claim.missing("particles did not run"));
    return s;
  }
  const json& j = part->json;
  const std::string source = text_at(j, "/model/source");
  const std::string where = source.empty() || source == "synthetic" ? "" : " (" + source + ")";
  std::vector<particles::ClaimVerdict> written;
  std::optional<std::string> unreadable;
  try {
    for (const json& v : list_at(object_at(j, "results"), "verdicts")) written.push_back(particles::ClaimVerdict::from_json(v));
  } catch (const Error& e) {
    unreadable = e.what();
  }
  const double end_time = number(j, "/results/final/time").value_or(NAN);
  for (const Claim& claim : claims) {
    const auto v = std::find_if(written.begin(), written.end(), [&](const particles::ClaimVerdict& w) { return w.claim == claim.id; });
    if (v == written.end()) {
      s.checks.push_back(claim.missing(unreadable ? *unreadable + "; rerun particles" : "particles wrote no verdict on it"));
      continue;
    }
    const Verdict outcome = v->verdict == "pass"      ? Verdict::kPass
                            : v->verdict == "differs" ? Verdict::kDiffers
                            : v->verdict == "shown"   ? Verdict::kInfo
                                                      : Verdict::kNotComputed;
    const auto text = [](double x) { return std::isfinite(x) ? fmt::format("{:.4g}", x) : std::string(kNotComputed); };
    const std::string observed = std::isnan(v->value) ? "not measured for this run"  // value null: not measurable here
                                                      : fmt::format("{} = {} at T = {}, {} at t = 0 (the control)", v->measure,
                                                                    text(v->value), text(end_time), text(v->control));
    s.checks.push_back({v->statement, observed + (v->note.empty() ? "" : "; " + v->note) + where, outcome, v->rule, claim.id, v->value,
                        v->control, control});
  }
  return s;
}

}  // namespace

const char* control_kind_text(const std::string& kind) {
  if (kind == "haar") return "the model's mean Jacobians with Haar-rotated bases";
  if (kind == "direction") return "perturbations as large along random directions";
  return kind == "scaled" ? "initialisations at the model's own scales" : "the family's initialisation";
}

const char* verdict_text(Verdict v) {
  switch (v) {
    case Verdict::kPass: return "pass";
    case Verdict::kArchitectural: return "architectural";
    case Verdict::kDiffers: return "differs";
    case Verdict::kInconclusive: return "inconclusive";
    case Verdict::kInfo: return "shown";
    case Verdict::kNotComputed: break;
  }
  return "not computed";
}

std::vector<PaperSummary> summarize_claims(const std::vector<ReportPart>& parts) {
  // One command's directory is judged on its own paper's claims only; analyze's on all three, a skipped part's
  // claims as not computed.
  const bool one_command = parts.size() == 1 && parts[0].rel_dir.empty();
  auto ran = [&](const char* command) { return part_for(parts, command) != nullptr; };
  std::vector<PaperSummary> papers;
  if (!one_command || ran("power")) papers.push_back(power_summary(parts));
  if (ran("power-l2")) papers.push_back(power_summary(parts, "power-l2"));
  if (!one_command || ran("jacobian") || ran("topology")) papers.push_back(residual_summary(parts));
  if (!one_command || ran("particles")) papers.push_back(particles_summary(part_for(parts, "particles")));

  // Holm over every verdict of the run that has a p-value; a provisional pass whose adjusted p is not below the
  // level becomes inconclusive.
  std::vector<ClaimCheck*> tested;
  std::vector<double> p;
  for (auto& paper : papers)
    for (auto& c : paper.checks)
      if (std::isfinite(c.evidence.p)) tested.push_back(&c), p.push_back(c.evidence.p);
  const std::vector<double> adjusted = holm_adjusted(p);
  for (size_t i = 0; i < tested.size(); ++i) {
    ClaimCheck& c = *tested[i];
    c.evidence.p_holm = adjusted[i];
    if (c.verdict == Verdict::kPass && !(adjusted[i] < kVerdictLevel)) {
      c.verdict = Verdict::kInconclusive;
      c.observed += fmt::format("; inconclusive: p = {} is {} after the Holm adjustment over the {} tested verdicts", num(c.evidence.p),
                                num(adjusted[i]), tested.size());
    }
  }
  return papers;
}

json verdicts_json(const std::vector<PaperSummary>& papers) {
  json out = json::array();
  for (const auto& paper : papers)
    for (const auto& c : paper.checks) {
      const Evidence& e = c.evidence;
      json controls = json::array();
      for (const ControlValues& k : e.controls)
        controls.push_back({{"kind", k.kind}, {"seeds", k.seeds}, {"values", finite_or_null(k.values)}, {"holds", k.holds},
                            {"p", finite_or_null(k.p)}});
      out.push_back({{"paper", paper.seed},
                     {"claim", c.id},
                     {"verdict", verdict_text(c.verdict)},
                     {"value", finite_or_null(c.value)},
                     {"control", {{"value", finite_or_null(c.control_value)}, {"what", c.control}}},
                     {"evidence",
                      {{"samples", e.samples},
                       {"interval", std::isfinite(e.lo) ? json{{"lo", e.lo}, {"hi", e.hi}, {"method", e.interval}} : json(nullptr)},
                       {"nested", std::isfinite(e.at_quarter) ? json{{"quarter", finite_or_null(e.at_quarter)},
                                                                     {"half", finite_or_null(e.at_half)}, {"stable", e.stable}}
                                                              : json(nullptr)},
                       {"direction", e.direction > 0 ? "above" : e.direction < 0 ? "below" : "none"},
                       {"controls", controls},
                       {"at_control_samples", std::isfinite(e.at_control_samples)
                                                  ? json{{"value", e.at_control_samples}, {"samples", e.control_samples}}
                                                  : json(nullptr)},
                       {"p_claim", finite_or_null(e.p_claim)},
                       {"p", finite_or_null(e.p)},
                       {"p_holm", finite_or_null(e.p_holm)}}},
                     {"observed", c.observed},
                     {"rule", c.rule}});
    }
  return out;
}

}  // namespace tdyn
