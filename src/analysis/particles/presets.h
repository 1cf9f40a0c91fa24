// Experiments as data: an ExperimentSpec names every choice of a particle simulation (sizes, time, seed, how
// each matrix and the initial tokens are made) as plain values that results.json records; build() turns it
// into matrices. The presets are the authors' experiments (SPEC §4), each a spec that the CLI may override.
//
// Matrix specs (for --query, --key, --value, --output, --ffn-in, --ffn-out) are a generator or a .npy file:
//   identity              I (rectangular eye when not square)
//   minus-identity        −I
//   gaussian[:s]          i.i.d. N(0, s²/cols) entries (s = 1: ‖M x‖ ≈ ‖x‖)
//   psd[:s]               M Mᵀ with M square gaussian, scaled to spectral radius s (default 1)
//   diag:a,b,...          diagonal with the listed entries (one per row)
//   identity-last:c       I with its last diagonal entry replaced by c (polytope × subspace, c < 0)
//   hyperplanes           the 2 × 2 matrix of the paper's hyperplane figure (simple positive top eigenvalue)
//   sym-mixed:k           symmetric, k simple positive eigenvalues 2 > ... > 1 and d − k negative ones in
//                         [−1, −0.5), in a random orthonormal basis (codimension-k hyperplanes)
//   sparse-sym[:density]  sparse symmetric with |λ| ≥ 1 and a simple top eigenvalue, by Gershgorin discs
//   same                  (--key only) K = Q, so that QᵀK = QᵀQ ⪰ 0
//   PATH.npy              a float array of the expected shape
// Initial tokens (--init): uniform:a (U[−a, a]^d), gaussian:s (N(0, s² I)), sphere (uniform on S^{d−1}), or an
// (n × d) PATH.npy, which then sets n and d.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/particles/dynamics.h"

namespace tdyn::particles {

struct ExperimentSpec {
  std::string preset = "custom";
  std::string description;
  int64_t n = 20, d = 2;
  int64_t d_head = 0;  // rows of Q and K; 0 = d
  double t_end = 5.0, dt = 0.1;
  uint64_t seed = 0;
  std::string initial = "uniform:5";
  std::string query = "identity", key = "same", value = "identity", output;  // output empty: none
  std::string ffn = "none";  // none, relu, tanh
  int64_t d_ff = 0;          // hidden width; 0 = d
  std::string ffn_in = "gaussian", ffn_out = "gaussian:0.5", ffn_b_in, ffn_b_out;  // biases: .npy or empty
  bool sphere = false;
};

struct Experiment {
  ParticleSystem system;
  Matrix x0;  // (n × d)
};

const std::vector<std::string>& preset_names();
std::string preset_list();  // "polytope, hyperplanes, ..." for help and errors
// The spec of a named preset; throws Error for an unknown name.
ExperimentSpec preset(const std::string& name);

// Makes the matrices and initial tokens; throws Error naming the flag/file on bad specs or shapes.
Experiment build(const ExperimentSpec& spec);

// One matrix from a spec (see the table above); `flag` names it in error messages, `role` picks the random
// stream so that changing one matrix's spec leaves the others unchanged.
Matrix make_matrix(const std::string& spec, int64_t rows, int64_t cols, uint64_t seed, int role, const std::string& flag);

}  // namespace tdyn::particles
