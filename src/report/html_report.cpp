#include "report/html_report.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <ctime>
#include <fnmatch.h>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace tdyn {
namespace {

const char* const kStyle = R"(
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
.architectural { background: #f3ecd9; color: #6b4e07; } .inconclusive { background: #efe3f6; color: #5d2a7a; }
pre { background: #f6f8fb; border: 1px solid #d7dce5; padding: 8px 10px; overflow-x: auto; font-size: 0.85em; white-space: pre-wrap; overflow-wrap: anywhere; }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(520px, 100%), 1fr)); gap: 18px; }
figure { margin: 0; border: 1px solid #d7dce5; border-radius: 6px; padding: 8px; background: #fff; }
figure img { width: 100%; height: auto; display: block; }
figcaption { font-size: 0.9em; margin-top: 6px; } figcaption .what { color: #5b6475; font-size: 0.9em; }
.missing { padding: 24px; background: #f6f8fb; color: #5b6475; text-align: center; }
details { margin: 8px 0; } summary { cursor: pointer; font-weight: 600; }
.error { background: #fde7d9; border: 1px solid #f0b48f; padding: 8px 10px; border-radius: 4px; }
.ablated { background: #fff4cc; border: 1px solid #e6c65c; padding: 8px 10px; border-radius: 4px; }
)";

using json = nlohmann::json;
using namespace json_lookup;

std::string num(double v) { return fmt::format("{:.3g}", v); }

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
    {"*metric_expanding_fraction", "Fraction of modes with |λ| > 1 + τσ₁ (beyond round-off) per depth: how many directions each sublayer expands."},
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

size_t caption_index(const std::string& stem) {
  for (size_t i = 0; i < std::size(kCaptions); ++i)
    if (::fnmatch(kCaptions[i].pattern, stem.c_str(), 0) == 0) return i;
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

std::string part_title(const ReportPart& p) {
  const std::string command = text_at(p.json, "/command");
  const bool idealised = command == "power" && text_at(p.json, "/options/mode") == "attn-only-l2";
  if (p.is_control())
    return fmt::format("Initialisation control ({}, seed {}): {}{} (not the model)",
                       p.control_kind == "scaled" ? "at the model's scales" : "the family's rule", p.init_seed,
                       command.empty() ? p.name : command, idealised ? " --mode attn-only-l2" : "");
  if (idealised) return "Power method in the paper's idealisation: attention only, L2-normalised (the power-method paper)";
  if (command == "power") return "Power method (the power-method paper)";
  if (command == "jacobian") return "Residual-stream Jacobians (the residual-stream paper)";
  if (command == "topology") return "Activation-graph topology (the residual-stream paper)";
  if (command == "particles") return "Self-attention particles (the clustering paper)";
  if (command == "compare") return "The model beside its initialisation (dashed: the family's rule, seed 0), per depth";
  return command.empty() ? p.name : command;
}

// The control whose parts get sections of their own: the first seed of the family's rule.
bool shown_control(const ReportPart& p, const std::vector<ReportPart>& parts) {
  for (const auto& q : parts)
    if (q.is_control()) return p.control_kind == q.control_kind && p.init_seed == q.init_seed;
  return false;
}

std::string anchor(const ReportPart& p) {
  std::string id = "part-" + (p.rel_dir.empty() ? std::string("main") : url_path(p.rel_dir));
  std::replace(id.begin(), id.end(), '/', '-');
  return id;
}

// The evidence column: the statistic, the sample count, each kind of initialisation's range and p, the p-values.
std::string evidence_text(const ClaimCheck& c) {
  const Evidence& e = c.evidence;
  std::vector<std::string> parts;
  if (std::isfinite(c.value)) parts.push_back("statistic " + num(c.value));
  if (e.samples > 0) parts.push_back(fmt::format("{} samples", e.samples));
  if (std::isfinite(e.lo)) parts.push_back(fmt::format("95 % interval [{}, {}]", num(e.lo), num(e.hi)));
  if (!e.stable) parts.push_back(fmt::format("unstable: {} at S/4, {} at S/2", num(e.at_quarter), num(e.at_half)));
  if (std::isfinite(e.p_claim)) parts.push_back("p (claim) " + num(e.p_claim));
  if (std::isfinite(e.at_control_samples))
    parts.push_back(fmt::format("{} on the inits' {} samples", num(e.at_control_samples), e.control_samples));
  for (const ControlValues& k : e.controls) {
    if (k.values.empty()) continue;
    const auto [lo, hi] = std::minmax_element(k.values.begin(), k.values.end());
    const char* label = k.kind == "scaled"      ? "init at the model's scale"
                        : k.kind == "haar"      ? "Haar-rotated"
                        : k.kind == "direction" ? "random directions"
                                                : "init";
    parts.push_back(fmt::format("{} ×{}: {} to {}{}", label, k.values.size(), num(*lo),
                                num(*hi), std::isfinite(k.p) ? ", p " + num(k.p) : ""));
  }
  if (std::isfinite(e.p_holm)) parts.push_back("Holm p " + num(e.p_holm));
  return fmt::format("{}", fmt::join(parts, " · "));
}

void summary_tables(std::string& h, const std::vector<PaperSummary>& papers) {
  h += "<h2 id=\"summary\">Summary: the papers' claims on this model</h2>\n";
  h += "<p class=\"sub\">Each verdict follows from numbers in the parts' results.json by the rule shown beside it, and "
       "compares this model with controls: what a model without the claimed property would show, and, for the claims "
       "about training, the same statistic on random initialisations of the architecture on the same tokens, of two "
       "kinds: the family's published rule (init) and random weights at the model's own scales, tensor kind by tensor "
       "kind (results.json's "
       "verdicts list every value). <b>pass</b>: the claim holds, "
       "beyond every control, with a p-value below 0.05 after the Holm adjustment over every verdict of the run; "
       "<b>architectural</b>: it holds, but as much at initialisation; <b>differs</b>: it does not hold; "
       "<b>inconclusive</b>: it holds, but no control tells it from the architecture, or its p-value does not survive the "
       "adjustment; <b>shown</b>: reported without a verdict; <b>not computed</b>: the analysis, the control or the key is "
       "missing.</p>\n";
  for (const auto& paper : papers) {
    if (paper.folded) {
      std::map<std::string, int> counts;
      for (const auto& c : paper.checks) ++counts[verdict_text(c.verdict)];
      std::vector<std::string> tally;
      for (const auto& [verdict, n] : counts) tally.push_back(fmt::format("{} {}", n, verdict));
      h += fmt::format("<details><summary><b>{}</b>: {}</summary>\n", html_escape(paper.title), fmt::join(tally, ", "));
    } else {
      h += fmt::format("<h3>{}</h3>\n", html_escape(paper.title));
    }
    h += "<div class=\"scroll-x\"><table>\n<tr><th style=\"width:26%\">claim</th><th>this model</th><th>verdict</th>"
         "<th style=\"width:22%\">evidence</th><th style=\"width:16%\">rule and controls</th></tr>\n";
    // The rule and the controls fold away: a reader opens the ones the verdict makes interesting. The claims this
    // run could not compute are listed below the table, folded, so that the figures stay near the top.
    std::vector<const ClaimCheck*> not_computed;
    for (const auto& c : paper.checks) {
      if (c.verdict == Verdict::kNotComputed) {
        not_computed.push_back(&c);
        continue;
      }
      h += fmt::format("<tr><td>{}</td><td>{}</td><td><span class=\"verdict {}\">{}</span></td><td class=\"rule\">{}</td>"
                       "<td class=\"rule\"><details><summary>rule, controls</summary><b>rule</b>: {}<br><b>controls</b>: {}{}</details></td></tr>\n",
                       html_escape(c.claim), html_escape(c.observed), verdict_class(c.verdict), verdict_text(c.verdict),
                       html_escape(evidence_text(c)), html_escape(c.rule), html_escape(c.control.empty() ? "none" : c.control),
                       std::isfinite(c.control_value) ? " (" + num(c.control_value) + ")" : "");
    }
    h += "</table></div>\n";
    if (!not_computed.empty()) {
      std::vector<std::string> ids;
      for (const ClaimCheck* c : not_computed) ids.push_back(c->id);
      h += fmt::format("<details class=\"rule\"><summary>not computed on this run: {}</summary><ul>\n", fmt::join(ids, ", "));
      for (const ClaimCheck* c : not_computed)
        h += fmt::format("<li><b>{}</b> {}: {}</li>\n", html_escape(c->id), html_escape(c->claim), html_escape(c->observed));
      h += "</ul></details>\n";
    }
    if (paper.folded) h += "</details>\n";
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
// The part's figures (every NAME.svg listed in results.json, or NAME.gp when gnuplot could not render it) into `h`;
// returns its other files (not .dat or .gp), with what results.json says each holds.
std::vector<std::pair<std::string, std::string>> figures_section(std::string& h, const fs::path& root, const ReportPart& p,
                                                                 const json& j) {
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
  return other_files;
}

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

  if (const json* ablate = find(j, "/options/ablate"); ablate && ablate->is_array() && !ablate->empty()) {
    std::vector<std::string> specs;
    for (const json& a : *ablate) specs.push_back(html_escape(a.is_string() ? a.get<std::string>() : a.dump()));
    h += fmt::format("<p class=\"ablated\">Ablated: every forward pass ran with <code>{}</code> set to 0; these are the "
                     "results of the ablated model.</p>\n", fmt::join(specs, "</code>, <code>"));
  }
  const std::vector<std::pair<std::string, std::string>> other_files = figures_section(h, root, p, j);
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

}  // namespace

const char* report_style() { return kStyle; }

const char* verdict_class(Verdict v) {
  switch (v) {
    case Verdict::kPass: return "pass";
    case Verdict::kArchitectural: return "architectural";
    case Verdict::kDiffers: return "differs";
    case Verdict::kInconclusive: return "inconclusive";
    case Verdict::kInfo: return "info";
    case Verdict::kNotComputed: break;
  }
  return "not-computed";
}

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
  std::tm utc{};
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M UTC", gmtime_r(&now, &utc));
  h += fmt::format("<p class=\"sub\">Transformers as dynamical systems · report built {} by tdyn {} from <code>{}</code></p>\n", stamp,
                   TDYN_VERSION, html_escape(dir.filename().empty() ? dir.string() : dir.filename().string()));
  // The init control's parts get a section for their first seed only; the other seeds' values are in the summary's
  // evidence and their results.json beside it.
  std::vector<const ReportPart*> sections;
  for (const auto& p : parts)
    if (p.is_model_part() || (p.is_control() && shown_control(p, parts))) sections.push_back(&p);
  h += "<nav><a href=\"#summary\">Summary</a>";
  for (const ReportPart* p : sections) h += fmt::format("<a href=\"#{}\">{}</a>", anchor(*p), html_escape(p->name));
  h += "</nav>\n";

  if (analyze) {
    const json* argv = find(top, "/argv");
    h += "<p>The whole analysis:</p>\n";
    h += fmt::format("<pre><code>{}</code></pre>\n", argv && argv->is_array() ? html_escape(shell_command(*argv)) : kNotComputed);
    h += "<table><tr><th>part</th><th>status</th><th>seconds</th></tr>\n";
    bool init_listed = false;
    for (const ReportPart* p : sections) {
      if (p->is_control() && std::exchange(init_listed, true)) continue;  // one row for the whole control
      const std::string name = p->is_control() ? "init" : p->name;
      const json* info = find(top, "/results/parts/" + name);
      auto seconds = info ? number(*info, "/seconds") : std::nullopt;
      const size_t seeds = info ? array_at(*info, "/seeds").size() : 0;
      h += fmt::format("<tr><td><a href=\"#{}\">{}</a></td><td>{}</td><td>{}</td></tr>\n", anchor(*p),
                       html_escape(seeds > 0 ? fmt::format("{} ({} seeds)", name, seeds) : name),
                       html_escape(info ? text_at(*info, "/status") : (p->json.is_null() ? "missing" : "ok")),
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
  for (const ReportPart* p : sections)
    part_section(h, dir, *p, analyze ? find(top, "/results/parts/" + (p->is_control() ? std::string("init") : p->name)) : nullptr);
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
