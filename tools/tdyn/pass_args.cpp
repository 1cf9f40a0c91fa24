#include "pass_args.h"

#include <iostream>

#include "core/error.h"
#include "core/ranks.h"
#include "report/progress.h"

namespace tdyn::cli {

void PassArgs::add_to(CLI::App* cmd, bool offer_from_pass) {
  CLI::Option* from = nullptr;
  if (offer_from_pass)
    from = cmd->add_option("--from-pass", from_pass,
                           "Take the forward-pass sums from this pass file (written by tdyn analyze as DIR/pass/pass.tdynpass) "
                           "instead of running the samples; it must be of the same model, samples and positions");
  auto* resume_flag = cmd->add_flag("--resume", resume,
                                    "Continue from the checkpoint in the output directory (pass.checkpoint) left by an interrupted "
                                    "run; the result is identical to an uninterrupted run with the same thread count");
  auto* every = cmd->add_option("--checkpoint-every", checkpoint_every,
                                "Save the running sums after this many samples (0: by time only); saves happen between chunks of "
                                "16 samples")
                    ->capture_default_str()->check(CLI::NonNegativeNumber);
  auto* seconds = cmd->add_option("--checkpoint-seconds", checkpoint_seconds,
                                  "... or after this many seconds since the last save (0: by count only)")
                      ->capture_default_str()->check(CLI::NonNegativeNumber);
  if (from)
    for (auto* o : {resume_flag, every, seconds}) o->excludes(from);
}

nlohmann::json pass_options_json(const PassArgs& args) {
  return {{"from_pass", args.from_pass.empty() ? nlohmann::json(nullptr) : nlohmann::json(args.from_pass)},
          {"chunk", PassSpec{}.chunk},
          {"checkpoint_every", args.checkpoint_every},
          {"checkpoint_seconds", args.checkpoint_seconds},
          {"ranks", ranks().size}};
}

nlohmann::json pass_model_identity(const std::string& path, const Model& model) {
  const ModelConfig& c = model.config;
  return {{"path", fs::absolute(path).lexically_normal().string()}, {"family", c.family}, {"format", c.format},
          {"d_model", c.d_model}, {"n_layers", c.n_layers}, {"d_vocab", c.d_vocab}, {"parameters", model.parameter_count()}};
}

namespace {

// The sums of `spec` taken out of a finished pass over a superset of its boundaries.
PassSums select_from_pass(const fs::path& path, const nlohmann::json& expected, const PassSpec& spec) {
  PassFile file = load_pass(path);
  if (!file.header.value("complete", false))
    fail("--from-pass {}: the checkpoint of an unfinished pass, not a finished one (continue its run with --resume)", path.string());
  const nlohmann::json& found = file.header.at("identity");
  auto differs = [&](const char* key) { return found.at(key) != expected.at(key); };
  if (differs("model")) fail("--from-pass {}: a pass of another model ({} vs {})", path.string(), found["model"].dump(), expected["model"].dump());
  if (differs("samples"))
    fail("--from-pass {}: a pass over other samples ({} vs {}): give the same --data, --samples, --max-len, --min-len and "
         "--sample-seed", path.string(), found["samples"].dump(), expected["samples"].dump());
  const nlohmann::json &have = found.at("spec"), &want = expected.at("spec");
  if (want["jacobians"].get<bool>() && (!have["jacobians"].get<bool>() || have["positions"] != want["positions"]))
    fail("--from-pass {}: the pass has no Jacobian sums at positions '{}'", path.string(), want["positions"].get<std::string>());
  if (want["correlations"].get<bool>() && !have["correlations"].get<bool>())
    fail("--from-pass {}: the pass has no correlation sums", path.string());
  const std::vector<std::string> hooks = have.at("boundaries");
  PassSums s;
  s.n_samples = file.sums.n_samples, s.n_tokens = file.sums.n_tokens, s.n_pairs = file.sums.n_pairs;
  for (const ResidualBoundary& b : spec.boundaries) {
    const auto at = std::find(hooks.begin(), hooks.end(), b.hook);
    if (at == hooks.end()) fail("--from-pass {}: the pass has no sums at {}", path.string(), b.hook);
    const size_t i = at - hooks.begin();
    if (spec.correlations) s.correlations.push_back(file.sums.correlations.at(i));
    if (spec.jacobians) s.jacobian_sums.push_back(file.sums.jacobian_sums.at(i));
  }
  // Probes by name; each must be the same measurement (boundary and basis).
  const nlohmann::json& have_probes = have.at("probes");
  for (const nlohmann::json& w : want.at("probes")) {
    size_t j = 0;
    while (j < have_probes.size() && have_probes[j].at("name") != w.at("name")) ++j;
    if (j == have_probes.size() || have_probes[j] != w)
      fail("--from-pass {}: the pass has no token probe '{}' of this model's spectra ({})", path.string(),
           w.at("name").get<std::string>(), j == have_probes.size() ? "missing" : "a different basis or boundary");
    s.probe_values.push_back(file.sums.probe_values.at(j));
  }
  return s;
}

}  // namespace

PassSums obtain_pass(const PassArgs& args, const Transformer& transformer, const JacobianModel* jacobians,
                     const std::vector<Sample>& samples, const PassSpec& spec, const nlohmann::json& model_identity,
                     const fs::path& checkpoint, const std::string& label) {
  const nlohmann::json identity = pass_identity(model_identity, samples, spec);
  if (!args.from_pass.empty()) {
    require_single_rank(true, "--from-pass");
    try {
      return select_from_pass(args.from_pass, identity, spec);
    } catch (const nlohmann::json::exception& e) {
      fail("--from-pass {}: its header lacks what a pass file holds ({})", args.from_pass, e.what());
    }
  }
  const Ranks& me = ranks();
  PassControl control;
  control.checkpoint = checkpoint;
  if (me.size > 1)
    control.checkpoint.replace_filename(fmt::format("{}.rank{}of{}{}", checkpoint.stem().string(), me.rank, me.size,
                                                    checkpoint.extension().string()));
  control.resume = args.resume;
  control.checkpoint_samples = args.checkpoint_every;
  control.checkpoint_seconds = args.checkpoint_seconds;
  control.note = [](const std::string& text) {
    if (!progress_quiet()) std::cerr << "tdyn: " << text << "\n";
  };
  Progress progress(label, samples_of_this_rank(static_cast<int64_t>(samples.size()), spec), "samples");  // this rank's share
  control.progress = [&progress](int64_t done) { progress.advance(done); };
  return run_pass(transformer, jacobians, samples, spec, identity, control);
}

void require_single_rank(bool condition, const std::string& what) {
  if (condition && ranks().size > 1)
    fail("{} runs in one process only; start it without mpirun (the sample pass is what MPI splits)", what);
}

}  // namespace tdyn::cli
