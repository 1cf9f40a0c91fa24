#include "pass_args.h"

#include <cstdlib>
#include <iostream>

#include "core/error.h"
#include "core/ranks.h"
#include "report/progress.h"

namespace tdyn::cli {

void PassArgs::add_to(CLI::App* cmd, bool offer_from_pass) {
  auto* resume_flag = cmd->add_flag("--resume", resume,
                                    "Continue the pass that an interrupted run left in the output directory (pass.tdynpass) after "
                                    "its last finished layer; the result is identical to an uninterrupted run with the same thread count");
  if (offer_from_pass)
    cmd->add_option("--from-pass", from_pass,
                    "Take the forward-pass sums from this pass file (written by tdyn analyze as DIR/pass/pass.tdynpass) "
                    "instead of running the samples; it must be of the same model, samples and positions")
        ->excludes(resume_flag);
}

nlohmann::json pass_options_json(const PassArgs& args) {
  return {{"from_pass", args.from_pass.empty() ? nlohmann::json(nullptr) : nlohmann::json(args.from_pass)},
          {"chunk", PassSpec{}.chunk},
          {"order", "layer-major"},
          {"ranks", ranks().size}};
}

nlohmann::json pass_model_identity(const std::string& path, const Model& model) {
  const ModelConfig& c = model.config;
  return {{"path", fs::absolute(path).lexically_normal().string()}, {"family", c.family}, {"format", c.format},
          {"d_model", c.d_model}, {"n_layers", c.n_layers}, {"d_vocab", c.d_vocab}, {"parameters", model.parameter_count()}};
}

namespace {

// A finished pass over a superset of `spec`'s boundaries, sums and probes, of this model and these samples.
PassFile check_pass(const fs::path& path, const nlohmann::json& expected, const PassSpec& spec) {
  PassFile file = PassFile::open(path);
  const nlohmann::json& found = file.identity();
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
  for (const ResidualBoundary& b : spec.boundaries)
    if (std::find(hooks.begin(), hooks.end(), b.hook) == hooks.end()) fail("--from-pass {}: the pass has no sums at {}", path.string(), b.hook);
  // Probes by name; each must be the same measurement (boundary and basis).
  const nlohmann::json& have_probes = have.at("probes");
  for (const nlohmann::json& w : want.at("probes")) {
    size_t j = 0;
    while (j < have_probes.size() && have_probes[j].at("name") != w.at("name")) ++j;
    if (j == have_probes.size() || have_probes[j] != w)
      fail("--from-pass {}: the pass has no token probe '{}' of this model's spectra ({})", path.string(),
           w.at("name").get<std::string>(), j == have_probes.size() ? "missing" : "a different basis or boundary");
  }
  return file;
}

}  // namespace

PassFile obtain_pass(const PassArgs& args, const Transformer& transformer, const JacobianModel* jacobians,
                     const std::vector<Sample>& samples, const PassSpec& spec, const nlohmann::json& model_identity,
                     const fs::path& file, bool keep, const std::string& label) {
  const nlohmann::json identity = pass_identity(model_identity, samples, spec);
  if (!args.from_pass.empty()) {
    require_single_rank(true, "--from-pass");
    try {
      return check_pass(args.from_pass, identity, spec);
    } catch (const nlohmann::json::exception& e) {
      fail("--from-pass {}: its header lacks what a pass file holds ({})", args.from_pass, e.what());
    }
  }
  PassControl control;
  control.file = file;
  control.resume = args.resume;
  control.note = [](const std::string& text) {
    if (!progress_quiet()) std::cerr << "tdyn: " << text << "\n";
  };
  const int64_t n_layers = transformer.config().n_layers;
  Progress progress(label, n_layers * samples_of_this_rank(static_cast<int64_t>(samples.size()), spec), "sample-layers");
  control.progress = [&progress](int64_t done) { progress.advance(done); };
  PassFile pass = run_pass(transformer, jacobians, samples, spec, identity, control);
  if (pass.is_worker_share()) {
    // This rank's share is with rank 0, which writes every output.
    finalize_ranks();
    std::exit(0);
  }
  if (!keep) pass.remove_when_done();
  return pass;
}

void require_single_rank(bool condition, const std::string& what) {
  if (condition && ranks().size > 1)
    fail("{} runs in one process only; start it without mpirun (the sample pass is what MPI splits)", what);
}

}  // namespace tdyn::cli
