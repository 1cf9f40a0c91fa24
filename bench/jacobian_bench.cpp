// Timing helper for bench/jacobian_vs_torch.sh (prints one JSON object per call):
//   jacobian_bench init DIR D LAYERS        a random Llama (HF layout, d_model D, d_head 64) written by write_random_init
//   jacobian_bench single MODEL T REPEATS   one exact d × d Jacobian of layer 0's attention and MLP steps at the last
//                                           of T tokens (ids 1..T), median seconds; writes MODEL/../jac_{attn,mlp}.npy
//   jacobian_bench mean MODEL S T MODE      mean over S samples of T tokens at the last position, MODE structured |
//                                           plain (S per-sample Jacobians summed); seconds and peak RSS
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include <nlohmann/json.hpp>

#include "analysis/jacobian_analysis.h"
#include "core/npy.h"
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

int main_impl(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  nlohmann::json out;
  if (mode == "init" && argc == 5) {
    const int64_t d = std::stoll(argv[3]), layers = std::stoll(argv[4]), heads = d / 64;
    nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 256},
                             {"hidden_size", d}, {"intermediate_size", 8 * d / 3 / 32 * 32}, {"num_hidden_layers", layers},
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
      std::vector<double> plain, structured;
      linalg::Matrix j;
      for (int64_t r = 0; r < repeats; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        j = jm.jacobian(state, 0, which, T - 1);
        plain.push_back(seconds_since(t0));
        t0 = std::chrono::steady_clock::now();
        const linalg::Matrix js = jm.structure(state, 0, which, T - 1).dense();
        structured.push_back(seconds_since(t0));
      }
      std::sort(plain.begin(), plain.end());
      std::sort(structured.begin(), structured.end());
      out[to_string(which)] = {{"plain_jvp_s", plain[plain.size() / 2]}, {"structured_dense_s", structured[structured.size() / 2]}};
      write_matrix(model_path.parent_path() / fmt::format("jac_{}.npy", to_string(which)), j);
    }
    out["d_model"] = jm.d_model();
  } else if (mode == "mean" && argc == 6) {
    const int64_t S = std::stoll(argv[3]), T = std::stoll(argv[4]);
    JacobianModel jm(std::make_shared<Transformer>(load_model(argv[2])));
    std::vector<Sample> samples(S);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t i = 0; i < T; ++i) samples[s].ids.push_back(static_cast<int32_t>(1 + (i * 31 + s * 17) % (jm.config().d_vocab - 1)));
    MeanJacobianOptions opts;
    opts.structured = std::string(argv[5]) == "structured";
    const double rss_before = peak_rss_mib();
    auto t0 = std::chrono::steady_clock::now();
    const MeanJacobians mj = mean_jacobians(jm, samples, opts);
    out = {{"mode", argv[5]}, {"S", S}, {"T", T}, {"seconds", seconds_since(t0)}, {"peak_rss_mib", peak_rss_mib()},
           {"peak_rss_mib_before", rss_before}, {"sublayers", mj.mean.size()}, {"d_model", jm.d_model()}};
  } else {
    std::cerr << "usage: jacobian_bench init DIR D LAYERS | single MODEL T REPEATS | mean MODEL S T structured|plain\n";
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
