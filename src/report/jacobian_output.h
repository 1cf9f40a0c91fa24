// Writes a Jacobian run (analysis/jacobian/run.h) into a results directory: the mean Jacobians and cumulative
// products as .npy (streamed while the run makes them, JacobianFiles), their spectra, the metrics tables as .csv,
// the figures, and results.json.
#pragma once

#include <memory>
#include <string>

#include "analysis/jacobian/run.h"
#include "core/npy.h"
#include "report/results.h"

namespace tdyn {

// The JacobianArrays of a results directory: per checkpoint PREFIX (CheckpointJacobians::prefix),
// PREFIXmean_jacobians.npy and PREFIXcumulative_products.npy [depth, d, d], written one depth at a time,
// PREFIXper_sample/ (with save_per_sample), and once the checkpoint is done its spectra, mean_of_products.npy and
// its entry of results.json's models (written at once, so that a later failure leaves it).
class JacobianFiles final : public JacobianArrays {
 public:
  JacobianFiles(ResultsDir& out, const JacobianOptions& options) : out_(out), per_sample_(options.save_per_sample) {}
  void begin(const CheckpointJacobians& model, int64_t depths, int64_t d) override;
  void per_sample(const CheckpointJacobians& model, int64_t sample, int64_t pos, int64_t layer, Sublayer which,
                  const linalg::Matrix& j) override;
  void depth(const CheckpointJacobians& model, const linalg::Matrix& mean, const linalg::Matrix& cumulative) override;
  void end(const CheckpointJacobians& model) override;

 private:
  ResultsDir& out_;
  bool per_sample_;
  int64_t d_ = 0;
  std::unique_ptr<NpyStream> means_, cumulative_;
};

// The rest, after run_jacobian streamed into JacobianFiles(out, options): options (merged into any the caller set), model,
// samples.source_index.npy, results, the metrics and surgery tables, the figures; then results.json.
void write_jacobian(ResultsDir& out, const JacobianResult& result, const JacobianOptions& options);

}  // namespace tdyn
