// Mean Jacobians over samples, cumulative products and the Schur-surgery sweep; see means.h.
#include "analysis/jacobian/means.h"

#include <algorithm>
#include <exception>

#include <omp.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/serial_blas.h"
#include "linalg/gemm.h"

namespace tdyn {

using linalg::ComplexMatrix;
using linalg::Matrix;

std::string sublayer_name(int64_t k) {
  return fmt::format("blocks.{}.jac_{}", k / 2, k % 2 == 0 ? "attn" : "mlp");
}

MeanJacobians mean_jacobians(const JacobianModel& model, const std::vector<Sample>& samples,
                             const MeanJacobianOptions& options, ProgressSink& progress, const std::string& label) {
  const int64_t K = model.n_sublayers(), d = model.d_model(), S = static_cast<int64_t>(samples.size());
  const bool need_plain = !options.structured || options.mean_of_products || options.per_sample;
  MeanJacobians result;
  std::vector<StructuredMean> structured(K);
  std::vector<Matrix> plain_sum(K, Matrix::Zero(d, d)), product_sum;
  if (options.mean_of_products) product_sum.assign(K, Matrix::Zero(d, d));
  ProgressLoop loop(progress, label, S, "samples");
  int64_t failed_sample = -1;
  std::exception_ptr error;

  SerialBlas serial_blas(S > 1 && omp_get_max_threads() > 1);  // the threads take one sample each
#pragma omp parallel
  {
    // Per-thread sums, merged at the end.
    std::vector<StructuredMean> my_structured(K);
    std::vector<Matrix> my_plain(options.structured ? 0 : K, Matrix::Zero(d, d));
    std::vector<Matrix> my_products(options.mean_of_products ? K : 0, Matrix::Zero(d, d));
    int64_t my_pairs = 0, my_samples = 0;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < S; ++i) {
      // An exception must not leave the parallel region (that terminates the program): the first failing
      // sample's error is kept and rethrown below.
      try {
        const SequenceState state = model.run(samples[i].ids);
        const std::vector<int64_t> positions = options.positions.resolve(state.n_pos);
        for (int64_t pos : positions) {
          DepthChain<Matrix> product(model.transformer().mlp_reads_layer_input());
          for (int64_t k = 0; k < K; ++k) {
            const int64_t layer = k / 2;
            const Sublayer which = k % 2 == 0 ? Sublayer::Attention : Sublayer::Mlp;
            if (options.structured) my_structured[k].add(model.structure(state, layer, which, pos));
            if (!need_plain) continue;
            const Matrix j = model.jacobian(state, layer, which, pos);
            if (!options.structured) my_plain[k] += j;
            if (options.mean_of_products) my_products[k] += product.add(j);
            if (options.per_sample) {
#pragma omp critical(tdyn_jacobian_per_sample)
              options.per_sample(i, pos, layer, which, j);
            }
          }
          ++my_pairs;
        }
        if (!positions.empty()) ++my_samples;
      } catch (...) {
#pragma omp critical(tdyn_jacobian_error)
        if (failed_sample < 0 || i < failed_sample) failed_sample = i, error = std::current_exception();
      }
#pragma omp critical(tdyn_jacobian_progress)
      loop.advance();
    }
#pragma omp critical(tdyn_jacobian_merge)
    {
      for (int64_t k = 0; k < K; ++k) {
        if (options.structured) structured[k].merge(my_structured[k]);
        else plain_sum[k] += my_plain[k];
        if (options.mean_of_products) product_sum[k] += my_products[k];
      }
      result.n_pairs += my_pairs;
      result.n_samples += my_samples;
    }
  }
  serial_blas.restore();
  if (error) std::rethrow_exception(error);
  if (result.n_pairs == 0) fail("no (sample, position) pair to average: {} samples, positions '{}'", S, options.positions.to_string());
  const double inv = 1.0 / static_cast<double>(result.n_pairs);
  for (int64_t k = 0; k < K; ++k) {
    result.mean.push_back(options.structured ? structured[k].mean() : Matrix(plain_sum[k] * inv));
    if (options.mean_of_products) result.mean_of_products.push_back(product_sum[k] * inv);
  }
  return result;
}

double henrici_departure(const ComplexMatrix& a, const linalg::ComplexVector& eigenvalues) {
  return std::sqrt(std::max(0.0, a.squaredNorm() - eigenvalues.squaredNorm()));
}

nlohmann::json SurgeryPoint::to_json() const {
  auto ranks = [](const std::vector<EffectiveRanks>& per_depth) {
    return per_depth.empty() ? nlohmann::json(nullptr) : per_depth.back().to_json();
  };
  double worst = 0;
  for (double ratio : departure_ratio) worst = std::max(worst, std::abs(ratio - std::abs(alpha)));
  nlohmann::json out = {{"alpha", alpha}, {"full_depth_surgery", ranks(surgery)}, {"full_depth_control", ranks(control)},
                        {"max_abs_departure_ratio_minus_alpha", worst}, {"max_imaginary_fraction", max_imaginary_fraction}};
  if (!control_draws.empty()) {
    out["full_depth_control_draws"] = nlohmann::json::array();
    for (const EffectiveRanks& e : control_draws) out["full_depth_control_draws"].push_back(ranks({e}));
  }
  return out;
}

// The seed of the random N of draw `draw` ≥ 1 at a depth whose first draw has `seed`: streams apart from it.
static uint64_t control_draw_seed(uint64_t seed, int64_t draw) {
  return seed + (static_cast<uint64_t>(draw) << 32);
}

SurgerySweep::SurgerySweep(const SurgeryOptions& options, bool mlp_reads_layer_input, TaskShare share)
    : share_(share), options_(options), real_product_(mlp_reads_layer_input) {
  const size_t n_alphas = options.alphas.size();
  for (size_t a = 0; a < n_alphas; ++a)
    if (std::abs(options.alphas[a] - 1) < 1e-12) unit_alpha_ = static_cast<int64_t>(a);
  control_task_.assign(n_alphas, -1);
  surgery_task_.assign(n_alphas, -1);
  for (size_t a = 0; a < n_alphas; ++a)
    if (options.alphas[a] != 0) control_task_[a] = static_cast<int64_t>(tasks_.size()), tasks_.push_back({Product::Control, a});
  if (unit_alpha_ >= 0)
    for (int64_t j = 0; j + 1 < options.control_draws; ++j) tasks_.push_back({Product::Draw, static_cast<size_t>(j)});
  for (size_t a = 0; a < n_alphas; ++a)
    if (static_cast<int64_t>(a) != unit_alpha_) surgery_task_[a] = static_cast<int64_t>(tasks_.size()), tasks_.push_back({Product::Surgery, a});
  if (unit_alpha_ >= 0) {  // the real product, the shortest task, last
    surgery_task_[static_cast<size_t>(unit_alpha_)] = static_cast<int64_t>(tasks_.size());
    tasks_.push_back({Product::Surgery, static_cast<size_t>(unit_alpha_)});
  }
  found_.resize(tasks_.size());
  products_.assign(tasks_.size(), DepthChain<ComplexMatrix>(mlp_reads_layer_input));
}

bool SurgerySweep::real(size_t task) const {
  return tasks_[task].product == Product::Surgery && static_cast<int64_t>(tasks_[task].index) == unit_alpha_;
}

void SurgerySweep::add(const Matrix& mean) { add(mean, linalg::complex_schur(mean)); }

void SurgerySweep::add(const Matrix& mean, const linalg::ComplexSchur& schur) {
  const double departure = schur.strictly_upper().norm();
  const uint64_t seed = options_.seed + static_cast<uint64_t>(depth_);
  // One task per thread: the complex SVDs that rank each depth gain little from BLAS's threads.
  std::vector<size_t> mine;
  for (size_t t = 0; t < tasks_.size(); ++t)
    if (share_.mine(static_cast<int64_t>(t))) mine.push_back(t);
  parallel_tasks(static_cast<int64_t>(mine.size()), [&](int64_t i) { step(mine[static_cast<size_t>(i)], mean, schur, departure, seed); });
  ++depth_;
}

void SurgerySweep::step(size_t t, const Matrix& mean, const linalg::ComplexSchur& schur, double departure, uint64_t seed) {
  const Task& task = tasks_[t];
  Found& found = found_[t];
  if (real(t)) {  // J_1 = J: the mean itself, not its reconstruction from the Schur form
    const double identity_form = std::sqrt(std::max(0.0, mean.squaredNorm() - schur.eigenvalues().squaredNorm()));
    found.departure_ratio.push_back(departure > 0 ? identity_form / departure : 0.0);
    const Matrix& c = real_product_.add(mean);
    if (!options_.full_depth_only) found.ranks.push_back(effective_ranks(linalg::singular_values(c)));
    return;
  }
  ComplexMatrix modified;
  if (task.product == Product::Draw) {
    modified = schur_surgery_control(schur, 1.0, control_draw_seed(seed, static_cast<int64_t>(task.index) + 1));
  } else if (task.product == Product::Control) {
    modified = schur_surgery_control(schur, options_.alphas[task.index], seed);
  } else {
    modified = schur_surgery(schur, options_.alphas[task.index]);
    found.departure_ratio.push_back(departure > 0 ? henrici_departure(modified, schur.eigenvalues()) / departure : 0.0);
    found.max_imaginary_fraction = std::max(found.max_imaginary_fraction, imaginary_fraction(modified));
  }
  const ComplexMatrix& c = products_[t].add(modified);
  if (!options_.full_depth_only) found.ranks.push_back(effective_ranks(linalg::singular_values(c)));
}

std::vector<SurgerySweep::Found> SurgerySweep::finished() const {
  std::vector<Found> found = found_;
  if (!options_.full_depth_only || depth_ == 0) return found;
  std::vector<size_t> mine;
  for (size_t t = 0; t < tasks_.size(); ++t)
    if (share_.mine(static_cast<int64_t>(t))) mine.push_back(t);
  parallel_tasks(static_cast<int64_t>(mine.size()), [&](int64_t i) {
    const size_t t = mine[static_cast<size_t>(i)];
    found[t].ranks.assign(static_cast<size_t>(depth_ - 1), EffectiveRanks{NAN, NAN, NAN, 0, 0.9});
    found[t].ranks.push_back(effective_ranks(real(t) ? linalg::singular_values(real_product_.product())
                                                     : linalg::singular_values(products_[t].product())));
  });
  return found;
}

// Each α's point from its surgery's and control's findings (at α = 0 the control's are the surgery's); α = 1's
// control draws: its own control, then the further draws'.
std::vector<SurgeryPoint> SurgerySweep::assemble(const std::vector<Found>& found) const {
  std::vector<SurgeryPoint> points;
  for (size_t a = 0; a < options_.alphas.size(); ++a) {
    const Found& surgery = found[static_cast<size_t>(surgery_task_[a])];
    const Found& control = control_task_[a] < 0 ? surgery : found[static_cast<size_t>(control_task_[a])];
    points.push_back({options_.alphas[a], surgery.ranks, control.ranks, surgery.departure_ratio, surgery.max_imaginary_fraction, {}});
  }
  if (unit_alpha_ >= 0 && depth_ > 0) {
    SurgeryPoint& p = points[static_cast<size_t>(unit_alpha_)];
    p.control_draws = {p.control.back()};
    for (size_t t = 0; t < tasks_.size(); ++t)
      if (tasks_[t].product == Product::Draw) p.control_draws.push_back(found[t].ranks.back());
  }
  return points;
}

std::vector<SurgeryPoint> SurgerySweep::points() const {
  TDYN_CHECK(share_.count == 1);
  return assemble(finished());
}

namespace {

void append_ranks(std::vector<double>& out, const std::vector<EffectiveRanks>& list) {
  out.push_back(static_cast<double>(list.size()));
  for (const EffectiveRanks& e : list) append_numbers(out, e);
}

std::vector<EffectiveRanks> read_ranks(NumberReader& in) {
  std::vector<EffectiveRanks> list(static_cast<size_t>(in.index()));
  for (EffectiveRanks& e : list) e = in.ranks();
  return list;
}

}  // namespace

// Per task of the share in order: its ranks, departure ratios and largest imaginary fraction.
std::vector<double> SurgerySweep::share_numbers() const {
  const std::vector<Found> found = finished();
  std::vector<double> out;
  for (size_t t = 0; t < tasks_.size(); ++t) {
    if (!share_.mine(static_cast<int64_t>(t))) continue;
    append_ranks(out, found[t].ranks);
    out.push_back(static_cast<double>(found[t].departure_ratio.size()));
    out.insert(out.end(), found[t].departure_ratio.begin(), found[t].departure_ratio.end());
    out.push_back(found[t].max_imaginary_fraction);
  }
  return out;
}

std::vector<SurgeryPoint> SurgerySweep::points_from_shares(const std::vector<std::vector<double>>& shares) const {
  TDYN_CHECK(static_cast<int64_t>(shares.size()) == share_.count);
  std::vector<NumberReader> readers;
  for (const auto& numbers : shares) readers.emplace_back(numbers, "the surgery sweep's share");
  std::vector<Found> found(tasks_.size());
  for (size_t t = 0; t < tasks_.size(); ++t) {
    NumberReader& in = readers[static_cast<size_t>(share_.owner(static_cast<int64_t>(t)))];
    found[t].ranks = read_ranks(in);
    found[t].departure_ratio.resize(static_cast<size_t>(in.index()));
    for (double& r : found[t].departure_ratio) r = in.next();
    found[t].max_imaginary_fraction = in.next();
  }
  for (const NumberReader& in : readers) in.finish();
  return assemble(found);
}

std::vector<SurgeryPoint> schur_surgery_sweep(const std::vector<Matrix>& means, const SurgeryOptions& options,
                                              ProgressSink& progress, bool mlp_reads_layer_input) {
  SurgerySweep sweep(options, mlp_reads_layer_input);
  ProgressLoop loop(progress, "surgery", static_cast<int64_t>(means.size()), "depths");
  for (const Matrix& mean : means) {
    sweep.add(mean);
    loop.advance();
  }
  return sweep.points();
}

}  // namespace tdyn
