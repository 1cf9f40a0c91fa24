// One Jacobian analysis from start to end, as `tdyn jacobian` and tdyn.jacobian run it (SPEC §3): for each
// checkpoint, the mean sublayer Jacobians J̄_k over the samples (means.h; the structured mean through the shared
// sample pass, analysis/pass/run.h), their cumulative products C_k, operator metrics of both per depth, optionally the
// mean of per-sample products and the Schur-surgery sweep. report/jacobian_output.h writes the result as
// results.json, .npy, .csv and figures.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/jacobian/means.h"
#include "analysis/pass/run.h"
#include "core/phase_times.h"
#include "core/progress.h"

namespace tdyn {

struct JacobianOptions {
  PositionSpec positions;         // of each sample (default: the last token)
  bool structured = true;         // structured mean at forward-pass cost; false: the plain sum of per-sample Jacobians
  bool mean_of_products = false;  // also the mean over samples of J_k ⋯ J_1 and its metrics
  bool save_per_sample = false;   // hand every per-sample, per-position Jacobian to JacobianArrays::per_sample
  OperatorMetricsOptions metrics;  // its alignment_ks as asked: run_jacobian drops the ks ≥ d
  bool surgery = false;
  SurgeryOptions surgery_options;
  // Zero ablations of sublayer parts (model/ablation.h): the Jacobians are those of the ablated model, every
  // checkpoint ablated alike.
  std::vector<Ablation> ablations;
  std::vector<int64_t> eig_depths;  // 1-based depths whose eigenvalues are plotted; empty: first, middle, last
  bool keep_matrices = false;       // the result keeps every J̄_k and C_k (2 K d² doubles; else only streamed)
  // The metrics of C_k at the first and last depth only, what the bottleneck verdict reads; the other depths' are
  // left uncomputed (d = 0: null in results.json, NaN in the tables and arrays). analyze's controls use it.
  bool cumulative_ends_only = false;
  // Only what analyze's verdicts and `tdyn compare` read, for runs whose figures nobody draws: cumulative_ends_only,
  // those two C_k without their Schur form (their singular values alone: the effective ranks), and the J̄_k without
  // self-alignment (singular values without vectors). The eigenvalue metrics of C_k are null, no alignment is listed.
  bool verdict_metrics_only = false;
  // The structure-preserving null of the bottleneck: this many draws of the cumulative products with every J̄_k
  // replaced by Q_k J̄_k Q_kᵀ, Q_k Haar-random orthogonal and new at every depth (seeded by haar_null_seed, the
  // draw and k). Each J̄_k keeps its eigenvalues, singular values and normality; only how the depths' bases line
  // up is lost, so a collapse that the spectra and scale alone make is reproduced by the null. Each draw costs
  // about 7 d³ flops per depth (a QR and three products).
  int64_t haar_null_draws = 0;
  uint64_t haar_null_seed = 0;
  // Every MPI rank runs this analysis (`tdyn jacobian` under mpirun), so the ranks share the depths' metrics: rank 0
  // sends each other rank its share of the operators and receives their metrics. False where rank 0 analyses alone
  // (analyze's parts run once the other ranks have left). No effect in one process.
  bool ranks_share_metrics = false;

  // The structured mean is a sum over samples: the shared pass computes it, with checkpoints and MPI. The other
  // modes keep per-sample Jacobians and run in one process.
  bool uses_pass() const { return structured && !mean_of_products && !save_per_sample; }
};

struct JacobianCheckpoint {
  std::string path;  // as results.json records it
  std::shared_ptr<const Model> model;
};

// Everything computed for one checkpoint.
struct CheckpointJacobians {
  std::string path, prefix;  // prefix of its files: "" (the first checkpoint) or "compare{i}."
  std::shared_ptr<const Model> model;
  int64_t n_samples = 0, n_pairs = 0;
  std::vector<OperatorMetrics> mean_metrics, cumulative_metrics, product_mean_metrics;  // per depth
  std::vector<linalg::Matrix> mean, cumulative;  // J̄_k and C_k, with keep_matrices
  std::vector<linalg::Matrix> mean_of_products;  // with mean_of_products
  std::vector<SurgeryPoint> surgery;             // per alpha, with surgery
  // Per draw of the Haar null (JacobianOptions::haar_null_draws): the effective ranks of its C_1 and C_K.
  std::vector<std::pair<EffectiveRanks, EffectiveRanks>> haar_null;
};

struct JacobianResult {
  std::vector<CheckpointJacobians> models;  // the first checkpoint, then the compared ones
  nlohmann::json model;                     // results.json's "model": the first checkpoint
  std::vector<int64_t> source_indices;      // of each sample in its source
  int64_t depths = 0, d = 0;                // K = 2 n_layers sublayers, d_model
  std::vector<linalg::Index> alignment_ks_used, alignment_ks_skipped;  // self-alignment k < d, and the ks ≥ d
  std::vector<int64_t> eig_sublayers;       // 0-based, sorted, distinct
  PhaseTimes timings;
};

// Where the arrays too large to keep go while the run makes them: per-sample Jacobians and each depth's J̄_k
// and C_k. report/jacobian_output.h streams them into .npy files.
class JacobianArrays {
 public:
  virtual ~JacobianArrays() = default;
  // Checkpoint `model` starts; its means will have `depths` slices of d × d.
  virtual void begin(const CheckpointJacobians& model, int64_t depths, int64_t d) = 0;
  // J of one sample, position and sublayer (with save_per_sample; called from one thread at a time).
  virtual void per_sample(const CheckpointJacobians& model, int64_t sample, int64_t pos, int64_t layer, Sublayer which,
                          const linalg::Matrix& j) = 0;
  virtual void depth(const CheckpointJacobians& model, const linalg::Matrix& mean, const linalg::Matrix& cumulative) = 0;
  // Everything of `model` is computed.
  virtual void end(const CheckpointJacobians& model) = 0;
};

// How the shared pass of a checkpoint is obtained (spec: its Σ J at every sublayer boundary; label: of its
// progress): the CLI's --resume / --from-pass / MPI, or by default a pass run into a temporary file.
using JacobianPassSource = std::function<PassFile(const CheckpointJacobians& checkpoint, const Transformer&,
                                                  const JacobianModel&, const PassSpec& spec, const std::string& label)>;

// The analysis of `checkpoints` (one architecture) on `samples`. Progress: notes, then the loops of the means and
// the metrics per checkpoint. `arrays`, when given, receives the per-sample and per-depth matrices.
JacobianResult run_jacobian(const std::vector<JacobianCheckpoint>& checkpoints, const std::vector<Sample>& samples,
                            const JacobianOptions& options, ProgressSink& progress, const JacobianPassSource& pass = {},
                            JacobianArrays* arrays = nullptr);

// The name of checkpoint `index` in figures: its file name, "compare{i}: NAME" for a compared one.
std::string checkpoint_label(const CheckpointJacobians& model, size_t index);

// results.json's "options" of a run: the analysis settings (the caller adds how models and samples were given).
nlohmann::json options_json(const JacobianResult& result, const JacobianOptions& options);

// results.json's "results": samples used, notes, and per checkpoint (checkpoint_json) the metrics per depth and
// the surgery.
nlohmann::json results_json(const JacobianResult& result);
nlohmann::json checkpoint_json(const CheckpointJacobians& model);

}  // namespace tdyn
