#include "report/html_report.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <ctime>
#include <optional>

#include <fmt/format.h>

#include "analysis/power_layers.h"
#include "core/error.h"

namespace tdyn {
namespace {

using json = nlohmann::json;

// ---- Reading results.json defensively ---------------------------------------------------------------------------
// The analyses grow new keys and old directories lack them, so every lookup may fail; a failed lookup becomes
// "not computed" on the page, never an exception.

// Follows "/a/0/b" through objects and arrays; nullptr when any step is missing or of the wrong type.
const json* find(const json& root, std::string_view pointer) {
  const json* node = &root;
  size_t pos = 0;
  while (pos < pointer.size()) {
    if (pointer[pos] != '/') return nullptr;
    const size_t next = std::min(pointer.find('/', pos + 1), pointer.size());
    const std::string_view key = pointer.substr(pos + 1, next - pos - 1);
    if (node->is_object()) {
      auto it = node->find(std::string(key));
      if (it == node->end()) return nullptr;
      node = &*it;
    } else if (node->is_array()) {
      size_t index = 0;
      auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), index);
      if (ec != std::errc() || ptr != key.data() + key.size() || index >= node->size()) return nullptr;
      node = &(*node)[index];
    } else {
      return nullptr;
    }
    pos = next;
  }
  return node;
}

// A finite number, or nothing (absent, null — how NaN is stored — or not a number).
std::optional<double> number(const json& root, std::string_view pointer) {
  const json* j = find(root, pointer);
  if (!j || !j->is_number()) return std::nullopt;
  const double v = j->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

const json& array_at(const json& root, std::string_view pointer) {
  static const json empty = json::array();
  const json* j = find(root, pointer);
  return j && j->is_array() ? *j : empty;
}

std::string text_at(const json& root, std::string_view pointer) {
  const json* j = find(root, pointer);
  if (!j || j->is_null()) return "";
  if (j->is_number_float()) return fmt::format("{:.4g}", j->get<double>());  // no 17-digit noise on the page
  return j->is_string() ? j->get<std::string>() : j->dump();
}

std::string num(double v) { return fmt::format("{:.3g}", v); }

// The margins of the rules that compare with a control: the trained model must beat its control by this factor,
// so that a model which merely matches it (a random initialisation judged against another seed) differs.
constexpr double kBottleneckMargin = 0.5;  // r(trained) < 0.5 r(init): a collapse at least twice the init's
constexpr double kSurgeryMargin = 0.9;     // the real N's bottleneck at least 10 % deeper than a random N's
constexpr int kMinCoupledLayers = 1;        // and more than the init's: the paper's init has 0, trained OLMo 3 14–24
constexpr double kSignRuleLevel = 0.05;    // the sign rule's own test, one rank correlation over the layers
constexpr double kCommunitiesLevel = 0.05;  // the shuffled-unit test of the communities' NMI with the control's
constexpr double kLayerTestLevel = 0.05;   // the power-method paper's permutation tests over the layers (power_layers.h)

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

// The parts analyze runs on the random initialisation (a jacobian of DIR/init/model, and its topology in
// DIR/init/topology) are the controls' source, never the model's own jacobian or topology part.
constexpr const char* kInitPart = "init";
constexpr const char* kInitTopologyPart = "init/topology";

const ReportPart* part_for(const std::vector<ReportPart>& parts, const std::string& command) {
  for (const auto& p : parts)
    if (!p.json.is_null() && p.name != kInitPart && p.name != kInitTopologyPart && text_at(p.json, "/command") == command) return &p;
  return nullptr;
}

const ReportPart* named_part(const std::vector<ReportPart>& parts, const std::string& name) {
  for (const auto& p : parts)
    if (!p.json.is_null() && p.name == name) return &p;
  return nullptr;
}

constexpr const char* kNotComputed = "not computed";

ClaimCheck not_computed(std::string claim, std::string rule, const std::string& why) {
  return {std::move(claim), why.empty() ? kNotComputed : std::string(kNotComputed) + " (" + why + ")", Verdict::kNotComputed,
          std::move(rule)};
}

// A claim with its rule and control, before the numbers are read.
struct Claim {
  const char* id;
  std::string claim, rule, control;

  ClaimCheck judged(std::string observed, Verdict verdict, double value = NAN, double control_value = NAN) const {
    return {claim, std::move(observed), verdict, rule, id, value, control_value, control};
  }
  ClaimCheck missing(const std::string& why) const {
    ClaimCheck c = not_computed(claim, rule, why);
    c.id = id, c.control = control;
    return c;
  }
};

std::string num_or_missing(std::optional<double> v) { return v ? num(*v) : std::string(kNotComputed); }

// ---- The pass/differs rules -------------------------------------------------------------------------------------
// Each rule reads a few numbers the analysis wrote and compares them with a control the way the paper states its
// claim: a number that a model without the claimed property would also reach does not pass. They are deliberately
// simple so that a reader can redo them from results.json; docs/report.md lists them and says why each control.

// Why a test over the layers was not judged: too few layers, or one shared F for all of them.
std::string untestable_layers(const json& power, size_t layers) {
  const json* shared = find(power, "/results/cross_layer_alignment/shared_weights");
  if (shared && shared->is_boolean() && shared->get<bool>()) return "shared weights: every layer has the same F and v₁";
  if (layers < static_cast<size_t>(kMinTestedLayers)) return fmt::format("{} layers, fewer than {} to test", layers, kMinTestedLayers);
  return "";
}

ClaimCheck judge_alignment_local(const Claim& c, const json& power) {
  const size_t layers = array_at(power, "/results/cross_layer_alignment/mean").size();
  auto own = number(power, "/results/cross_layer_alignment/diagonal_mean"),
       other = number(power, "/results/cross_layer_alignment/off_diagonal_mean");
  if (!own || !other) return c.missing("no cross_layer_alignment in results.json (power from before it was measured)");
  const std::string observed = fmt::format("mean alignment with the own layer's v₁ {} vs the other layers' {}", num(*own), num(*other));
  const std::string why = untestable_layers(power, layers);
  if (!why.empty()) return c.judged(observed + " (" + why + ")", Verdict::kInfo, *own, *other);
  auto p = number(power, "/results/cross_layer_alignment/p_permutation");
  if (!p) return c.missing("no permutation p-value in results.json");
  return c.judged(fmt::format("{}, over {} layers (permutation p = {})", observed, layers, num(*p)),
                  *own > *other && *p < kLayerTestLevel ? Verdict::kPass : Verdict::kDiffers, *own, *other);
}

ClaimCheck judge_gamma_gap(const Claim& c, const json& power) {
  const auto layers = number(power, "/results/gamma_vs_gap/layers");
  if (!layers) return c.missing("no gamma_vs_gap in results.json (power from before it was measured)");
  auto rho = number(power, "/results/gamma_vs_gap/rho"), p = number(power, "/results/gamma_vs_gap/p_permutation");
  const std::string observed = fmt::format("Spearman(γ_t, 1 − |λ₂|/|λ₁|) over {} layers = {}", *layers, num_or_missing(rho));
  const std::string why = untestable_layers(power, static_cast<size_t>(*layers));
  if (!why.empty() || !rho) return c.judged(observed + " (" + (why.empty() ? "γ_t or the gap constant over the layers" : why) + ")",
                                            Verdict::kInfo, rho.value_or(NAN));
  if (!p) return c.missing("no permutation p-value in results.json");
  return c.judged(fmt::format("{} (one-sided permutation p = {})", observed, num(*p)),
                  *rho > 0 && *p < kLayerTestLevel ? Verdict::kPass : Verdict::kDiffers, *rho, *p);
}

// The power-method paper (Li & Altafini): layers act like steps of the power method on F_t = O_t V_t.
PaperSummary power_summary(const ReportPart* part) {
  PaperSummary s{"000", "Transformer layers and the power method (Li & Altafini)", {}};
  const Claim c1{"gamma", "Tokens leaving layer t align with its dominant eigenvector v₁,t well above chance.",
                 "pass when γ_t (mean a(x_i^{t+1}; v₁,t), results.layers[t].dynamics_F.gamma) exceeds the random-direction "
                 "baseline E|cos| (dynamics_F.baseline), the same tokens' alignment before the layer (dynamics_F.gamma_before) "
                 "and their alignment with random directions drawn from their own covariance (dynamics_F.gamma_covariance) "
                 "in more than half of the layers",
                 "per layer the strongest of: the same tokens before the layer, a(x_i^t; v₁,t); random directions drawn from the "
                 "tokens' own distribution, a(x_i^{t+1}; U); the isotropic baseline (median over layers)"};
  const Claim c2{"rho", "Each layer moves most tokens toward v₁,t: ρ_t > 1/2, significantly.",
                 "pass when ρ_t over the tokens whose state is new (dynamics_F.rho_unique: a state repeated from an earlier "
                 "sample, such as BOS, counted once) is > 1/2 with the one-sided sign-flip test over samples p < 0.05 "
                 "(dynamics_F.p_value_samples) in more than half of the layers",
                 "1/2: tokens as likely to move away from v₁,t as toward it, tested with samples (not tokens) as the units"};
  const Claim c3{"dominant", "Each F_t has a dominant eigenvalue (real, or a complex pair) standing apart from the rest.",
                 "shown, not judged: how many λ₁ are real, and the median |λ₂|/|λ₁| (results.layers[t].F)", "none (not judged)"};
  const Claim c4{"regime", "A shared layer iterated far past the model's depth settles into the regime its spectrum predicts.",
                 "shown, not judged: the regime classified by the iteration (results.iteration.regime)", "none (not judged)"};
  const Claim c5{"alignment_local",
                 "Alignment is local: tokens leaving layer t align with v₁,t, not with one global eigenvector shared by the layers.",
                 fmt::format("pass when the mean alignment of the tokens leaving each layer with its own v₁,t (the diagonal of "
                             "results.cross_layer_alignment.mean) exceeds their mean alignment with the other layers' v₁,s "
                             "(off_diagonal_mean) and the permutation test over layer labels gives p < {} (p_permutation); shown "
                             "with fewer than {} layers or shared weights",
                             kLayerTestLevel, kMinTestedLayers),
                 "the same tokens' alignment with the dominant eigenvectors of the other layers, the layer labels permuted"};
  const Claim c6{"gamma_gap", "Alignment is weak where the spectral gap is small: γ_t grows with the gap of F_t.",
                 fmt::format("pass when the Spearman correlation over layers of γ_t with the relative gap 1 − |λ₂|/|λ₁| of F_t "
                             "(results.gamma_vs_gap.rho) is positive with one-sided permutation p < {} (p_permutation); shown "
                             "with fewer than {} layers or shared weights",
                             kLayerTestLevel, kMinTestedLayers),
                 "the layers' gaps permuted (the permutation null of that rank correlation): its p-value"};
  if (!part) {
    for (const Claim* c : {&c1, &c2, &c3, &c4, &c5, &c6}) s.checks.push_back(c->missing("power did not run"));
    return s;
  }
  const json& layers = array_at(part->json, "/results/layers");
  std::vector<double> gamma, before, covariance, strongest, baseline, rho, ratio;
  int64_t above = 0, significant = 0, counted = 0, tested = 0, real = 0, spectra = 0;
  for (const json& l : layers) {
    auto g = number(l, "/dynamics_F/gamma"), g0 = number(l, "/dynamics_F/gamma_before"), b = number(l, "/dynamics_F/baseline");
    // gamma_covariance is null where no sample's tokens span F's dominant dimension (one-token samples).
    auto gc = number(l, "/dynamics_F/gamma_covariance");
    if (g && g0 && b) {
      ++counted;
      gamma.push_back(*g), before.push_back(*g0), baseline.push_back(*b);
      if (gc) covariance.push_back(*gc);
      strongest.push_back(std::max({*g0, *b, gc.value_or(*b)}));
      above += *g > strongest.back();
    }
    auto r = number(l, "/dynamics_F/rho_unique"), p = number(l, "/dynamics_F/p_value_samples");
    if (r && p) {
      ++tested;
      rho.push_back(*r);
      significant += *r > 0.5 && *p < 0.05;
    }
    const json* pair = find(l, "/F/complex_pair");
    if (pair && pair->is_boolean()) ++spectra, real += !pair->get<bool>();
    if (auto q = number(l, "/F/modulus_ratio")) ratio.push_back(*q);
  }
  if (counted == 0) s.checks.push_back(c1.missing("no per-layer dynamics with gamma_before in results.json"));
  else
    s.checks.push_back(c1.judged(fmt::format("γ_t above every control in {} of {} layers (median γ_t = {}; before the layer {}; "
                                             "directions from the tokens {}; isotropic baseline ≈ {})",
                                             above, counted, num(median(gamma)), num(median(before)),
                                             covariance.empty() ? std::string(kNotComputed) : num(median(covariance)),
                                             num(median(baseline))),
                                 2 * above > counted ? Verdict::kPass : Verdict::kDiffers, median(gamma), median(strongest)));
  if (tested == 0) s.checks.push_back(c2.missing("no sample-level test in results.json (power from before rho_unique)"));
  else
    s.checks.push_back(c2.judged(fmt::format("ρ_t > 1/2 significantly over samples in {} of {} layers (median ρ_t over new states = {})",
                                             significant, tested, num(median(rho))),
                                 2 * significant > tested ? Verdict::kPass : Verdict::kDiffers, median(rho), 0.5));
  if (spectra == 0) s.checks.push_back(c3.missing(""));
  else
    s.checks.push_back(c3.judged(fmt::format("λ₁ real in {} of {} layers, a complex pair in {}; median |λ₂|/|λ₁| = {}", real, spectra,
                                             spectra - real, ratio.empty() ? std::string(kNotComputed) : num(median(ratio))),
                                 Verdict::kInfo, ratio.empty() ? NAN : median(ratio)));
  const std::string regime = text_at(part->json, "/results/iteration/regime/description");
  if (regime.empty()) s.checks.push_back(c4.missing("no shared-weight layer iterated; see power --iterate-layer"));
  else s.checks.push_back(c4.judged(regime, Verdict::kInfo));
  s.checks.push_back(judge_alignment_local(c5, part->json));
  s.checks.push_back(judge_gamma_gap(c6, part->json));
  return s;
}

// effective rank of C_K / effective rank of C_1 of results.models[0] of a jacobian part; nothing when absent.
std::optional<double> bottleneck_ratio(const ReportPart* part) {
  const json* depths = part ? find(part->json, "/results/models/0/depths") : nullptr;
  if (!depths || !depths->is_array() || depths->empty()) return std::nullopt;
  auto first = number(depths->front(), "/cumulative/effective_rank/roy_vetterli"),
       last = number(depths->back(), "/cumulative/effective_rank/roy_vetterli");
  if (!first || !last || *first <= 0) return std::nullopt;
  return *last / *first;
}

ClaimCheck judge_communities_architectural(const Claim& c, const json& topology) {
  auto nmi = number(topology, "/results/community_similarity/mean_nmi"), null = number(topology, "/results/community_similarity/null_mean"),
       p = number(topology, "/results/community_similarity/p_permutation");
  if (!nmi || !null || !p)
    return c.missing("no community_similarity in results.json; analyze compares with its init part, topology with --communities-control");
  const std::string observed = fmt::format("mean NMI with the control's communities {} vs {} with its units shuffled (p = {}, {} boundaries)",
                                           num(*nmi), num(*null), num(*p),
                                           array_at(topology, "/results/community_similarity/boundaries").size());
  const json* independent = find(topology, "/results/community_similarity/independent_draw");
  if (independent && independent->is_boolean() && independent->get<bool>())
    return c.judged(observed + "; the control is an independent random draw, whose units are not this model's: only the same "
                               "run's step-0 checkpoint (topology --communities-control) can test the claim",
                    Verdict::kInfo, *nmi, *null);
  return c.judged(observed, *nmi > *null && *p < kCommunitiesLevel ? Verdict::kPass : Verdict::kDiffers, *nmi, *null);
}

// The residual-stream paper: Jacobian spectral geometry (from `jacobian`, with the random initialisation's `jacobian` as the
// bottleneck's control) and activation-graph topology (from `topology`).
PaperSummary residual_summary(const ReportPart* jacobian, const ReportPart* init, const ReportPart* topology,
                              const ReportPart* init_topology) {
  PaperSummary s{"003", "Residual-stream Jacobians and network topology", {}};
  const Claim c1{"bottleneck",
                 "The cumulative Jacobian is a learned bottleneck: its effective rank falls with depth (Llama 3.1 8B: ≈436 → ≈7), "
                 "far more than at initialisation.",
                 fmt::format("pass when r = erank(C_K)/erank(C_1) (Roy–Vetterli, results.models[0].depths[k].cumulative.effective_rank."
                             "roy_vetterli; K the last depth) is below 1 and below {} × the same ratio of the random initialisation",
                             kBottleneckMargin),
                 "the same architecture's random initialisation (tdyn init) on the same samples (analyze's init part): its r"};
  const Claim c2{"normality", "Early layers are non-normal, late layers more nearly symmetric.",
                 "pass when, over the first third of the depths versus the last third, the mean normalised Henrici departure "
                 "(mean.henrici_departure.schur_normalized) is larger early and the mean symmetry index ‖J − Jᵀ‖/‖J‖ "
                 "(mean.symmetry_index) is smaller late",
                 "the same model's early depths (value: late departure; control: early departure)"};
  const Claim c3{"surgery", "Removing the non-normal part N of the Schur form (surgery α = 0) largely dissolves the bottleneck, "
                            "and it is this N, not any N of its size, that makes it.",
                 fmt::format("pass when the full-depth effective rank at α = 0 (results.models[0].surgery[α=0].full_depth_surgery."
                             "roy_vetterli) exceeds the unmodified one (α = 1) and the unmodified one is below {} × the control's "
                             "(surgery[α=1].full_depth_control.roy_vetterli)",
                             kSurgeryMargin),
                 "each depth's N replaced by a random strictly upper triangular N of the same Frobenius norm (α = 1): its "
                 "full-depth effective rank"};
  const Claim c4{"coupling",
                 "Boundary nodes of the activation graph couple to the Jacobian gain in trained models "
                 "(OLMo 3: 0 / 14 / 24 significant layers at steps 0 / 471k / 1.41M).",
                 fmt::format("pass when more sublayer maps are coupled (Spearman(participation, log gain) significant after "
                             "Benjamini–Hochberg and |ρ| ≥ the effect size, results.coupling.coupled_layers) than in the random "
                             "initialisation on the same samples, and at least {}",
                             kMinCoupledLayers),
                 "the same architecture's random initialisation (tdyn init) on the same samples (analyze's init part, "
                 "init/topology): its coupled layers"};
  const Claim c4s{"coupling_sign",
                  "Near-symmetric layers amplify (ρ > 0) and strongly non-normal layers attenuate (ρ < 0).",
                  fmt::format("pass when the Spearman correlation over layers of the coupling ρ with the normalised departure "
                              "‖N‖/‖J̄‖ is negative with permutation p < {} (results.coupling.sign_rule)",
                              kSignRuleLevel),
                  "the layers' departures shuffled (the permutation null of that rank correlation): its p-value"};
  const Claim c5{"communities", "Signed Leiden CPM finds communities in the correlation graph at every boundary.",
                 "shown, not judged: communities per boundary (results.boundaries[b].communities)", "none (not judged)"};

  const Claim c6{"communities_architectural",
                 "The mesoscale community structure is partly architectural: communities present at initialisation persist "
                 "in the trained model.",
                 fmt::format("pass when the mean NMI over boundaries of the model's communities with the control's, unit by unit "
                             "(results.community_similarity.mean_nmi), exceeds the shuffled-unit null (null_mean) with permutation "
                             "p < {} (p_permutation); shown, not judged, when the control is an independent random draw "
                             "(independent_draw: its units are not the model's, so the NMI is at chance by construction)",
                             kCommunitiesLevel),
                 "the initialisation's communities with its units shuffled (same community sizes)"};

  const json* depths = jacobian ? find(jacobian->json, "/results/models/0/depths") : nullptr;
  if (!depths || !depths->is_array() || depths->empty()) {
    const std::string why = jacobian ? "no depths in results.json" : "jacobian did not run";
    for (const Claim* c : {&c1, &c2, &c3}) s.checks.push_back(c->missing(why));
  } else {
    const size_t K = depths->size();
    auto first = number(depths->front(), "/cumulative/effective_rank/roy_vetterli"),
         last = number(depths->back(), "/cumulative/effective_rank/roy_vetterli");
    const auto ratio = bottleneck_ratio(jacobian), init_ratio = bottleneck_ratio(init);
    if (!first || !last || !ratio) {
      s.checks.push_back(c1.missing("no cumulative effective ranks"));
    } else {
      const std::string trained = fmt::format("effective rank of C_k: {} at depth 1 → {} at depth {} (r = {})", num(*first), num(*last), K,
                                              num(*ratio));
      if (!init_ratio) {
        ClaimCheck c = c1.missing(init ? "no cumulative effective ranks in the init part" : "no random-init control; analyze runs it "
                                                                                             "unless --no-init-control");
        c.observed = trained + "; " + c.observed;
        c.value = *ratio;
        s.checks.push_back(c);
      } else {
        s.checks.push_back(c1.judged(fmt::format("{}; at initialisation r = {}", trained, num(*init_ratio)),
                                     *ratio < 1 && *ratio < kBottleneckMargin * *init_ratio ? Verdict::kPass : Verdict::kDiffers,
                                     *ratio, *init_ratio));
      }
    }

    std::vector<double> dep, sym, cplx;
    for (const json& d : *depths) {
      auto a = number(d, "/mean/henrici_departure/schur_normalized"), b = number(d, "/mean/symmetry_index");
      if (!a || !b) break;
      dep.push_back(*a), sym.push_back(*b), cplx.push_back(number(d, "/mean/complex_fraction").value_or(NAN));
    }
    if (dep.size() != K || K < 2) {
      s.checks.push_back(c2.missing(K < 2 ? "fewer than 2 depths" : "departure or symmetry index missing"));
    } else {
      const size_t third = std::max<size_t>(1, K / 3);
      const double dep_early = mean(dep, 0, third), dep_late = mean(dep, K - third, K), sym_early = mean(sym, 0, third),
                   sym_late = mean(sym, K - third, K), cplx_early = mean(cplx, 0, third);
      s.checks.push_back(c2.judged(
          fmt::format("first {} vs last {} depths: departure {} vs {}, symmetry index {} vs {}; complex eigenvalues early: {}", third,
                      third, num(dep_early), num(dep_late), num(sym_early), num(sym_late),
                      std::isfinite(cplx_early) ? fmt::format("{:.0f} %", 100 * cplx_early) : std::string(kNotComputed)),
          dep_early > dep_late && sym_late < sym_early ? Verdict::kPass : Verdict::kDiffers, dep_late, dep_early));
    }

    // At α = 0 the control equals the surgery (both drop N); the control says something at α = 1, where a random
    // strictly upper triangular N of the same norm replaces the real one. If that random N makes as deep a
    // bottleneck, the collapse comes from N's size, which any non-normal matrix has, not from the learned N.
    std::optional<double> at0, at1, control1;
    for (const json& p : array_at(jacobian->json, "/results/models/0/surgery")) {
      auto alpha = number(p, "/alpha");
      if (!alpha) continue;
      if (std::abs(*alpha) < 1e-12) at0 = number(p, "/full_depth_surgery/roy_vetterli");
      if (std::abs(*alpha - 1) < 1e-12)
        at1 = number(p, "/full_depth_surgery/roy_vetterli"), control1 = number(p, "/full_depth_control/roy_vetterli");
    }
    const std::string observed = fmt::format("full-depth effective rank {} at α = 0 vs {} unmodified; with a random N of the same norm: {}",
                                             num_or_missing(at0), num_or_missing(at1), num_or_missing(control1));
    if (at0 && at1 && control1)
      s.checks.push_back(c3.judged(observed, *at0 > *at1 && *at1 < kSurgeryMargin * *control1 ? Verdict::kPass : Verdict::kDiffers,
                                   *at1, *control1));
    else {
      ClaimCheck c = c3.missing("no surgery at α = 0 and α = 1; run jacobian --surgery with both in --alphas");
      if (at0 || at1) c.observed = observed + "; " + c.observed;
      s.checks.push_back(c);
    }
  }

  if (!topology) {
    for (const Claim* c : {&c4, &c4s, &c5, &c6}) s.checks.push_back(c->missing("topology did not run"));
    return s;
  }
  const auto coupled = number(topology->json, "/results/coupling/coupled_layers");
  const size_t tested = array_at(topology->json, "/results/coupling/layers").size();
  if (!coupled) {
    s.checks.push_back(c4.missing("no coupled_layers in results.json (topology --no-coupling?)"));
    s.checks.push_back(c4s.missing("no coupling in results.json"));
  } else {
    const std::string trained = fmt::format("{} of {} maps coupled ({} significant at q = {}, |ρ| ≥ {})", *coupled, tested,
                                            text_at(topology->json, "/results/coupling/significant_layers"),
                                            text_at(topology->json, "/results/coupling/fdr_q"),
                                            text_at(topology->json, "/results/coupling/min_effect"));
    const auto init_coupled = init_topology ? number(init_topology->json, "/results/coupling/coupled_layers") : std::nullopt;
    if (!init_coupled) {
      ClaimCheck c = c4.missing(init_topology ? "no coupled_layers in the init part's topology"
                                              : "no random-init control; analyze runs it unless --no-init-control");
      c.observed = trained + "; " + c.observed;
      c.value = *coupled;
      s.checks.push_back(c);
    } else {
      const size_t init_tested = array_at(init_topology->json, "/results/coupling/layers").size();
      s.checks.push_back(c4.judged(fmt::format("{}; at initialisation {} of {}", trained, *init_coupled, init_tested),
                                   *coupled >= kMinCoupledLayers && *coupled > *init_coupled ? Verdict::kPass : Verdict::kDiffers,
                                   *coupled, *init_coupled));
    }
    const auto sign_rho = number(topology->json, "/results/coupling/sign_rule/rho"),
               sign_p = number(topology->json, "/results/coupling/sign_rule/p_permutation");
    if (!sign_rho || !sign_p)
      s.checks.push_back(c4s.missing("no sign_rule with a permutation p in results.json (fewer than 3 maps, or --permutations 0)"));
    else
      s.checks.push_back(c4s.judged(fmt::format("Spearman(ρ, departure) over {} maps = {} (permutation p = {})",
                                                text_at(topology->json, "/results/coupling/sign_rule/layers"), num(*sign_rho), num(*sign_p)),
                                    *sign_rho < 0 && *sign_p < kSignRuleLevel ? Verdict::kPass : Verdict::kDiffers, *sign_rho, *sign_p));
  }
  std::vector<double> communities;
  for (const json& b : array_at(topology->json, "/results/boundaries"))
    if (auto n = number(b, "/communities")) communities.push_back(*n);
  if (communities.empty()) s.checks.push_back(c5.missing(""));
  else
    s.checks.push_back(c5.judged(fmt::format("{} to {} communities over {} boundaries (median {})",
                                             *std::min_element(communities.begin(), communities.end()),
                                             *std::max_element(communities.begin(), communities.end()), communities.size(),
                                             num(median(communities))),
                                 Verdict::kInfo, median(communities)));
  s.checks.push_back(judge_communities_architectural(c6, topology->json));
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
  const std::string control = "the same measure at t = 0, before the dynamics";
  const Claim claims[] = {{"clusters", c1, r1, control}, {"boolean", c2, r2, control}, {"leaders", c3, r3, control},
                          {"rank", c4, r4, control}};
  if (!part) {
    for (const Claim& claim : claims) s.checks.push_back(claim.missing("particles did not run"));
    return s;
  }
  const json& j = part->json;
  const std::string source = text_at(j, "/model/source");
  const std::string where = source.empty() || source == "synthetic" ? "" : " (" + source + ")";
  for (const Claim& claim : claims) {
    const json* found = nullptr;
    for (const json& v : array_at(j, "/results/verdicts"))
      if (text_at(v, "/claim") == claim.id) found = &v;
    if (!found) {
      s.checks.push_back(claim.missing("results.json has no verdicts: written before they were added; rerun particles"));
      continue;
    }
    const json& v = *found;
    const std::string verdict = text_at(v, "/verdict");
    const Verdict outcome = verdict == "pass"      ? Verdict::kPass
                            : verdict == "differs" ? Verdict::kDiffers
                            : verdict == "shown"   ? Verdict::kInfo
                                                   : Verdict::kNotComputed;
    const std::string note = text_at(v, "/note"), value = text_at(v, "/value");  // value null: not measurable here
    const std::string observed =
        value.empty() ? "not measured for this run"
                      : fmt::format("{} = {} at T = {}, {} at t = 0 (the control)", text_at(v, "/measure"), value,
                                    text_at(j, "/results/final/time"), text_at(v, "/control"));
    s.checks.push_back({text_at(v, "/statement"), observed + (note.empty() ? "" : "; " + note) + where, outcome,
                        text_at(v, "/rule"), claim.id, number(v, "/value").value_or(NAN), number(v, "/control").value_or(NAN),
                        control});
  }
  return s;
}

// ---- Figure captions ---------------------------------------------------------------------------------------------
// What to look for in each figure, keyed by a pattern of its file stem ('*' matches anything). The first match
// wins; the table's order is also the order figures appear in.
struct Caption {
  const char* pattern;
  const char* text;
};
constexpr Caption kCaptions[] = {
    {"eigenvalues", "Eigenvalues of every layer matrix F_t in the complex plane, dashed unit circle. Look for one eigenvalue "
                    "(or a conjugate pair) standing apart from the bulk: the direction the layer amplifies, as in a power-method step."},
    {"gamma_rho", "γ_t (mean alignment of the layer's output tokens with v₁,t) against the dashed random baseline, and ρ_t "
                  "(fraction of tokens whose alignment grew) against 1/2. The analogy holds where γ_t is well above the "
                  "baseline and ρ_t above 1/2."},
    {"iteration_alignment", "One layer applied repeatedly. Alignment rising to 1 means consensus on ±v₁; energy in span{v₁, v₂} "
                            "near 1 with alignment below 1 means slow convergence or rotation inside that plane."},
    {"iteration_plane", "Tokens in the eigen-coordinates of span{Re v₁, Im v₁} over the last steps: circles mean a rotation "
                        "(limit cycle) at the angle of λ₁ per step."},
    {"steering_sweep", "Rank-1 steering of the last layer: as c/|λ₁| grows, u should become the dominant eigenvector "
                       "(alignment → 1), the final tokens align with u, and the output distribution moves (KL)."},
    {"*cumulative_effective_rank", "Effective rank of the cumulative products C_k against depth: a falling curve is the "
                                   "bottleneck of the residual-stream paper (Llama 3.1 8B: ≈436 → ≈7)."},
    {"*surgery", "Schur surgery: effective rank of the full-depth product when the non-normal part N is scaled by α. A rank "
                 "rising as α → 0 means non-normality makes the bottleneck; the random-N control should not do the same."},
    {"*metric_henrici_normalized", "Normalised Henrici departure from normality per depth: high early and low late is the "
                                   "paper's pattern (early layers non-normal, late near-normal)."},
    {"*metric_symmetry_index", "Symmetry index ‖J − Jᵀ‖/‖J‖ per depth: near 0 means near-symmetric; the paper finds late "
                               "layers more symmetric."},
    {"*metric_complex_fraction", "Fraction of complex eigenvalues per depth: many complex eigenvalues mean rotation-dominated "
                                 "maps (the paper's early layers)."},
    {"*metric_expanding_fraction", "Fraction of modes with |λ| > 1 per depth: how many directions each sublayer expands."},
    {"*metric_condition_number", "Condition number σ₁/σ_d per depth (log scale): large values mean the sublayer squeezes "
                                 "some directions far more than others."},
    {"*metric_alignment_k*", "Self-alignment of the top-k left and right singular subspaces ‖U_kᵀV_k‖²/k: 1 for a symmetric "
                             "positive map, near k/d for unrelated subspaces."},
    {"*metric_effective_rank", "Effective rank (Roy–Vetterli) of each mean Jacobian J̄_k: near d means the sublayer is close "
                               "to the identity on the residual stream."},
    {"*metric_*", "A spectral metric of the mean Jacobians against depth."},
    {"*eigenvalues_depth*", "Eigenvalues of the mean Jacobian at this depth with the unit circle: a cloud off the real axis "
                            "means rotation; points outside the circle are expanding modes."},
    {"communities_vs_depth", "Signed Leiden CPM communities of the correlation graph per boundary: how the residual units "
                             "group, and how that changes with depth."},
    {"participation_vs_depth", "Participation coefficient per boundary (median and quantiles): boundary nodes connect several "
                               "communities."},
    {"coupling_vs_depth", "Spearman correlation between participation and Jacobian gain log‖J̄ e_i‖ per layer; filled "
                          "markers are significant after Benjamini–Hochberg. Trained models show significant layers; "
                          "random initialisations should not."},
    {"graph", "The correlation graph at one boundary, coloured by community; rings mark boundary (bridge) nodes."},
    {"compare_communities", "Community count per boundary for each checkpoint: training versus architecture."},
    {"compare_coupling", "Coupling ρ per layer for each checkpoint; filled markers are significant."},
    {"trajectories", "Particle trajectories with snapshots at four times, of the variable that clusters (the title says "
                     "which): the tokens x_i(t) on the unit sphere (real-model heads, --sphere) or with --cluster-on x, the "
                     "rescaled tokens z_i(t) otherwise. Look for tokens converging to a few points (clusters), polytope "
                     "vertices (V = I) or hyperplanes."},
    {"clusters", "Number of clusters over time, of x or of z as the title says (options.cluster_on): a falling staircase "
                 "is clustering. When V has a simple positive top eigenvalue, the second curve counts the levels of "
                 "φ₁*(z) (Theorem 3.1: at most 3)."},
    {"rank_P", "Numerical rank of P(t) and the number of leaders: low rank with a few leaders is the paper's Boolean, "
               "low-rank limit."},
    {"boolean_distance", "Distance of P(t) to the nearest 0/1 matrix (falling to 0: P becomes Boolean) and to the uniform "
                         "matrix (falling to 0: collapse, as for V = −I)."},
    {"attention_t*", "The attention matrix P at one time: rows concentrating on a few columns are followers choosing leaders."},
    {"phi1_histogram", "Values of φ₁*(z_i(T)) for the top eigenvalue of V, relative to their mean and in units of "
                       "max_i |φ₁*(z_i(0))|; the title gives the number of levels (values closer than --level-tol are one "
                       "level). At most 3 levels means the limits lie on at most 3 parallel hyperplanes (Theorem 3.1)."},
};

bool glob_match(std::string_view pattern, std::string_view text) {
  if (pattern.empty()) return text.empty();
  if (pattern[0] == '*') {
    for (size_t i = 0; i <= text.size(); ++i)
      if (glob_match(pattern.substr(1), text.substr(i))) return true;
    return false;
  }
  return !text.empty() && pattern[0] == text[0] && glob_match(pattern.substr(1), text.substr(1));
}

size_t caption_index(const std::string& stem) {
  for (size_t i = 0; i < std::size(kCaptions); ++i)
    if (glob_match(kCaptions[i].pattern, stem)) return i;
  return std::size(kCaptions);
}

// ---- Page building -----------------------------------------------------------------------------------------------

// A URL path to a file inside the report's directory: each segment percent-encoded where needed.
std::string url_path(const std::string& path) {
  std::string out;
  for (unsigned char c : path) {
    if (std::isalnum(c) || std::string_view("-_.~/").find(static_cast<char>(c)) != std::string_view::npos) out += static_cast<char>(c);
    else out += fmt::format("%{:02X}", c);
  }
  return out;
}

// "depth2" before "depth10": digit runs compare as numbers, so figures of one kind appear in depth order.
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      const std::string_view x = std::string_view(a).substr(i, ie - i), y = std::string_view(b).substr(j, je - j);
      if (x.size() != y.size()) return x.size() < y.size();  // no leading zeros in the names tdyn writes
      if (x != y) return x < y;
      i = ie, j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

std::string join_path(const std::string& dir, const std::string& name) { return dir.empty() ? name : dir + "/" + name; }

const char* kStyle = R"(
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1200px; padding: 0 24px 48px; color: #1d2330; }
h1 { font-size: 1.6em; margin: 24px 0 4px; } h2 { margin-top: 40px; border-bottom: 2px solid #d7dce5; padding-bottom: 4px; }
h3 { margin: 24px 0 8px; } .sub { color: #5b6475; margin: 0 0 16px; }
nav { display: flex; flex-wrap: wrap; } nav a { margin-right: 14px; } a { color: #1f5fbf; }
table { border-collapse: collapse; width: 100%; margin: 8px 0 16px; }
th, td { border: 1px solid #d7dce5; padding: 6px 8px; text-align: left; vertical-align: top; }
th { background: #f1f4f9; } td.rule { color: #5b6475; font-size: 0.85em; }
td.rule, td.contents, code { overflow-wrap: anywhere; }  /* long keys, file names and paths wrap in narrow windows */
.scroll-x { overflow-x: auto; }  /* a table still wider than a phone scrolls on its own, not the page */
.verdict { font-weight: 600; white-space: nowrap; border-radius: 4px; padding: 1px 6px; box-decoration-break: clone; -webkit-box-decoration-break: clone; }
@media (max-width: 600px) { .verdict { white-space: normal; } }  /* "not computed" on two lines leaves the rule column room */
.pass { background: #dff3e4; color: #17692e; } .differs { background: #fde7d9; color: #9a3b07; }
.not-computed { background: #eceef2; color: #5b6475; } .info { background: #e3ecfa; color: #1f4f99; }
pre { background: #f6f8fb; border: 1px solid #d7dce5; padding: 8px 10px; overflow-x: auto; font-size: 0.85em; white-space: pre-wrap; overflow-wrap: anywhere; }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(520px, 100%), 1fr)); gap: 18px; }
figure { margin: 0; border: 1px solid #d7dce5; border-radius: 6px; padding: 8px; background: #fff; }
figure img { width: 100%; height: auto; display: block; }
figcaption { font-size: 0.9em; margin-top: 6px; } figcaption .what { color: #5b6475; font-size: 0.9em; }
.missing { padding: 24px; background: #f6f8fb; color: #5b6475; text-align: center; }
details { margin: 8px 0; } summary { cursor: pointer; font-weight: 600; }
.error { background: #fde7d9; border: 1px solid #f0b48f; padding: 8px 10px; border-radius: 4px; }
)";

const char* verdict_class(Verdict v) {
  switch (v) {
    case Verdict::kPass: return "pass";
    case Verdict::kDiffers: return "differs";
    case Verdict::kInfo: return "info";
    case Verdict::kNotComputed: break;
  }
  return "not-computed";
}

const char* verdict_text(Verdict v) {
  switch (v) {
    case Verdict::kPass: return "pass";
    case Verdict::kDiffers: return "differs";
    case Verdict::kInfo: return "shown";
    case Verdict::kNotComputed: break;
  }
  return "not computed";
}

std::string part_title(const ReportPart& p) {
  const std::string command = text_at(p.json, "/command");
  if (command == "power") return "Power method (the power-method paper)";
  if (command == "jacobian")
    return p.name == kInitPart ? "Random initialisation: Jacobians, the control (the residual-stream paper)" : "Residual-stream Jacobians (the residual-stream paper)";
  if (command == "topology") return "Activation-graph topology (the residual-stream paper)";
  if (command == "particles") return "Self-attention particles (the clustering paper)";
  return command.empty() ? p.name : command;
}

std::string anchor(const ReportPart& p) { return "part-" + (p.rel_dir.empty() ? std::string("main") : url_path(p.rel_dir)); }

void summary_tables(std::string& h, const std::vector<PaperSummary>& papers) {
  h += "<h2 id=\"summary\">Summary: the papers' claims on this model</h2>\n";
  h += "<p class=\"sub\">Each verdict follows from numbers in the parts' results.json by the rule shown beside it. "
       "Each verdict compares this model with a control, named beside it: what a model without the claimed property "
       "would show. <b>pass</b>: this model shows what the paper reports, beyond the control; <b>differs</b>: it does "
       "not; <b>shown</b>: reported without a verdict; <b>not computed</b>: the analysis, the control or the key is "
       "missing.</p>\n";
  for (const auto& paper : papers) {
    h += fmt::format("<h3>{}</h3>\n<div class=\"scroll-x\"><table>\n<tr><th style=\"width:30%\">claim</th><th>this model</th><th>verdict</th>"
                     "<th style=\"width:18%\">control</th><th style=\"width:24%\">rule</th></tr>\n",
                     html_escape(paper.title));
    for (const auto& c : paper.checks)
      h += fmt::format("<tr><td>{}</td><td>{}</td><td><span class=\"verdict {}\">{}</span></td><td class=\"rule\">{}{}</td>"
                       "<td class=\"rule\">{}</td></tr>\n",
                       html_escape(c.claim), html_escape(c.observed), verdict_class(c.verdict), verdict_text(c.verdict),
                       html_escape(c.control.empty() ? "none" : c.control),
                       std::isfinite(c.control_value) ? ": " + num(c.control_value) : "", html_escape(c.rule));
    h += "</table></div>\n";
  }
}

void json_details(std::string& h, const std::string& title, const json* j) {
  if (!j || j->is_null() || (j->is_object() && j->empty())) return;
  h += fmt::format("<details><summary>{}</summary><pre>{}</pre></details>\n", html_escape(title),
                   html_escape(j->dump(2, ' ', false, json::error_handler_t::replace)));
}

void timings_details(std::string& h, const json& root) {
  const json* t = find(root, "/timings");
  if (!t || !t->is_object() || t->empty()) return;
  h += "<details><summary>Timings</summary><div class=\"scroll-x\"><table><tr><th>phase</th><th>seconds</th></tr>\n";
  for (const auto& [phase, seconds] : t->items())
    h += fmt::format("<tr><td>{}</td><td>{}</td></tr>\n", html_escape(phase),
                     seconds.is_number() ? fmt::format("{:.3f}", seconds.get<double>()) : html_escape(seconds.dump()));
  h += "</table></div></details>\n";
}

// `launch` is the analyze record of this part (null for a single results directory).
void part_section(std::string& h, const fs::path& root, const ReportPart& p, const json* launch) {
  h += fmt::format("<h2 id=\"{}\">{}</h2>\n", anchor(p), html_escape(part_title(p)));
  if (!p.rel_dir.empty()) h += fmt::format("<p class=\"sub\">directory <code>{}</code></p>\n", html_escape(p.rel_dir));
  if (!p.error.empty()) h += fmt::format("<p class=\"error\">{}</p>\n", html_escape(p.error));
  if (const json* bridge = launch ? find(*launch, "/bridge") : nullptr) {
    h += fmt::format("<p>Real-model bridge: head {} of layer {} of the model, with its own Q, K, V, O, simulated as {} particles "
                     "({}). The part's own results.json lists these matrices as its .npy inputs.</p>\n",
                     html_escape(text_at(*bridge, "/head")), html_escape(text_at(*bridge, "/layer")),
                     html_escape(text_at(*bridge, "/tokens")), html_escape(text_at(*bridge, "/initial_tokens")));
    json_details(h, "The bridge", bridge);
  }
  if (p.json.is_null()) return;
  const json& j = p.json;
  const json* argv = find(j, "/argv");
  h += "<p>Reproduce:</p>\n";
  h += fmt::format("<pre><code>{}</code></pre>\n", argv && argv->is_array() ? html_escape(shell_command(*argv)) : kNotComputed);
  const std::string model = text_at(j, "/model/path");
  if (!model.empty()) h += fmt::format("<p class=\"sub\">model <code>{}</code> {}</p>\n", html_escape(model), html_escape(text_at(j, "/model/family")));

  // Figures: every NAME.svg listed in results.json, or NAME.gp when gnuplot could not render it.
  struct Fig {
    std::string stem, what;
    size_t order;
  };
  std::vector<Fig> figures;
  std::vector<std::pair<std::string, std::string>> other_files;
  if (const json* files = find(j, "/files"); files && files->is_object()) {
    for (const auto& [name, what] : files->items()) {
      const std::string description = what.is_string() ? what.get<std::string>() : what.dump();
      const fs::path f(name);
      const std::string stem = (f.parent_path() / f.stem()).generic_string();
      if (f.extension() == ".svg" || (f.extension() == ".gp" && !files->contains(stem + ".svg")))
        figures.push_back({stem, description, caption_index(f.stem().string())});
      else if (f.extension() != ".dat" && f.extension() != ".gp")
        other_files.emplace_back(name, description);
    }
  }
  std::stable_sort(figures.begin(), figures.end(), [](const Fig& a, const Fig& b) {
    return a.order != b.order ? a.order < b.order : natural_less(a.stem, b.stem);
  });
  if (!figures.empty()) {
    h += "<div class=\"figures\">\n";
    for (const auto& f : figures) {
      const std::string svg = join_path(p.rel_dir, f.stem + ".svg");
      h += "<figure>";
      if (fs::exists(root / svg))
        h += fmt::format("<img src=\"{}\" alt=\"{}\" loading=\"lazy\">", html_escape(url_path(svg)), html_escape(f.stem));
      else
        h += fmt::format("<div class=\"missing\">not rendered: plot <a href=\"{0}.gp\">{1}.gp</a> with gnuplot "
                         "(data in {1}.dat)</div>",
                         html_escape(url_path(join_path(p.rel_dir, f.stem))), html_escape(fs::path(f.stem).filename().string()));
      const std::string caption = figure_caption(fs::path(f.stem).filename().string());
      h += fmt::format("<figcaption><b>{}</b>{}{}<br><span class=\"what\">{} · data <a href=\"{}.dat\">.dat</a>, script "
                       "<a href=\"{}.gp\">.gp</a></span></figcaption></figure>\n",
                       html_escape(f.stem), caption.empty() ? "" : " — ", html_escape(caption), html_escape(f.what),
                       html_escape(url_path(join_path(p.rel_dir, f.stem))), html_escape(url_path(join_path(p.rel_dir, f.stem))));
    }
    h += "</div>\n";
  } else {
    h += "<p class=\"sub\">No figures.</p>\n";
  }
  const json* notes = find(j, "/results/notes");
  if (notes && notes->is_array() && !notes->empty()) {
    h += "<details><summary>Notes</summary><ul>\n";
    for (const json& n : *notes) h += fmt::format("<li>{}</li>\n", html_escape(n.is_string() ? n.get<std::string>() : n.dump()));
    h += "</ul></details>\n";
  }
  json_details(h, "Model", find(j, "/model"));
  json_details(h, "Options (every default actually used)", find(j, "/options"));
  timings_details(h, j);
  if (!other_files.empty()) {
    h += "<details><summary>Data files</summary><div class=\"scroll-x\"><table><tr><th>file</th><th>contents</th></tr>\n";
    for (const auto& [name, what] : other_files)
      h += fmt::format("<tr><td><a href=\"{}\">{}</a></td><td class=\"contents\">{}</td></tr>\n", html_escape(url_path(join_path(p.rel_dir, name))),
                       html_escape(name), html_escape(what));
    h += "</table></div></details>\n";
  }
  h += fmt::format("<p class=\"sub\">tdyn {} · schema {} · started {} · <a href=\"{}\">results.json</a></p>\n",
                   html_escape(text_at(j, "/tool_version")), html_escape(text_at(j, "/schema_version")),
                   html_escape(text_at(j, "/started_utc")), html_escape(url_path(join_path(p.rel_dir, "results.json"))));
}

json read_json(const fs::path& file, std::string* error) {
  try {
    return json::parse(read_file(file));
  } catch (const std::exception& e) {
    *error = fmt::format("cannot read {}: {}", file.string(), e.what());
    return nullptr;
  }
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string figure_caption(const std::string& figure_stem) {
  const size_t i = caption_index(figure_stem);
  return i < std::size(kCaptions) ? kCaptions[i].text : "";
}

std::string shell_command(const json& argv) {
  std::string out;
  for (const json& a : argv) {
    const std::string s = a.is_string() ? a.get<std::string>() : a.dump();
    const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
      return std::isalnum(c) || std::string_view("@%+=:,./_-").find(static_cast<char>(c)) != std::string_view::npos;
    });
    if (!out.empty()) out += ' ';
    if (plain) {
      out += s;
    } else {
      out += '\'';
      for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out;
}

std::vector<ReportPart> load_report_parts(const fs::path& dir) {
  if (!fs::is_directory(dir)) fail("report: '{}' is not a directory", dir.string());
  std::vector<ReportPart> parts;
  std::string error;
  const fs::path top = dir / "results.json";
  json top_json = fs::exists(top) ? read_json(top, &error) : json(nullptr);
  if (!top_json.is_null() && text_at(top_json, "/command") != "analyze") {
    parts.push_back({text_at(top_json, "/command"), "", std::move(top_json), ""});
    return parts;
  }
  if (!error.empty()) parts.push_back({"results.json", "", nullptr, error});

  // The analyze layout. Its results.json names the parts in the order they ran and says why one is missing.
  std::vector<std::string> names;
  const json& listed = array_at(top_json, "/results/order");
  for (const json& n : listed)
    if (n.is_string()) names.push_back(n.get<std::string>());
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_directory() && fs::exists(entry.path() / "results.json")) found.push_back(entry.path().filename().string());
  std::sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    static const std::vector<std::string> order = {"power", "jacobian", "topology", "particles"};
    auto rank = [](const std::string& s) { return std::find(order.begin(), order.end(), s) - order.begin(); };
    return std::pair(rank(a), a) < std::pair(rank(b), b);
  });
  for (const auto& f : found)
    if (std::find(names.begin(), names.end(), f) == names.end()) names.push_back(f);
  for (const auto& name : names) {
    ReportPart p{name, name, nullptr, ""};
    const json* info = find(top_json, "/results/parts/" + name);
    const std::string status = info ? text_at(*info, "/status") : "";
    if (info) {
      const std::string sub = text_at(*info, "/dir");
      if (!sub.empty() && sub.find("..") == std::string::npos && sub[0] != '/') p.rel_dir = sub;
    }
    if (fs::exists(dir / p.rel_dir / "results.json")) p.json = read_json(dir / p.rel_dir / "results.json", &p.error);
    if (status == "skipped") p.error = "skipped (--skip)";
    else if (status == "failed") p.error = "failed: " + text_at(*info, "/error");
    else if (p.json.is_null() && p.error.empty()) p.error = "no results.json";
    // The init part's topology (the coupling's control) is a results directory inside it.
    const fs::path init_topology = dir / p.rel_dir / "topology" / "results.json";
    const bool has_init_topology = name == kInitPart && !p.rel_dir.empty() && fs::exists(init_topology);
    const std::string rel_dir = p.rel_dir;
    parts.push_back(std::move(p));
    if (has_init_topology) {
      ReportPart t{kInitTopologyPart, rel_dir + "/topology", nullptr, ""};
      t.json = read_json(init_topology, &t.error);
      parts.push_back(std::move(t));
    }
  }
  return parts;
}

std::vector<PaperSummary> summarize_claims(const std::vector<ReportPart>& parts) {
  std::vector<PaperSummary> papers = {power_summary(part_for(parts, "power")),
                                      residual_summary(part_for(parts, "jacobian"), named_part(parts, kInitPart), part_for(parts, "topology"),
                                                       named_part(parts, kInitTopologyPart)),
                                      particles_summary(part_for(parts, "particles"))};
  return papers;
}

json verdicts_json(const std::vector<PaperSummary>& papers) {
  auto or_null = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json out = json::array();
  for (const auto& paper : papers)
    for (const auto& c : paper.checks)
      out.push_back({{"paper", paper.seed}, {"claim", c.id}, {"verdict", verdict_text(c.verdict)}, {"value", or_null(c.value)},
                     {"control", {{"value", or_null(c.control_value)}, {"what", c.control}}}, {"rule", c.rule}});
  return out;
}

std::string render_html_report(const fs::path& dir) {
  const std::vector<ReportPart> parts = load_report_parts(dir);
  std::string top_error;
  const json top = fs::exists(dir / "results.json") ? read_json(dir / "results.json", &top_error) : json(nullptr);
  const bool analyze = text_at(top, "/command") == "analyze";
  std::string model = text_at(top, "/model/path");
  for (const auto& p : parts)
    if (model.empty()) model = text_at(p.json, "/model/path");

  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += fmt::format("<title>tdyn report{}</title>\n", model.empty() ? "" : " — " + html_escape(model));
  h += fmt::format("<style>{}</style>\n</head>\n<body>\n", kStyle);
  h += fmt::format("<h1>tdyn report{}</h1>\n", model.empty() ? "" : fmt::format(": <code>{}</code>", html_escape(model)));
  std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  h += fmt::format("<p class=\"sub\">Transformers as dynamical systems · report built {} by tdyn {} from <code>{}</code></p>\n", stamp,
                   TDYN_VERSION, html_escape(dir.filename().empty() ? dir.string() : dir.filename().string()));
  h += "<nav><a href=\"#summary\">Summary</a>";
  for (const auto& p : parts) h += fmt::format("<a href=\"#{}\">{}</a>", anchor(p), html_escape(p.name));
  h += "</nav>\n";

  if (analyze) {
    const json* argv = find(top, "/argv");
    h += "<p>The whole analysis:</p>\n";
    h += fmt::format("<pre><code>{}</code></pre>\n", argv && argv->is_array() ? html_escape(shell_command(*argv)) : kNotComputed);
    h += "<table><tr><th>part</th><th>status</th><th>seconds</th></tr>\n";
    for (const auto& p : parts) {
      const json* info = find(top, "/results/parts/" + p.name);
      auto seconds = info ? number(*info, "/seconds") : std::nullopt;
      h += fmt::format("<tr><td><a href=\"#{}\">{}</a></td><td>{}</td><td>{}</td></tr>\n", anchor(p), html_escape(p.name),
                       html_escape(info ? text_at(*info, "/status") : (p.json.is_null() ? "missing" : "ok")),
                       seconds ? fmt::format("{:.1f}", *seconds) : "");
    }
    h += "</table>\n";
    json_details(h, "Options of the analysis (every default actually used)", find(top, "/options"));
    json_details(h, "What the parts share", find(top, "/results/sharing"));
    timings_details(h, top);
  } else if (!top_error.empty()) {
    h += fmt::format("<p class=\"error\">{}</p>\n", html_escape(top_error));
  }

  summary_tables(h, summarize_claims(parts));
  if (parts.empty()) h += "<p class=\"error\">No results.json found in this directory or its subdirectories.</p>\n";
  for (const auto& p : parts) part_section(h, dir, p, analyze ? find(top, "/results/parts/" + p.name) : nullptr);
  h += "</body>\n</html>\n";
  return h;
}

fs::path write_html_report(const fs::path& dir) {
  const std::string html = render_html_report(dir);
  const fs::path index = dir / "index.html";
  write_file_atomic(index, html);
  return index;
}

}  // namespace tdyn
