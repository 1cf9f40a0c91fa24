#include "report/verdicts.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "analysis/power/layers.h"
#include "core/json_number.h"

namespace tdyn {
namespace {

using json = nlohmann::json;
using namespace json_lookup;

std::string num(double v) { return fmt::format("{:.3g}", v); }

// The margins of the rules that compare with a control: the trained model must beat its control by this factor,
// so that a model which merely matches it (a random initialisation judged against another seed) differs.
constexpr double kBottleneckMargin = 0.5;  // r(trained) < 0.5 r(init): a collapse at least twice the init's
constexpr double kSurgeryMargin = 0.9;     // the real N's bottleneck at least 10 % deeper than a random N's
constexpr int kMinCoupledLayers = 1;        // and more than the init's: the paper's init has 0, trained OLMo 3 14–24
constexpr double kSignRuleLevel = 0.05;    // the sign rule's own test, one rank correlation over the layers
constexpr double kCommunitiesLevel = 0.05;  // the shuffled-unit test of the communities' NMI with the control's
constexpr double kLayerTestLevel = 0.05;   // the power-method paper's permutation tests over the layers (analysis/power/layers.h)

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

}  // namespace

const char* verdict_text(Verdict v) {
  switch (v) {
    case Verdict::kPass: return "pass";
    case Verdict::kDiffers: return "differs";
    case Verdict::kInfo: return "shown";
    case Verdict::kNotComputed: break;
  }
  return "not computed";
}

std::vector<PaperSummary> summarize_claims(const std::vector<ReportPart>& parts) {
  const ReportPart* power = part_for(parts, "power");
  const ReportPart* jacobian = part_for(parts, "jacobian");
  const ReportPart* topology = part_for(parts, "topology");
  const ReportPart* particles = part_for(parts, "particles");
  // One command's directory is judged on its own paper's claims only; analyze's on all three, a skipped part's
  // claims as not computed.
  const bool one_command = parts.size() == 1 && parts[0].rel_dir.empty();
  std::vector<PaperSummary> papers;
  if (!one_command || power) papers.push_back(power_summary(power));
  if (!one_command || jacobian || topology)
    papers.push_back(residual_summary(jacobian, named_part(parts, kInitPart), topology, named_part(parts, kInitTopologyPart)));
  if (!one_command || particles) papers.push_back(particles_summary(particles));
  return papers;
}

json verdicts_json(const std::vector<PaperSummary>& papers) {
  json out = json::array();
  for (const auto& paper : papers)
    for (const auto& c : paper.checks)
      out.push_back({{"paper", paper.seed}, {"claim", c.id}, {"verdict", verdict_text(c.verdict)}, {"value", finite_or_null(c.value)},
                     {"control", {{"value", finite_or_null(c.control_value)}, {"what", c.control}}}, {"rule", c.rule}});
  return out;
}

}  // namespace tdyn
