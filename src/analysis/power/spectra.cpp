#include "analysis/power/spectra.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>
#include <Eigen/QR>

#include "core/error.h"
#include "kernels/serial_blas.h"

namespace tdyn {
namespace {

// Orthonormal basis of the column span of `columns` (d × k, full column rank).
Matrix orthonormalize(const Matrix& columns) {
  Eigen::HouseholderQR<Matrix> qr(columns);
  return qr.householderQ() * Matrix::Identity(columns.rows(), columns.cols());
}

// The top_k leading eigenpairs of a sorted decomposition: a fallback's dgeev result cut to what Arnoldi would
// have returned, so every layer has the same number of eigenpairs (and a d × d complex eigenvector matrix per
// layer, 256 MiB at d = 4096, is not kept).
linalg::Eigendecomposition leading(const linalg::Eigendecomposition& sorted, Index k) {
  return {sorted.eigenvalues.head(k), sorted.eigenvectors.leftCols(k)};
}

}  // namespace

Vector token_state(const Tensor& x, int64_t i) {
  return Eigen::Map<const Eigen::VectorXf>(x.row(i), x.dim(1)).cast<double>();
}

SortedSpectrum sorted_spectrum(const Matrix& a, const SpectrumOptions& options, const char* name) {
  const Index d = a.rows();
  if (d <= options.full_spectrum_max_d || d < options.top_k + 3)
    return {linalg::sorted_by_modulus(linalg::eigen_general(a, true)), true, ""};
  const Index k = std::min(options.top_k, d - 2);
  if (std::optional<linalg::TopEigenpairs> top = linalg::top_eigenpairs_if_converged(a, k, options.arnoldi))
    return {linalg::sorted_by_modulus({top->eigenvalues, top->eigenvectors}), false, ""};
  const Index restarts = options.arnoldi.max_restarts;
  return {linalg::sorted_by_modulus(linalg::eigen_general(a, true)), true,
          fmt::format("{}: Arnoldi (Spectra) did not converge to the top {} eigenpairs in {} restarts (tolerance "
                      "{:g}); they come from the full dgeev spectrum instead",
                      name, k, restarts, options.arnoldi.tolerance)};
}

nlohmann::json LayerSpectrum::to_json() const {
  return {{"layer", layer},
          {"value_layer", value_layer},
          {"full_spectrum", full},
          {"F", f.to_json()},
          {"I_plus_F", identity_plus_f.to_json()},
          {"bias_norm", bias_norm},
          {"frobenius_norm", frobenius_norm},
          {"notes", notes}};
}

LayerSpectrum layer_spectrum(const LayerMatrix& m, const SpectrumOptions& options) {
  LayerSpectrum s;
  s.layer = m.layer;
  s.value_layer = m.value_layer;
  s.bias_norm = m.bias.norm();
  s.frobenius_norm = m.f.norm();
  const SortedSpectrum f = sorted_spectrum(m.f, options, "F");
  s.f = dominant_spectrum(f.decomposition);
  if (f.every_eigenvalue) {
    // I + F has the same eigenvectors and eigenvalues 1 + λ.
    linalg::Eigendecomposition shifted = f.decomposition;
    shifted.eigenvalues.array() += 1.0;
    s.identity_plus_f = dominant_spectrum(shifted);
  } else {
    const Matrix identity_plus_f = m.f + Matrix::Identity(m.f.rows(), m.f.cols());
    const SortedSpectrum shifted = sorted_spectrum(identity_plus_f, options, "I + F");
    s.identity_plus_f = dominant_spectrum(shifted.decomposition);
    if (!shifted.note.empty()) s.notes.push_back(shifted.note);
  }
  if (f.note.empty()) {
    s.full = f.every_eigenvalue;
    s.eigenvalues = f.decomposition.eigenvalues;
    s.eigenvectors = f.decomposition.eigenvectors;
  } else {
    s.full = false;
    s.notes.insert(s.notes.begin(), f.note);
    const linalg::Eigendecomposition top = leading(f.decomposition, std::min(options.top_k, m.f.rows() - 2));
    s.eigenvalues = top.eigenvalues;
    s.eigenvectors = top.eigenvectors;
  }
  return s;
}

std::vector<LayerSpectrum> layer_spectra(const std::vector<LayerMatrix>& matrices, const SpectrumOptions& options,
                                         const std::function<void(const LayerSpectrum&)>& done) {
  const auto n = static_cast<int64_t>(matrices.size());
  std::vector<LayerSpectrum> spectra(matrices.size());
  const int64_t batch = n == 0 ? 1 : operators_in_flight(matrices.front().f.rows(), 6, n);
  for (int64_t first = 0; first < n; first += batch) {
    const int64_t end = std::min(n, first + batch);
    parallel_tasks(end - first, [&](int64_t i) {
      const auto l = static_cast<size_t>(first + i);
      spectra[l] = layer_spectrum(matrices[l], options);
    });
    if (done)
      for (int64_t l = first; l < end; ++l) done(spectra[static_cast<size_t>(l)]);
  }
  return spectra;
}

Matrix dominant_basis(const DominantSpectrum& s) {
  if (!s.complex_pair) return s.eigenvector_real.normalized();
  Matrix plane(s.eigenvector_real.size(), 2);
  plane.col(0) = s.eigenvector_real;
  plane.col(1) = s.eigenvector_imag;
  return orthonormalize(plane);
}

std::vector<EigenGroup> eigen_groups(const ComplexVector& eigenvalues) {
  std::vector<EigenGroup> groups;
  for (Index i = 0; i < eigenvalues.size(); ++i) {
    const bool pair = eigenvalues[i].imag() != 0 && i + 1 < eigenvalues.size() &&
                      eigenvalues[i + 1] == std::conj(eigenvalues[i]);
    groups.push_back({i, pair});
    if (pair) ++i;
  }
  return groups;
}

Matrix invariant_basis(const ComplexMatrix& eigenvectors, const std::vector<EigenGroup>& groups) {
  std::vector<Vector> columns;
  for (const EigenGroup& g : groups) {
    columns.push_back(eigenvectors.col(g.start).real());
    if (g.pair || eigenvectors.col(g.start).imag().norm() > 0) columns.push_back(eigenvectors.col(g.start).imag());
  }
  Matrix m(eigenvectors.rows(), static_cast<Index>(columns.size()));
  for (size_t j = 0; j < columns.size(); ++j) m.col(j) = columns[j];
  return orthonormalize(m);
}

double alignment(const Eigen::Ref<const Vector>& x, const Matrix& basis) {
  const double norm = x.norm();
  return norm > 0 ? (basis.transpose() * x).norm() / norm : 0.0;
}

std::vector<double> token_covariance_alignments(const Matrix& tokens, Index k, uint64_t seed) {
  TDYN_CHECK(k >= 1 && k <= tokens.cols());
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  Matrix g(tokens.rows(), k);
  for (Index j = 0; j < k; ++j)
    for (Index i = 0; i < tokens.rows(); ++i) g(i, j) = normal(rng);  // column by column: k = 1 and 2 share the first
  // Uncentred: the directions come from the tokens' second moment, which holds their mean direction, as the
  // alignments below measure the uncentred tokens (centred, a strong common direction could never be drawn).
  const Matrix u = tokens.transpose() * g;
  const Eigen::ColPivHouseholderQR<Matrix> qr(u);
  std::vector<double> out(tokens.rows(), std::numeric_limits<double>::quiet_NaN());
  // Rank by the QR's own threshold, relative to the largest column: directions of round-off size are no directions.
  if (tokens.rows() == 0 || qr.rank() < k) return out;
  const Matrix basis = qr.householderQ() * Matrix::Identity(tokens.cols(), k);
  for (Index i = 0; i < tokens.rows(); ++i) out[i] = alignment(tokens.row(i).transpose(), basis);
  return out;
}

uint64_t token_covariance_seed(int64_t layer, int64_t sample) {
  // splitmix64 of (layer, sample): neighbouring layers and samples get unrelated streams.
  uint64_t z = (static_cast<uint64_t>(layer) << 40) ^ static_cast<uint64_t>(sample) ^ 0x6a09e667f3bcc909ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double random_alignment_baseline(Index d, Index k) {
  TDYN_CHECK(d >= 1 && k >= 1 && k <= d);
  const double dd = static_cast<double>(d), kk = static_cast<double>(k);
  return std::exp(std::lgamma((kk + 1) / 2) + std::lgamma(dd / 2) - std::lgamma(kk / 2) - std::lgamma((dd + 1) / 2));
}

}  // namespace tdyn
