// The shared sample pass (analysis/pass/run.h): layer by layer, its sums equal whole forward passes' on every
// family, its reduction order is fixed (repeatable bit for bit; chunking changes only round-off), the pass file
// rejects damage, a run interrupted or killed with SIGKILL and resumed ends identical to an uninterrupted one, and
// two MPI ranks give the single-process result within 1e-12.
#include <signal.h>
#include <sys/wait.h>
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "analysis/jacobian/jacobian_sums.h"
#include "analysis/jacobian/means.h"
#include "analysis/pass/accumulator.h"
#include "analysis/pass/source.h"
#include "analysis/pass/run.h"
#include "analysis/power/pass.h"
#include "analysis/topology/correlation_sums.h"
#include "analysis/topology/topology_analysis.h"
#include "core/npy.h"
#include "kernels/packed_matrix.h"
#include "model/init.h"
#include "model/loader.h"
#include "test_util.h"

namespace tdyn {
namespace {

using test::kStories;

std::vector<Sample> random_samples(int64_t count, int64_t d_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Sample> samples;
  for (int64_t s = 0; s < count; ++s) {
    Sample sample;
    sample.source_index = s;
    const int64_t n = 4 + static_cast<int64_t>(rng() % 20);
    for (int64_t i = 0; i < n; ++i) sample.ids.push_back(static_cast<int32_t>(rng() % d_vocab));
    samples.push_back(sample);
  }
  return samples;
}

// Two pass files hold the same bytes.
bool same_bits(const PassFile& a, const PassFile& b) { return read_file(a.path()) == read_file(b.path()); }

struct StoriesPass : ::testing::Test {
  void SetUp() override {
    if (!fs::exists(test::shared_dir() / kStories)) GTEST_SKIP() << "shared test data not found: " << test::shared_dir() / kStories;
    model = load_model(test::shared_dir() / kStories);
    transformer = std::make_shared<const Transformer>(model);
    jacobians = std::make_unique<JacobianModel>(transformer);
    samples = random_samples(21, model->config.d_vocab, 5);
    spec.boundaries = residual_boundaries(model->config.n_layers, BoundarySet::Sublayers);
    spec.chunk = 4;
    // Per-token probes: the norm, and the alignment with the first unit axis, at two boundaries.
    const int64_t d = model->config.d_model;
    spec.probes = {{"norm", "blocks.0.hook_resid_pre", {}}, {"axis0", "blocks.1.hook_resid_mid", linalg::Matrix::Identity(d, 1)}};
  }
  std::shared_ptr<const Model> model;
  std::shared_ptr<const Transformer> transformer;
  std::unique_ptr<JacobianModel> jacobians;
  std::vector<Sample> samples;
  PassSpec spec;
};

TEST_F(StoriesPass, RepeatsBitForBitAndChunkingChangesOnlyRoundOff) {
  const PassFile first = run_pass(*transformer, jacobians.get(), samples, spec, {});
  const PassFile again = run_pass(*transformer, jacobians.get(), samples, spec, {});
  EXPECT_TRUE(same_bits(first, again));
  EXPECT_EQ(first.n_samples(), 21);
  EXPECT_EQ(first.n_pairs(), 21);
  EXPECT_EQ(static_cast<int64_t>(probe_values(first, "norm").size()), first.n_tokens());
  // The norm probe equals the residual stream's own norms, token by token in sample order.
  std::vector<double> norms;
  for (const Sample& s : samples) {
    const SequenceState state = jacobians->run(s.ids);
    const Tensor& x = state.resid_pre.at(0);
    for (int64_t i = 0; i < x.dim(0); ++i) {
      const Eigen::VectorXd row = Eigen::Map<const Eigen::VectorXf>(x.row(i), x.dim(1)).cast<double>();
      norms.push_back(row.norm());
    }
  }
  test::expect_close(probe_values(first, "norm"), norms, 0, 0, "norm probe vs the residual stream");

  // Another thread count changes only the grouping of the additions.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(3);
  const PassFile three_threads = run_pass(*transformer, jacobians.get(), samples, spec, {});
  omp_set_num_threads(threads);
  for (size_t k = 0; k + 1 < spec.boundaries.size(); ++k) {
    const linalg::Matrix a = jacobian_sum(first, spec.boundaries[k].hook), b = jacobian_sum(three_threads, spec.boundaries[k].hook);
    EXPECT_LE((a - b).cwiseAbs().maxCoeff(), 1e-12 * b.cwiseAbs().maxCoeff()) << "3 threads vs 1: " << spec.boundaries[k].hook;
  }
  EXPECT_EQ(probe_values(first, "axis0"), probe_values(three_threads, "axis0"));

  PassSpec one_chunk = spec;
  one_chunk.chunk = 1000;
  const PassFile whole = run_pass(*transformer, jacobians.get(), samples, one_chunk, {});
  // One chunk stacks more samples' rows in each MLP product, which may round differently in float32.
  test::expect_close(probe_values(first, "axis0"), probe_values(whole, "axis0"), 1e-6, 1e-5, "axis0 probe, chunks of 16 vs one chunk");
  for (size_t k = 0; k < spec.boundaries.size(); ++k) {
    const std::string& hook = spec.boundaries[k].hook;
    if (k + 1 < spec.boundaries.size()) {
      const linalg::Matrix a = mean_jacobian(first, hook), b = mean_jacobian(whole, hook);
      EXPECT_LE((a - b).cwiseAbs().maxCoeff(), 1e-6 * b.cwiseAbs().maxCoeff()) << hook;
    }
    test::expect_close(correlation_sums(first, hook).correlation().values, correlation_sums(whole, hook).correlation().values, 1e-6, 1e-5,
                       "correlation at " + hook);
  }
}

// A pass run for no file goes to a temporary one, removed with the last copy of its PassFile.
TEST_F(StoriesPass, TemporaryPassFileGoesWithItsReader) {
  fs::path path;
  {
    const PassFile pass = run_pass(*transformer, jacobians.get(), samples, spec, {});
    path = pass.path();
    const PassFile copy = pass;
    EXPECT_TRUE(fs::exists(path));
  }
  EXPECT_FALSE(fs::exists(path));
}

// A temporary pass that fails (here: interrupted after three samples) leaves neither its file nor its working buffers.
TEST_F(StoriesPass, FailedTemporaryPassLeavesNoFiles) {
  const std::string prefix = fmt::format("tdyn-pass-{}-", ::getpid());
  auto leftovers = [&] {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(fs::temp_directory_path()))
      if (entry.path().filename().string().rfind(prefix, 0) == 0) found.push_back(entry.path().string());
    return found;
  };
  ASSERT_EQ(leftovers(), std::vector<std::string>{});
  PassControl control;
  int64_t done = 0;
  control.progress = [&](int64_t n) {
    EXPECT_FALSE(leftovers().empty());  // the file and its buffers exist while it runs
    if ((done += n) == 3) fail("interrupted");
  };
  EXPECT_THROW(run_pass(*transformer, jacobians.get(), samples, spec, {}, control), Error);
  EXPECT_EQ(leftovers(), std::vector<std::string>{});
}

// Layer by layer with KV-shared layers (whose keys come from an earlier layer, kept between layers) and per-layer
// inputs (Gemma 4), and for every other family: the pass's mean Jacobians and correlations equal those of whole
// forward passes (JacobianModel::run and mean_jacobians, the reference path) — to float64 round-off when each sample
// is a chunk of its own, to float32 round-off when a chunk's samples run their MLP steps as one product (whose
// float32 sums the host's BLAS may round differently by the product's shape, so that they reach the Jacobians of the
// last layers through the states: on one AVX-512 host, 6e-6 of the largest entry with chunks of 5). One chunk of all 24 samples has more Jacobian positions (about 300) than
// one slice makes input projections for, so it is measured in two slices.
TEST(FixturePass, LayerMajorEqualsWholeForwardPasses) {
  // The pass multiplies by each layer's float32 copy (with_float32_layer): packed when the build has packed kernels,
  // and then the whole forward passes are given packed weights too (LoadOptions::pack_weights), so that both sum
  // alike; without, llama/bf16's whole forward passes read the bf16 rows.
  LoadOptions load;
  load.pack_weights = true;
  for (const char* name : {"gemma4", "llama", "llama/bf16", "gpt2", "bert", "albert", "olmo3"}) {
    const fs::path dir = test::shared_dir() / "fixtures" / name;
    if (!fs::exists(dir)) GTEST_SKIP() << "shared test data not found: " << dir;
    auto model = load_model(dir, load);
    auto transformer = std::make_shared<const Transformer>(model);
    const JacobianModel jacobians(transformer);
    const std::vector<Sample> samples = random_samples(24, std::min<int64_t>(model->config.d_vocab, 200), 11);
    PassSpec spec;
    spec.boundaries = residual_boundaries(model->config.n_layers, BoundarySet::Sublayers);
    spec.positions = PositionSpec::parse("all");
    MeanJacobianOptions options;
    options.positions = spec.positions;
    const MeanJacobians reference = mean_jacobians(jacobians, samples, options);
    std::vector<SequenceState> states;
    for (const Sample& s : samples) states.push_back(jacobians.run(s.ids));
    struct Run {
      int64_t chunk;
      double tolerance, jacobian_tolerance;
    };
    for (const auto& [chunk, tolerance, jacobian_tolerance] : {Run{1, 1e-12, 1e-10}, Run{5, 1e-5, 3e-5}, Run{24, 1e-5, 3e-5}}) {
      spec.chunk = chunk;
      const std::string what = fmt::format("{}, chunks of {}, ", name, chunk);
      const PassFile pass = run_pass(*transformer, &jacobians, samples, spec, {});
      for (const ResidualBoundary& b : spec.boundaries) {
        std::vector<float> rows;
        for (const SequenceState& state : states) {
          const Tensor& x = b.sublayer < 0 ? state.resid_post.back() : b.sublayer % 2 == 0 ? state.resid_pre[b.layer] : state.resid_mid[b.layer];
          rows.insert(rows.end(), x.data.begin(), x.data.end());
        }
        topology::CorrelationAccumulator direct(model->config.d_model);
        direct.add_rows(std::span<const float>(rows));
        const topology::CorrelationAccumulator sums = correlation_sums(pass, b.hook);
        EXPECT_EQ(sums.n_rows(), direct.n_rows()) << what << b.hook;
        test::expect_close(sums.means(), direct.means(), tolerance, tolerance, what + "means at " + b.hook);
        test::expect_close(sums.correlation().values, direct.correlation().values, tolerance, tolerance, what + "correlation at " + b.hook);
        if (b.sublayer < 0) continue;
        const linalg::Matrix& expected = reference.mean[b.sublayer];
        EXPECT_LE((mean_jacobian(pass, b.hook) - expected).cwiseAbs().maxCoeff(), jacobian_tolerance * (1 + expected.cwiseAbs().maxCoeff()))
            << what << b.hook;
      }
    }
  }
}

// A layer's float32 copy: packed afresh when the build has packed kernels, else the stored values widened (a float32
// checkpoint then left as it is); the other layers are the loaded model's.
TEST(FixturePass, Float32LayerHoldsTheStoredValues) {
  TDYN_REQUIRE_SHARED("fixtures/llama/bf16");
  const auto model = load_model(test::shared_dir() / "fixtures/llama/bf16");
  const auto variant = with_float32_layer(model, 1);
  ASSERT_NE(variant.get(), model.get());
  const bool packing = !packed_products_kernel().empty();
  for (int64_t l = 0; l < model->config.n_layers; ++l) {
    const LayerWeights &stored = model->weights.layers[l], &widened = variant->weights.layers[l];
    for (auto member : {&LayerWeights::q, &LayerWeights::k, &LayerWeights::v, &LayerWeights::o, &LayerWeights::gate,
                        &LayerWeights::up, &LayerWeights::down}) {
      const Linear &a = stored.*member, &b = widened.*member;
      ASSERT_EQ(a.w.dtype, DType::BF16);
      EXPECT_EQ(a.w.packed, nullptr) << "the loaded model's matrices are packed only when asked";
      if (l != 1) {
        EXPECT_EQ(b.w.data, a.w.data) << "layer " << l;
        EXPECT_EQ(b.w.packed, a.w.packed) << "layer " << l;
        continue;
      }
      if (packing) {  // a packed copy of the layer's own, of the stored matrix
        EXPECT_EQ(b.w.data, a.w.data);
        ASSERT_NE(b.w.packed, nullptr);
        EXPECT_EQ(b.w.packed->n_out(), a.out);
        EXPECT_EQ(b.w.packed->n_in(), a.in);
        continue;
      }
      ASSERT_NE(b.w.f32(), nullptr);
      ASSERT_EQ(b.w.rows, a.w.rows);
      ASSERT_EQ(b.w.cols, a.w.cols);
      for (int64_t r = 0; r < a.w.rows; ++r)
        for (int64_t c = 0; c < a.w.cols; ++c) ASSERT_EQ(b.w.at(r, c), a.w.at(r, c)) << "layer 1, row " << r << ", column " << c;
    }
  }
  const auto float32 = load_model(test::shared_dir() / "fixtures/llama");
  EXPECT_EQ(with_float32_layer(float32, 0).get() == float32.get(), !packing);
}

// Packed products (LoadOptions::pack_weights) give the unpacked model's logits up to float32 round-off; a matrix is
// packed at the first prompt that multiplies it, decoding alone packs nothing, and the pass uses the model's copies.
TEST(FixturePass, PackedModelRunsAsUnpacked) {
  TDYN_REQUIRE_SHARED("fixtures/llama/bf16");
  if (packed_products_kernel().empty()) GTEST_SKIP() << "no packed kernels: built without oneDNN, or not for this CPU";
  LoadOptions packed_options;
  packed_options.pack_weights = true;
  const auto packed = load_model(test::shared_dir() / "fixtures/llama/bf16", packed_options);
  const auto unpacked = load_model(test::shared_dir() / "fixtures/llama/bf16");
  const PackedMatrix* q = packed->weights.layers[0].q.w.packed;
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(unpacked->weights.layers[0].q.w.packed, nullptr);
  EXPECT_EQ(with_float32_layer(packed, 0).get(), packed.get()) << "the pass would pack a layer the model holds packed";
  const Transformer t_packed(packed), t_unpacked(unpacked);
  const std::vector<int32_t> one = {5}, prompt = {1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45};
  t_packed.forward(one);
  EXPECT_FALSE(q->is_packed()) << "a decoding step's product packed the matrix";
  const Tensor a = t_packed.forward(prompt), b = t_unpacked.forward(prompt);
  EXPECT_TRUE(q->is_packed());
  EXPECT_TRUE(packed->weights.unembed.w.packed->is_packed());
  test::expect_close(std::vector<float>(a.ptr(), a.ptr() + a.size()), std::vector<float>(b.ptr(), b.ptr() + b.size()),
                     1e-4, 1e-4, "logits, packed against unpacked");
}

// An interruption at any point, resumed, gives the uninterrupted file bit for bit, and leaves no working buffer.
TEST_F(StoriesPass, ResumedPassEqualsUninterrupted) {
  const nlohmann::json identity = pass_identity({{"name", "stories260K"}}, samples, spec);
  const fs::path dir = test::scratch_dir("pass_resume");
  PassControl plain;
  plain.file = dir / "expected" / "pass.tdynpass";
  fs::create_directories(plain.file.parent_path());
  const PassFile expected = run_pass(*transformer, jacobians.get(), samples, spec, identity, plain);
  const int64_t n_layers = model->config.n_layers, n = static_cast<int64_t>(samples.size());
  for (int64_t stop_after : {int64_t{3}, n, n + 5, 3 * n + 1}) {
    const fs::path run_dir = dir / fmt::format("stop{}", stop_after);
    fs::create_directories(run_dir);
    PassControl control;
    control.file = run_dir / "pass.tdynpass";
    int64_t seen = 0;
    // The progress callback runs after a sample's layer: throwing there is a crash in the middle of that layer.
    control.progress = [&](int64_t done) {
      seen += done;
      if (seen > stop_after) throw std::runtime_error("interrupted");
    };
    EXPECT_THROW(run_pass(*transformer, jacobians.get(), samples, spec, identity, control), std::runtime_error);
    EXPECT_EQ(finished_layers(control.file), stop_after / n) << "stop after " << stop_after;
    EXPECT_THROW(PassFile::open(control.file), Error) << "an unfinished pass is not a finished one";

    PassControl resume;
    resume.file = control.file;
    resume.resume = true;
    std::vector<std::string> notes;
    resume.note = [&](const std::string& text) { notes.push_back(text); };
    const PassFile resumed = run_pass(*transformer, jacobians.get(), samples, spec, identity, resume);
    EXPECT_EQ(read_file(resumed.path()), read_file(expected.path())) << "stop after " << stop_after;
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find(fmt::format("{} of {} layers done", stop_after / n, n_layers)), std::string::npos) << notes[0];
    int64_t files = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator(run_dir)) ++files;
    EXPECT_EQ(files, 1) << "a completed pass leaves only its file";
  }

  // A pass of other samples is refused, naming the file.
  PassControl control;
  control.file = dir / "other.tdynpass";
  control.progress = [](int64_t) { throw std::runtime_error("interrupted"); };
  EXPECT_THROW(run_pass(*transformer, jacobians.get(), samples, spec, identity, control), std::runtime_error);
  control.progress = {};
  std::vector<Sample> other = samples;
  other.back().ids.push_back(1);
  control.resume = true;
  try {
    run_pass(*transformer, jacobians.get(), other, spec, pass_identity({{"name", "stories260K"}}, other, spec), control);
    ADD_FAILURE() << "a pass of other samples was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("other.tdynpass"), std::string::npos) << e.what();
  }
}

// A pass records the ablations its forward passes ran with: an unablated pass is not taken for an ablated model's.
// Each measurement's sums at every layer are the same however the samples are split: all on one thread of one
// process, or in interleaved chunks of 2 over two "ranks" (the first on two threads), the second rank's sums
// serialised and merged into the first's, as rank 0 does under MPI. The probes' values keep the samples' order.
TEST_F(StoriesPass, MeasurementsMergeAcrossRanksInSampleOrder) {
  const int64_t n_layers = model->config.n_layers;
  std::vector<SequenceState> states;
  for (const Sample& s : samples) states.push_back(jacobians->run(s.ids));
  std::vector<std::unique_ptr<PassMeasurement>> measurements;
  measurements.push_back(correlation_measurement(spec.boundaries, model->config.d_model));
  measurements.push_back(jacobian_measurement(*jacobians, *transformer, spec));
  measurements.push_back(probe_measurement(spec.probes, spec.boundaries));
  for (int64_t layer = 0; layer < n_layers; ++layer) {
    std::vector<PassSample> all, rank[2];
    for (size_t i = 0; i < samples.size(); ++i) {
      all.push_back({static_cast<int64_t>(i), layer, &states[i]});
      rank[(i / 2) % 2].push_back(all.back());
    }
    for (size_t m = 0; m < measurements.size(); ++m) {
      const auto sums_of = [&](const std::vector<PassSample>& mine, int threads) {
        std::unique_ptr<LayerAccumulator> sums = measurements[m]->begin_layer(layer, n_layers, threads);
        sums->before_slice(mine);
        for (size_t j = 0; j < mine.size(); ++j) sums->add(mine[j], static_cast<int>(j % threads));
        sums->merge_threads();
        return sums;
      };
      const std::vector<double> whole = sums_of(all, 1)->serialise();
      std::unique_ptr<LayerAccumulator> first = sums_of(rank[0], 2);
      first->merge(sums_of(rank[1], 1)->serialise());
      const std::vector<double> split = first->serialise();
      const std::string what = fmt::format("measurement {} at layer {}", m, layer);
      if (m == 2) EXPECT_EQ(split, whole) << what;  // the probes: values, not sums
      else test::expect_close(split, whole, 1e-12, 1e-12, what);
      measurements[m]->end_layer(layer, layer + 1 < n_layers);
    }
  }
}

TEST_F(StoriesPass, FromPassRefusesAPassOfOtherAblations) {
  const fs::path dir = test::scratch_dir("pass_ablations");
  const nlohmann::json model_identity = {{"name", "stories260K"}};
  PassControl control;
  control.file = dir / "plain.tdynpass";
  run_pass(*transformer, jacobians.get(), samples, spec, pass_identity(model_identity, samples, spec), control);
  PassSpec ablated = spec;
  ablated.zeroed = ZeroedParts(*transformer, {Ablation::parse("blocks.0.hook_mlp_out")});
  const JacobianModel ablated_jacobians(transformer, ablated.zeroed);
  EXPECT_EQ(ablated.to_json()["ablate"], nlohmann::json({"blocks.0.hook_mlp_out:zero"}));
  EXPECT_FALSE(spec.to_json().contains("ablate"));
  PassSource source;
  source.from_pass = control.file.string();
  test::expect_error_contains([&] { obtain_pass(source, *transformer, &ablated_jacobians, samples, ablated, model_identity,
                                                dir / "out.tdynpass", false, "pass", silent_progress()); },
                              "a pass of the model with other ablations ([] vs [\"blocks.0.hook_mlp_out:zero\"])");
}

TEST_F(StoriesPass, PassFileRejectsDamage) {
  const fs::path dir = test::scratch_dir("pass_file");
  PassControl control;
  control.file = dir / "pass.tdynpass";
  const PassFile pass = run_pass(*transformer, jacobians.get(), samples, spec, {{"x", 1}}, control);
  EXPECT_EQ(pass.identity(), nlohmann::json({{"x", 1}}));
  const std::string bytes = read_file(control.file);
  auto expect_error = [&](const std::string& damaged, const std::string& what, const std::string& needle, bool when_read = false) {
    write_file_atomic(dir / "damaged", damaged);
    try {
      const PassFile f = PassFile::open(dir / "damaged");
      if (when_read)  // every section, each reader checking its checksum
        for (const ResidualBoundary& b : spec.boundaries) {
          (void)correlation_sums(f, b.hook);
          if (b.sublayer >= 0) (void)jacobian_sum(f, b.hook);
        }
        for (const TokenProbe& p : spec.probes) (void)probe_values(f, p.name);
      ADD_FAILURE() << what << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": " << e.what();
    }
  };
  for (size_t cut : {size_t{0}, size_t{5}, size_t{12}, size_t{40}, bytes.size() / 2, bytes.size() - 1})
    expect_error(bytes.substr(0, cut), fmt::format("cut at {}", cut), cut < 8 ? "" : "truncated");
  expect_error(bytes.substr(0, bytes.size() - 56), "the final section cut off", "unfinished pass");
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x10;
  expect_error(flipped, "one flipped bit in the sums", "checksum", true);
  flipped = bytes;
  flipped[30] ^= 0x10;
  expect_error(flipped, "one flipped bit in the header", "checksum");
  expect_error("NOTAPASS" + bytes.substr(8), "wrong magic", "not a tdyn pass file");
  expect_error(bytes + "x", "trailing byte", "unexpected bytes");
}

// ---- Through the CLI: SIGKILL at several points, and two MPI ranks --------------------------------------------

// Starts the CLI in the background (output to `log`); returns its pid.
pid_t start_cli(const std::vector<std::string>& args, const fs::path& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<std::string> argv = {test::cli_path().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> c_argv;
    for (auto& a : argv) c_argv.push_back(a.data());
    c_argv.push_back(nullptr);
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    (void)f;
    dup2(fileno(stdout), fileno(stderr));
    execv(c_argv[0], c_argv.data());
    _exit(127);
  }
  return pid;
}

// Every .npy and the numbers of results.json ("results" and "model") must be identical; only the directory's own
// path may differ.
void expect_same_outputs(const fs::path& a, const fs::path& b, const std::string& what) {
  auto ja = nlohmann::json::parse(read_file(a / "results.json")), jb = nlohmann::json::parse(read_file(b / "results.json"));
  for (auto* j : {&ja, &jb}) {
    for (auto& c : (*j)["results"]["checkpoints"]) c.erase("results_dir");
    // analyze's topology names its init control inside the run's own directory.
    auto& results = (*j)["results"];
    if (auto control = results.find("community_similarity"); control != results.end() && control->is_object())
      control->erase("control_dir"), control->erase("control_model");
  }
  EXPECT_EQ(ja["results"], jb["results"]) << what;
  EXPECT_EQ(ja["model"], jb["model"]) << what;
  int64_t arrays = 0;
  for (const auto& entry : fs::directory_iterator(a)) {
    if (entry.path().extension() != ".npy") continue;
    ++arrays;
    ASSERT_TRUE(fs::exists(b / entry.path().filename())) << what << ": " << entry.path().filename();
    EXPECT_EQ(read_file(entry.path()), read_file(b / entry.path().filename())) << what << ": " << entry.path().filename();
  }
  EXPECT_GT(arrays, 3) << what;
}

std::string quoted(const std::vector<std::string>& args) {
  std::string line;
  for (const auto& a : args) line += " '" + a + "'";
  return line;
}

// Runs `args(out)` to completion once; then, for each kill point, starts it, sends it `signal` when the pass file
// holds that many finished layers (0: after 150 ms, likely before any), reruns it with --resume and compares the
// outputs of `parts` (subdirectories; "" = the directory itself) with the uninterrupted run. A signal it can catch
// (Ctrl-C's SIGINT, SIGTERM) must end it with 128 + signal and a line saying how to continue.
void kill_and_resume(const std::string& name, const std::function<std::vector<std::string>(const fs::path&)>& args,
                     const std::string& pass_file, const std::vector<std::string>& parts, const std::vector<int64_t>& kill_points,
                     int signal = SIGKILL) {
  const fs::path dir = test::scratch_dir(name);
  std::string err;
  ASSERT_EQ(test::run_cli(quoted(args(dir / "whole")), nullptr, &err), 0) << err;
  int point = 0;
  for (int64_t wait_for : kill_points) {
    const fs::path out = dir / fmt::format("killed{}", point++);
    const pid_t pid = start_cli(args(out), dir / "log");
    const auto start = std::chrono::steady_clock::now();
    bool exited = false;
    while (!exited) {
      if (wait_for == 0 ? std::chrono::steady_clock::now() - start > std::chrono::milliseconds(150)
                        : finished_layers(out / pass_file) >= wait_for)
        break;
      int status = 0;
      exited = waitpid(pid, &status, WNOHANG) == pid;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // A signal the program catches is what is tested: a run that finished first tested nothing.
    if (signal != SIGKILL) EXPECT_FALSE(exited) << "finished before the signal; nothing was interrupted";
    if (!exited) {
      kill(pid, signal);
      int status = 0;
      waitpid(pid, &status, 0);
      if (signal != SIGKILL) {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + signal) << "status " << status << ": " << read_file(dir / "log");
        EXPECT_NE(read_file(dir / "log").find("tdyn: interrupted; rerun the same command with --resume to continue"), std::string::npos)
            << read_file(dir / "log");
      }
    }
    std::vector<std::string> resume = args(out);
    resume.push_back("--resume");
    ASSERT_EQ(test::run_cli(quoted(resume), nullptr, &err), 0) << err;
    EXPECT_FALSE(fs::exists(out / (pass_file + ".states"))) << "working buffers left behind";
    for (const std::string& part : parts)
      expect_same_outputs(dir / "whole" / part, out / part,
                          fmt::format("{}: killed after {} finished layers{}", part, wait_for, exited ? " (it had finished)" : ""));
  }
}

// Peak anonymous memory (RssAnon, in kB) of a CLI run, polled from /proc while it runs; -1 if it failed.
int64_t peak_anonymous_kb(const std::vector<std::string>& args, const fs::path& log) {
  const fs::path cli = fs::canonical(test::cli_path());
  const pid_t pid = start_cli(args, log);
  int64_t peak = 0;
  for (;;) {
    // Until its execv the child is a copy of this test process, whose RssAnon (the models and passes of the tests
    // that ran before) is not the CLI's: only the CLI's own image counts.
    std::error_code not_yet;
    if (fs::read_symlink(fmt::format("/proc/{}/exe", pid), not_yet) == cli) {
      std::ifstream status(fmt::format("/proc/{}/status", pid));
      for (std::string line; std::getline(status, line);)
        if (line.rfind("RssAnon:", 0) == 0) peak = std::max<int64_t>(peak, std::stoll(line.substr(8)));
    }
    int code = 0;
    if (waitpid(pid, &code, WNOHANG) == pid) return WIFEXITED(code) && WEXITSTATUS(code) == 0 ? peak : -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// The pass holds one layer at a time: jacobian and topology on random Llama models of one width and 2 or 8 layers
// use the same anonymous memory within 10 % (each layer's float64 weights alone are 11 MB here, its sums 2 MB).
TEST(PassCli, AnonymousMemoryDoesNotGrowWithDepth) {
#ifdef TDYN_TEST_UNDER_ASAN
  GTEST_SKIP() << "RssAnon is the sanitizer's shadow memory and quarantine here";
#endif
  const fs::path dir = test::scratch_dir("pass_memory");
  nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 384},
                           {"intermediate_size", 1024}, {"num_attention_heads", 6}, {"num_key_value_heads", 2},
                           {"head_dim", 64}, {"hidden_act", "silu"}, {"max_position_embeddings", 128},
                           {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0}, {"vocab_size", 256},
                           {"tie_word_embeddings", false}, {"torch_dtype", "float32"}};
  std::vector<int64_t> ids(4 * 24);
  std::mt19937_64 rng(3);
  for (auto& id : ids) id = static_cast<int64_t>(rng() % 256);
  write_npy(dir / "ids.npy", ids.data(), {4, 24});
  // One malloc arena: how much of each thread's arena a run happens to touch varies by a few MB between runs.
  setenv("MALLOC_ARENA_MAX", "1", 1);
  std::map<std::string, std::vector<int64_t>> peaks;
  for (int layers : {2, 8}) {
    config["num_hidden_layers"] = layers;
    const fs::path model = dir / fmt::format("L{}", layers);
    write_random_init(config, model, 1);
    for (const std::string command : {"jacobian", "topology"}) {
      const int64_t kb = peak_anonymous_kb({"--threads", "2", "--quiet", command, model.string(), "--data", (dir / "ids.npy").string(),
                                            "--samples", "4", "--max-len", "24", "--out", (dir / fmt::format("{}{}", command, layers)).string(),
                                            command == "jacobian" ? "--alignment-k" : "--permutations", command == "jacobian" ? "1" : "0"},
                                           dir / "log");
      ASSERT_GT(kb, 0) << command << " on " << layers << " layers failed: " << read_file(dir / "log");
      peaks[command].push_back(kb);
    }
  }
  unsetenv("MALLOC_ARENA_MAX");
  for (const auto& [command, kb] : peaks) {
    std::cout << command << ": peak RssAnon " << kb[0] << " kB with 2 layers, " << kb[1] << " kB with 8\n";
    EXPECT_LT(std::abs(static_cast<double>(kb[1] - kb[0])), 0.10 * static_cast<double>(kb[0]))
        << command << ": peak RssAnon " << kb[0] << " kB with 2 layers, " << kb[1] << " kB with 8";
  }
}

// topology on a model with one MLP's output ablated (analyze's kill test covers the unablated pass).
TEST(PassCli, KilledAndResumedRunEqualsUninterrupted) {
  TDYN_REQUIRE_SHARED(kStories);
  const std::string model = (test::shared_dir() / kStories).string();
  kill_and_resume("pass_kill", [&](const fs::path& out) {
    return std::vector<std::string>{"--threads", "1", "--quiet", "topology", model, "--samples", "80", "--max-len", "64",
                                    "--permutations", "200", "--save-correlations", "--save-jacobians",
                                    "--ablate", "blocks.0.hook_mlp_out", "--out", out.string()};
  }, "pass.tdynpass", {""}, {0, 1, 3});
}

// --resume of a pass file made with other options names the one field that differs, not both headers whole.
TEST(PassCli, ResumingAnotherRunNamesWhatDiffers) {
  TDYN_REQUIRE_SHARED(kStories);
  const fs::path dir = test::scratch_dir("pass_resume_other");
  const std::string args = fmt::format("--quiet analyze {} --max-len 16 --skip particles,topology,power --no-init-control --out {}",
                                       (test::shared_dir() / kStories).string(), dir.string());
  std::string err;
  ASSERT_EQ(test::run_cli(args + " --samples 8", nullptr, &err), 0) << err;
  EXPECT_EQ(test::run_cli(args + " --samples 9 --resume", nullptr, &err), 1);
  EXPECT_NE(err.find("of a different run (identity.samples.count: 8 vs now 9)"), std::string::npos) << err;
  EXPECT_LT(err.size(), 400u) << err;
}

// On a model with one head ablated: the resumed pass continues with the same edits (they are in its identity).
TEST(PassCli, KilledAndResumedJacobianEqualsUninterrupted) {
  TDYN_REQUIRE_SHARED(kStories);
  const std::string model = (test::shared_dir() / kStories).string();
  kill_and_resume("pass_kill_jacobian", [&](const fs::path& out) {
    return std::vector<std::string>{"--threads", "1", "--quiet", "jacobian", model, "--samples", "80", "--max-len", "64",
                                    "--surgery", "--ablate", "blocks.1.attn.hook_z:heads=2", "--out", out.string()};
  }, "pass.tdynpass", {""}, {2});
}

// Ctrl-C in jacobian: it says how to continue, and --resume ends where the uninterrupted run does.
TEST(PassCli, InterruptedJacobianSaysHowToResumeAndResumes) {
  TDYN_REQUIRE_SHARED(kStories);
  const std::string model = (test::shared_dir() / kStories).string();
  kill_and_resume("pass_interrupt", [&](const fs::path& out) {
    return std::vector<std::string>{"--threads", "1", "jacobian", model, "--samples", "80", "--max-len", "64", "--out", out.string()};
  }, "pass.tdynpass", {""}, {1}, SIGINT);
}

// Of a model with one head ablated: every part and control resumes with the ablation.
TEST(PassCli, KilledAndResumedAnalysisEqualsUninterrupted) {
  TDYN_REQUIRE_SHARED(kStories);
  const std::string model = (test::shared_dir() / kStories).string();
  kill_and_resume("pass_kill_analyze", [&](const fs::path& out) {
    return std::vector<std::string>{"--threads", "1", "--quiet", "analyze", model, "--samples", "64", "--max-len", "64",
                                    "--skip", "particles", "--ablate", "blocks.2.attn.hook_z:heads=3", "--out", out.string()};
  }, "pass/pass.tdynpass", {"power", "power-l2", "jacobian", "topology", "subsets/subset-0/jacobian", "nested/half/jacobian"}, {2});
}

// `args` of the CLI under `mpiexec -np 2`, its output in `log`; the exit status. Open MPI refuses root without the
// first two variables, and a 2-core machine needs oversubscription for 2 ranks. Under the sanitizers the ranks run
// without leak checking: Open MPI's plugins leak at exit (and are unloaded by then, so no suppression can name them);
// tdyn's own code is leak-checked by every other test. `timeout` ends a run that hangs.
int run_two_ranks(const std::string& args, const fs::path& log) {
  const std::string command =
      fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
                  "ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" timeout 600 {} -np 2 {} {} > {} 2>&1",
                  TDYN_MPIEXEC, test::cli_path().string(), args, log.string());
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool have_mpiexec() {
  const std::string mpiexec = TDYN_MPIEXEC;
  return !mpiexec.empty() && fs::exists(mpiexec);
}
#define TDYN_REQUIRE_MPI()                                                                               \
  do {                                                                                                   \
    if (!have_mpiexec()) GTEST_SKIP() << "built without MPI (install libopenmpi-dev openmpi-bin and rebuild)"; \
  } while (0)

TEST(PassCli, TwoMpiRanksEqualOneProcess) {
  TDYN_REQUIRE_SHARED(kStories);
  TDYN_REQUIRE_MPI();
  const fs::path dir = test::scratch_dir("pass_mpi");
  const std::string model = (test::shared_dir() / kStories).string();
  const std::string common = fmt::format("--threads 1 --quiet topology {} --samples 50 --max-len 48 --permutations 100 "
                                         "--boundaries sublayers --save-correlations --save-jacobians",
                                         model);
  std::string err;
  ASSERT_EQ(test::run_cli(common + " --out " + (dir / "one").string(), nullptr, &err), 0) << err;
  ASSERT_EQ(run_two_ranks(common + " --out " + (dir / "two").string(), dir / "mpi.log"), 0) << read_file(dir / "mpi.log");
  const auto rj = nlohmann::json::parse(read_file(dir / "two" / "results.json"));
  EXPECT_EQ(rj["options"]["pass"]["ranks"], 2);
  int64_t arrays = 0;
  for (const auto& entry : fs::directory_iterator(dir / "one")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("correlation_", 0) != 0 && name != "mean_jacobians.npy") continue;
    ++arrays;
    const std::vector<double> a = read_npy(entry.path()).as_double(), b = read_npy(dir / "two" / name).as_double();
    // Only the order of the float64 sums differs; a Pearson correlation amplifies its round-off by the
    // cancellation in E[xy] − E[x]E[y], hence an absolute tolerance of a few hundred ulps of 1.
    test::expect_close(b, a, 1e-12, 1e-13, "2 ranks vs 1: " + name);
  }
  const int64_t n_layers = load_model(model)->config.n_layers;
  EXPECT_EQ(arrays, 1 + 2 * n_layers + 1);  // mean Jacobians + a correlation at every one of the 2L + 1 boundaries
  for (const auto& entry : fs::directory_iterator(dir / "two"))
    EXPECT_EQ(entry.path().string().find("tdynpass"), std::string::npos) << "left behind: " << entry.path();
}

// Power's per-token probes under two ranks that take several chunks each (40 samples in chunks of 16: rank 0 takes
// samples 0–15 and 32–39, rank 1 16–31): the tokens come back in sample order, so every per-token array and every
// per-sample statistic (ρ over unique states, the samples above and below the control) equals one process's.
TEST(PassCli, TwoMpiRanksKeepTheTokensInSampleOrder) {
  TDYN_REQUIRE_SHARED(kStories);
  TDYN_REQUIRE_MPI();
  const fs::path dir = test::scratch_dir("pass_mpi_probes");
  const std::string common = fmt::format(
      "--threads 1 --quiet analyze {} --samples 40 --max-len 32 --skip power-l2,jacobian,topology,particles "
      "--no-init-control --interval-subsets 0",
      (test::shared_dir() / kStories).string());
  std::string err;
  ASSERT_EQ(test::run_cli(common + " --out " + (dir / "one").string(), nullptr, &err), 0) << err;
  ASSERT_EQ(run_two_ranks(common + " --out " + (dir / "two").string(), dir / "mpi.log"), 0) << read_file(dir / "mpi.log");
  for (const char* array : {"alignment_before", "alignment_after", "alignment_covariance", "cross_layer_alignment", "token_sample"}) {
    const std::string file = fmt::format("power/{}.npy", array);
    test::expect_close(read_npy(dir / "two" / file).as_double(), read_npy(dir / "one" / file).as_double(), 1e-12, 1e-13,
                       "2 ranks vs 1: " + file);
  }
  const auto layers = [&](const char* run) {
    return nlohmann::json::parse(read_file(dir / run / "power" / "results.json"))["results"]["layers"];
  };
  const nlohmann::json one = layers("one"), two = layers("two");
  ASSERT_EQ(one.size(), two.size());
  for (size_t l = 0; l < one.size(); ++l)
    for (const char* key : {"rho_unique", "p_value_samples", "samples_above", "samples_below"}) {
      const nlohmann::json &a = one[l]["dynamics_F"][key], &b = two[l]["dynamics_F"][key];
      ASSERT_TRUE(a.is_number()) << "layer " << l << ": " << key;
      EXPECT_NEAR(b.get<double>(), a.get<double>(), 1e-12) << "layer " << l << ": " << key;
    }
}

// The numbers of an array as float64; a complex128 one (which read_npy does not take) as its real and imaginary
// parts in turn, after the version 1.0 header tdyn writes.
std::vector<double> numbers_of(const fs::path& path) {
  const std::string bytes = read_file(path);
  if (bytes.find("'descr': '<c16'") == std::string::npos) return read_npy(path).as_double();
  const size_t data = 10 + (static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8);
  std::vector<double> parts((bytes.size() - data) / sizeof(double));
  std::memcpy(parts.data(), bytes.data() + data, parts.size() * sizeof(double));
  return parts;
}

// Every file under `dir`, relative to it.
std::set<std::string> files_under(const fs::path& dir) {
  std::set<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) files.insert(fs::relative(entry.path(), dir).string());
  return files;
}

// Each command that splits its samples across MPI ranks, on a llama2.c checkpoint with its own tokenizer and the
// default corpus, and on a Hugging Face one given token ids: two ranks write the files one process writes, with
// the same numbers in every array.
struct MpiCommand : ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(MpiCommand, TwoRanksWriteWhatOneProcessWrites) {
  const auto& [command, model_name] = GetParam();
  TDYN_REQUIRE_MPI();
  const fs::path dir = test::scratch_dir("mpi_" + command + "_" + model_name);
  std::string inputs;
  if (model_name == "stories260K") {
    TDYN_REQUIRE_SHARED(kStories);
    inputs = (test::shared_dir() / kStories).string();
  } else {
    TDYN_REQUIRE_SHARED("fixtures/" + model_name);
    std::vector<int64_t> ids(12 * 16);
    std::mt19937_64 rng(1);
    for (auto& id : ids) id = static_cast<int64_t>(rng() % 256);  // the fixtures' vocabularies have 256 or more
    write_npy(dir / "ids.npy", ids.data(), {12, 16});
    inputs = fmt::format("{} --data {}", (test::shared_dir() / "fixtures" / model_name).string(), (dir / "ids.npy").string());
  }
  // jacobian's ranks share the depths' metrics too: with surgery the Schur forms come back to rank 0 for the sweep.
  // On the Hugging Face checkpoint the ranks' forward passes run with parts ablated (analyze's in every part and control).
  std::string extra = command == "jacobian" ? " --surgery --alphas 0,0.5,1" : "";
  if (model_name == "llama")
    extra += command == "jacobian" ? " --ablate 'blocks.0.attn.hook_z:heads=1'" : " --ablate blocks.1.mlp.hook_post";
  // analyze of the llama2.c checkpoint on two threads: rank 0 runs the initialisations after the first and the sample
  // sets one at a time on one thread each, as one process runs them side by side.
  const int threads = command == "analyze" && model_name == "stories260K" ? 2 : 1;
  const std::string args = fmt::format("--threads {} --quiet {} {} --samples 12 --max-len 16{}", threads, command, inputs, extra);
  std::string err;
  ASSERT_EQ(test::run_cli(args + " --out " + (dir / "one").string(), nullptr, &err), 0) << err;
  ASSERT_EQ(run_two_ranks(args + " --out " + (dir / "two").string(), dir / "mpi.log"), 0) << read_file(dir / "mpi.log");
  const std::set<std::string> one = files_under(dir / "one");
  EXPECT_EQ(files_under(dir / "two"), one);
  int64_t arrays = 0;
  for (const std::string& file : one) {
    if (fs::path(file).extension() != ".npy" || !fs::exists(dir / "two" / file)) continue;
    ++arrays;
    test::expect_close(numbers_of(dir / "two" / file), numbers_of(dir / "one" / file), 1e-10, 1e-12, "2 ranks vs 1: " + file);
  }
  EXPECT_GT(arrays, 4);
  const fs::path pass_user = command == "analyze" ? dir / "two" / "jacobian" : dir / "two";  // analyze: a part's own
  EXPECT_EQ(nlohmann::json::parse(read_file(pass_user / "results.json"))["options"]["pass"]["ranks"], 2);
  if (command == "topology") {
    // The worker rank computed its layers' couplings (J̄'s Schur form), which equal one process's to the round-off of
    // the pass's sums.
    const auto two = nlohmann::json::parse(read_file(dir / "two" / "results.json")), one = nlohmann::json::parse(read_file(dir / "one" / "results.json"));
    EXPECT_EQ(two["options"]["coupling"]["ranks"], 2);
    const nlohmann::json &a = two["results"]["coupling"]["layers"], &b = one["results"]["coupling"]["layers"];
    ASSERT_EQ(a.size(), b.size());
    const auto near = [](const nlohmann::json& x, const nlohmann::json& y, const std::string& what) {
      if (x.is_null() || y.is_null()) EXPECT_EQ(x, y) << what;  // null: no ranking to test (an ablated map's constant gains)
      else EXPECT_NEAR(x.get<double>(), y.get<double>(), 1e-9) << what;
    };
    for (size_t l = 0; l < a.size(); ++l) {
      for (const char* key : {"normalized_departure", "symmetry_index", "complex_fraction"})
        near(a[l]["operator"][key], b[l]["operator"][key], fmt::format("layer {}: {}", l, key));
      near(a[l]["column_gain"]["rho"], b[l]["column_gain"]["rho"], fmt::format("layer {}: rho", l));
      EXPECT_EQ(a[l]["nodes"], b[l]["nodes"]);
    }
  }
  if (command != "analyze") return;
  // The worker rank took its share of the metrics of every jacobian run: the model's, a sample subset's, a nested
  // set's, the first initialisation's and one run side by side in one process.
  for (const char* run : {"jacobian", "subsets/subset-0/jacobian", "nested/half/jacobian", "init/seed-0/jacobian", "init/scaled-1/jacobian"})
    EXPECT_EQ(nlohmann::json::parse(read_file(dir / "two" / run / "results.json"))["options"]["metrics_ranks"], 2) << run;
  // analyze's jacobian part as its command line gives it (--from-pass, which rank 0 alone reads), on two ranks that
  // share its metrics (surgery and Haar null included): the part's own results.
  const auto part = nlohmann::json::parse(read_file(dir / "two" / "results.json"))["results"]["parts"]["jacobian"];
  std::vector<std::string> argv = part["argv"].get<std::vector<std::string>>();
  argv.erase(argv.begin());  // the program
  argv.back() = (dir / "from_pass").string();  // after --out
  ASSERT_EQ(run_two_ranks(fmt::format("{}", fmt::join(argv, " ")), dir / "from_pass.log"), 0)  // argv has the run's --threads
      << read_file(dir / "from_pass.log");
  EXPECT_EQ(nlohmann::json::parse(read_file(dir / "from_pass" / "results.json"))["results"],
            nlohmann::json::parse(read_file(dir / "two" / "jacobian" / "results.json"))["results"]);
}

INSTANTIATE_TEST_SUITE_P(PassCommands, MpiCommand,
                         ::testing::Combine(::testing::Values("jacobian", "topology", "analyze"),
                                            ::testing::Values("stories260K", "llama")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// What does not split its work stops at once on every rank with the usage exit code and one message, and writes
// nothing: a command that would run N times over, and the parts of jacobian and topology that compare checkpoints.
TEST(PassCli, WhatDoesNotSplitRefusesUnderMpi) {
  TDYN_REQUIRE_SHARED(kStories);
  TDYN_REQUIRE_MPI();
  const fs::path dir = test::scratch_dir("mpi_refused");
  const std::string model = (test::shared_dir() / kStories).string();
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"power " + model, "runs in one process"},
      {"jacobian " + model + " --compare " + model, "jacobian comparing checkpoints runs in one process only"},
      {"jacobian " + model + " --mean plain", "runs in one process only"},
      {"topology " + model + " --compare " + model, "topology comparing checkpoints"},
      {"compare " + dir.string(), "runs in one process"},
  };
  for (const auto& [args, phrase] : refused) {
    const fs::path out = dir / "out";
    const auto started = std::chrono::steady_clock::now();
    EXPECT_EQ(run_two_ranks("--quiet " + args + " --out " + out.string(), dir / "log"), 2) << args << ": " << read_file(dir / "log");
    const std::string log = read_file(dir / "log");
    EXPECT_NE(log.find(phrase), std::string::npos) << args << ": " << log;
    EXPECT_EQ(log.find("rank 1"), std::string::npos) << args << ": printed by every rank: " << log;
    EXPECT_EQ(log.find("MPI_ABORT"), std::string::npos) << args << ": " << log;
    EXPECT_FALSE(fs::exists(out / "results.json")) << args;
    std::cout << args << ": refused in "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() << " s\n";
  }
}

}  // namespace
}  // namespace tdyn

namespace tdyn {
namespace {

// tdyn analyze runs the samples once, and each part it hands the pass to gives what the part gives on its own.
TEST(PassCli, AnalyzeSharesOnePassWithThePartsOwnResults) {
  TDYN_REQUIRE_SHARED(kStories);
  TDYN_REQUIRE_SHARED("data/wikitext-2/wiki.test.raw");
  const fs::path dir = test::scratch_dir("pass_analyze");
  const std::string model = (test::shared_dir() / kStories).string();
  const std::string data = (test::shared_dir() / "data/wikitext-2/wiki.test.raw").string();
  const std::string inputs = fmt::format("{} --data {} --samples 24 --max-len 40", model, data);
  std::string err;
  ASSERT_EQ(test::run_cli(fmt::format("--threads 1 --quiet analyze {} --skip particles --out {}", inputs, (dir / "all").string()),
                          nullptr, &err), 0) << err;
  const auto analysis = nlohmann::json::parse(read_file(dir / "all" / "results.json"));
  EXPECT_EQ(analysis["results"]["pass"]["samples"], 24);
  for (const char* part : {"power", "jacobian", "topology"}) {
    const auto argv = analysis["results"]["parts"][part]["argv"].get<std::vector<std::string>>();
    EXPECT_NE(std::find(argv.begin(), argv.end(), "--from-pass"), argv.end()) << part;
  }
  ASSERT_EQ(test::run_cli(fmt::format("--threads 1 --quiet power {} --out {}", inputs, (dir / "power").string()), nullptr, &err), 0) << err;
  ASSERT_EQ(test::run_cli(fmt::format("--threads 1 --quiet jacobian {} --surgery --haar-null 5 --out {}", inputs, (dir / "jacobian").string()), nullptr, &err), 0)
      << err;
  // As analyze runs it: the maps' normality from the jacobian run (whose mean Jacobians are these, bit for bit).
  ASSERT_EQ(test::run_cli(fmt::format("--threads 1 --quiet topology {} --normality-from {} --out {}", inputs, (dir / "jacobian").string(),
                                      (dir / "topology").string()), nullptr, &err), 0)
      << err;
  for (const char* file : {"power/alignment_before.npy", "power/alignment_after.npy", "power/alignment_covariance.npy",
                           "power/token_sample.npy", "power/token_repeated.npy", "jacobian/mean_jacobians.npy",
                           "jacobian/cumulative_products.npy", "topology/participation.npy", "topology/log_column_gain.npy"}) {
    if (!fs::exists(dir / file)) continue;  // a part that does not write this array
    EXPECT_EQ(read_file(dir / "all" / file), read_file(dir / file)) << file << " differs between analyze and the part alone";
  }
  for (const char* part : {"power", "jacobian"}) {
    const auto shared = nlohmann::json::parse(read_file(dir / "all" / part / "results.json"));
    const auto alone = nlohmann::json::parse(read_file(dir / part / "results.json"));
    EXPECT_EQ(shared["results"], alone["results"]) << part;
  }
  auto topology = [](const fs::path& d) {
    auto j = nlohmann::json::parse(read_file(d / "results.json"))["results"];
    for (auto& c : j["checkpoints"]) c.erase("results_dir");
    j.erase("community_similarity");  // analyze's topology compares with its init part; the part alone has none
    return j;
  };
  EXPECT_EQ(topology(dir / "all" / "topology"), topology(dir / "topology"));

  // A pass of other samples is refused by the parts.
  EXPECT_NE(test::run_cli(fmt::format("--quiet jacobian {} --data {} --samples 23 --max-len 40 --from-pass {} --out {}", model, data,
                                      (dir / "all" / "pass" / "pass.tdynpass").string(), (dir / "bad").string()),
                          nullptr, &err), 0);
  EXPECT_NE(err.find("other samples"), std::string::npos) << err;

  // An interrupted pass holds the sums of its first layers only: it is refused as a finished pass.
  const std::string finished = read_file(dir / "all" / "pass" / "pass.tdynpass");
  write_file_atomic(dir / "unfinished.tdynpass", finished.substr(0, finished.size() - 56));
  EXPECT_NE(test::run_cli(fmt::format("--quiet jacobian {} --from-pass {} --out {}", inputs, (dir / "unfinished.tdynpass").string(),
                                      (dir / "bad2").string()),
                          nullptr, &err), 0);
  EXPECT_NE(err.find("unfinished pass"), std::string::npos) << err;
}

}  // namespace
}  // namespace tdyn
