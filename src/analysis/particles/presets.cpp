// Matrix generators, initial distributions and the presets of the paper's experiments.
#include "analysis/particles/presets.h"

#include <cmath>
#include <map>
#include <random>

#include <Eigen/Eigenvalues>
#include <Eigen/QR>

#include "core/error.h"
#include "core/npy.h"
#include "core/text.h"

namespace tdyn::particles {
namespace {

// Random streams, one per role, so that overriding one matrix does not change the others.
enum Role { kInitial = 1, kQuery, kKey, kValue, kOutput, kFfnIn, kFfnOut };

std::mt19937_64 stream(uint64_t seed, int role) {
  std::seed_seq sequence{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(role)};
  return std::mt19937_64(sequence);
}

bool is_npy(const std::string& spec) { return spec.size() > 4 && spec.substr(spec.size() - 4) == ".npy"; }

// "name:param" → (name, param); the parameter is optional.
std::pair<std::string, std::string> split_spec(const std::string& spec) {
  const auto colon = spec.find(':');
  if (colon == std::string::npos) return {spec, ""};
  return {spec.substr(0, colon), spec.substr(colon + 1)};
}

double number(const std::string& text, double fallback, const std::string& flag, const std::string& spec) {
  if (text.empty()) return fallback;
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size() && std::isfinite(value)) return value;
  } catch (const std::exception&) {
  }
  fail("{} '{}': '{}' is not a number", flag, spec, text);
}

Matrix gaussian(int64_t rows, int64_t cols, double scale, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, scale / std::sqrt(static_cast<double>(std::max<int64_t>(cols, 1))));
  Matrix m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

Matrix random_orthogonal(int64_t d, std::mt19937_64& rng) {
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(Eigen::MatrixXd(gaussian(d, d, 1.0, rng)));
  return Matrix(qr.householderQ());
}

// Sparse symmetric matrix with every eigenvalue of modulus ≥ 1 and a simple top eigenvalue, by Gershgorin:
// each diagonal entry is pushed beyond ±(1 + radius of its disc), and the disc of one row is moved right of
// all the others, so it holds exactly one eigenvalue (the largest) and no disc meets (−1, 1).
Matrix sparse_symmetric(int64_t d, double density, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  // Off-diagonal scale chosen so that a disc radius is about 0.4 whatever d and the density.
  std::normal_distribution<double> normal(0.0, 0.5 / std::sqrt(std::max(1.0, density * d)));
  Matrix v = Matrix::Zero(d, d);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = i + 1; j < d; ++j)
      if (unit(rng) < density) v(i, j) = v(j, i) = normal(rng);
  Vector radius = v.cwiseAbs().rowwise().sum();
  for (int64_t i = 0; i < d; ++i) v(i, i) = (unit(rng) < 0.5 ? -1.0 : 1.0) * (1.0 + radius[i] + 0.5 * unit(rng));
  double right_edge_of_others = -INFINITY;
  for (int64_t i = 1; i < d; ++i) right_edge_of_others = std::max(right_edge_of_others, v(i, i) + radius[i]);
  if (d > 1) v(0, 0) = std::max(right_edge_of_others, 1.0) + radius[0] + 0.5;
  return v;
}

Matrix read_matrix(const std::string& path, int64_t rows, int64_t cols, const std::string& flag) {
  NpyArray a = read_npy(path);
  Shape expected{rows, cols};
  // A (d) vector is accepted where a (d × 1) column is expected, and a scalar for a 1 × 1 matrix.
  bool fits = a.shape == expected || (a.shape.size() == 1 && cols == 1 && a.shape[0] == rows) ||
              (a.shape.empty() && rows == 1 && cols == 1);
  if (!fits) fail("{} {}: expected shape {}, got {}", flag, path, shape_str(expected), shape_str(a.shape));
  std::vector<double> values = a.as_double();
  Matrix m = Eigen::Map<Matrix>(values.data(), rows, cols);
  if (!m.allFinite()) fail("{} {}: contains NaN or infinite entries", flag, path);
  return m;
}

Vector read_vector(const std::string& path, int64_t size, const std::string& flag) {
  if (path.empty()) return Vector();
  return read_matrix(path, size, 1, flag).col(0);
}

const std::map<std::string, ExperimentSpec>& preset_table() {
  // Sizes, horizons and Δt follow the paper's figures (Euler with frozen P, Δt = 0.1, x0 ~ U[−5, 5]).
  static const std::map<std::string, ExperimentSpec> table = [] {
    std::map<std::string, ExperimentSpec> t;
    auto add = [&](const std::string& name, const std::string& description, int64_t n, int64_t d, double t_end,
                   const std::string& query, const std::string& key, const std::string& value) {
      ExperimentSpec s;
      s.preset = name;
      s.description = description;
      s.n = n, s.d = d, s.t_end = t_end, s.query = query, s.key = key, s.value = value;
      t[name] = s;
    };
    add("polytope", "Theorem 2.1: V = I, QᵀK = I ≻ 0; the rescaled tokens z_i converge to vertices of a convex "
        "polytope (use --d 3 for the 3-D figure)", 20, 2, 5.0, "identity", "same", "identity");
    add("hyperplanes", "Theorem 3.1: V with a simple positive top eigenvalue (the paper's 2 × 2 matrix); the values "
        "φ1*(z_i) converge to at most 3 levels, so the tokens end on at most 3 parallel lines", 20, 2, 5.0,
        "identity", "same", "hyperplanes");
    add("codim-k", "Symmetric V with 2 simple positive and 1 negative eigenvalue: each positive direction has at most "
        "3 levels, so the tokens end on intersections of hyperplanes (codimension 2: lines in ℝ³); T = 10 because the "
        "direction of λ = 1.5 still has 4 levels at T = 5", 20, 3, 10.0,
        "identity", "same", "sym-mixed:2");
    add("polytope-x-subspace", "V = I except V[d−1, d−1] = −0.5: polytope vertices in the top eigenspace times a "
        "subspace in the last coordinate", 20, 3, 5.0, "identity", "same", "identity-last:-0.5");
    // Q = K = N Nᵀ (N square gaussian) scaled to spectral radius 1, so QᵀK = (N Nᵀ)² ≻ 0 on a fixed time scale.
    add("leaders", "d = 1, V = M Mᵀ > 0, QᵀK = N Nᵀ > 0: P(t) tends to a Boolean matrix whose non-zero columns are "
        "the extreme tokens (the leaders); --d 2 for the 2-D version", 20, 1, 5.0, "psd", "same", "psd");
    add("lowrank", "n = 40 tokens in d = 80, V = M Mᵀ, QᵀK = N Nᵀ: the rank of P(t) drops to a few leaders",
        40, 80, 10.0, "gaussian", "same", "psd");
    add("high-dim", "n = d = 128, sparse symmetric V with |λ| ≥ 1 and a simple top eigenvalue: at most 3 levels of "
        "φ1*(z) and a low-rank Boolean P", 128, 128, 5.0, "identity", "same", "sparse-sym");
    add("collapse", "V = −I: the tokens collapse to 0 and P tends to the uniform matrix 1/n", 20, 2, 10.0,
        "identity", "same", "minus-identity");
    return t;
  }();
  return table;
}

}  // namespace

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = {"polytope", "hyperplanes", "codim-k", "polytope-x-subspace",
                                                 "leaders",  "lowrank",     "high-dim", "collapse"};
  return names;
}

std::string preset_list() {
  std::string out;
  for (const auto& name : preset_names()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

ExperimentSpec preset(const std::string& name) {
  const auto& table = preset_table();
  auto it = table.find(name);
  if (it == table.end()) fail("--preset: unknown preset '{}'; expected one of {}", name, preset_list());
  return it->second;
}

Matrix make_matrix(const std::string& spec, int64_t rows, int64_t cols, uint64_t seed, int role, const std::string& flag) {
  if (is_npy(spec)) return read_matrix(spec, rows, cols, flag);
  auto [name, param] = split_spec(spec);
  auto rng = stream(seed, role);
  auto need_square = [&] {
    if (rows != cols) fail("{} '{}' makes a square matrix but [{}, {}] is needed", flag, spec, rows, cols);
  };
  if (name == "identity") return Matrix::Identity(rows, cols);
  if (name == "minus-identity") return -Matrix::Identity(rows, cols);
  if (name == "gaussian") return gaussian(rows, cols, number(param, 1.0, flag, spec), rng);
  if (name == "psd") {
    need_square();
    Matrix m = gaussian(rows, rows, 1.0, rng);
    Matrix psd = m * m.transpose();
    psd = 0.5 * (psd + psd.transpose());
    // Scaled to spectral radius s, so that the time scale does not depend on the draw (in d = 1, M Mᵀ = m²
    // could be arbitrarily small).
    return psd * (number(param, 1.0, flag, spec) / Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(Eigen::MatrixXd(psd)).eigenvalues().maxCoeff());
  }
  if (name == "diag") {
    std::vector<double> entries;
    for (const std::string& item : split_list(param)) entries.push_back(number(item, NAN, flag, spec));
    if (static_cast<int64_t>(entries.size()) != std::min(rows, cols))
      fail("{} '{}': expected {} diagonal entries, got {}", flag, spec, std::min(rows, cols), entries.size());
    Matrix m = Matrix::Zero(rows, cols);
    for (size_t i = 0; i < entries.size(); ++i) m(i, i) = entries[i];
    return m;
  }
  if (name == "identity-last") {
    need_square();
    Matrix m = Matrix::Identity(rows, cols);
    m(rows - 1, cols - 1) = number(param, -0.5, flag, spec);
    return m;
  }
  if (name == "hyperplanes") {
    if (rows != 2 || cols != 2) fail("{} 'hyperplanes' is the paper's 2 × 2 matrix and needs d = 2, got [{}, {}]", flag, rows, cols);
    Matrix m(2, 2);
    m << 0.64709742, 0.81911926, 0.61210449, 0.63263484;
    return m;
  }
  if (name == "sym-mixed") {
    need_square();
    const double k = number(param, 1.0, flag, spec);
    if (k < 1 || k > rows || k != std::floor(k)) fail("{} '{}': k must be a whole number in [1, {}]", flag, spec, rows);
    Vector lambda(rows);
    const int64_t positive = static_cast<int64_t>(k), negative = rows - positive;
    for (int64_t j = 0; j < positive; ++j) lambda[j] = 2.0 - static_cast<double>(j) / positive;
    for (int64_t j = 0; j < negative; ++j) lambda[positive + j] = -0.5 - 0.5 * static_cast<double>(j) / negative;
    Matrix u = random_orthogonal(rows, rng);
    Matrix m = u * lambda.asDiagonal() * u.transpose();
    return 0.5 * (m + m.transpose());
  }
  if (name == "sparse-sym") {
    need_square();
    const double density = number(param, 0.05, flag, spec);
    if (!(density >= 0 && density <= 1)) fail("{} '{}': density must be in [0, 1]", flag, spec);
    return sparse_symmetric(rows, density, rng);
  }
  fail("{}: unknown matrix spec '{}'; expected identity, minus-identity, gaussian[:s], psd[:s], diag:a,b,..., "
       "identity-last:c, hyperplanes, sym-mixed:k, sparse-sym[:density] or a .npy file",
       flag, spec);
}

Experiment build(const ExperimentSpec& spec) {
  Experiment e;
  int64_t n = spec.n, d = spec.d;
  if (is_npy(spec.initial)) {
    NpyArray a = read_npy(spec.initial);
    if (a.shape.size() != 2) fail("--init {}: expected an (n, d) array, got shape {}", spec.initial, shape_str(a.shape));
    n = a.shape[0], d = a.shape[1];
    std::vector<double> values = a.as_double();
    e.x0 = Eigen::Map<Matrix>(values.data(), n, d);
    if (!e.x0.allFinite()) fail("--init {}: contains NaN or infinite entries", spec.initial);
  } else {
    if (n < 1 || d < 1) fail("--n and --d must be at least 1, got n = {}, d = {}", n, d);
    auto rng = stream(spec.seed, kInitial);
    auto [name, param] = split_spec(spec.initial);
    e.x0.resize(n, d);
    if (name == "uniform") {
      const double a = number(param, 5.0, "--init", spec.initial);
      std::uniform_real_distribution<double> uniform(-a, a);
      for (int64_t i = 0; i < e.x0.size(); ++i) e.x0.data()[i] = uniform(rng);
    } else if (name == "gaussian") {
      std::normal_distribution<double> normal(0.0, number(param, 1.0, "--init", spec.initial));
      for (int64_t i = 0; i < e.x0.size(); ++i) e.x0.data()[i] = normal(rng);
    } else if (name == "sphere") {
      std::normal_distribution<double> normal(0.0, 1.0);
      for (int64_t i = 0; i < e.x0.size(); ++i) e.x0.data()[i] = normal(rng);
      normalize_rows(e.x0);
    } else {
      fail("--init: unknown initial distribution '{}'; expected uniform:a, gaussian:s, sphere or an (n, d) .npy file",
           spec.initial);
    }
  }
  // d_head: given, else the rows of a Q file, else d.
  int64_t d_head = spec.d_head > 0 ? spec.d_head : d;
  if (spec.d_head <= 0 && is_npy(spec.query)) {
    Shape shape = read_npy(spec.query).shape;
    if (shape.size() == 2) d_head = shape[0];
  }
  AttentionHead& head = e.system.head;
  head.query = make_matrix(spec.query, d_head, d, spec.seed, kQuery, "--query");
  head.key = spec.key == "same" ? head.query : make_matrix(spec.key, d_head, d, spec.seed, kKey, "--key");
  if (spec.output.empty()) {
    head.value = make_matrix(spec.value, d, d, spec.seed, kValue, "--value");
  } else {
    // With an output matrix the value matrix may have its own width (a head's d_head): read it from the file.
    int64_t d_value = d;
    if (is_npy(spec.value)) {
      Shape shape = read_npy(spec.value).shape;
      if (shape.size() == 2) d_value = shape[0];
    }
    head.value = make_matrix(spec.value, d_value, d, spec.seed, kValue, "--value");
    head.output = make_matrix(spec.output, d, d_value, spec.seed, kOutput, "--output");
  }
  head.validate();
  if (spec.ffn != "none") {
    if (spec.ffn != "relu" && spec.ffn != "tanh") fail("--ffn: expected none, relu or tanh; got '{}'", spec.ffn);
    const int64_t d_ff = spec.d_ff > 0 ? spec.d_ff : d;
    FeedForward ffn;
    ffn.activation = spec.ffn == "relu" ? Activation::relu : Activation::tanh;
    ffn.w_in = make_matrix(spec.ffn_in, d_ff, d, spec.seed, kFfnIn, "--ffn-in");
    ffn.w_out = make_matrix(spec.ffn_out, d, d_ff, spec.seed, kFfnOut, "--ffn-out");
    ffn.b_in = read_vector(spec.ffn_b_in, d_ff, "--ffn-b-in");
    ffn.b_out = read_vector(spec.ffn_b_out, d, "--ffn-b-out");
    ffn.validate(d);
    e.system.ffn = ffn;
  }
  e.system.project_to_sphere = spec.sphere;
  return e;
}

}  // namespace tdyn::particles
