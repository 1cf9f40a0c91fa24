// tdyn info MODEL [--json] [--check-weights]: family, configuration, parameter count and tensor table of a
// checkpoint, from its headers alone (no weight byte is read unless --check-weights).
#include <iostream>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "command.h"

namespace tdyn::cli {
namespace {

nlohmann::json describe(const Model& m) {
  const ModelConfig& c = m.config;
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& name : m.store.names()) {
    const TensorInfo& t = m.store.get(name);
    tensors.push_back({{"name", name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"file", t.file}});
  }
  nlohmann::json rope = {{"style", to_string(c.rope.style)}, {"theta", c.rope.theta}, {"scaling", c.rope.scaling}};
  if (c.rope.scaling != "default") rope["factor"] = c.rope.factor;
  if (c.rope.partial_rotary_factor != 1.0) {
    rope["partial_rotary_factor"] = c.rope.partial_rotary_factor;
    rope["rotary_dims"] = c.rope.rotary_dim(c.d_head);  // leading dimensions of each head that rotate
  }
  // Per-layer sliding windows (0: full causal attention), when any layer has one.
  nlohmann::json windows = nlohmann::json::array();
  bool any_window = false;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    windows.push_back(c.layer(l).sliding_window);
    any_window |= c.layer(l).sliding_window > 0;
  }
  return {{"path", m.path.string()},
          {"family", c.family},
          {"format", c.format},
          {"parameters", m.parameter_count()},
          {"config",
           {{"d_model", c.d_model}, {"n_layers", c.n_layers}, {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads},
            {"d_head", c.d_head}, {"d_mlp", c.d_mlp}, {"d_vocab", c.d_vocab}, {"n_ctx", c.n_ctx},
            {"norm", to_string(c.norm)}, {"norm_eps", c.norm_eps}, {"activation", to_string(c.activation)},
            {"gated_mlp", c.gated_mlp}, {"attn_scale", c.attn_scale}, {"causal", c.causal},
            {"tied_embeddings", c.tied_embeddings}, {"parallel_residual", c.parallel_residual}, {"rope", rope},
            {"sliding_window", any_window ? windows : nlohmann::json(nullptr)}}},
          {"source_config", *c.source},
          {"format_metadata", m.store.metadata()},
          {"tensors", tensors}};
}

std::function<int()> setup_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Describe a checkpoint: family, configuration, parameter count, tensor table");
  auto args = std::make_shared<ModelArgs>();
  auto json = std::make_shared<bool>(false);
  args->add_to(cmd, /*headers_only=*/true);
  cmd->add_flag("--json", *json, "Print the description as JSON");
  return [args, json] {
    auto model = args->load();
    nlohmann::json d = describe(*model);
    if (*json) {
      std::cout << d.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      return 0;
    }
    const auto& c = d["config"];
    std::cout << fmt::format("model       {}\nfamily      {}\nformat      {}\nparameters  {}\n", d["path"].get<std::string>(),
                             d["family"].get<std::string>(), d["format"].get<std::string>(), d["parameters"].get<int64_t>());
    for (auto& [key, value] : c.items()) std::cout << fmt::format("{:<18}{}\n", key, value.dump());
    std::cout << fmt::format("\n{} tensors:\n", d["tensors"].size());
    for (const auto& t : d["tensors"])
      std::cout << fmt::format("  {:<56} {:<5} {}\n", t["name"].get<std::string>(), t["dtype"].get<std::string>(),
                               t["shape"].dump());
    return 0;
  };
}

TDYN_REGISTER_COMMAND("info", 10, setup_info);

}  // namespace
}  // namespace tdyn::cli
