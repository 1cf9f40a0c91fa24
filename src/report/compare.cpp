#include "report/compare.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <tuple>

#include <fmt/format.h>

#include "analysis/samples.h"
#include "analysis/stats.h"
#include "core/error.h"
#include "report/html_report.h"
#include "report/report_parts.h"
#include "report/results.h"

namespace tdyn {
namespace {

using json = nlohmann::json;
using namespace json_lookup;

// Where a sublayer map ("blocks.3.jac_attn") sits: its layer's attention at (l + ½) / L, its MLP and a whole layer
// (or a parallel block) at (l + 1) / L.
struct Place {
  int64_t layer = -1;  // 0-based; −1: the name names none
  std::string sublayer;
  double normalized = NAN;
};

Place map_place(const std::string& name, int64_t n_layers) {
  Place p;
  int layer = -1;
  if (std::sscanf(name.c_str(), "blocks.%d.", &layer) != 1 || layer < 0 || n_layers <= 0) return p;
  p.layer = layer;
  const bool attn = name.find("attn") != std::string::npos, mlp = name.find("mlp") != std::string::npos;
  p.sublayer = attn ? "attn" : mlp ? "mlp" : "layer";
  p.normalized = (layer + (attn ? 0.5 : 1.0)) / static_cast<double>(n_layers);
  return p;
}

// `file` as a row's `from` names it: relative to the comparison's directory `out`.
fs::path seen_from(const fs::path& file, const fs::path& out) {
  return fs::absolute(file).lexically_normal().lexically_relative(fs::absolute(out).lexically_normal());
}

// A number at `pointer`, a boolean as 1 or 0; nothing when absent, null (NaN) or of another type.
std::optional<double> value_at(const json& root, const std::string& pointer) {
  const json* j = find(root, pointer);
  if (j && j->is_boolean()) return j->get<bool>() ? 1.0 : 0.0;
  return number(root, pointer);
}

// One results.json read for the comparison: its rows go to `rows` under one model label, source and part. `subsets`
// are the same part of analyze's disjoint sample subsets, whose spread at the same pointer is the row's interval.
struct PartReader {
  std::vector<CompareRow>& rows;
  const json& root;
  fs::path file;  // as `from` names it
  std::string model, source, part;
  int64_t n_layers = 0;
  std::span<const json> subsets = {};

  // `in_subset` gives the same value's pointer in a subset's results.json when it is not `pointer` (null: none there).
  void add(int64_t depth, double normalized, const std::string& sublayer, const std::string& quantity, const std::string& pointer,
           double at = NAN, const std::function<std::optional<std::string>(const json&)>& in_subset = {}) const {
    const std::optional<double> v = value_at(root, pointer);
    if (!v) return;
    CompareRow r{model, source, part, depth, normalized, sublayer, quantity, at, *v, NAN, NAN, file.string() + "#" + pointer};
    std::vector<double> spread;
    for (const json& s : subsets) {
      const std::optional<std::string> there = in_subset ? in_subset(s) : pointer;
      if (auto x = there ? value_at(s, *there) : std::nullopt) spread.push_back(*x);
    }
    if (spread.size() >= 2) std::tie(r.lo, r.hi) = subset_interval(*v, spread);
    rows.push_back(std::move(r));
  }
};

void power_rows(const PartReader& p) {
  const json& layers = array_at(p.root, "/results/layers");
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto depth = static_cast<int64_t>(l) + 1;
    const double normalized = static_cast<double>(depth) / static_cast<double>(p.n_layers);
    const std::string at = fmt::format("/results/layers/{}", l);
    p.add(depth, normalized, "layer", "gamma", at + "/dynamics_F/gamma");
    p.add(depth, normalized, "layer", "rho", at + "/dynamics_F/rho");
    p.add(depth, normalized, "layer", "modulus_ratio", at + "/F/modulus_ratio");
    p.add(depth, normalized, "layer", "lambda1_complex", at + "/F/complex_pair");
  }
}

// One checkpoint of a jacobian run (results.models[i]).
void jacobian_rows(const PartReader& p, size_t model) {
  const std::string base = fmt::format("/results/models/{}", model);
  const json& depths = array_at(p.root, base + "/depths");
  for (size_t k = 0; k < depths.size(); ++k) {
    const Place place = map_place(depths[k].value("name", ""), p.n_layers);
    const auto depth = static_cast<int64_t>(k) + 1;
    const std::string at = fmt::format("{}/depths/{}", base, k);
    p.add(depth, place.normalized, place.sublayer, "normalized_departure", at + "/mean/henrici_departure/schur_normalized");
    p.add(depth, place.normalized, place.sublayer, "symmetry_index", at + "/mean/symmetry_index");
    p.add(depth, place.normalized, place.sublayer, "complex_fraction", at + "/mean/complex_fraction");
    p.add(depth, place.normalized, place.sublayer, "spectral_radius", at + "/mean/spectral_radius");
    p.add(depth, place.normalized, place.sublayer, "effective_rank", at + "/mean/effective_rank/roy_vetterli");
    // Runs that need only the first and last C_k leave the others unmeasured (d = 0).
    if (number(depths[k], "/cumulative/d").value_or(0) > 0)
      p.add(depth, place.normalized, place.sublayer, "cumulative_effective_rank", at + "/cumulative/effective_rank/roy_vetterli");
  }
  const json& surgery = array_at(p.root, base + "/surgery");
  for (size_t i = 0; i < surgery.size(); ++i) {
    const double alpha = number(surgery[i], "/alpha").value_or(NAN);
    const std::string at = fmt::format("{}/surgery/{}", base, i);
    // A subset's surgery may run fewer α: its point of the same α.
    const auto same_alpha = [&](const std::string& leaf) {
      return [&base, alpha, leaf](const json& subset) -> std::optional<std::string> {
        const json& points = array_at(subset, base + "/surgery");
        for (size_t j = 0; j < points.size(); ++j)
          if (number(points[j], "/alpha") == alpha) return fmt::format("{}/surgery/{}{}", base, j, leaf);
        return std::nullopt;
      };
    };
    p.add(0, NAN, "", "surgery_effective_rank", at + "/full_depth_surgery/roy_vetterli", alpha, same_alpha("/full_depth_surgery/roy_vetterli"));
    p.add(0, NAN, "", "surgery_control_effective_rank", at + "/full_depth_control/roy_vetterli", alpha,
          same_alpha("/full_depth_control/roy_vetterli"));
  }
}

void topology_rows(const PartReader& p) {
  const json& boundaries = array_at(p.root, "/results/boundaries");
  for (size_t b = 0; b < boundaries.size(); ++b) {
    const double depth = number(boundaries[b], "/depth").value_or(NAN);
    p.add(static_cast<int64_t>(b), depth / static_cast<double>(p.n_layers), "", "communities",
          fmt::format("/results/boundaries/{}/communities", b));
  }
  const json& layers = array_at(p.root, "/results/coupling/layers");
  for (size_t i = 0; i < layers.size(); ++i) {
    const Place place = map_place(layers[i].value("map", ""), p.n_layers);
    const std::string at = fmt::format("/results/coupling/layers/{}", i);
    p.add(static_cast<int64_t>(i) + 1, place.normalized, place.sublayer, "coupling_rho", at + "/column_gain/rho");
    p.add(static_cast<int64_t>(i) + 1, place.normalized, place.sublayer, "coupled", at + "/column_gain/coupled");
  }
  p.add(0, NAN, "", "coupled_layers", "/results/coupling/coupled_layers");
}

void particles_rows(const PartReader& p) {
  const json& time = array_at(p.root, "/results/series/time");
  for (size_t i = 0; i < time.size(); ++i)
    p.add(0, NAN, "", "clusters", fmt::format("/results/series/clusters/{}", i), number(time, fmt::format("/{}", i)).value_or(NAN));
}

// The model's name: its checkpoint file's stem, or its directory's name when the file's is generic ("model.bin",
// "model.safetensors") or the checkpoint is a directory.
std::string model_name(const json& root) {
  const fs::path path = text_at(root, "/model/path");
  const std::string stem = path.stem().string();
  const bool file = path.has_extension(), generic = file && (stem.starts_with("model") || stem.starts_with("pytorch_model"));
  const std::string name = generic ? path.parent_path().filename().string() : file ? stem : path.filename().string();
  return name.empty() ? text_at(root, "/command") : name;
}

// The options that shape a run's numbers, wherever its command keeps them.
json shaping_options(const json& root) {
  json o = json::object();
  for (const char* key : {"samples", "data", "max_len"}) {
    const json* v = find(root, std::string("/options/") + key);
    if (v && v->is_object()) v = find(*v, std::string("/") + key);  // a part's options.samples {data, samples, ...}
    if (!v) v = find(root, std::string("/options/samples/") + key);
    if (v && !v->is_null()) o[key] = *v;
  }
  // A run on the default corpus may record it as "" (the default) or by its path.
  if (o.contains("data") && o["data"] == "") {
    try {
      o["data"] = default_corpus().string();
    } catch (const Error&) {
      o["data"] = "the default corpus";
    }
  }
  return o;
}

// The part a single command's results directory is (power --mode attn-only-l2 is analyze's power-l2).
std::string part_of(const json& root) {
  const std::string command = text_at(root, "/command");
  return command == "power" && text_at(root, "/options/mode") == "attn-only-l2" ? "power-l2" : command;
}

void part_rows(const PartReader& p, const std::string& command) {
  if (command == "power") power_rows(p);
  if (command == "jacobian") jacobian_rows(p, 0);
  if (command == "topology") topology_rows(p);
  if (command == "particles") particles_rows(p);
}

// A jacobian run of several checkpoints (--compare), or a topology run with comparisons: a checkpoint series, each
// checkpoint a model of its own (c.models[first] the first, labelled by the series and its file), ordered by training
// step when every checkpoint's name gives one. `file` is the run's results.json as the rows name it.
void checkpoint_series(Comparison& c, size_t first, const json& root, const fs::path& file) {
  const std::string command = text_at(root, "/command");
  const json& checkpoints = array_at(root, command == "jacobian" ? "/results/models" : "/results/checkpoints");
  const std::string series = c.models[first].label;
  for (size_t i = 0; i < checkpoints.size(); ++i) {
    if (i > 0) {
      c.models.push_back(c.models[first]);
      c.models.back().verdicts.clear();  // the run's verdicts are the first checkpoint's
    }
    ComparedModel& m = c.models.back();
    const std::string name = checkpoints[i].contains("label") ? text_at(checkpoints[i], "/label")
                                                               : fs::path(text_at(checkpoints[i], "/path")).filename().string();
    m.series = series;
    m.label = fmt::format("{}: {}", series, name);
    // One file compared with itself (a check of the series' plumbing) keeps its checkpoints apart.
    if (std::any_of(c.models.begin(), c.models.end() - 1, [&](const ComparedModel& o) { return o.label == m.label; }))
      m.label += fmt::format(" #{}", i + 1);
    m.step = training_step(name);
    const PartReader p{c.rows, root, file, m.label, "model", part_of(root), m.n_layers};
    if (command == "jacobian") jacobian_rows(p, i);
    else p.add(0, NAN, "", "coupled_layers", fmt::format("/results/checkpoints/{}/coupling/coupled_layers", i),
               std::isnan(m.step) ? static_cast<double>(i) : m.step);
  }
  const auto begin = c.models.begin() + static_cast<std::ptrdiff_t>(first);
  if (std::none_of(begin, c.models.end(), [](const ComparedModel& m) { return std::isnan(m.step); }))
    std::stable_sort(begin, c.models.end(), [](const ComparedModel& a, const ComparedModel& b) { return a.step < b.step; });
}

// Runs of one architecture (family, depth, width) outside a series whose labels each name a training step
// (`--label step1000`, or a hub-cache revision such as DIR@step1000 in the model's name) are a checkpoint series
// too, named by that architecture and ordered by step; their coupled counts lie on its step axis.
void series_from_labels(Comparison& c) {
  std::map<std::tuple<std::string, int64_t, int64_t>, std::vector<size_t>> groups;
  for (size_t i = 0; i < c.models.size(); ++i) {
    const ComparedModel& m = c.models[i];
    if (m.series.empty() && !std::isnan(training_step(m.label))) groups[{m.family, m.n_layers, m.d_model}].push_back(i);
  }
  for (const auto& [architecture, members] : groups) {
    if (members.size() < 2) continue;
    const auto& [family, n_layers, d_model] = architecture;
    std::vector<ComparedModel> series;
    for (size_t i : members) {
      series.push_back(c.models[i]);
      series.back().series = fmt::format("{}, {} layers, d_model {}", family, n_layers, d_model);
      series.back().step = training_step(series.back().label);
      for (CompareRow& r : c.rows)
        if (r.model == series.back().label && r.quantity == "coupled_layers") r.at = series.back().step;
    }
    std::stable_sort(series.begin(), series.end(), [](const ComparedModel& a, const ComparedModel& b) { return a.step < b.step; });
    for (size_t j = 0; j < members.size(); ++j) c.models[members[j]] = std::move(series[j]);  // in training order, in their places
  }
}

// The parts of an analyze directory: the model's, its first initialisation's (analyze's control, drawn in the
// report) and the sample subsets behind the intervals.
void analyze_rows(Comparison& c, const ComparedModel& m, const fs::path& out) {
  std::vector<json> subsets;
  for (int g = 0;; ++g) {
    std::string error;
    const fs::path file = m.dir / "subsets" / fmt::format("subset-{}", g) / "jacobian" / "results.json";
    if (!fs::exists(file)) break;
    subsets.push_back(read_json(file, &error));
  }
  for (const char* part : {"power", "power-l2", "jacobian", "topology", "particles"}) {
    for (const char* source : {"model", "init"}) {
      const fs::path file = (std::string(source) == "model" ? m.dir : m.dir / "init" / "seed-0") / part / "results.json";
      if (!fs::exists(file)) continue;
      std::string error;
      const json root = read_json(file, &error);
      if (root.is_null()) fail("compare: {}", error);
      PartReader p{c.rows, root, seen_from(file, out), m.label, source, part, m.n_layers};
      if (std::string(source) == "model" && std::string(part) == "jacobian") p.subsets = subsets;
      part_rows(p, text_at(root, "/command"));
    }
  }
}

// Each per-depth quantity (and topology's coupled count) of each checkpoint series with two or more checkpoints: its
// mean over depths at every checkpoint, in the series' order, and Kendall's τ of those means with the order.
std::vector<SeriesTrend> series_trends(const Comparison& c) {
  std::vector<SeriesTrend> trends;
  std::vector<std::string> series;
  for (const ComparedModel& m : c.models)
    if (!m.series.empty() && std::find(series.begin(), series.end(), m.series) == series.end()) series.push_back(m.series);
  for (const std::string& name : series) {
    std::vector<const ComparedModel*> checkpoints;
    for (const ComparedModel& m : c.models)
      if (m.series == name) checkpoints.push_back(&m);
    if (checkpoints.size() < 2) continue;
    std::vector<std::pair<std::string, std::string>> quantities;  // (part, quantity), in the rows' order
    for (const CompareRow& r : c.rows)
      if (r.model == checkpoints.front()->label && (std::isfinite(r.normalized_depth) || r.quantity == "coupled_layers") &&
          std::find(quantities.begin(), quantities.end(), std::pair(r.part, r.quantity)) == quantities.end())
        quantities.emplace_back(r.part, r.quantity);
    for (const auto& [part, quantity] : quantities) {
      SeriesTrend t{name, part, quantity, {}, {}, NAN};
      for (const ComparedModel* m : checkpoints) {
        double sum = 0;
        int64_t n = 0;
        for (const CompareRow& r : c.rows)
          if (r.model == m->label && r.part == part && r.quantity == quantity && (std::isfinite(r.normalized_depth) || quantity == "coupled_layers"))
            sum += r.value, ++n;
        t.checkpoints.push_back(m->label);
        t.means.push_back(n > 0 ? sum / static_cast<double>(n) : NAN);
      }
      t.tau = order_tau(t.means);
      trends.push_back(std::move(t));
    }
  }
  return trends;
}

}  // namespace

double training_step(const std::string& label) {
  std::string lower = label;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  const auto digits_at = [&](size_t i) {
    size_t j = i;
    while (j < lower.size() && std::isdigit(static_cast<unsigned char>(lower[j]))) ++j;
    return j > i ? std::stod(lower.substr(i, j - i)) : NAN;
  };
  // A bare number is a step; so is the number after the last "step", "ckpt", "checkpoint" or "iter" (a separator
  // between them allowed). Other numbers in a name (a size, a token count) are not.
  if (!lower.empty() && std::all_of(lower.begin(), lower.end(), [](unsigned char ch) { return std::isdigit(ch); })) return digits_at(0);
  double step = NAN;
  size_t best = std::string::npos;
  for (const char* word : {"step", "ckpt", "checkpoint", "iter"}) {
    const size_t at = lower.rfind(word);
    if (at == std::string::npos || (best != std::string::npos && at < best)) continue;
    size_t i = at + std::string_view(word).size();
    while (i < lower.size() && (lower[i] == '_' || lower[i] == '-' || lower[i] == '=')) ++i;
    if (const double v = digits_at(i); std::isfinite(v)) step = v, best = at;
  }
  return step;
}

Comparison compare_runs(const std::vector<CompareInput>& runs, const fs::path& out) {
  if (runs.empty()) fail("compare: no results directories given");
  Comparison c;

  std::map<std::string, std::set<std::string>> parts_of;  // the parts each model's runs gave (a model's runs merge)
  for (const CompareInput& run : runs) {
    const fs::path file = run.dir / "results.json";
    if (!fs::exists(file)) fail("compare: {} has no results.json: not a tdyn results directory", run.dir.string());
    std::string error;
    const json root = read_json(file, &error);
    if (root.is_null()) fail("compare: {}", error);
    const std::string command = text_at(root, "/command");
    static const std::set<std::string> known = {"power", "jacobian", "topology", "particles", "analyze"};
    if (!known.contains(command))
      fail("compare: {} holds the results of '{}'; compare reads power, jacobian, topology, particles and analyze runs",
           run.dir.string(), command);
    const bool series = (command == "jacobian" && array_at(root, "/results/models").size() > 1) ||
                        (command == "topology" && array_at(root, "/results/checkpoints").size() > 1);
    const std::set<std::string> parts = command == "analyze" ? std::set<std::string>{"power", "power-l2", "jacobian", "topology", "particles"}
                                                             : std::set<std::string>{part_of(root)};
    // A checkpoint series is named by its directory: its checkpoints by their files.
    std::string label = !run.label.empty() ? run.label : series ? run.dir.filename().string() : model_name(root);
    // Runs of one model by different commands (its power and its jacobian, say) are one model of the comparison.
    auto same = std::find_if(c.models.begin(), c.models.end(), [&](const ComparedModel& m) { return m.label == label; });
    const bool disjoint = same != c.models.end() && !series && same->series.empty() &&
                          std::none_of(parts.begin(), parts.end(), [&](const std::string& p) { return parts_of[label].contains(p); });
    if (same != c.models.end() && !disjoint) {
      if (!run.label.empty()) fail("compare: the label '{}' is given to two runs of the same analysis", label);
      label += " (" + run.dir.filename().string() + ")";  // two runs of one model (other samples, say): told apart by directory
      same = c.models.end();
    }
    parts_of[label].insert(parts.begin(), parts.end());
    if (same != c.models.end()) {
      same->command += ", " + command;
      for (PaperSummary& paper : summarize_claims(load_report_parts(run.dir))) same->verdicts.push_back(std::move(paper));
      if (shaping_options(root) != same->options)
        c.differences.push_back(fmt::format("{}: its {} run's options differ from its {} run's: {} against {}", label, command,
                                            same->command, shaping_options(root).dump(), same->options.dump()));
    } else {
      ComparedModel m;
      m.label = label;
      m.dir = run.dir;
      m.command = command;
      m.family = text_at(root, "/model/family");
      m.n_layers = static_cast<int64_t>(number(root, "/model/n_layers").value_or(0));
      m.d_model = static_cast<int64_t>(number(root, "/model/d_model").value_or(0));
      m.options = shaping_options(root);
      m.verdicts = summarize_claims(load_report_parts(run.dir));
      c.models.push_back(std::move(m));
      same = c.models.end() - 1;
    }
    const ComparedModel& m = *same;
    if (command == "analyze") analyze_rows(c, m, out);
    else if (series) checkpoint_series(c, c.models.size() - 1, root, seen_from(file, out));
    else part_rows(PartReader{c.rows, root, seen_from(file, out), m.label, "model", part_of(root), m.n_layers}, command);
  }
  series_from_labels(c);
  c.trends = series_trends(c);
  for (const char* key : {"samples", "data", "max_len"}) {
    std::set<std::string> values;
    std::string each;
    for (const ComparedModel& m : c.models) {
      const std::string v = m.options.contains(key) ? (m.options[key].is_string() ? m.options[key].get<std::string>() : m.options[key].dump()) : "-";
      values.insert(v);
      each += fmt::format("{}{} ({})", each.empty() ? "" : ", ", v, m.label);
    }
    if (values.size() > 1) c.differences.push_back(fmt::format("{}: {}", key, each));
  }
  return c;
}

namespace {

// The papers' figures by name: a quantity of one part against normalised depth (per sublayer kind, attention and MLP
// on separate axes, where `split`), or against the rows' `at` (α, time, training step).
struct FigureSpec {
  const char* name;
  const char* part;
  const char* quantity;
  const char* claim;  // the verdict shown beside it
  const char* title;
  const char* ylabel;
  const char* xlabel = "normalised depth l / L";
  bool split = false;
};

const FigureSpec kFigures[] = {
    {"gamma", "power", "gamma", "gamma", "γ_t: the tokens' mean alignment with v₁ of F_t, per layer", "γ_t"},
    {"rho", "power", "rho", "rho", "ρ_t: the share of tokens that layer t moves toward v₁,t", "ρ_t"},
    {"modulus_ratio", "power", "modulus_ratio", "dominant", "|λ₂| / |λ₁| of F_t, per layer", "|λ₂| / |λ₁|"},
    {"lambda1_complex", "power", "lambda1_complex", "dominant", "λ₁ of F_t: a complex pair (1) or real (0)", "λ₁ complex"},
    {"normalized_departure", "jacobian", "normalized_departure", "normality", "Normalised Henrici departure of the mean Jacobian",
     "departure from normality", "normalised depth l / L", true},
    {"symmetry_index", "jacobian", "symmetry_index", "normality", "Symmetry index ‖J̄ − J̄ᵀ‖ / ‖J̄‖", "symmetry index",
     "normalised depth l / L", true},
    {"complex_fraction", "jacobian", "complex_fraction", "normality", "Share of complex eigenvalues of the mean Jacobian",
     "complex share", "normalised depth l / L", true},
    {"cumulative_effective_rank", "jacobian", "cumulative_effective_rank", "bottleneck",
     "Effective rank of the cumulative map C_k = J̄_k ⋯ J̄_1 (Roy–Vetterli)", "effective rank of C_k"},
    {"surgery", "jacobian", "surgery_effective_rank", "surgery", "Schur surgery: effective rank of the full-depth product over α",
     "effective rank", "α (the departure kept)"},
    {"coupled_layers", "topology", "coupled_layers", "emergence", "Significantly coupled sublayer maps per checkpoint",
     "coupled maps", "training step (or checkpoint index)"},
    {"clusters", "particles", "clusters", "clusters", "Clusters of the particles over time", "clusters", "time t"},
};

// gnuplot's own first line colours, as the report's figures draw (its yellow left out: too faint for a line).
const char* const kColours[] = {"#9400d3", "#009e73", "#56b4e9", "#e69f00", "#0072b2", "#e51e10", "#000000"};

// Text gnuplot can hold in a single-quoted string and a sprintf format.
std::string gnuplot_safe(std::string text) {
  std::erase_if(text, [](char c) { return c == '\'' || c == '"' || c == '%' || c == '\\'; });
  return text;
}

// A model's (or its initialisation's) line in a figure, with each point's value as a hover title.
void add_line(Figure& fig, const std::string& label, std::vector<std::pair<double, double>> points, const char* colour, bool dashed) {
  std::sort(points.begin(), points.end());
  std::vector<double> x, y;
  for (const auto& [a, b] : points) x.push_back(a), y.push_back(b);
  const std::string look = fmt::format("lc rgb '{}' lw 2{}", colour, dashed ? " dt 2" : "");
  fig.series.push_back({label, {x, y}, "lines " + look});
  fig.series.push_back({"", {x, y}, fmt::format("labels hypertext point pt 7 ps 0.6 {}", look),
                        fmt::format("1:2:(sprintf('{}: %.4g at %.4g', $2, $1))", gnuplot_safe(label))});
}

// The figure's lines: one per model (and its initialisation, dashed), of the rows of `sublayer` ("" for every one).
Figure figure_of(const Comparison& c, const FigureSpec& spec, const std::string& sublayer) {
  Figure fig;
  fig.name = sublayer.empty() ? spec.name : fmt::format("{}_{}", spec.name, sublayer);
  fig.title = sublayer.empty() ? spec.title : fmt::format("{} ({})", spec.title, sublayer == "attn" ? "attention sublayers" : sublayer == "mlp" ? "MLP sublayers" : "whole layers");
  fig.xlabel = spec.xlabel;
  fig.ylabel = spec.ylabel;
  fig.width = 760;
  fig.height = 460;
  const bool by_depth = std::string(spec.xlabel).starts_with("normalised");
  fig.settings = {"set key below"};  // labels of any length leave the plot its width
  if (by_depth) fig.settings.push_back("set xrange [0:1]");
  for (size_t i = 0; i < c.models.size(); ++i)
    for (const char* source : {"model", "init"}) {
      std::vector<std::pair<double, double>> points;
      for (const CompareRow& r : c.rows)
        if (r.model == c.models[i].label && r.source == source && r.part == spec.part && r.quantity == spec.quantity &&
            (sublayer.empty() || r.sublayer == sublayer)) {
          const double x = by_depth ? r.normalized_depth : r.at;
          if (std::isfinite(x)) points.emplace_back(x, r.value);
        }
      if (points.empty()) continue;
      const bool init = std::string(source) == "init";
      add_line(fig, init ? c.models[i].label + " (initialisation)" : c.models[i].label, points, kColours[i % std::size(kColours)], init);
    }
  return fig;
}

// The checkpoints' coupled counts lie on their series' step axis; a lone run has none to draw.
std::vector<std::string> panels(const Comparison& c, const FigureSpec& spec) {
  if (!spec.split) return {""};
  std::vector<std::string> kinds;
  for (const char* k : {"attn", "mlp", "layer"})
    if (std::any_of(c.rows.begin(), c.rows.end(), [&](const CompareRow& r) { return r.part == spec.part && r.quantity == spec.quantity && r.sublayer == k; }))
      kinds.push_back(k);
  return kinds;
}

// A model's verdict on `claim`; of a model's several runs, the one that computed it.
const ClaimCheck* find_check(const ComparedModel& m, const std::string& claim) {
  const ClaimCheck* found = nullptr;
  for (const PaperSummary& paper : m.verdicts)
    for (const ClaimCheck& check : paper.checks)
      if (check.id == claim && (!found || found->verdict == Verdict::kNotComputed)) found = &check;
  return found;
}

std::string interval_text(double lo, double hi) {
  return std::isfinite(lo) && std::isfinite(hi) ? fmt::format(" [{:.3g}, {:.3g}]", lo, hi) : "";
}

// The verdict, its statistic and interval; a claim shown without a verdict (the shared-weight regime, say) says what
// was observed.
std::string verdict_cell(const ClaimCheck* check) {
  if (!check) return "<td>—</td>";
  const std::string value = std::isfinite(check->value) ? fmt::format(" {:.3g}", check->value) : "";
  const std::string observed = check->verdict == Verdict::kInfo ? "<br><span class=\"sub\">" + html_escape(check->observed) + "</span>" : "";
  return fmt::format("<td><span class=\"verdict {}\">{}</span>{}{}{}</td>", verdict_class(check->verdict), verdict_text(check->verdict),
                     value, interval_text(check->evidence.lo, check->evidence.hi), observed);
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

std::string csv_number(double v) { return std::isfinite(v) ? fmt::format("{}", v) : ""; }  // shortest exact

std::string compare_csv(const Comparison& c) {
  std::string out = "model,source,part,depth,normalized_depth,sublayer,quantity,at,value,lo,hi,from\n";
  for (const CompareRow& r : c.rows)
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{}\n", csv_field(r.model), r.source, r.part, r.depth, csv_number(r.normalized_depth),
                       r.sublayer, r.quantity, csv_number(r.at), csv_number(r.value), csv_number(r.lo), csv_number(r.hi), csv_field(r.from));
  return out;
}

// The claims any model has a verdict on, in the order of the papers' tables.
std::vector<const ClaimCheck*> claims(const Comparison& c) {
  std::vector<const ClaimCheck*> out;
  std::set<std::string> seen;
  for (const ComparedModel& m : c.models)
    for (const PaperSummary& paper : m.verdicts)
      for (const ClaimCheck& check : paper.checks)
        if (seen.insert(check.id).second) out.push_back(&check);
  return out;
}

std::string comparison_page(const Comparison& c, const std::vector<std::pair<FigureSpec, std::vector<std::string>>>& drawn) {
  std::string h = fmt::format("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>tdyn compare</title>\n"
                              "<style>{}</style>\n</head>\n<body>\n<h1>tdyn compare: {} models</h1>\n",
                              report_style(), c.models.size());
  h += "<p class=\"sub\">Every per-depth quantity on normalised depth l / L (attention sublayers at (l + ½) / L, MLP sublayers "
       "and whole layers at (l + 1) / L); an analyze run's initialisation control (the family's rule, seed 0) dashed in its "
       "model's colour. Every number is in <a href=\"compare.csv\">compare.csv</a> with the results.json it was read from.</p>\n";
  h += "<h2 id=\"models\">Models</h2>\n<div class=\"scroll-x\"><table><tr><th>model</th><th>run</th><th>family</th><th>layers</th>"
       "<th>d_model</th><th>samples</th><th>data</th></tr>\n";
  for (const ComparedModel& m : c.models)
    h += fmt::format("<tr><td>{}</td><td><code>{}</code> ({})</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>\n",
                     html_escape(m.label), html_escape(m.dir.string()), html_escape(m.command), html_escape(m.family), m.n_layers, m.d_model,
                     html_escape(text_at(m.options, "/samples")), html_escape(text_at(m.options, "/data")));
  h += "</table></div>\n";
  if (!c.differences.empty()) {
    h += "<p class=\"error\">These runs differ in options that shape their numbers; set their values side by side with care:</p><ul>\n";
    for (const std::string& d : c.differences) h += "<li>" + html_escape(d) + "</li>\n";
    h += "</ul>\n";
  }
  h += "<h2 id=\"verdicts\">Verdicts</h2>\n<div class=\"scroll-x\"><table><tr><th>claim</th>";
  for (const ComparedModel& m : c.models) h += "<th>" + html_escape(m.label) + "</th>";
  h += "</tr>\n";
  for (const ClaimCheck* claim : claims(c)) {
    h += fmt::format("<tr><td><code>{}</code> {}</td>", html_escape(claim->id), html_escape(claim->claim));
    for (const ComparedModel& m : c.models) h += verdict_cell(find_check(m, claim->id));
    h += "</tr>\n";
  }
  h += "</table></div>\n";
  if (!c.trends.empty()) {
    h += "<h2 id=\"trends\">Trends over the checkpoint series</h2>\n<p class=\"sub\">Each quantity's mean over depths at each "
         "checkpoint, in training order, and Kendall's τ of those means with the order (+1: rising at every step, −1: "
         "falling).</p>\n<div class=\"scroll-x\"><table><tr><th>series</th><th>quantity</th><th>means, in order</th><th>τ</th></tr>\n";
    for (const SeriesTrend& t : c.trends) {
      std::string means;
      for (size_t i = 0; i < t.means.size(); ++i) means += fmt::format("{}{:.4g}", i ? " → " : "", t.means[i]);
      h += fmt::format("<tr><td>{}</td><td>{} <code>{}</code></td><td>{}</td><td>{}</td></tr>\n", html_escape(t.series), html_escape(t.part),
                       html_escape(t.quantity), means, std::isfinite(t.tau) ? fmt::format("{:+.2f}", t.tau) : "—");
    }
    h += "</table></div>\n";
  }
  h += "<h2 id=\"figures\">Figures</h2>\n";
  for (const auto& [spec, names] : drawn) {
    h += fmt::format("<h3 id=\"{}\">{}</h3>\n", spec.name, html_escape(spec.title));
    for (const std::string& name : names) h += fmt::format("<figure><img src=\"{}.svg\" alt=\"{}\"></figure>\n", name, name);
    std::string verdicts;
    for (const ComparedModel& m : c.models)
      if (const ClaimCheck* check = find_check(m, spec.claim))
        verdicts += fmt::format("{}{}: <span class=\"verdict {}\">{}</span>{}", verdicts.empty() ? "" : "; ", html_escape(m.label),
                                verdict_class(check->verdict), verdict_text(check->verdict), interval_text(check->evidence.lo, check->evidence.hi));
    h += fmt::format("<p>Claim <code>{}</code>{}</p>\n", spec.claim, verdicts.empty() ? " (no model of this comparison has a verdict on it)" : ": " + verdicts);
  }
  return h + "</body>\n</html>\n";
}

}  // namespace

fs::path write_comparison(const Comparison& c, const fs::path& dir, const std::vector<std::string>& argv) {
  ResultsDir out(dir, "compare", argv);
  json runs = json::array(), models = json::array(), verdicts = json::object();
  for (const ComparedModel& m : c.models) {
    models.push_back({{"label", m.label}, {"dir", m.dir.string()}, {"command", m.command}, {"family", m.family}, {"n_layers", m.n_layers},
                      {"d_model", m.d_model}, {"series", m.series}, {"step", std::isfinite(m.step) ? json(m.step) : json()}, {"options", m.options}});
    for (const ClaimCheck* claim : claims(c))
      if (const ClaimCheck* check = find_check(m, claim->id))
        verdicts[claim->id][m.label] = {{"verdict", verdict_text(check->verdict)},
                                        {"observed", check->observed},
                                        {"value", std::isfinite(check->value) ? json(check->value) : json()},
                                        {"lo", std::isfinite(check->evidence.lo) ? json(check->evidence.lo) : json()},
                                        {"hi", std::isfinite(check->evidence.hi) ? json(check->evidence.hi) : json()}};
  }
  json trends = json::array();
  for (const SeriesTrend& t : c.trends) {
    json means = json::array();
    for (double v : t.means) means.push_back(std::isfinite(v) ? json(v) : json());
    trends.push_back({{"series", t.series}, {"part", t.part}, {"quantity", t.quantity}, {"checkpoints", t.checkpoints}, {"means", means},
                      {"tau", std::isfinite(t.tau) ? json(t.tau) : json()}});
  }
  out.results() = {{"models", models}, {"differences", c.differences}, {"verdicts", verdicts}, {"trends", trends}, {"rows", c.rows.size()}};
  write_file_atomic(out.file("compare.csv"), compare_csv(c));
  out.record_file("compare.csv", "one row per (model, source, part, depth, sublayer, quantity): value, 95 % interval and where it was read");
  std::vector<std::pair<FigureSpec, std::vector<std::string>>> drawn;
  for (const FigureSpec& spec : kFigures) {
    std::vector<std::string> names;
    for (const std::string& sublayer : panels(c, spec)) {
      const Figure fig = figure_of(c, spec, sublayer);
      if (fig.series.empty()) continue;
      out.figure(fig, spec.title);
      names.push_back(fig.name);
    }
    if (!names.empty()) drawn.emplace_back(spec, names);
  }
  write_file_atomic(out.file("index.html"), comparison_page(c, drawn));
  out.record_file("index.html", "the comparison page: models, verdicts side by side, the papers' figures");
  out.write();
  return out.file("index.html");
}

}  // namespace tdyn
