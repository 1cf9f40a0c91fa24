// Timing helper for bench/jacobian_vs_torch.sh (prints one JSON object per call):
//   jacobian_bench init DIR D LAYERS [D_MLP] a random Llama (HF layout, d_model D, d_head 64, n_kv_heads = n_heads/2)
//                                           written by write_random_init; d_mlp by Llama's rule, 256 ⌈(8D/3)/256⌉
//                                           (2048 at D = 768, 5632 at D = 2048), unless given
//   jacobian_bench single MODEL T REPEATS   one exact d × d Jacobian of layer 0's attention and MLP steps at the last
//                                           of T tokens (ids 1..T): jacobian() (median of REPEATS) and the tangent-
//                                           propagation reference (once); writes MODEL/../jac_{attn,mlp}.npy
//   jacobian_bench mean MODEL S T MODE      mean over S samples of T tokens at the last position, MODE structured |
//                                           plain (S per-sample Jacobians summed); seconds and peak RSS
//   jacobian_bench forward MODEL S T        the float32 forward pass alone over the same S samples, threaded over
//                                           samples as `mean` is; seconds
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include <nlohmann/json.hpp>

#include "analysis/jacobian/means.h"
#include "core/npy.h"
#include "linalg/gemm.h"
#include "model/init.h"
#include "model/loader.h"

namespace tdyn {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

void write_matrix(const fs::path& path, const linalg::Matrix& m) {
  const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> r = m;
  write_npy(path, r.data(), {r.rows(), r.cols()});
}

// S samples of T token ids, the same for `mean` and `forward`.
std::vector<Sample> bench_samples(int64_t S, int64_t T, int64_t d_vocab) {
  std::vector<Sample> samples(S);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t i = 0; i < T; ++i) samples[s].ids.push_back(static_cast<int32_t>(1 + (i * 31 + s * 17) % (d_vocab - 1)));
  return samples;
}

int main_impl(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  nlohmann::json out;
  if (mode == "init" && (argc == 5 || argc == 6)) {
    const int64_t d = std::stoll(argv[3]), layers = std::stoll(argv[4]), heads = d / 64;
    const int64_t d_mlp = argc == 6 ? std::stoll(argv[5]) : (8 * d / 3 + 255) / 256 * 256;
    nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 256},
                             {"hidden_size", d}, {"intermediate_size", d_mlp}, {"num_hidden_layers", layers},
                             {"num_attention_heads", heads}, {"num_key_value_heads", std::max<int64_t>(1, heads / 2)},
                             {"hidden_act", "silu"}, {"max_position_embeddings", 512}, {"rms_norm_eps", 1e-5},
                             {"rope_theta", 10000.0}, {"tie_word_embeddings", false}, {"initializer_range", 0.02},
                             {"torch_dtype", "float32"}};
    write_random_init(config, argv[2], 1);
    out["written"] = argv[2];
  } else if (mode == "single" && argc == 5) {
    const fs::path model_path = argv[2];
    const int64_t T = std::stoll(argv[3]), repeats = std::stoll(argv[4]);
    JacobianModel jm(std::make_shared<Transformer>(load_model(model_path)));
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < T; ++i) ids.push_back(static_cast<int32_t>(1 + i % (jm.config().d_vocab - 1)));
    const SequenceState state = jm.run(ids);
    for (Sublayer which : {Sublayer::Attention, Sublayer::Mlp}) {
      std::vector<double> times;
      linalg::Matrix j = jm.jacobian(state, 0, which, T - 1);  // the first call also makes the float64 weights
      for (int64_t r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        j = jm.jacobian(state, 0, which, T - 1);
        times.push_back(seconds_since(t0));
      }
      std::sort(times.begin(), times.end());
      const auto t0 = std::chrono::steady_clock::now();
      const linalg::Matrix reference = jm.jacobian_by_tangents(state, 0, which, T - 1);
      const double tangents_s = seconds_since(t0);
      out[to_string(which)] = {{"jacobian_s", times[times.size() / 2]}, {"tangents_s", tangents_s},
                               {"relative_difference_to_tangents", (j - reference).norm() / reference.norm()}};
      write_matrix(model_path.parent_path() / fmt::format("jac_{}.npy", to_string(which)), j);
    }
    out["d_model"] = jm.d_model();
    out["d_mlp"] = jm.config().d_mlp;
  } else if (mode == "forward" && argc == 5) {
    const int64_t S = std::stoll(argv[3]), T = std::stoll(argv[4]);
    const Transformer t(load_model(argv[2]));
    const std::vector<Sample> samples = bench_samples(S, T, t.config().d_vocab);
    t.forward(samples[0].ids);  // maps the weights in
    const SerialBlas serial_blas(S > 1 && omp_get_max_threads() > 1);  // as mean_jacobians runs its threads
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t s = 0; s < S; ++s) t.forward(samples[s].ids);
    out = {{"mode", "forward"}, {"S", S}, {"T", T}, {"seconds", seconds_since(t0)}};
  } else if (mode == "mean" && argc == 6) {
    const int64_t S = std::stoll(argv[3]), T = std::stoll(argv[4]);
    JacobianModel jm(std::make_shared<Transformer>(load_model(argv[2])));
    const std::vector<Sample> samples = bench_samples(S, T, jm.config().d_vocab);
    MeanJacobianOptions opts;
    opts.structured = std::string(argv[5]) == "structured";
    const double rss_before = peak_rss_mib();
    auto t0 = std::chrono::steady_clock::now();
    const MeanJacobians mj = mean_jacobians(jm, samples, opts);
    out = {{"mode", argv[5]}, {"S", S}, {"T", T}, {"seconds", seconds_since(t0)}, {"peak_rss_mib", peak_rss_mib()},
           {"peak_rss_mib_before", rss_before}, {"sublayers", mj.mean.size()}, {"d_model", jm.d_model()}};
  } else {
    std::cerr << "usage: jacobian_bench init DIR D LAYERS [D_MLP] | single MODEL T REPEATS | mean MODEL S T structured|plain | "
                 "forward MODEL S T\n";
    return 2;
  }
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace
}  // namespace tdyn

int main(int argc, char** argv) {
  try {
    return tdyn::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "jacobian_bench: " << e.what() << "\n";
    return 1;
  }
}
