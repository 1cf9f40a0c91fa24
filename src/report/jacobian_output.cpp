#include "report/jacobian_output.h"

#include <cmath>
#include <functional>

#include <fmt/format.h>

#include "core/npy.h"
#include "report/figure.h"

namespace tdyn {
namespace {

// Stacks K square matrices into a row-major [K, d, d] array (rows = outputs).
std::vector<double> stack(const std::vector<linalg::Matrix>& ms) {
  std::vector<double> out;
  for (const auto& m : ms) {
    const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> r = m;
    out.insert(out.end(), r.data(), r.data() + r.size());
  }
  return out;
}

// A depth whose metrics were not computed (d = 0: JacobianOptions::cumulative_ends_only) has NaN rows, and so do the
// eigenvalues of one computed without them (verdict_metrics_only).
void write_spectra(ResultsDir& out, const std::string& stem, const std::vector<OperatorMetrics>& ms, const std::string& what) {
  const int64_t K = static_cast<int64_t>(ms.size()), d = ms.front().d;
  std::vector<double> eig, sv;
  for (const auto& m : ms) {
    for (int64_t i = 0; i < d; ++i) {
      const bool eigenvalues = i < m.eigenvalues.size();
      eig.push_back(eigenvalues ? m.eigenvalues[i].real() : NAN);
      eig.push_back(eigenvalues ? m.eigenvalues[i].imag() : NAN);
      sv.push_back(i < m.singular_values.size() ? m.singular_values[i] : NAN);
    }
  }
  write_npy_complex(out.file(stem + ".eigenvalues.npy"), eig.data(), {K, d});
  out.record_file(stem + ".eigenvalues.npy", "complex128 [depth, d]: eigenvalues of " + what + ", by modulus");
  out.npy(stem + ".singular_values.npy", sv.data(), {K, d}, "float64 [depth, d]: singular values of " + what + ", descending");
}

// The metrics tables' columns: one alignment column per k computed (the alignment_ks asked, less those ≥ d).
std::vector<std::string> metric_columns(const std::vector<linalg::Index>& alignment_ks) {
  std::vector<std::string> columns = {"model", "depth", "layer", "sublayer", "frobenius_norm", "condition_number", "henrici",
                                      "henrici_normalized", "henrici_identity"};
  for (linalg::Index k : alignment_ks) columns.push_back(fmt::format("alignment_k{}", k));
  columns.insert(columns.end(), {"expanding_fraction", "complex_fraction", "symmetry_index", "rank_roy_vetterli",
                                 "rank_participation", "rank_stable", "rank_energy90"});
  return columns;
}

// A row of `columns` values; NaN past the depth's place for metrics not computed (d = 0).
std::vector<double> metric_row(int64_t model, int64_t k, const OperatorMetrics& m, size_t columns) {
  std::vector<double> row = {static_cast<double>(model), static_cast<double>(k + 1), static_cast<double>(k / 2),
                             static_cast<double>(k % 2)};
  if (m.d == 0) {
    row.resize(columns, NAN);
    return row;
  }
  row.insert(row.end(), {m.frobenius_norm, m.condition_number, m.departure.schur, m.departure.schur_normalized, m.departure.identity});
  for (const SubspaceAlignment& a : m.self_alignment) row.push_back(a.value);
  row.insert(row.end(), {m.expanding_fraction, m.complex_fraction, m.symmetry_index, m.effective_rank.roy_vetterli,
                         m.effective_rank.participation_ratio, m.effective_rank.stable_rank,
                         static_cast<double>(m.effective_rank.energy_rank)});
  return row;
}

// surgery.csv's rows of one alpha: the effective ranks of both products and the departure ratio per depth.
void append_surgery_rows(std::vector<std::vector<double>>& rows, size_t model, const SurgeryPoint& p) {
  for (size_t k = 0; k < p.surgery.size(); ++k) {
    const EffectiveRanks &s = p.surgery[k], &ctl = p.control[k];
    // A depth not ranked (SurgeryOptions::full_depth_only) has NaN ranks, its energy rank too.
    auto energy = [](const EffectiveRanks& r) { return std::isfinite(r.roy_vetterli) ? static_cast<double>(r.energy_rank) : NAN; };
    rows.push_back({static_cast<double>(model), p.alpha, static_cast<double>(k + 1), s.roy_vetterli, s.participation_ratio,
                    s.stable_rank, energy(s), ctl.roy_vetterli, ctl.participation_ratio, ctl.stable_rank, energy(ctl),
                    p.departure_ratio[k]});
  }
}

void emit(ResultsDir& out, const Figure& fig, const std::string& what) {
  if (const std::string note = out.figure(fig, what); !note.empty()) out.results()["figure_notes"][fig.name] = note;
}

const char* const kDepthLabel = "depth k (sublayer: 2l+1 attention, 2l+2 MLP of layer l)";

std::vector<double> depths_1_to(int64_t K) {
  std::vector<double> depth;
  for (int64_t k = 0; k < K; ++k) depth.push_back(static_cast<double>(k + 1));
  return depth;
}

// Metrics of J̄_k vs depth, one figure per metric, checkpoints overlaid.
void metric_figures(ResultsDir& out, const std::vector<CheckpointJacobians>& results) {
  const std::vector<double> depth = depths_1_to(static_cast<int64_t>(results.front().mean_metrics.size()));
  struct MetricPlot {
    std::string name, title;
    std::function<double(const OperatorMetrics&)> get;
    bool log = false;
  };
  std::vector<MetricPlot> plots = {
      {"henrici_normalized", "Henrici departure from normality dep/||J||_F", [](const auto& m) { return m.departure.schur_normalized; }},
      {"complex_fraction", "fraction of complex eigenvalues", [](const auto& m) { return m.complex_fraction; }},
      {"expanding_fraction", "fraction of expanding modes |lambda| > 1 (beyond round-off)", [](const auto& m) { return m.expanding_fraction; }},
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
    Figure fig{"metric_" + p.name, p.title + " of the mean Jacobians", kDepthLabel, p.name, {}, {}};
    if (p.log) fig.settings.push_back("set logscale y");
    for (size_t i = 0; i < results.size(); ++i) {
      Series s{checkpoint_label(results[i], i), {depth, {}}, "linespoints pt 7 ps 0.6"};
      for (const auto& m : results[i].mean_metrics) s.columns[1].push_back(p.get(m));
      fig.series.push_back(std::move(s));
    }
    emit(out, fig, "figure: " + p.title + " vs depth");
  }
}

// Eigenvalues of selected J̄_k in the complex plane with the unit circle.
void eigenvalue_figures(ResultsDir& out, const std::vector<CheckpointJacobians>& results, const std::vector<int64_t>& eig_sublayers) {
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
      Series s{checkpoint_label(results[i], i), {{}, {}}, "points pt 7 ps 0.5"};
      for (const auto& z : results[i].mean_metrics[k].eigenvalues) {
        s.columns[0].push_back(z.real());
        s.columns[1].push_back(z.imag());
      }
      fig.series.push_back(std::move(s));
    }
    emit(out, fig, "figure: eigenvalues of " + sublayer_name(k) + " (mean) in the complex plane");
  }
}

// Cumulative effective rank vs depth: all four measures, log scale.
void cumulative_rank_figure(ResultsDir& out, const std::vector<CheckpointJacobians>& results) {
  const std::vector<double> depth = depths_1_to(static_cast<int64_t>(results.front().mean_metrics.size()));
  Figure fig{"cumulative_effective_rank", "effective rank of the cumulative products C_k", kDepthLabel, "effective rank",
             {"set logscale y"}, {}};
  const std::vector<std::pair<std::string, std::function<double(const EffectiveRanks&)>>> measures = {
      {"Roy-Vetterli", [](const auto& r) { return r.roy_vetterli; }},
      {"participation ratio", [](const auto& r) { return r.participation_ratio; }},
      {"stable rank", [](const auto& r) { return r.stable_rank; }},
      {"90% energy rank", [](const auto& r) { return static_cast<double>(r.energy_rank); }}};
  for (size_t i = 0; i < results.size(); ++i) {
    for (size_t q = 0; q < measures.size(); ++q) {
      Series s{measures[q].first + " (" + checkpoint_label(results[i], i) + ")", {depth, {}},
               fmt::format("linespoints lt {} dt {} pt 7 ps 0.5", q + 1, i + 1)};
      for (const auto& m : results[i].cumulative_metrics) s.columns[1].push_back(m.d > 0 ? measures[q].second(m.effective_rank) : NAN);
      fig.series.push_back(std::move(s));
    }
  }
  fig.width = 900;
  emit(out, fig, "figure: cumulative effective ranks (four measures) vs depth");
}

// Surgery: cumulative effective rank at full depth vs alpha, with the control.
void surgery_figure(ResultsDir& out, const std::vector<CheckpointJacobians>& results) {
  if (results.front().surgery.empty()) return;
  Figure fig{"surgery", "Schur surgery J_alpha = Q(Lambda + alpha N)Q*: effective rank of the full-depth product",
             "alpha", "effective rank of C_L", {"set logscale y"}, {}};
  for (size_t i = 0; i < results.size(); ++i) {
    for (int control = 0; control < 2; ++control) {
      for (int q = 0; q < 4; ++q) {
        static const char* names[] = {"Roy-Vetterli", "participation", "stable", "energy 90%"};
        Series s{fmt::format("{} {} ({})", names[q], control ? "control" : "surgery", checkpoint_label(results[i], i)), {{}, {}},
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

void write_figures(ResultsDir& out, const std::vector<CheckpointJacobians>& results, const std::vector<int64_t>& eig_sublayers) {
  metric_figures(out, results);
  eigenvalue_figures(out, results, eig_sublayers);
  cumulative_rank_figure(out, results);
  surgery_figure(out, results);
}

}  // namespace

void JacobianFiles::begin(const CheckpointJacobians& model, int64_t depths, int64_t d) {
  d_ = d;
  means_ = std::make_unique<NpyStream>(out_.file(model.prefix + "mean_jacobians.npy"), Shape{depths, d, d});
  cumulative_ = std::make_unique<NpyStream>(out_.file(model.prefix + "cumulative_products.npy"), Shape{depths, d, d});
  if (!per_sample_) return;
  fs::create_directories(out_.file(model.prefix + "per_sample"));
  out_.record_file(model.prefix + "per_sample",
                   "directory: sample{s}.pos{p}.blocks.{l}.jac_{attn,mlp}.npy, float64 [d, d] per-sample Jacobians "
                   "(rows = outputs); s indexes samples.source_index.npy");
}

void JacobianFiles::per_sample(const CheckpointJacobians& model, int64_t sample, int64_t pos, int64_t layer, Sublayer which,
                               const linalg::Matrix& j) {
  const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rm = j;
  write_npy(out_.file(model.prefix + "per_sample") / fmt::format("sample{}.pos{}.blocks.{}.jac_{}.npy", sample, pos, layer, to_string(which)),
            rm.data(), {rm.rows(), rm.cols()});
}

void JacobianFiles::depth(const CheckpointJacobians&, const linalg::Matrix& mean, const linalg::Matrix& cumulative) {
  means_->append_matrix(mean.data(), d_, d_);
  cumulative_->append_matrix(cumulative.data(), d_, d_);
}

void JacobianFiles::end(const CheckpointJacobians& r) {
  means_->finish();
  cumulative_->finish();
  means_.reset();
  cumulative_.reset();
  out_.record_file(r.prefix + "mean_jacobians.npy",
                   "float64 [depth, d, d]: mean Jacobians J̄_k (k = 2l attention, 2l+1 MLP of layer l; rows = outputs)");
  out_.record_file(r.prefix + "cumulative_products.npy",
                   "float64 [depth, d, d]: C_k = J̄_k ⋯ J̄_1 (parallel blocks: C_2l+1 = C_2l + (J̄_2l+1 − I) C_2l−1)");
  write_spectra(out_, r.prefix + "mean", r.mean_metrics, "J̄_k");
  write_spectra(out_, r.prefix + "cumulative", r.cumulative_metrics, "C_k");
  if (!r.mean_of_products.empty()) {
    const std::vector<double> prods = stack(r.mean_of_products);
    const int64_t K = static_cast<int64_t>(r.mean_of_products.size());
    out_.npy(r.prefix + "mean_of_products.npy", prods.data(), {K, d_, d_}, "float64 [depth, d, d]: mean over (sample, position) of J_k ⋯ J_1");
  }
  out_.results()["models"].push_back(checkpoint_json(r));
  out_.write();  // partial results survive a later failure
}

void write_jacobian(ResultsDir& out, const JacobianResult& result, const JacobianOptions& options) {
  for (const auto& [phase, seconds] : result.timings) out.add_timing(phase, seconds);
  out.model() = result.model;
  out.options().merge_patch(options_json(result, options));  // beside what the caller put there
  out.npy("samples.source_index.npy", result.source_indices.data(), {static_cast<int64_t>(result.source_indices.size())},
          "int64 [S]: passage / row index of each sample in its source");
  out.results() = results_json(result);
  const std::vector<std::string> columns = metric_columns(result.alignment_ks_used);
  std::vector<std::vector<double>> mean_rows, cumulative_rows, product_rows, surgery_rows;
  for (size_t i = 0; i < result.models.size(); ++i) {
    const CheckpointJacobians& r = result.models[i];
    const int64_t model = static_cast<int64_t>(i);
    for (int64_t k = 0; k < static_cast<int64_t>(r.mean_metrics.size()); ++k) {
      mean_rows.push_back(metric_row(model, k, r.mean_metrics[k], columns.size()));
      cumulative_rows.push_back(metric_row(model, k, r.cumulative_metrics[k], columns.size()));
      if (options.mean_of_products) product_rows.push_back(metric_row(model, k, r.product_mean_metrics[k], columns.size()));
    }
    for (const auto& p : r.surgery) append_surgery_rows(surgery_rows, i, p);
  }
  out.csv("metrics_mean.csv", columns, mean_rows,
          "metrics of the mean Jacobians J̄_k per depth (model: 0 = MODEL, i = compare{i}; sublayer 0 attention, 1 MLP)");
  out.csv("metrics_cumulative.csv", columns, cumulative_rows, "metrics of the cumulative products C_k per depth");
  if (options.mean_of_products)
    out.csv("metrics_mean_of_products.csv", columns, product_rows, "metrics of the mean of per-sample products");
  if (options.surgery)
    out.csv("surgery.csv",
            {"model", "alpha", "depth", "surgery_roy_vetterli", "surgery_participation", "surgery_stable", "surgery_energy90",
             "control_roy_vetterli", "control_participation", "control_stable", "control_energy90", "departure_ratio"},
            surgery_rows, "effective ranks of cumulative products of J_alpha and of the control, per alpha and depth");
  {
    PhaseTimer t(out, "figures");
    write_figures(out, result.models, result.eig_sublayers);
  }
  out.write();
}

}  // namespace tdyn
