#include "analysis/pass/source.h"

#include <algorithm>

#include "core/error.h"
#include "core/ranks.h"

namespace tdyn {

nlohmann::json PassSource::to_json() const {
  return {{"from_pass", from_pass.empty() ? nlohmann::json(nullptr) : nlohmann::json(from_pass)},
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
  if (differs("model")) fail("pass file {}: a pass of another model ({} vs {})", path.string(), found["model"].dump(), expected["model"].dump());
  if (differs("samples"))
    fail("pass file {}: a pass over other samples ({} vs {}): the same data, samples, max_len, min_len and "
         "seed are needed", path.string(), found["samples"].dump(), expected["samples"].dump());
  const nlohmann::json &have = found.at("spec"), &want = expected.at("spec");
  const nlohmann::json none = nlohmann::json::array();
  if (have.value("ablate", none) != want.value("ablate", none))
    fail("pass file {}: a pass of the model with other ablations ({} vs {})", path.string(), have.value("ablate", none).dump(),
         want.value("ablate", none).dump());
  if (want["jacobians"].get<bool>() && (!have["jacobians"].get<bool>() || have["positions"] != want["positions"]))
    fail("pass file {}: the pass has no Jacobian sums at positions '{}'", path.string(), want["positions"].get<std::string>());
  if (want["correlations"].get<bool>() && !have["correlations"].get<bool>())
    fail("pass file {}: the pass has no correlation sums", path.string());
  const std::vector<std::string> hooks = have.at("boundaries");
  for (const ResidualBoundary& b : spec.boundaries)
    if (std::find(hooks.begin(), hooks.end(), b.hook) == hooks.end()) fail("pass file {}: the pass has no sums at {}", path.string(), b.hook);
  // Probes by name; each must be the same measurement (boundary and basis).
  const nlohmann::json& have_probes = have.at("probes");
  for (const nlohmann::json& w : want.at("probes")) {
    size_t j = 0;
    while (j < have_probes.size() && have_probes[j].at("name") != w.at("name")) ++j;
    if (j == have_probes.size() || have_probes[j] != w)
      fail("pass file {}: the pass has no token probe '{}' of this model's spectra ({})", path.string(),
           w.at("name").get<std::string>(), j == have_probes.size() ? "missing" : "a different basis or boundary");
  }
  return file;
}

}  // namespace

PassFile obtain_pass(const PassSource& source, const Transformer& transformer, const JacobianModel* jacobians,
                     const std::vector<Sample>& samples, const PassSpec& spec, const nlohmann::json& model_identity,
                     const fs::path& file, bool keep, const std::string& label, ProgressSink& progress) {
  const nlohmann::json identity = pass_identity(model_identity, samples, spec);
  if (!source.from_pass.empty()) {
    if (!ranks().root()) throw WorkerShareDone{};  // rank 0 reads it; a worker rank has no share in a finished pass
    try {
      return check_pass(source.from_pass, identity, spec);
    } catch (const nlohmann::json::exception& e) {
      fail("pass file {}: its header lacks what a pass file holds ({})", source.from_pass, e.what());
    }
  }
  PassControl control;
  control.file = file;
  control.resume = source.resume;
  control.note = [&progress](const std::string& text) { progress.note(text); };
  const int64_t n_layers = transformer.config().n_layers;
  ProgressLoop loop(progress, label, n_layers * samples_of_this_rank(static_cast<int64_t>(samples.size()), spec), "sample-layers");
  control.progress = [&loop](int64_t done) { loop.advance(done); };
  PassFile pass = run_pass(transformer, jacobians, samples, spec, identity, control);
  if (pass.is_worker_share()) throw WorkerShareDone{};
  if (!keep) pass.remove_when_done();
  return pass;
}

void require_single_rank(bool condition, const std::string& what) {
  if (condition && ranks().size > 1)
    throw RefusedUnderRanks(fmt::format("{} runs in one process only; start it without mpirun (the sample pass is what MPI splits)", what));
}

}  // namespace tdyn
