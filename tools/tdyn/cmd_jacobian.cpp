// tdyn jacobian MODEL [--compare MODEL2 ...] --out DIR [...]: mean sublayer Jacobians over samples, their
// cumulative products, operator metrics per depth, optional Schur surgery, and figures (SPEC §3, §5).
#include <iostream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "analysis/jacobian/means.h"
#include "cli_util.h"
#include "command.h"
#include "pass_args.h"
#include "core/error.h"
#include "core/npy.h"
#include "linalg/gemm.h"
#include "report/figure.h"
#include "report/progress.h"
#include "report/results.h"

namespace tdyn::cli {
namespace {

struct JacobianArgs {
  ModelArgs model;
  SampleArgs samples;
  PassArgs pass;
  std::vector<std::string> compare;
  std::string out, positions = "last", mean = "structured", cumulative = "product-of-means", alphas = "0,0.25,0.5,0.75,1",
              eig_sublayers, alignment_ks = "1,10,100";
  bool save_per_sample = false, surgery = false;
  uint64_t surgery_seed = 0;
};

// Everything computed for one checkpoint.
struct ModelResult {
  std::string path, prefix;  // prefix of its files: "" (MODEL) or "compare{i}."
  std::shared_ptr<const Model> model;
  MeanJacobians jacobians;
  std::vector<OperatorMetrics> mean_metrics, cumulative_metrics, product_mean_metrics;
  std::vector<SurgeryPoint> surgery;
};

// Stacks K square matrices into a row-major [K, d, d] array (rows = outputs).
std::vector<double> stack(const std::vector<linalg::Matrix>& ms) {
  std::vector<double> out;
  for (const auto& m : ms) {
    const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> r = m;
    out.insert(out.end(), r.data(), r.data() + r.size());
  }
  return out;
}

void write_spectra(ResultsDir& out, const std::string& stem, const std::vector<OperatorMetrics>& ms, const std::string& what) {
  const int64_t K = static_cast<int64_t>(ms.size()), d = ms.front().d;
  std::vector<double> eig, sv;
  for (const auto& m : ms) {
    for (int64_t i = 0; i < d; ++i) {
      eig.push_back(m.eigenvalues[i].real());
      eig.push_back(m.eigenvalues[i].imag());
      sv.push_back(m.singular_values[i]);
    }
  }
  write_npy_complex(out.file(stem + ".eigenvalues.npy"), eig.data(), {K, d});
  out.record_file(stem + ".eigenvalues.npy", "complex128 [depth, d]: eigenvalues of " + what + ", by modulus");
  out.npy(stem + ".singular_values.npy", sv.data(), {K, d}, "float64 [depth, d]: singular values of " + what + ", descending");
}

// The metrics tables' columns: one alignment column per k computed (--alignment-k less the ks ≥ d).
std::vector<std::string> metric_columns(const std::vector<linalg::Index>& alignment_ks) {
  std::vector<std::string> columns = {"model", "depth", "layer", "sublayer", "frobenius_norm", "condition_number", "henrici",
                                      "henrici_normalized", "henrici_identity"};
  for (linalg::Index k : alignment_ks) columns.push_back(fmt::format("alignment_k{}", k));
  columns.insert(columns.end(), {"expanding_fraction", "complex_fraction", "symmetry_index", "rank_roy_vetterli",
                                 "rank_participation", "rank_stable", "rank_energy90"});
  return columns;
}

std::vector<double> metric_row(int64_t model, int64_t k, const OperatorMetrics& m) {
  std::vector<double> row = {static_cast<double>(model), static_cast<double>(k + 1), static_cast<double>(k / 2),
                             static_cast<double>(k % 2), m.frobenius_norm, m.condition_number, m.departure.schur,
                             m.departure.schur_normalized, m.departure.identity};
  for (const SubspaceAlignment& a : m.self_alignment) row.push_back(a.value);
  row.insert(row.end(), {m.expanding_fraction, m.complex_fraction, m.symmetry_index, m.effective_rank.roy_vetterli,
                         m.effective_rank.participation_ratio, m.effective_rank.stable_rank,
                         static_cast<double>(m.effective_rank.energy_rank)});
  return row;
}

std::string model_label(const ModelResult& r, size_t i) {
  return i == 0 ? fs::path(r.path).filename().string() : fmt::format("compare{}: {}", i, fs::path(r.path).filename().string());
}

void emit(ResultsDir& out, const Figure& fig, const std::string& what) {
  const FigureFiles files = write_figure(out.path(), fig);
  for (const auto& f : files.written) out.record_file(f, what);
  if (!files.rendered && !files.note.empty()) out.results()["figure_notes"][fig.name] = files.note;
}

void write_figures(ResultsDir& out, const std::vector<ModelResult>& results, const std::vector<int64_t>& eig_sublayers) {
  const int64_t K = static_cast<int64_t>(results.front().mean_metrics.size());
  std::vector<double> depth;
  for (int64_t k = 0; k < K; ++k) depth.push_back(static_cast<double>(k + 1));
  const std::string xlabel = "depth k (sublayer: 2l+1 attention, 2l+2 MLP of layer l)";

  // Metrics of J̄_k vs depth, one figure per metric, checkpoints overlaid.
  struct MetricPlot {
    std::string name, title;
    std::function<double(const OperatorMetrics&)> get;
    bool log = false;
  };
  std::vector<MetricPlot> plots = {
      {"henrici_normalized", "Henrici departure from normality dep/||J||_F", [](const auto& m) { return m.departure.schur_normalized; }},
      {"complex_fraction", "fraction of complex eigenvalues", [](const auto& m) { return m.complex_fraction; }},
      {"expanding_fraction", "fraction of expanding modes |lambda| > 1", [](const auto& m) { return m.expanding_fraction; }},
      {"symmetry_index", "symmetry index ||J - J^T||_F/||J||_F", [](const auto& m) { return m.symmetry_index; }},
      {"condition_number", "condition number sigma_1/sigma_d", [](const auto& m) { return m.condition_number; }, true},
  };
  // One self-alignment figure per k computed (the ks ≥ d were dropped before the metrics, with a note).
  const std::vector<SubspaceAlignment>& alignments = results.front().mean_metrics.front().self_alignment;
  for (size_t i = 0; i < alignments.size(); ++i)
    plots.push_back({fmt::format("alignment_k{}", alignments[i].k),
                     fmt::format("self-alignment ||U_k^T V_k||_F^2/k, k = {}", alignments[i].k),
                     [i](const auto& m) { return i < m.self_alignment.size() ? m.self_alignment[i].value : NAN; }});
  plots.push_back({"effective_rank", "effective rank (Roy-Vetterli) of the mean Jacobian",
                   [](const auto& m) { return m.effective_rank.roy_vetterli; }});
  for (const auto& p : plots) {
    Figure fig{"metric_" + p.name, p.title + " of the mean Jacobians", xlabel, p.name, {}, {}};
    if (p.log) fig.settings.push_back("set logscale y");
    for (size_t i = 0; i < results.size(); ++i) {
      Series s{model_label(results[i], i), {depth, {}}, "linespoints pt 7 ps 0.6"};
      for (const auto& m : results[i].mean_metrics) s.columns[1].push_back(p.get(m));
      fig.series.push_back(std::move(s));
    }
    emit(out, fig, "figure: " + p.title + " vs depth");
  }

  // Eigenvalues of selected J̄_k in the complex plane with the unit circle.
  for (int64_t k : eig_sublayers) {
    Figure fig{fmt::format("eigenvalues_depth{}", k + 1), fmt::format("eigenvalues of the mean Jacobian {}", sublayer_name(k)),
               "Re lambda", "Im lambda", {"set size ratio -1"}, {}};
    Series circle{"unit circle", {{}, {}}, "lines lc rgb '#999999'"};
    for (int i = 0; i <= 360; ++i) {
      circle.columns[0].push_back(std::cos(i * M_PI / 180));
      circle.columns[1].push_back(std::sin(i * M_PI / 180));
    }
    fig.series.push_back(std::move(circle));
    for (size_t i = 0; i < results.size(); ++i) {
      Series s{model_label(results[i], i), {{}, {}}, "points pt 7 ps 0.5"};
      for (const auto& z : results[i].mean_metrics[k].eigenvalues) {
        s.columns[0].push_back(z.real());
        s.columns[1].push_back(z.imag());
      }
      fig.series.push_back(std::move(s));
    }
    emit(out, fig, "figure: eigenvalues of " + sublayer_name(k) + " (mean) in the complex plane");
  }

  // Cumulative effective rank vs depth: all four measures, log scale.
  {
    Figure fig{"cumulative_effective_rank", "effective rank of the cumulative products C_k", xlabel, "effective rank",
               {"set logscale y"}, {}};
    const std::vector<std::pair<std::string, std::function<double(const EffectiveRanks&)>>> measures = {
        {"Roy-Vetterli", [](const auto& r) { return r.roy_vetterli; }},
        {"participation ratio", [](const auto& r) { return r.participation_ratio; }},
        {"stable rank", [](const auto& r) { return r.stable_rank; }},
        {"90% energy rank", [](const auto& r) { return static_cast<double>(r.energy_rank); }}};
    for (size_t i = 0; i < results.size(); ++i) {
      for (size_t q = 0; q < measures.size(); ++q) {
        Series s{measures[q].first + " (" + model_label(results[i], i) + ")", {depth, {}},
                 fmt::format("linespoints lt {} dt {} pt 7 ps 0.5", q + 1, i + 1)};
        for (const auto& m : results[i].cumulative_metrics) s.columns[1].push_back(measures[q].second(m.effective_rank));
        fig.series.push_back(std::move(s));
      }
    }
    fig.width = 900;
    emit(out, fig, "figure: cumulative effective ranks (four measures) vs depth");
  }

  // Surgery: cumulative effective rank at full depth vs alpha, with the control.
  if (!results.front().surgery.empty()) {
    Figure fig{"surgery", "Schur surgery J_alpha = Q(Lambda + alpha N)Q*: effective rank of the full-depth product",
               "alpha", "effective rank of C_L", {"set logscale y"}, {}};
    for (size_t i = 0; i < results.size(); ++i) {
      for (int control = 0; control < 2; ++control) {
        for (int q = 0; q < 4; ++q) {
          static const char* names[] = {"Roy-Vetterli", "participation", "stable", "energy 90%"};
          Series s{fmt::format("{} {} ({})", names[q], control ? "control" : "surgery", model_label(results[i], i)), {{}, {}},
                   fmt::format("linespoints lt {} dt {} pt {} ps 0.6", q + 1, control ? 2 : 1, control ? 6 : 7)};
          for (const auto& p : results[i].surgery) {
            const EffectiveRanks& r = (control ? p.control : p.surgery).back();
            const double v[] = {r.roy_vetterli, r.participation_ratio, r.stable_rank, static_cast<double>(r.energy_rank)};
            s.columns[0].push_back(p.alpha);
            s.columns[1].push_back(v[q]);
          }
          fig.series.push_back(std::move(s));
        }
      }
    }
    fig.width = 1000;
    emit(out, fig, "figure: surgery curves (cumulative effective rank vs alpha) with the random control");
  }
}

int run(const JacobianArgs& a) {
  ResultsDir out(a.out, "jacobian", invocation());
  const bool progress = !progress_quiet();
  auto note = [&](const std::string& s) {
    if (progress) std::cerr << "tdyn: " << s << "\n";
  };

  MeanJacobianOptions opts;
  opts.positions = PositionSpec::parse(a.positions);
  opts.structured = a.mean == "structured";
  opts.mean_of_products = a.cumulative != "product-of-means";
  opts.progress = progress;
  // The structured mean is a sum over samples: the shared pass computes it, with checkpoints and MPI. The other
  // modes keep per-sample Jacobians and run in one process.
  const bool use_pass = opts.structured && !opts.mean_of_products && !a.save_per_sample;
  if (!use_pass && (a.pass.resume || !a.pass.from_pass.empty()))
    fail("--resume and --from-pass need the structured mean without --cumulative both and --save-per-sample");
  require_single_rank(!use_pass, "jacobian with --mean plain, --cumulative both or --save-per-sample");
  require_single_rank(!a.compare.empty(), "jacobian with --compare");
  OperatorMetricsOptions metric_opts;
  metric_opts.alignment_ks.clear();
  for (int32_t k : parse_int_list(a.alignment_ks, "--alignment-k")) metric_opts.alignment_ks.push_back(k);
  SurgeryOptions surgery_opts;
  surgery_opts.alphas = parse_double_list(a.alphas, "--alphas");
  surgery_opts.seed = a.surgery_seed;

  std::vector<ModelResult> results;
  results.push_back({a.model.path, "", a.model.load(), {}, {}, {}, {}, {}});
  for (size_t i = 0; i < a.compare.size(); ++i) {
    ModelArgs m = a.model;
    m.path = a.compare[i];
    results.push_back({a.compare[i], fmt::format("compare{}.", i + 1), m.load(), {}, {}, {}, {}, {}});
  }
  const ModelConfig& c0 = results.front().model->config;
  for (const auto& r : results) {
    if (r.model->config.d_model != c0.d_model || r.model->config.n_layers != c0.n_layers)
      fail("--compare needs checkpoints of one architecture: '{}' has d_model {} and {} layers, '{}' has {} and {}", r.path,
           r.model->config.d_model, r.model->config.n_layers, a.model.path, c0.d_model, c0.n_layers);
  }

  std::vector<Sample> samples;
  {
    PhaseTimer t(out, "load_samples");
    samples = a.samples.load(a.model.path, c0.d_vocab);
  }
  if (samples.empty()) fail("no samples to analyse (check --data / --min-len)");
  note(fmt::format("{} samples, positions {}, {} mean", samples.size(), a.positions, a.mean));

  // Options and defaults actually used.
  auto& o = out.options();
  o["model"] = a.model.path;
  o["compare"] = a.compare;
  o["samples"] = a.samples.options.to_json();
  o["tokenizer"] = a.samples.tokenizer.empty() ? "(the model's own)" : a.samples.tokenizer;
  o["positions"] = opts.positions.to_string();
  o["mean"] = a.mean;
  o["cumulative"] = a.cumulative;
  o["save_per_sample"] = a.save_per_sample;
  o["pass"] = use_pass ? pass_options_json(a.pass) : nlohmann::json("not used: per-sample Jacobians are needed");
  o["alignment_ks"] = metric_opts.alignment_ks;
  o["complex_tolerance"] = metric_opts.complex_tolerance;
  o["energy_fraction"] = 0.9;
  o["surgery"] = a.surgery;
  if (a.surgery) {
    o["alphas"] = surgery_opts.alphas;
    o["surgery_seed"] = surgery_opts.seed;
  }
  o["jacobian_convention"] =
      "J[i, j] = d out_i / d in_j (rows = outputs); sublayer k = 2l: resid_pre -> resid_mid, k = 2l+1: resid_mid -> "
      "resid_post of layer l; only position p's residual varies (other positions' keys/values fixed); float64";
  out.model() = {{"path", a.model.path}, {"family", c0.family}, {"format", c0.format}, {"d_model", c0.d_model},
                 {"n_layers", c0.n_layers}, {"parameters", results.front().model->parameter_count()}};
  out.results()["samples_used"] = samples.size();
  std::vector<int64_t> source_indices;
  for (const auto& s : samples) source_indices.push_back(s.source_index);
  out.npy("samples.source_index.npy", source_indices.data(), {static_cast<int64_t>(source_indices.size())},
          "int64 [S]: passage / row index of each sample in its source");

  const int64_t K = 2 * c0.n_layers, d = c0.d_model;
  // Self-alignment for k ≥ d compares two bases of all of R^d: ‖U_kᵀV_k‖²/k = 1 for every matrix. Such ks are
  // neither computed nor plotted; results.json says which were dropped.
  std::vector<linalg::Index> skipped_ks;
  std::erase_if(metric_opts.alignment_ks, [&](linalg::Index k) {
    if (k < d) return false;
    skipped_ks.push_back(k);
    return true;
  });
  o["alignment_ks_used"] = metric_opts.alignment_ks;
  if (!skipped_ks.empty())
    out.results()["notes"].push_back(fmt::format(
        "self-alignment k = {} skipped (not computed, not plotted): k ≥ d = {} makes U_k and V_k bases of all of R^d, so "
        "‖U_kᵀV_k‖²/k = 1 for every matrix",
        fmt::join(skipped_ks, ", "), d));
  std::vector<int64_t> eig_sublayers;
  if (a.eig_sublayers.empty()) eig_sublayers = {0, K / 2, K - 1};
  else
    for (int32_t k : parse_int_list(a.eig_sublayers, "--eig-depths")) {
      if (k < 1 || k > K) throw CLI::ValidationError("--eig-depths", fmt::format("depth {} outside 1..{}", k, K));
      eig_sublayers.push_back(k - 1);
    }
  std::sort(eig_sublayers.begin(), eig_sublayers.end());
  eig_sublayers.erase(std::unique(eig_sublayers.begin(), eig_sublayers.end()), eig_sublayers.end());
  o["eig_depths"] = [&] {
    std::vector<int64_t> v;
    for (int64_t k : eig_sublayers) v.push_back(k + 1);
    return v;
  }();

  const std::vector<ResidualBoundary> boundaries = residual_boundaries(c0.n_layers, BoundarySet::Sublayers);
  std::vector<std::vector<double>> mean_rows, cumulative_rows, product_rows, surgery_rows;
  for (size_t i = 0; i < results.size(); ++i) {
    ModelResult& r = results[i];
    auto transformer = std::make_shared<Transformer>(r.model);
    JacobianModel jm(transformer);
    MeanJacobianOptions mo = opts;
    mo.label = results.size() > 1 ? fmt::format("[{}] ", model_label(r, i)) : "";
    if (a.save_per_sample) {
      const fs::path dir = out.file(r.prefix + "per_sample");
      fs::create_directories(dir);
      mo.per_sample = [dir](int64_t sample, int64_t pos, int64_t layer, Sublayer which, const linalg::Matrix& j) {
        const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rm = j;
        write_npy(dir / fmt::format("sample{}.pos{}.blocks.{}.jac_{}.npy", sample, pos, layer, to_string(which)), rm.data(),
                  {rm.rows(), rm.cols()});
      };
      out.record_file(r.prefix + "per_sample",
                      "directory: sample{s}.pos{p}.blocks.{l}.jac_{attn,mlp}.npy, float64 [d, d] per-sample Jacobians "
                      "(rows = outputs); s indexes samples.source_index.npy");
    }
    std::optional<PassFile> pass;
    {
      PhaseTimer t(out, r.prefix + "mean_jacobians");
      if (use_pass) {
        // Σ J leaving every boundary of the sublayer set: k = 0, 1, ..., 2L − 1 in order, then the final boundary.
        PassSpec spec;
        spec.boundaries = boundaries;
        spec.correlations = false;
        spec.positions = opts.positions;
        pass = obtain_pass(a.pass, *transformer, &jm, samples, spec, pass_model_identity(r.path, *r.model),
                           out.file(r.prefix + "pass.tdynpass"), false, mo.label + "mean Jacobians");
        r.jacobians.n_samples = pass->n_samples();
        r.jacobians.n_pairs = pass->n_pairs();
      } else {
        r.jacobians = mean_jacobians(jm, samples, mo);
      }
    }
    {
      // One depth at a time: J̄_k (from the pass file, or in memory), the running C_k = J̄_k C_{k−1}, their
      // metrics and array slices, and the surgery's running products, so that memory does not grow with depth.
      PhaseTimer t(out, r.prefix + "metrics");
      note(fmt::format("{}metrics of {} mean Jacobians and cumulative products{}", mo.label, K, a.surgery ? ", surgery" : ""));
      NpyStream means_npy(out.file(r.prefix + "mean_jacobians.npy"), {K, d, d});
      NpyStream cumulative_npy(out.file(r.prefix + "cumulative_products.npy"), {K, d, d});
      std::optional<SurgerySweep> sweep;
      if (a.surgery) sweep.emplace(surgery_opts, transformer->config().parallel_residual);
      r.mean_metrics.resize(K);
      r.cumulative_metrics.resize(K);
      DepthChain<linalg::Matrix> chain(transformer->config().parallel_residual);
      Progress bar(mo.label + "metrics", K, "depths");
      for (int64_t k = 0; k < K; ++k) {
        const linalg::Matrix mean = pass ? pass->mean_jacobian(boundaries[k].hook) : r.jacobians.mean[k];
        const linalg::Matrix& cumulative = chain.add(mean);
        r.mean_metrics[k] = operator_metrics(mean, metric_opts);  // LAPACK's own threads do the work at large d
        r.cumulative_metrics[k] = operator_metrics(cumulative, metric_opts);
        if (sweep) sweep->add(mean);
        means_npy.append_matrix(mean.data(), d, d);
        cumulative_npy.append_matrix(cumulative.data(), d, d);
        bar.advance();
      }
      means_npy.finish();
      cumulative_npy.finish();
      out.record_file(r.prefix + "mean_jacobians.npy",
                      "float64 [depth, d, d]: mean Jacobians J̄_k (k = 2l attention, 2l+1 MLP of layer l; rows = outputs)");
      out.record_file(r.prefix + "cumulative_products.npy",
                      "float64 [depth, d, d]: C_k = J̄_k ⋯ J̄_1 (parallel blocks: C_2l+1 = C_2l + (J̄_2l+1 − I) C_2l−1)");
      if (sweep) r.surgery = sweep->points();
      if (opts.mean_of_products) {
        r.product_mean_metrics.resize(K);
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t k = 0; k < K; ++k) r.product_mean_metrics[k] = operator_metrics(r.jacobians.mean_of_products[k], metric_opts);
      }
    }

    write_spectra(out, r.prefix + "mean", r.mean_metrics, "J̄_k");
    write_spectra(out, r.prefix + "cumulative", r.cumulative_metrics, "C_k");
    if (opts.mean_of_products) {
      const std::vector<double> prods = stack(r.jacobians.mean_of_products);
      out.npy(r.prefix + "mean_of_products.npy", prods.data(), {K, d, d},
              "float64 [depth, d, d]: mean over (sample, position) of J_k ⋯ J_1");
    }
    for (int64_t k = 0; k < K; ++k) {
      mean_rows.push_back(metric_row(i, k, r.mean_metrics[k]));
      cumulative_rows.push_back(metric_row(i, k, r.cumulative_metrics[k]));
      if (opts.mean_of_products) product_rows.push_back(metric_row(i, k, r.product_mean_metrics[k]));
    }
    for (const auto& p : r.surgery) {
      for (int64_t k = 0; k < K; ++k) {
        const EffectiveRanks &s = p.surgery[k], &ctl = p.control[k];
        surgery_rows.push_back({static_cast<double>(i), p.alpha, static_cast<double>(k + 1), s.roy_vetterli,
                                s.participation_ratio, s.stable_rank, static_cast<double>(s.energy_rank), ctl.roy_vetterli,
                                ctl.participation_ratio, ctl.stable_rank, static_cast<double>(ctl.energy_rank),
                                p.departure_ratio[k]});
      }
    }

    // results.json: scalars per depth.
    nlohmann::json mj;
    mj["path"] = r.path;
    mj["file_prefix"] = r.prefix;
    mj["family"] = r.model->config.family;
    mj["samples"] = r.jacobians.n_samples;
    mj["pairs"] = r.jacobians.n_pairs;
    for (int64_t k = 0; k < K; ++k) {
      nlohmann::json row = {{"depth", k + 1}, {"name", sublayer_name(k)}, {"mean", r.mean_metrics[k].to_json()},
                            {"cumulative", r.cumulative_metrics[k].to_json()}};
      if (opts.mean_of_products) row["mean_of_products"] = r.product_mean_metrics[k].to_json();
      mj["depths"].push_back(row);
    }
    for (const auto& p : r.surgery) mj["surgery"].push_back(p.to_json());
    out.results()["models"].push_back(mj);
    out.write();  // partial results survive a later failure
  }

  const std::vector<std::string> columns = metric_columns(metric_opts.alignment_ks);
  out.csv("metrics_mean.csv", columns, mean_rows,
          "metrics of the mean Jacobians J̄_k per depth (model: 0 = MODEL, i = compare{i}; sublayer 0 attention, 1 MLP)");
  out.csv("metrics_cumulative.csv", columns, cumulative_rows, "metrics of the cumulative products C_k per depth");
  if (opts.mean_of_products)
    out.csv("metrics_mean_of_products.csv", columns, product_rows, "metrics of the mean of per-sample products");
  if (a.surgery)
    out.csv("surgery.csv",
            {"model", "alpha", "depth", "surgery_roy_vetterli", "surgery_participation", "surgery_stable", "surgery_energy90",
             "control_roy_vetterli", "control_participation", "control_stable", "control_energy90", "departure_ratio"},
            surgery_rows, "effective ranks of cumulative products of J_alpha and of the control, per alpha and depth");
  {
    PhaseTimer t(out, "figures");
    write_figures(out, results, eig_sublayers);
  }
  out.write();
  note(fmt::format("wrote {}", out.file("results.json").string()));
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("jacobian", "Mean sublayer Jacobians, cumulative products, spectral metrics and Schur surgery (\"Dynamics of the "
                                             "Transformer Residual Stream: Coupling Spectral Geometry to Network Topology\")");
  auto a = std::make_shared<JacobianArgs>();
  a->model.add_to(cmd);
  a->samples.add_to(cmd, 1000);
  a->pass.add_to(cmd);
  cmd->add_option("--out", a->out, "Results directory")->required();
  cmd->add_option("--positions", a->positions, "Token positions per sample: last, all, or a list such as 5,23,-1")
      ->capture_default_str();
  cmd->add_option("--mean", a->mean, "structured (mean at forward-pass cost) or plain (sum of per-sample Jacobians)")
      ->capture_default_str()->check(CLI::IsMember({"structured", "plain"}));
  cmd->add_option("--cumulative", a->cumulative,
                  "product-of-means (C_k = J̄_k ⋯ J̄_1), or both (also the mean of per-sample products)")
      ->capture_default_str()->check(CLI::IsMember({"product-of-means", "both"}));
  cmd->add_flag("--save-per-sample", a->save_per_sample,
                "Write every per-sample, per-position Jacobian to per_sample/sample{s}.pos{p}.blocks.{l}.jac_{attn,mlp}.npy");
  cmd->add_option("--compare", a->compare,
                  "Further checkpoints of the same architecture, run on the same samples (comma-separated or "
                  "repeated; CACHE@REVISION for the steps of a training run)")
      ->delimiter(',');
  cmd->add_flag("--surgery", a->surgery, "Schur surgery: J_alpha = Q(Lambda + alpha N)Q* and the random-N control");
  cmd->add_option("--alphas", a->alphas, "Surgery alpha values")->capture_default_str();
  cmd->add_option("--surgery-seed", a->surgery_seed, "Seed of the control's random N (sublayer k uses seed + k)")
      ->capture_default_str();
  cmd->add_option("--eig-depths", a->eig_sublayers, "Depths (1-based) whose eigenvalues are plotted (default first, middle, last)");
  cmd->add_option("--alignment-k", a->alignment_ks, "k values of the top-k singular-subspace self-alignment")->capture_default_str();
  return [a] { return run(*a); };
}

TDYN_REGISTER_COMMAND("jacobian", 35, setup);

}  // namespace
}  // namespace tdyn::cli
