#include "analysis/jacobian/run.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>

#include <Eigen/QR>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "analysis/jacobian/jacobian_sums.h"
#include "analysis/pass/source.h"
#include "core/error.h"
#include "core/phase_times.h"
#include "core/ranks.h"
#include "kernels/serial_blas.h"

namespace tdyn {
namespace {

void check_one_architecture(const std::vector<JacobianCheckpoint>& checkpoints) {
  if (checkpoints.empty()) fail("no checkpoint to analyse");
  const ModelConfig& c0 = checkpoints.front().model->config;
  for (const auto& c : checkpoints) {
    if (c.model->config.d_model != c0.d_model || c.model->config.n_layers != c0.n_layers)
      fail("compare: the checkpoints must share one architecture: '{}' has d_model {} and {} layers, '{}' has {} and {}",
           c.path, c.model->config.d_model, c.model->config.n_layers, checkpoints.front().path, c0.d_model, c0.n_layers);
  }
}

// Self-alignment for k ≥ d compares two bases of all of R^d: ‖U_kᵀV_k‖²/k = 1 for every matrix. Such ks are
// neither computed nor plotted; results.json says which were dropped. Also the depths whose eigenvalues are
// plotted.
void choose_ks_and_depths(JacobianResult& r, const JacobianOptions& options) {
  if (!options.verdict_metrics_only)
    for (linalg::Index k : options.metrics.alignment_ks) (k < r.d ? r.alignment_ks_used : r.alignment_ks_skipped).push_back(k);
  if (options.eig_depths.empty()) r.eig_sublayers = {0, r.depths / 2, r.depths - 1};
  for (int64_t k : options.eig_depths) {
    if (k < 1 || k > r.depths) fail("eig_depths: depth {} is outside 1..{}", k, r.depths);
    r.eig_sublayers.push_back(k - 1);
  }
  std::sort(r.eig_sublayers.begin(), r.eig_sublayers.end());
  r.eig_sublayers.erase(std::unique(r.eig_sublayers.begin(), r.eig_sublayers.end()), r.eig_sublayers.end());
}

PassFile default_pass(const std::vector<Sample>& samples, const CheckpointJacobians& checkpoint, const Transformer& transformer,
                      const JacobianModel& jacobians, const PassSpec& spec, const std::string& label, ProgressSink& progress) {
  ProgressLoop loop(progress, label, transformer.config().n_layers * static_cast<int64_t>(samples.size()), "sample-layers");
  PassControl control;  // a temporary file
  control.progress = [&loop](int64_t done) { loop.advance(done); };
  control.note = [&progress](const std::string& line) { progress.note(line); };
  return run_pass(transformer, &jacobians, samples, spec, pass_identity({{"path", checkpoint.path}}, samples, spec), control);
}

// J̄_k of every depth, from the pass or in memory, with n_samples and n_pairs; per-sample Jacobians go to `arrays`.
std::function<linalg::Matrix(int64_t)> compute_means(CheckpointJacobians& r, const Transformer& transformer,
                                                     const JacobianModel& jm, const std::vector<Sample>& samples,
                                                     const JacobianOptions& options, const std::string& label,
                                                     ProgressSink& progress, const JacobianPassSource& pass_source,
                                                     JacobianArrays* arrays) {
  if (options.uses_pass()) {
    // Σ J leaving every boundary of the sublayer set: k = 0, 1, ..., 2L − 1 in order, then the final boundary.
    PassSpec spec;
    spec.boundaries = residual_boundaries(transformer.config().n_layers, BoundarySet::Sublayers);
    spec.correlations = false;
    spec.positions = options.positions;
    spec.zeroed = jm.zeroed();
    const std::string what = label + "mean Jacobians";
    auto pass = std::make_shared<PassFile>(pass_source ? pass_source(r, transformer, jm, spec, what)
                                                       : default_pass(samples, r, transformer, jm, spec, what, progress));
    r.n_samples = pass->n_samples();
    r.n_pairs = pass->n_pairs();
    return [pass, boundaries = spec.boundaries](int64_t k) { return mean_jacobian(*pass, boundaries[k].hook); };
  }
  MeanJacobianOptions mo;
  mo.positions = options.positions;
  mo.structured = options.structured;
  mo.mean_of_products = options.mean_of_products;
  if (options.save_per_sample && arrays)
    mo.per_sample = [&r, arrays](int64_t sample, int64_t pos, int64_t layer, Sublayer which, const linalg::Matrix& j) {
      arrays->per_sample(r, sample, pos, layer, which, j);
    };
  auto means = std::make_shared<MeanJacobians>(mean_jacobians(jm, samples, mo, progress, label + "samples"));
  r.n_samples = means->n_samples;
  r.n_pairs = means->n_pairs;
  r.mean_of_products = std::move(means->mean_of_products);
  return [means](int64_t k) { return means->mean[k]; };
}

// A Haar-random d × d orthogonal matrix: the Q of a Gaussian matrix's QR, its columns' signs fixed by R's diagonal
// (without that fix Q is not Haar-distributed).
linalg::Matrix haar_orthogonal(linalg::Index d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  linalg::Matrix g(d, d);
  for (linalg::Index i = 0; i < g.size(); ++i) g.data()[i] = normal(rng);
  const Eigen::HouseholderQR<linalg::Matrix> qr(g);
  linalg::Matrix q = qr.householderQ();
  const auto& r = qr.matrixQR();
  for (linalg::Index j = 0; j < d; ++j)
    if (r(j, j) < 0) q.col(j) *= -1;
  return q;
}

uint64_t haar_seed(uint64_t seed, int64_t draw, int64_t depth) {
  return seed ^ (static_cast<uint64_t>(draw) << 40) ^ (static_cast<uint64_t>(depth) * 0x9e3779b97f4a7c15ULL);
}

// The processes that share the depths' metrics: every MPI rank when all of them run this analysis
// (JacobianOptions::ranks_share_metrics), else this one alone.
TaskShare metric_share(const JacobianOptions& options) {
  if (!options.ranks_share_metrics || ranks().size == 1) return {};
  return {ranks().rank, ranks().size};
}

// One operator of a batch: J̄_k (with surgery its complex Schur form serves its metrics and then the sweep) or C_k.
struct DepthOperator {
  int64_t k = 0;
  bool mean = true;
};

struct DepthOutcome {
  OperatorMetrics metrics;
  linalg::ComplexSchur schur;  // J̄_k's, with surgery
};

// Matrices as the numbers ranks send each other (column-major; a complex entry as its real and imaginary parts),
// appended to `out`, and read back from `at` onwards.
void append_numbers(std::vector<double>& out, const linalg::Matrix& m) { out.insert(out.end(), m.data(), m.data() + m.size()); }
void append_numbers(std::vector<double>& out, const linalg::ComplexSchur& schur) {
  for (const ComplexMatrix* m : {&schur.q, &schur.t}) {
    const double* parts = reinterpret_cast<const double*>(m->data());
    out.insert(out.end(), parts, parts + 2 * m->size());
  }
}
linalg::Matrix matrix_at(const std::vector<double>& numbers, size_t at, int64_t d) {
  TDYN_CHECK(numbers.size() >= at + static_cast<size_t>(d * d));
  return Eigen::Map<const linalg::Matrix>(numbers.data() + at, d, d);
}
linalg::ComplexSchur schur_at(const std::vector<double>& numbers, size_t at, int64_t d) {
  TDYN_CHECK(numbers.size() == at + static_cast<size_t>(4 * d * d));
  linalg::ComplexSchur schur;
  for (ComplexMatrix* m : {&schur.q, &schur.t}) {
    m->resize(d, d);
    std::copy_n(numbers.data() + at, 2 * d * d, reinterpret_cast<double*>(m->data()));
    at += static_cast<size_t>(2 * d * d);
  }
  return schur;
}

// An outcome as numbers: the metrics, then the Schur form (none without surgery).
std::vector<double> numbers_of(const DepthOutcome& o) {
  std::vector<double> out;
  o.metrics.append_numbers(out);
  append_numbers(out, o.schur);
  return out;
}

DepthOutcome outcome_of(const std::vector<double>& numbers, int64_t d) {
  NumberReader in(numbers, "a rank's operator metrics");
  DepthOutcome o;
  o.metrics = OperatorMetrics::read_numbers(in);
  if (in.position() < numbers.size()) o.schur = schur_at(numbers, in.position(), d);
  return o;
}

// The metrics of one batch's operators, each rank taking its tasks one per thread on single-threaded LAPACK. Rank 0
// holds every operator (`operators`; the other ranks pass none), sends each other rank its own, and receives their
// outcomes. Returns every task's outcome on rank 0, none elsewhere.
std::vector<DepthOutcome> batch_metrics(const std::vector<DepthOperator>& tasks, const std::vector<const linalg::Matrix*>& operators,
                                        int64_t d, bool surgery, const OperatorMetricsOptions& mean_opts,
                                        const OperatorMetricsOptions& cumulative_opts, const TaskShare& share) {
  std::vector<size_t> mine;
  for (size_t t = 0; t < tasks.size(); ++t)
    if (share.mine(static_cast<int64_t>(t))) mine.push_back(t);
  std::vector<linalg::Matrix> received(share.root() ? 0 : tasks.size());
  if (share.root()) {
    for (size_t t = 0; t < tasks.size(); ++t)
      if (!share.mine(static_cast<int64_t>(t))) {
        std::vector<double> numbers;
        append_numbers(numbers, *operators[t]);
        send_to(static_cast<int>(share.owner(static_cast<int64_t>(t))), numbers);
      }
  } else {
    for (size_t t : mine) received[t] = matrix_at(receive_from(0), 0, d);
  }
  std::vector<DepthOutcome> outcomes(tasks.size());
  parallel_tasks(static_cast<int64_t>(mine.size()), [&](int64_t i) {
    const size_t t = mine[static_cast<size_t>(i)];
    const linalg::Matrix& op = share.root() ? *operators[t] : received[t];
    DepthOutcome& o = outcomes[t];
    if (tasks[t].mean && surgery) {
      o.schur = linalg::complex_schur(op);
      o.metrics = operator_metrics(op, mean_opts, o.schur);
    } else {
      o.metrics = operator_metrics(op, tasks[t].mean ? mean_opts : cumulative_opts);
    }
  });
  if (!share.root()) {
    for (size_t t : mine) send_to(0, numbers_of(outcomes[t]));
    return {};
  }
  for (size_t t = 0; t < tasks.size(); ++t)
    if (!share.mine(static_cast<int64_t>(t))) outcomes[t] = outcome_of(receive_from(static_cast<int>(share.owner(static_cast<int64_t>(t)))), d);
  return outcomes;
}

// Depth by depth in order: J̄_k, the running C_k = J̄_k C_{k−1}, the Haar null's and the surgery's running products;
// in between, the metrics of a batch of depths, one operator per thread on single-threaded LAPACK (and, when the
// MPI ranks share them, over every rank's threads: rank 0 alone reads J̄_k and runs the products). The Schur form's
// QR sweeps and the SVD's bidiagonalisation gain little from LAPACK's own threads (bench_operator_metrics,
// operator_metrics_one_per_thread). A depth in flight holds J̄_k, C_k and LAPACK's copies of them, with surgery also
// the complex Schur form (Q and T): about 6 d² doubles, 12 with surgery. Memory holds a batch, not every depth
// (unless keep_matrices). `mean_at` is rank 0's alone.
void depth_metrics(CheckpointJacobians& r, const std::function<linalg::Matrix(int64_t)>& mean_at, int64_t K, int64_t d,
                   const JacobianOptions& options, const OperatorMetricsOptions& metric_opts, bool mlp_reads_layer_input,
                   const std::string& label, ProgressSink& progress, JacobianArrays* arrays) {
  const TaskShare share = metric_share(options);
  std::optional<SurgerySweep> sweep;
  if (options.surgery) sweep.emplace(options.surgery_options, mlp_reads_layer_input, share);
  r.mean_metrics.resize(K);
  r.cumulative_metrics.resize(K);
  DepthChain<linalg::Matrix> chain(mlp_reads_layer_input);
  std::vector<DepthChain<linalg::Matrix>> null_chains(static_cast<size_t>(options.haar_null_draws), DepthChain<linalg::Matrix>(mlp_reads_layer_input));
  r.haar_null.assign(null_chains.size(), {});
  ProgressLoop loop(progress, label + "metrics", K, "depths");
  const bool ends_only = options.cumulative_ends_only || options.verdict_metrics_only;
  OperatorMetricsOptions cumulative_opts = metric_opts;
  cumulative_opts.eigenvalues = !options.verdict_metrics_only;
  // Every rank cuts the depths into the same batches: rank 0's operators in flight, times the ranks.
  double in_flight = static_cast<double>(operators_in_flight(d, options.surgery ? 12 : 6, K));
  if (share.count > 1) in_flight = broadcast_from_root(in_flight);
  const int64_t batch = std::min<int64_t>(K, static_cast<int64_t>(in_flight) * share.count);
  for (int64_t first = 0; first < K; first += batch) {
    const int64_t end = std::min(K, first + batch);
    // One task per operator: J̄_k of each depth, and C_k where its metrics are wanted.
    std::vector<DepthOperator> tasks;
    for (int64_t k = first; k < end; ++k) tasks.push_back({k, true});
    for (int64_t k = first; k < end; ++k)
      if (!ends_only || k == 0 || k == K - 1) tasks.push_back({k, false});
    std::vector<linalg::Matrix> means, cumulatives;
    std::vector<const linalg::Matrix*> operators;
    if (share.root()) {
      means.reserve(static_cast<size_t>(end - first));
      for (int64_t k = first; k < end; ++k) {
        means.push_back(mean_at(k));
        const linalg::Matrix& mean = means.back();
        const linalg::Matrix& cumulative = chain.add(mean);
        parallel_tasks(static_cast<int64_t>(null_chains.size()), [&](int64_t j) {
          const linalg::Matrix q = haar_orthogonal(mean.rows(), haar_seed(options.haar_null_seed, j, k));
          const linalg::Matrix& c = null_chains[static_cast<size_t>(j)].add(linalg::multiply(linalg::multiply(q, mean), q.transpose()));
          if (k == 0) r.haar_null[static_cast<size_t>(j)].first = effective_ranks(linalg::singular_values(c));
          if (k == K - 1) r.haar_null[static_cast<size_t>(j)].second = effective_ranks(linalg::singular_values(c));
        });
        if (!ends_only || k == 0 || k == K - 1) cumulatives.push_back(cumulative);
        if (arrays) arrays->depth(r, mean, cumulative);
        if (options.keep_matrices) r.mean.push_back(mean), r.cumulative.push_back(cumulative);
      }
      for (const linalg::Matrix& m : means) operators.push_back(&m);
      for (const linalg::Matrix& m : cumulatives) operators.push_back(&m);
    }
    std::vector<DepthOutcome> outcomes = batch_metrics(tasks, operators, d, sweep.has_value(), metric_opts, cumulative_opts, share);
    if (share.root())
      for (size_t t = 0; t < tasks.size(); ++t)
        (tasks[t].mean ? r.mean_metrics : r.cumulative_metrics)[tasks[t].k] = std::move(outcomes[t].metrics);
    for (size_t i = 0; i < tasks.size() && tasks[i].mean; ++i) {
      if (sweep && share.count == 1) {
        sweep->add(means[i], outcomes[i].schur);
      } else if (sweep) {  // every rank runs its share of the sweep's tasks on J̄_k and its Schur form from rank 0
        std::vector<double> numbers;
        if (share.root()) append_numbers(numbers, means[i]), append_numbers(numbers, outcomes[i].schur);
        broadcast_from_root(numbers);
        sweep->add(matrix_at(numbers, 0, d), schur_at(numbers, static_cast<size_t>(d * d), d));
      }
      loop.advance();
    }
  }
  if (sweep && share.count > 1) {
    const std::vector<std::vector<double>> shares = gather_to_root(sweep->share_numbers());
    if (share.root()) r.surgery = sweep->points_from_shares(shares);
  } else if (sweep) {
    r.surgery = sweep->points();
  }
  if (options.mean_of_products) {
    r.product_mean_metrics.resize(K);
    parallel_tasks(K, [&](int64_t k) { r.product_mean_metrics[k] = operator_metrics(r.mean_of_products[k], metric_opts); });
  }
}

}  // namespace

std::string checkpoint_label(const CheckpointJacobians& model, size_t index) {
  const std::string name = fs::path(model.path).filename().string();
  return index == 0 ? name : fmt::format("compare{}: {}", index, name);
}

JacobianResult run_jacobian(const std::vector<JacobianCheckpoint>& checkpoints, const std::vector<Sample>& samples,
                            const JacobianOptions& options, ProgressSink& progress, const JacobianPassSource& pass_source,
                            JacobianArrays* arrays) {
  check_one_architecture(checkpoints);
  if (samples.empty()) fail("no samples to analyse");
  const ModelConfig& c0 = checkpoints.front().model->config;
  JacobianResult result;
  result.model = {{"path", checkpoints.front().path}, {"family", c0.family},     {"format", c0.format},
                  {"d_model", c0.d_model},            {"n_layers", c0.n_layers}, {"parameters", checkpoints.front().model->parameter_count()}};
  for (const auto& s : samples) result.source_indices.push_back(s.source_index);
  result.depths = 2 * c0.n_layers;
  result.d = c0.d_model;
  choose_ks_and_depths(result, options);
  OperatorMetricsOptions metric_opts = options.metrics;
  metric_opts.alignment_ks = result.alignment_ks_used;
  progress.note(fmt::format("{} samples, positions {}, {} mean", samples.size(), options.positions.to_string(),
                            options.structured ? "structured" : "plain"));

  const int64_t K = result.depths;
  result.models.reserve(checkpoints.size());  // each CheckpointJacobians stays where the arrays saw it
  for (size_t i = 0; i < checkpoints.size(); ++i) {
    CheckpointJacobians& r = result.models.emplace_back();
    r.path = checkpoints[i].path;
    r.prefix = i == 0 ? "" : fmt::format("compare{}.", i);
    r.model = checkpoints[i].model;
    const std::string label = checkpoints.size() > 1 ? fmt::format("[{}] ", checkpoint_label(r, i)) : "";
    auto transformer = std::make_shared<Transformer>(r.model);
    JacobianModel jm(transformer, ZeroedParts(*transformer, options.ablations));
    if (arrays) arrays->begin(r, K, result.d);
    std::function<linalg::Matrix(int64_t)> mean_at;
    bool worker = false;  // an MPI worker rank whose share of the pass is with rank 0
    timed(result.timings, r.prefix + "mean_jacobians", [&] {
      try {
        mean_at = compute_means(r, *transformer, jm, samples, options, label, progress, pass_source, arrays);
      } catch (const WorkerShareDone&) {
        if (!options.ranks_share_metrics) throw;
        worker = true;
      }
    });
    progress.note(fmt::format("{}metrics of {} mean Jacobians and cumulative products{}", label, K, options.surgery ? ", surgery" : ""));
    timed(result.timings, r.prefix + "metrics", [&] {
      depth_metrics(r, mean_at, K, transformer->config().d_model, options, metric_opts, transformer->mlp_reads_layer_input(), label, progress, arrays);
    });
    if (worker) throw WorkerShareDone{};  // its share of the metrics is with rank 0 too
    if (arrays) arrays->end(r);
  }
  return result;
}

nlohmann::json options_json(const JacobianResult& result, const JacobianOptions& options) {
  nlohmann::json o = {{"positions", options.positions.to_string()},
                      {"mean", options.structured ? "structured" : "plain"},
                      {"cumulative", options.mean_of_products ? "both" : "product-of-means"},
                      {"save_per_sample", options.save_per_sample},
                      {"cumulative_ends_only", options.cumulative_ends_only},
                      {"verdict_metrics_only", options.verdict_metrics_only},
                      {"alignment_ks", options.metrics.alignment_ks},
                      {"alignment_ks_used", result.alignment_ks_used},
                      {"complex_tolerance", options.metrics.complex_tolerance},
                      {"energy_fraction", 0.9},
                      {"surgery", options.surgery}};
  o["ablate"] = to_json(options.ablations);
  o["metrics_ranks"] = metric_share(options).count;  // the MPI ranks that computed the depths' metrics
  o["haar_null_draws"] = options.haar_null_draws;
  if (options.haar_null_draws > 0) o["haar_null_seed"] = options.haar_null_seed;
  if (options.surgery) {
    o["alphas"] = options.surgery_options.alphas;
    o["surgery_seed"] = options.surgery_options.seed;
    o["surgery_control_draws"] = options.surgery_options.control_draws;
    o["surgery_full_depth_only"] = options.surgery_options.full_depth_only;
  }
  o["jacobian_convention"] =
      "J[i, j] = d out_i / d in_j (rows = outputs); sublayer k = 2l: resid_pre -> resid_mid, k = 2l+1: resid_mid -> "
      "resid_post of layer l; only position p's residual varies (other positions' keys/values fixed); float64";
  std::vector<int64_t> eig_depths;
  for (int64_t k : result.eig_sublayers) eig_depths.push_back(k + 1);
  o["eig_depths"] = eig_depths;
  return o;
}

nlohmann::json checkpoint_json(const CheckpointJacobians& r) {
  nlohmann::json mj;
  mj["path"] = r.path;
  mj["file_prefix"] = r.prefix;
  mj["family"] = r.model->config.family;
  mj["samples"] = r.n_samples;
  mj["pairs"] = r.n_pairs;
  for (int64_t k = 0; k < static_cast<int64_t>(r.mean_metrics.size()); ++k) {
    const OperatorMetrics& c = r.cumulative_metrics[k];  // d = 0: not computed (cumulative_ends_only, verdict_metrics_only)
    nlohmann::json row = {{"depth", k + 1}, {"name", sublayer_name(k)}, {"mean", r.mean_metrics[k].to_json()},
                          {"cumulative", c.d > 0 ? c.to_json() : nlohmann::json(nullptr)}};
    if (!r.product_mean_metrics.empty()) row["mean_of_products"] = r.product_mean_metrics[k].to_json();
    mj["depths"].push_back(row);
  }
  for (const auto& p : r.surgery) mj["surgery"].push_back(p.to_json());
  // Each draw as the first and last depths of a "depths" list, so that a reader of the model's depths reads it alike.
  for (size_t j = 0; j < r.haar_null.size(); ++j) {
    const int64_t K = static_cast<int64_t>(r.mean_metrics.size());
    auto depth = [](int64_t k, const EffectiveRanks& e) {
      return nlohmann::json{{"depth", k}, {"cumulative", {{"effective_rank", e.to_json()}}}};
    };
    mj["haar_null"].push_back({{"draw", j}, {"depths", {depth(1, r.haar_null[j].first), depth(K, r.haar_null[j].second)}}});
  }
  return mj;
}

nlohmann::json results_json(const JacobianResult& result) {
  nlohmann::json j;
  j["samples_used"] = result.source_indices.size();
  if (!result.alignment_ks_skipped.empty())
    j["notes"].push_back(fmt::format(
        "self-alignment k = {} skipped (not computed, not plotted): k ≥ d = {} makes U_k and V_k bases of all of R^d, so "
        "‖U_kᵀV_k‖²/k = 1 for every matrix",
        fmt::join(result.alignment_ks_skipped, ", "), result.d));
  for (const CheckpointJacobians& r : result.models) j["models"].push_back(checkpoint_json(r));
  return j;
}

}  // namespace tdyn
