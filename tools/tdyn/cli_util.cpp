#include "cli_util.h"

#include <charconv>

namespace tdyn::cli {

std::vector<int32_t> parse_int_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t b = item.find_first_not_of(' '), e = item.find_last_not_of(' ');
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    int32_t v = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size())
      throw CLI::ValidationError(flag, "expected comma-separated integers, got '" + item + "'");
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

void ModelArgs::add_to(CLI::App* cmd) {
  cmd->add_option("MODEL", path,
                  "Hugging Face model directory (config.json + model.safetensors[.index.json]), "
                  "a .gguf file, or a llama2.c .bin checkpoint")
      ->required();
  cmd->add_flag("--allow-unknown-config-keys", allow_unknown_config_keys,
                "Warn about config.json keys tdyn does not know instead of refusing the model");
}

std::shared_ptr<const Model> ModelArgs::load() const {
  LoadOptions options;
  options.config.allow_unknown_keys = allow_unknown_config_keys;
  return load_model(path, options);
}

}  // namespace tdyn::cli
