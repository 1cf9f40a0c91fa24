// tdyn analyze end to end on the real stories260K checkpoint with a small S: every part runs, the report has every
// section, and DIR/results.json satisfies docs/results.schema.json (checked by the small validator below, which
// knows the keywords that schema uses: type, required, properties, items, additionalProperties, enum, const).
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace tdyn {
namespace {

using json = nlohmann::json;

bool has_type(const json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  return false;
}

// Appends one message per violation, naming the JSON path.
void validate(const json& v, const json& schema, const std::string& path, std::vector<std::string>* errors) {
  if (schema.contains("type") && !has_type(v, schema["type"])) {
    errors->push_back(fmt::format("{}: expected {}, got {}", path, schema["type"].get<std::string>(), v.type_name()));
    return;
  }
  if (schema.contains("const") && v != schema["const"]) errors->push_back(fmt::format("{}: expected {}, got {}", path, schema["const"].dump(), v.dump()));
  if (schema.contains("enum") && std::find(schema["enum"].begin(), schema["enum"].end(), v) == schema["enum"].end())
    errors->push_back(fmt::format("{}: {} not in {}", path, v.dump(), schema["enum"].dump()));
  if (v.is_object()) {
    for (const auto& key : schema.value("required", json::array()))
      if (!v.contains(key)) errors->push_back(fmt::format("{}: missing key '{}'", path, key.get<std::string>()));
    const json properties = schema.value("properties", json::object());
    for (const auto& [key, value] : v.items()) {
      if (properties.contains(key)) validate(value, properties[key], path + "/" + key, errors);
      else if (schema.contains("additionalProperties") && schema["additionalProperties"].is_object())
        validate(value, schema["additionalProperties"], path + "/" + key, errors);
    }
  }
  if (v.is_array() && schema.contains("items"))
    for (size_t i = 0; i < v.size(); ++i) validate(v[i], schema["items"], fmt::format("{}/{}", path, i), errors);
}

TEST(Analyze, SchemaValidatorCatchesViolations) {
  const json schema = json::parse(read_file(test::source_dir() / "docs/results.schema.json"));
  std::vector<std::string> errors;
  validate(json{{"schema_version", "1"}, {"command", "power"}}, schema, "", &errors);
  EXPECT_GE(errors.size(), 3u);  // wrong type, wrong const, missing keys
}

TEST(Analyze, Stories260KEndToEnd) {
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  TDYN_REQUIRE_SHARED("data/wikitext-2/wiki.test.raw");
  const fs::path dir = test::scratch_dir("analyze_stories");
  const fs::path model = test::shared_dir() / "models/stories260K/stories260K.bin";
  // S = 200, the default and the size the report is meant for.
  const std::string cmd = fmt::format("{} analyze '{}' --samples 200 --quiet --out '{}' > '{}' 2>&1", test::cli_path().string(),
                                      model.string(), dir.string(), (dir / "log.txt").string());
  const int rc = std::system(cmd.c_str());
  ASSERT_EQ(rc, 0) << cmd << "\n" << (fs::exists(dir / "log.txt") ? read_file(dir / "log.txt") : "");

  const json results = json::parse(read_file(dir / "results.json"));
  const json schema = json::parse(read_file(test::source_dir() / "docs/results.schema.json"));
  std::vector<std::string> errors;
  validate(results, schema, "", &errors);
  for (const auto& e : errors) ADD_FAILURE() << e;

  EXPECT_EQ(results["results"]["pass"]["samples"], 200);
  for (const char* part : {"power", "jacobian", "topology", "particles"}) {
    EXPECT_EQ(results["results"]["parts"][part]["status"], "ok") << part << ": " << results["results"]["parts"][part].dump();
    EXPECT_TRUE(fs::exists(dir / part / "results.json")) << part;
  }
  const std::string html = read_file(dir / "index.html");
  for (const char* s : {"id=\"summary\"", "Seed 000", "Seed 003", "Seed 004", "id=\"part-power\"", "id=\"part-jacobian\"",
                        "id=\"part-topology\"", "id=\"part-particles\"", "<img src=\"power/eigenvalues.svg\"",
                        "<img src=\"jacobian/cumulative_effective_rank.svg\"", "<img src=\"topology/coupling_vs_depth.svg\"",
                        "<img src=\"particles/trajectories.svg\""})
    EXPECT_NE(html.find(s), std::string::npos) << "missing " << s;
  EXPECT_EQ(html.find("failed:"), std::string::npos);
}

}  // namespace
}  // namespace tdyn
