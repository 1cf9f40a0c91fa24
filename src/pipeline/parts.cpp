#include "pipeline/parts.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "core/error.h"
#include "core/files.h"
#include "core/ranks.h"
#include "model/init.h"
#include "report/jacobian_output.h"
#include "report/particles_output.h"
#include "report/power_output.h"
#include "report/topology_output.h"
#include "tokenizer/tokenizer.h"

namespace tdyn {
PowerResult power_to(ResultsDir* out, const AnalysisInputs& in, const PowerOptions& options, ProgressSink& progress) {
  const std::unique_ptr<Tokenizer> tok = tokenizer_if_any(in.model_path, in.tokenizer);
  PowerPassSource pass;
  if (!in.pass.from_pass.empty())
    pass = [&](const PassSpec& spec) {
      const Transformer transformer(in.model);
      return obtain_pass(in.pass, transformer, nullptr, in.samples, spec, pass_model_identity(in.model_path, *in.model), {}, false,
                         "", progress);
    };
  PowerResult result = run_power(in.model, in.model_path, in.samples, options, progress, tok.get(), pass);
  if (!out) return result;
  out->options()["from_pass"] = in.pass.from_pass.empty() ? nlohmann::json(nullptr) : nlohmann::json(in.pass.from_pass);
  out->options()["samples"] = sample_options_json(in.sample_options);
  out->options()["tokenizer"] = in.tokenizer;
  write_power(*out, result, options);
  return result;
}

void check_jacobian_ranks(bool comparing, const JacobianOptions& options) {
  require_single_rank(!options.uses_pass(), "jacobian with the plain mean, the mean of products or per-sample Jacobians");
  require_single_rank(comparing, "jacobian comparing checkpoints");
}

std::vector<JacobianCheckpoint> load_checkpoints(const std::vector<std::string>& paths, const LoadOptions& load) {
  std::vector<JacobianCheckpoint> checkpoints;
  for (const std::string& path : paths) checkpoints.push_back({path, load_model(path, load)});
  return checkpoints;
}

JacobianResult jacobian_to(ResultsDir* out, const AnalysisInputs& in, const std::vector<JacobianCheckpoint>& compare,
                           const JacobianOptions& options, ProgressSink& progress) {
  const bool use_pass = options.uses_pass();
  if (!use_pass && (in.pass.resume || !in.pass.from_pass.empty()))
    fail("resuming or reading a pass needs the structured mean without the mean of products and per-sample Jacobians");
  TDYN_CHECK(out || !options.save_per_sample);
  check_jacobian_ranks(!compare.empty(), options);
  if (in.samples.empty()) fail("no samples to analyse (check the data and min_len)");
  std::vector<JacobianCheckpoint> checkpoints = {{in.model_path, in.model}};
  checkpoints.insert(checkpoints.end(), compare.begin(), compare.end());
  JacobianPassSource pass;  // without a results directory, run_jacobian's own: into a temporary file
  std::optional<JacobianFiles> files;
  if (out) {
    for (const auto& [phase, seconds] : in.timings) out->add_timing(phase, seconds);
    std::vector<std::string> compared;
    for (const JacobianCheckpoint& c : compare) compared.push_back(c.path);
    out->options() = {{"model", in.model_path},
                      {"compare", compared},
                      {"samples", in.sample_options.to_json()},
                      {"tokenizer", in.tokenizer.empty() ? "(the model's own)" : in.tokenizer},
                      {"pass", use_pass ? in.pass.to_json() : nlohmann::json("not used: per-sample Jacobians are needed")}};
    pass = [&](const CheckpointJacobians& c, const Transformer& transformer, const JacobianModel& jacobians, const PassSpec& spec,
               const std::string& label) {
      return obtain_pass(in.pass, transformer, &jacobians, in.samples, spec, pass_model_identity(c.path, *c.model),
                         out->file(c.prefix + "pass.tdynpass"), false, label, progress);
    };
    // An MPI worker rank ends in its share of the pass (WorkerShareDone) and writes no file: rank 0 writes them all.
    if (ranks().root()) files.emplace(*out, options);
  }
  JacobianResult result = run_jacobian(checkpoints, in.samples, options, progress, pass, files ? &*files : nullptr);
  if (out) write_jacobian(*out, result, options);
  return result;
}

void take_jacobian_metrics_share(const AnalysisInputs& in, const JacobianOptions& options) {
  TDYN_CHECK(!ranks().root() && options.ranks_share_metrics && options.uses_pass());
  const JacobianPassSource no_pass = [](const CheckpointJacobians&, const Transformer&, const JacobianModel&, const PassSpec&,
                                        const std::string&) -> PassFile { throw WorkerShareDone{}; };
  try {
    run_jacobian({{in.model_path, in.model}}, in.samples, options, silent_progress(), no_pass);
  } catch (const WorkerShareDone&) {
    return;  // its share went to rank 0
  }
  TDYN_CHECK(false);  // a worker rank's run ends in WorkerShareDone
}

nlohmann::json TopologyComparisons::to_json() const {
  std::vector<std::string> paths;
  for (const JacobianCheckpoint& c : compare) paths.push_back(c.path);
  return {{"compare", paths},
          {"random_init", random_init ? nlohmann::json{{"seed", *random_init}, {"rule", "Hugging Face _init_weights: N(0, 0.02), norms 1"}}
                                      : nlohmann::json(false)}};
}

namespace {

// One checkpoint of a topology run: its pass (run here, or read per in.pass), its analysis with `options`, and its
// results in `out` (null: nowhere, the pass in a temporary file), whose options record the run's (`run_options`).
TopologyResult analyse_checkpoint(const AnalysisInputs& in, const TopologyComparisons& comparisons, const TopologyOptions& options,
                                  const TopologyOptions& run_options, const std::shared_ptr<const Model>& model,
                                  const std::string& path, const std::string& label, ResultsDir* out, ProgressSink& progress) {
  check_sample_ids(in.samples, model->config, path);
  auto transformer = std::make_shared<const Transformer>(model);
  const PassSpec spec = topology_pass_spec(*transformer, options);
  std::unique_ptr<JacobianModel> jacobians;
  if (options.coupling) jacobians = std::make_unique<JacobianModel>(transformer, spec.zeroed);
  std::optional<PassFile> pass;
  PhaseTimes times;
  try {
    PhaseClock clock(times, jacobians ? "forward_correlations_and_jacobians" : "forward_correlations");
    pass = obtain_pass(in.pass, *transformer, jacobians.get(), in.samples, spec, pass_model_identity(path, *model),
                       out ? out->file("pass.tdynpass") : fs::path(), false, fmt::format("topology {}: samples", label), progress);
  } catch (const WorkerShareDone&) {
    take_coupling_share(options);  // with ranks_share_coupling; its share of the pass is with rank 0 already
    throw;
  }
  TopologyResult result = run_topology(*model, path, label, *pass, options, progress);
  if (!out) return result;
  for (const auto& [phase, seconds] : times) out->add_timing(phase, seconds);
  out->options() = comparisons.to_json();
  out->options()["samples"] = sample_options_json(in.sample_options);
  out->options()["tokenizer"] = in.tokenizer.empty() ? "the one shipped with MODEL" : in.tokenizer;
  out->options()["pass"] = in.pass.to_json();
  write_topology(*out, result, run_options);
  return result;
}

// The architecture of `model` (loaded from `path`) as a Hugging Face config for write_random_init: a Hugging Face
// checkpoint's own, or a llama2.c or GGUF Llama's written from its config.
nlohmann::json hf_config_of(const Model& model, const std::string& path) {
  const ModelConfig& c = model.config;
  if (c.format == "hf") {
    if (c.source->is_object() && c.source->contains("model_type")) return *c.source;
    return nlohmann::json::parse(read_file(fs::path(path) / "config.json"));
  }
  if (c.family == "llama") return llama_hf_config_json(c);  // llama2.c and GGUF Llama checkpoints
  fail("cannot describe a {} {} checkpoint as a Hugging Face config (a random initialisation needs one): give a Hugging Face "
       "directory", c.format, c.family);
}

}  // namespace

TopologyOptions compared_options(const TopologyOptions& options) {
  TopologyOptions compared = options;
  compared.communities_control.clear();
  return compared;
}

void check_topology_ranks(bool comparing) {
  require_single_rank(comparing, "topology comparing checkpoints or a random initialisation");
}

std::vector<TopologyResult> topology_to(ResultsDir* out, const AnalysisInputs& in, const TopologyComparisons& comparisons,
                                        const TopologyOptions& options, ProgressSink& progress, const std::string& model_label) {
  PositionSpec::parse(options.positions);  // fail early on bad positions
  check_topology_ranks(comparisons.any());
  if (comparisons.any() && !out)
    fail("comparing checkpoints writes each one's results in a directory of its own: give the results directory (out)");
  if (out)
    for (const auto& [phase, seconds] : in.timings) out->add_timing(phase, seconds);
  std::vector<std::string> labels;
  if (!model_label.empty()) labels.push_back(model_label);
  std::vector<TopologyResult> results;
  results.push_back(analyse_checkpoint(in, comparisons, options, options, in.model, in.model_path,
                                       model_label.empty() ? checkpoint_label(in.model_path, &labels) : model_label, out, progress));
  if (!out) return results;
  std::vector<TopologyCheckpoint> checkpoints = {checkpoint_summary(results.front(), out->path())};
  const TopologyOptions further = compared_options(options);
  auto analyse_further = [&](const std::shared_ptr<const Model>& model, const std::string& path, const std::string& label, ResultsDir& sub) {
    results.push_back(analyse_checkpoint(in, comparisons, further, options, model, path, label, &sub, progress));
    checkpoints.push_back(checkpoint_summary(results.back(), sub.path()));
  };
  for (const JacobianCheckpoint& c : comparisons.compare) {
    const std::string label = checkpoint_label(c.path, &labels);
    ResultsDir sub(out->file("compare") / label, "topology", out->argv());
    analyse_further(c.model, c.path, label, sub);
  }
  if (comparisons.random_init) {
    const std::string label = checkpoint_label("random_init", &labels);
    ResultsDir sub(out->file("compare") / label, "topology", out->argv());
    const fs::path model_dir = sub.file("model");
    write_random_init(hf_config_of(*in.model, in.model_path), model_dir, *comparisons.random_init);
    sub.record_file("model/config.json", "random initialisation of MODEL's architecture: configuration");
    sub.record_file("model/model.safetensors", fmt::format("random initialisation: weights (seed {})", *comparisons.random_init));
    analyse_further(load_model(model_dir), model_dir.string(), label, sub);
  }
  write_topology_comparison(*out, checkpoints);
  return results;
}

particles::ParticlesResult particles_to(ResultsDir* out, const std::string& path, const Model& model, const LoadOptions& load,
                                        const ModelHeadOptions& head, const std::optional<SampleOptions>& tokens,
                                        const std::string& tokenizer, const particles::ExperimentSpec& spec,
                                        const particles::ParticlesOptions& options) {
  particles::ParticlesResult result;
  if (!tokens) {
    result = particles::run_particles(model, path, head, nullptr, spec, options);
  } else {
    if (tokens->ids.size() > 1) fail("the particles start from one sample of tokens: {} were given as ids", tokens->ids.size());
    SampleOptions one = *tokens;
    // An absolute corpus path in results.json, so the run reproduces from any directory.
    if (one.data.empty() && one.prompt.empty() && one.ids.empty()) one.data = fs::absolute(default_corpus()).lexically_normal().string();
    one.samples = 1;
    one.min_len = 1;
    one.max_len = std::max<int64_t>(spec.n, 1);
    const std::vector<int32_t> ids = load_samples_for_model(one, path, model.config.d_vocab, tokenizer).at(0).ids;
    result = particles::run_particles(model, path, head, &ids, spec, options);
    result.model["bridge"]["token_source"] = one.to_json();
  }
  if (!out) return result;
  out->options()["from_model"]["allow_unknown_config_keys"] = load.config.allow_unknown_keys;
  write_particles(*out, result, options);
  return result;
}

nlohmann::json write_init_checkpoint(const Model& source, const std::string& source_path, const fs::path& dir, uint64_t seed,
                                     double initializer_range, const TensorMoments* moments) {
  const ModelConfig& c = source.config;
  nlohmann::json hf_config = hf_config_of(source, source_path);
  if (initializer_range > 0) {
    if (hf_config.contains("text_config")) hf_config["text_config"]["initializer_range"] = initializer_range;
    hf_config["initializer_range"] = initializer_range;
  }
  write_random_init(hf_config, dir, seed, moments);
  // Tokenizer files of a Hugging Face source travel with the init so that it runs on text as the source does.
  std::vector<std::string> copied;
  if (c.format == "hf") {
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                             "vocab.txt", "encoder.json", "vocab.bpe", "tokenizer.model"}) {
      const fs::path src = fs::path(source_path) / name;
      if (fs::is_regular_file(src)) {
        write_file_atomic(dir / name, read_file(src));
        copied.push_back(name);
      }
    }
  }
  nlohmann::json provenance = {{"source_model", source_path},
                               {"source_format", c.format},
                               {"family", c.family},
                               {"seed", seed},
                               {"initializer_range", hf_config.value("initializer_range", 0.02)},
                               {"rule", "Hugging Face _init_weights: matrices and embeddings ~ N(0, initializer_range), "
                                        "biases 0, norm scales 1 (see src/model/init.h)"},
                               {"tokenizer_files_copied", copied}};
  if (moments) {
    provenance["rule"] = "the source's scales: every tensor of a kind (role and part) listed in matched_moments ~ N(mean, std) of "
                         "the source's tensors of that kind, the others by Hugging Face _init_weights (see src/model/init.h)";
    nlohmann::json listed = nlohmann::json::array();
    for (const auto& [key, m] : *moments)
      listed.push_back({{"role", static_cast<int>(key.first)}, {"bias", key.second == Part::Bias}, {"mean", m.mean}, {"std", m.std}, {"values", m.count}});
    provenance["matched_moments"] = listed;
  }
  write_file_atomic(dir / "tdyn_init.json", provenance.dump(2) + "\n");
  return provenance;
}

TensorMoments tensor_moments(const Model& model) {
  struct Sums {
    double sum = 0, squares = 0;
    int64_t count = 0;
    void add(double v) { sum += v, squares += v * v, ++count; }
  };
  std::map<std::pair<Role, Part>, Sums> sums;
  std::vector<float> row;
  auto matrix = [&](Role role, const StoredMatrix& m) {
    if (!m) return;
    row.resize(static_cast<size_t>(m.cols));
    Sums& s = sums[{role, Part::Weight}];
    for (int64_t r = 0; r < m.rows; ++r) {
      m.row_floats(r, 0, m.cols, row.data());
      for (float v : row) s.add(v);
    }
  };
  auto vector = [&](Role role, Part part, const float* v, int64_t n) {
    if (!v) return;
    Sums& s = sums[{role, part}];
    for (int64_t i = 0; i < n; ++i) s.add(v[i]);
  };
  auto linear = [&](Role role, const Linear& l) {
    matrix(role, l.w);
    vector(role, Part::Bias, l.b, l.out);
  };
  auto norm = [&](Role role, const Norm& n, int64_t d) {
    vector(role, Part::Weight, n.w, d);
    vector(role, Part::Bias, n.b, d);
  };
  const ModelConfig& c = model.config;
  const ModelWeights& w = model.weights;
  const int64_t d = c.d_model, d_embed = c.d_embed > 0 ? c.d_embed : c.d_model;
  matrix(Role::Embed, w.embed);
  vector(Role::PosEmbed, Part::Weight, w.pos_embed, c.learned_positions ? c.n_ctx * d_embed : 0);
  vector(Role::TokenTypeEmbed, Part::Weight, w.token_type_embed, c.n_token_types * d_embed);
  norm(Role::EmbedNorm, w.embed_norm, d_embed);
  linear(Role::EmbedMap, w.embed_map);
  norm(Role::FinalNorm, w.final_norm, d);
  linear(Role::HeadDense, w.head_dense);
  norm(Role::HeadNorm, w.head_norm, d_embed);
  for (const LayerWeights& l : w.layers) {  // a shared layer repeated changes no mean or spread
    norm(Role::AttnNorm, l.attn_norm, d);
    linear(Role::AttnQ, l.q), linear(Role::AttnK, l.k), linear(Role::AttnV, l.v), linear(Role::AttnO, l.o);
    norm(Role::AttnPostNorm, l.attn_post_norm, d);
    norm(Role::MlpNorm, l.mlp_norm, d);
    linear(Role::MlpGate, l.gate), linear(Role::MlpUp, l.up), linear(Role::MlpDown, l.down);
    norm(Role::MlpPostNorm, l.mlp_post_norm, d);
  }
  TensorMoments out;
  for (const auto& [key, s] : sums) {
    if (s.count == 0) continue;
    const double mean = s.sum / static_cast<double>(s.count);
    out[key] = {mean, std::sqrt(std::max(0.0, s.squares / static_cast<double>(s.count) - mean * mean)), s.count};
  }
  if (out.empty()) fail("the model has no weights to take scales from");
  return out;
}

}  // namespace tdyn
