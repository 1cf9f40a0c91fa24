// tdyn analyze end to end on the real stories260K checkpoint with a small S: every part runs, the report has every
// section, and DIR/results.json satisfies docs/results.schema.json (checked by the small validator below, which
// knows the keywords that schema uses: type (one or a list), required, properties, items, additionalProperties, enum,
// const).
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <set>

#include <nlohmann/json.hpp>

#include "analysis/layer_matrix.h"
#include "core/text.h"
#include "test_util.h"

namespace tdyn {
namespace {

using json = nlohmann::json;
using test::kStories;

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
  if (schema.contains("type")) {
    const json types = schema["type"].is_array() ? schema["type"] : json::array({schema["type"]});
    if (std::none_of(types.begin(), types.end(), [&](const json& t) { return has_type(v, t.get<std::string>()); })) {
      errors->push_back(fmt::format("{}: expected {}, got {}", path, types.dump(), v.type_name()));
      return;
    }
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
  // A verdict whose value is a string, and one whose verdict is not one of the six.
  const json& verdict_schema = schema["properties"]["results"]["properties"]["verdicts"]["items"];
  const json evidence = {{"samples", 12}, {"direction", "below"}, {"p_claim", nullptr}, {"p", 0.01}, {"p_holm", 0.04},
                         {"controls", json::array({{{"kind", "init"}, {"seeds", {0, 1}}, {"values", {0.9, 0.8}}, {"holds", 2}, {"p", 0.01}}})}};
  const json good = {{"paper", "003"}, {"claim", "bottleneck"}, {"verdict", "architectural"}, {"value", nullptr},
                     {"control", {{"value", 0.5}, {"what", "init"}}}, {"evidence", evidence}, {"observed", "o"}, {"rule", "r"}};
  errors.clear();
  validate(good, verdict_schema, "", &errors);
  EXPECT_TRUE(errors.empty()) << errors.front();
  json bad = good;
  bad["value"] = "0.5";
  bad["verdict"] = "maybe";
  validate(bad, verdict_schema, "", &errors);
  EXPECT_EQ(errors.size(), 2u);
}

// analyze's verdicts on random initialisations of the llama fixture's architecture (d = 64, 3 layers) and 12 samples
// of token ids: one at the control's std 0.02 (another seed) and one at ten times it, which the family's own
// initialisation cannot explain but the scale-matched initialisations can. No claim about training may pass on
// either, though the rank falls with depth (the old rule, erank C_K < erank C_1, passed). The rules' "pass" side is
// tested on hand-written numbers in test_report.cpp.
std::string verdict_of(const json& results, const std::string& paper, const std::string& claim) {
  for (const json& v : results["results"]["verdicts"])
    if (v["paper"] == paper && v["claim"] == claim) return v["verdict"];
  return "absent";
}

TEST(Analyze, BottleneckVerdictAgainstRandomInit) {
  TDYN_REQUIRE_SHARED("fixtures/llama/config.json");
  const fs::path dir = test::scratch_dir("analyze_bottleneck");
  const fs::path fixture = test::shared_dir() / "fixtures/llama";
  std::string ids;
  for (int s = 0; s < 12; ++s) {
    for (int i = 0; i < 16; ++i) ids += fmt::format("{} ", (37 * s + 11 * i + i * i) % 256);
    ids += "\n";
  }
  write_file_atomic(dir / "samples.ids", ids);
  std::string out, err;
  auto analyze = [&](const fs::path& model, const std::string& name) {
    const fs::path res = dir / name;
    EXPECT_EQ(test::run_cli(fmt::format("--threads 1 --quiet analyze {} --data {} --samples 12 --max-len 16 --skip power,topology,particles "
                                        "--out {}",
                                        model.string(), (dir / "samples.ids").string(), res.string()),
                            &out, &err),
              0)
        << err;
    return json::parse(read_file(res / "results.json"));
  };
  for (const char* scale : {"0.02", "0.2"}) {
    const std::string name = fmt::format("random_{}", scale);
    ASSERT_EQ(test::run_cli(fmt::format("init {} --seed 7 --initializer-range {} --out {}", fixture.string(), scale, (dir / name).string()),
                            &out, &err),
              0)
        << err;
    const json random = analyze(dir / name, name + "_res");
    EXPECT_EQ(random["results"]["parts"]["init"]["status"], "ok") << random["results"]["parts"].dump(1);
    EXPECT_EQ(random["results"]["parts"]["init"]["seeds"].size(), 10u) << "5 seeds of each kind by default";
    for (const json& v : random["results"]["verdicts"]) {
      EXPECT_NE(v["verdict"], "pass") << "std " << scale << ": " << v.dump(1);
      if (v["claim"] == "bottleneck") {
        EXPECT_LT(v["value"].get<double>(), 1.0) << "the rank falls, as the old rule wanted";
        EXPECT_EQ(v["evidence"]["controls"].size(), 3u) << "both kinds of initialisation and the Haar null: " << v.dump(1);
        EXPECT_EQ(v["evidence"]["samples"], 12);
      }
    }
  }
  // At the family's own scale its initialisations explain the collapse: architectural.
  const json random = json::parse(read_file(dir / "random_0.02_res/results.json"));
  EXPECT_EQ(verdict_of(random, "003", "bottleneck"), "architectural") << random["results"]["verdicts"].dump(1);

  // Without the initialisations the other claims about training have no control.
  EXPECT_EQ(test::run_cli(fmt::format("--threads 1 --quiet analyze {} --data {} --samples 12 --max-len 16 --skip power,topology,particles "
                                      "--no-init-control --out {}",
                                      (dir / "random_0.02").string(), (dir / "samples.ids").string(), (dir / "no_control").string()),
                          &out, &err),
            0)
      << err;
  const json none = json::parse(read_file(dir / "no_control/results.json"));
  EXPECT_EQ(none["results"]["parts"]["init"]["status"], "skipped");
  // The Haar null of the model's own mean Jacobians still judges the bottleneck: a random model's collapse is its
  // spectra's, as strong under the null (architectural) or within the interval's reach of it (inconclusive).
  for (const json& v : none["results"]["verdicts"]) {
    if (v["claim"] != "bottleneck") continue;
    EXPECT_TRUE(v["verdict"] == "architectural" || v["verdict"] == "inconclusive") << v.dump(1);
    ASSERT_EQ(v["evidence"]["controls"].size(), 1u) << v.dump(1);
    EXPECT_EQ(v["evidence"]["controls"][0]["kind"], "haar");
    EXPECT_EQ(v["evidence"]["controls"][0]["values"].size(), 5u);
    EXPECT_EQ(v["observed"].get<std::string>().find("no initialisation control"), std::string::npos) << v.dump(1);
  }
}

// The HF fixtures of every family hold random weights (std 0.2, never trained): whatever their own statistics show,
// no claim about training may pass on them, against both kinds of initialisation and the Haar null.
TEST(Analyze, NoClaimAboutTrainingPassesOnRandomWeights) {
  TDYN_REQUIRE_SHARED("fixtures/llama/config.json");
  const fs::path dir = test::scratch_dir("analyze_random_families");
  std::string ids;
  for (int s = 0; s < 24; ++s) {
    for (int i = 0; i < 16; ++i) ids += fmt::format("{} ", 3 + (31 * s + 7 * i + i * i) % 56);  // in every fixture's vocabulary
    ids += "\n";
  }
  write_file_atomic(dir / "samples.ids", ids);
  const std::set<std::string> about_training = {"gamma",     "rho",     "alignment_local", "gamma_gap",    "bottleneck",
                                                "normality", "surgery", "coupling",        "coupling_sign"};
  for (const char* family : {"albert", "bert", "gpt2", "gpt_neo", "llama", "olmo3", "gemma4"}) {
    const fs::path fixture = test::shared_dir() / "fixtures" / family, out = dir / family;
    std::string err;
    // No sample subsets: without their intervals a verdict has one obstacle fewer to passing, so the test is stricter.
    ASSERT_EQ(test::run_cli(fmt::format("--threads 1 --quiet analyze {} --data {} --samples 24 --max-len 16 --skip particles "
                                        "--interval-subsets 0 --out {}",
                                        fixture.string(), (dir / "samples.ids").string(), out.string()),
                            nullptr, &err),
              0)
        << family << ": " << err;
    const json results = json::parse(read_file(out / "results.json"));
    int judged = 0;
    for (const json& v : results["results"]["verdicts"]) {
      if (!about_training.count(v["claim"].get<std::string>())) continue;
      EXPECT_NE(v["verdict"], "pass") << family << ": " << v.dump(1);
      judged += v["verdict"] != "not computed";
    }
    EXPECT_GE(judged, 6) << family << ": the claims about training were judged, not skipped";
  }
}

// --tokenizer reaches the shared pass and every part that tokenizes text: the model's own tokenizer named explicitly
// runs, each part's command line carries it, and GPT-2's tokenizer (ids up to 50256) is refused by the pass for
// stories260K's vocabulary of 512, before any part runs.
TEST(Analyze, TokenizerGoesToThePassAndEveryPart) {
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  TDYN_REQUIRE_SHARED("tokenizers/gpt2/encoder.json");
  TDYN_REQUIRE_SHARED("data/wikitext-2/wiki.test.raw");
  const fs::path dir = test::scratch_dir("analyze_tokenizer");
  const fs::path model = test::shared_dir() / "models/stories260K/stories260K.bin";
  const fs::path tokenizer = test::shared_dir() / "models/stories260K/tok512.bin";
  const std::string inputs = fmt::format("{} --data {} --samples 4 --max-len 16 --particles-tokens 8 --particles-T 1", model.string(),
                                         (test::shared_dir() / "data/wikitext-2/wiki.test.raw").string());
  std::string out, err;
  ASSERT_EQ(test::run_cli(fmt::format("--threads 1 --quiet analyze {} --tokenizer {} --out {}", inputs, tokenizer.string(),
                                      (dir / "own").string()),
                          &out, &err),
            0)
      << err;
  const json results = json::parse(read_file(dir / "own/results.json"));
  const std::string absolute = fs::absolute(tokenizer).lexically_normal().string();
  EXPECT_EQ(results["options"]["tokenizer"], absolute);
  for (const char* part : {"power", "power-l2", "jacobian", "init", "topology", "particles"}) {
    const json& record = results["results"]["parts"][part];
    EXPECT_EQ(record["status"], "ok") << part << ": " << record.dump();
    if (std::string(part) == "init") {
      for (const json& seed : record["seeds"])
        for (const auto& [command, argv] : seed["argv"].items())
          EXPECT_EQ(argv.dump().find("--tokenizer"), std::string::npos) << "init reads token ids, it has nothing to tokenize: " << command;
    } else {
      const auto argv = record["argv"].get<std::vector<std::string>>();
      const auto flag = std::find(argv.begin(), argv.end(), "--tokenizer");
      ASSERT_NE(flag, argv.end()) << part;
      ASSERT_NE(flag + 1, argv.end()) << part;
      EXPECT_EQ(*(flag + 1), absolute) << part;
    }
  }
  EXPECT_EQ(test::run_cli(fmt::format("--threads 1 --quiet analyze {} --tokenizer {} --out {}", inputs,
                                      (test::shared_dir() / "tokenizers/gpt2/encoder.json").string(), (dir / "gpt2").string()),
                          &out, &err),
            1);
  EXPECT_NE(err.find("outside the vocabulary [0, 512)"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir / "gpt2/power"));
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
  for (const char* part : {"power", "power-l2", "jacobian", "init", "topology", "particles"}) {
    EXPECT_EQ(results["results"]["parts"][part]["status"], "ok") << part << ": " << results["results"]["parts"][part].dump();
    if (std::string(part) != "init") EXPECT_TRUE(fs::exists(dir / part / "results.json")) << part;
  }
  const std::string html = read_file(dir / "index.html");
  for (const char* s : {"id=\"summary\"", "<h3>Transformer layers and the power method", "<h3>Residual-stream Jacobians and network topology",
                        "<h3>Clusters in self-attention dynamics", "id=\"part-power\"", "id=\"part-jacobian\"",
                        "id=\"part-topology\"", "id=\"part-particles\"", "id=\"part-power-l2\"",
                        "idealisation (attention only, L2-normalised)", "<img src=\"power/eigenvalues.svg\"",
                        "<img src=\"jacobian/cumulative_effective_rank.svg\"", "<img src=\"topology/coupling_vs_depth.svg\"",
                        "<img src=\"particles/trajectories.svg\""})
    EXPECT_NE(html.find(s), std::string::npos) << "missing " << s;
  EXPECT_EQ(html.find("failed:"), std::string::npos);
  // The model beside its initialisation first, then the model's parts, and only then the controls' sections.
  const size_t side_by_side = html.find("<h2 id=\"part-side-by-side\">"), power = html.find("<h2 id=\"part-power\">"),
               particles = html.find("<h2 id=\"part-particles\">"), control = html.find("<h2 id=\"part-init-seed-0-power\">");
  EXPECT_TRUE(side_by_side < power && power < particles && particles < control) << side_by_side << " " << power << " " << particles << " " << control;
  EXPECT_NE(read_file(dir / "side-by-side/compare.csv").find("stories260K,init,jacobian,1,0.1,attn,normalized_departure"), std::string::npos);
  EXPECT_NE(html.find("<img src=\"side-by-side/symmetry_index_mlp.svg\""), std::string::npos);
  // The random-init controls ran on the same token ids, so the bottleneck has a verdict against both kinds.
  for (const char* kind : {"seed", "scaled"})
    for (int seed = 0; seed < 5; ++seed) {
      const fs::path control = dir / "init" / fmt::format("{}-{}", kind, seed);
      // Only the first initialisation keeps its checkpoint; its init_argv writes any other again.
      EXPECT_EQ(fs::exists(control / "model/model.safetensors"), std::string(kind) == "seed" && seed == 0) << control;
      for (const char* part : {"power", "jacobian", "topology"})
        EXPECT_EQ(json::parse(read_file(control / part / "results.json"))["command"], part) << control;
    }
  // The controls ran on the first of the five sample subsets, as did the model's parts they are compared with.
  const json init = json::parse(read_file(dir / "init/seed-0/jacobian/results.json"));
  EXPECT_EQ(init["results"]["samples_used"], 40);
  for (const char* part : {"power", "jacobian", "topology"}) {
    const json matched = json::parse(read_file(dir / "subsets/subset-0" / part / "results.json"));
    EXPECT_EQ(matched["options"]["samples"]["data"], init["options"]["samples"]["data"]) << part;
    EXPECT_EQ(matched["options"]["samples"]["samples"], 40) << part;
  }
  EXPECT_FALSE(fs::exists(dir / "init/scaled-1/jacobian/surgery.gp")) << "only the first initialisation draws figures";
  EXPECT_TRUE(fs::exists(dir / "init/seed-0/jacobian/surgery.gp"));
  // The paper's idealisation is judged on its own, against the initialisations run the same way.
  bool idealised = false;
  for (const json& v : results["results"]["verdicts"])
    if (v["claim"] == "rho_l2") idealised = v["verdict"] != "not computed" && v["evidence"]["controls"].size() == 2;
  EXPECT_TRUE(idealised) << results["results"]["verdicts"].dump(1);
  EXPECT_EQ(json::parse(read_file(dir / "init/scaled-2/power-l2/results.json"))["options"]["mode"], "attn-only-l2");
  bool judged = false;
  for (const json& v : results["results"]["verdicts"])
    if (v["paper"] == "003" && v["claim"] == "bottleneck")
      judged = v["verdict"] != "not computed" && v["verdict"] != "inconclusive" && v["evidence"]["controls"].size() == 3 &&
               v["evidence"]["at_control_samples"]["samples"] == 40 && v["evidence"]["nested"].is_object();
  // The nested first 50 and 100 samples, behind the stability flags of the Jacobian statistics.
  EXPECT_EQ(json::parse(read_file(dir / "nested/quarter/jacobian/results.json"))["results"]["samples_used"], 50);
  EXPECT_EQ(json::parse(read_file(dir / "nested/half/jacobian/results.json"))["results"]["samples_used"], 100);
  EXPECT_TRUE(judged) << results["results"]["verdicts"].dump(1);
  // Every part ran, so every claim is judged or shown but those that need what one trained checkpoint without a
  // shared-weight layer cannot give (an iterated layer, a training run's checkpoints). A key the verdicts read that
  // an analysis no longer writes turns its claim into "not computed" here.
  std::set<std::string> not_computed;
  for (const json& v : results["results"]["verdicts"])
    if (v["verdict"] == "not computed") not_computed.insert(v["paper"].get<std::string>() + " " + v["claim"].get<std::string>());
  EXPECT_EQ(not_computed, (std::set<std::string>{"000 regime", "000 rotation", "000 bipartite", "003 emergence"}))
      << results["results"]["verdicts"].dump(1);
}


// The default corpus ships with the program: an installed tdyn (PREFIX/bin/tdyn beside PREFIX/share/tdyn) analyses a
// model from an empty working directory with no shared test data in reach, and without the corpus it says where it
// looked and what to do.
TEST(Analyze, DefaultCorpusShipsWithTheProgram) {
  TDYN_REQUIRE_SHARED(kStories);
  const fs::path dir = test::scratch_dir("default_corpus");
  const fs::path prefix = dir / "prefix", corpus = prefix / "share/tdyn/wikitext-2/wiki.test.raw";
  fs::create_directories(prefix / "bin");
  fs::create_directories(corpus.parent_path());
  fs::create_directories(dir / "model");
  fs::create_directories(dir / "empty");
  fs::copy_file(test::cli_path(), prefix / "bin/tdyn");
  fs::copy_file(test::source_dir() / "data/wikitext-2/wiki.test.raw", corpus);
  const fs::path stories = test::shared_dir() / kStories;
  fs::copy_file(stories, dir / "model" / stories.filename());
  fs::copy_file(stories.parent_path() / "tok512.bin", dir / "model/tok512.bin");
  // `args` of the installed program, run from the empty directory without TDYN_SHARED or TDYN_DATA (unless `data`).
  const auto run = [&](const std::string& args, const std::string& data = "") {
    const std::string command = fmt::format("cd {} && env -u TDYN_SHARED -u TDYN_DATA {}{} --quiet --threads 1 {} > {} 2>&1",
                                            (dir / "empty").string(), data.empty() ? "" : "TDYN_DATA=" + data + " ",
                                            (prefix / "bin/tdyn").string(), args, (dir / "log").string());
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  const std::string model = (dir / "model" / stories.filename()).string();
  ASSERT_EQ(run(fmt::format("analyze {} --samples 8 --max-len 24 --skip particles --out {}", model, (dir / "out").string())), 0)
      << read_file(dir / "log");
  const json results = json::parse(read_file(dir / "out/results.json"));
  EXPECT_EQ(fs::path(results["options"]["data"].get<std::string>()), fs::canonical(corpus));
  EXPECT_EQ(results["results"]["pass"]["samples"], 8);
  EXPECT_TRUE(fs::is_empty(dir / "empty"));

  fs::remove(corpus);
  EXPECT_EQ(run(fmt::format("power {} --samples 4 --out {}", model, (dir / "power").string())), 1);
  const std::string log = read_file(dir / "log");
  for (const std::string& phrase : {std::string("the default corpus"), fs::weakly_canonical(corpus).string(), std::string("TDYN_DATA"),
                                    std::string("--data")})
    EXPECT_NE(log.find(phrase), std::string::npos) << "no '" << phrase << "' in: " << log;

  // TDYN_DATA names another directory holding wikitext-2/.
  EXPECT_EQ(run(fmt::format("power {} --samples 4 --out {}", model, (dir / "power").string()), (test::source_dir() / "data").string()), 0)
      << read_file(dir / "log");
}

// An option that only the model can check fails before the pass, with its range; a part that fails later is named
// on stderr even under --quiet.
TEST(Analyze, ModelDependentOptionsFailBeforeThePass) {
  TDYN_REQUIRE_SHARED(kStories);
  const fs::path dir = test::scratch_dir("analyze_bad_layer");
  const std::string model = (test::shared_dir() / kStories).string();
  std::string err;
  EXPECT_EQ(test::run_cli(fmt::format("--quiet analyze {} --samples 4 --particles-layer 9 --out {}", model, dir.string()), nullptr, &err), 1);
  EXPECT_NE(err.find("--particles-layer 9: the model has layers 0 to 4"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir / "pass")) << "the pass ran before the check";
  EXPECT_EQ(test::run_cli(fmt::format("--quiet analyze {} --samples 4 --particles-head 8 --out {}", model, dir.string()), nullptr, &err), 1);
  EXPECT_NE(err.find("--particles-head 8: the model has heads 0 to 7"), std::string::npos) << err;

  // A file where the power part's directory goes: that part fails, the others run, and stderr says which and why.
  const fs::path blocked = test::scratch_dir("analyze_part_fails");
  write_file_atomic(blocked / "power", "");
  EXPECT_EQ(test::run_cli(fmt::format("--quiet analyze {} --samples 4 --max-len 16 --skip particles,topology --no-init-control --out {}",
                                      model, blocked.string()), nullptr, &err), 1);
  EXPECT_NE(err.find("tdyn: error: analyze: the power part failed: cannot create output directory"), std::string::npos) << err;
  EXPECT_TRUE(fs::exists(blocked / "jacobian/results.json"));
}

// --ablate reaches every pass, part and control: each part's command line and results record it, the power part's
// spectra are the ablated model's, a part's command line run alone reproduces its results from the ablated pass, the
// report says so, and an ablated particles head is refused before any pass.
TEST(Analyze, AblatedModelInEveryPartAndControl) {
  TDYN_REQUIRE_SHARED(kStories);
  const fs::path dir = test::scratch_dir("analyze_ablated");
  const std::string model = (test::shared_dir() / kStories).string(), spec = "blocks.2.attn.hook_z:zero:heads=1,4";
  const std::string run = fmt::format("--threads 1 --quiet analyze {} --samples 6 --max-len 16 --init-seeds 1 --interval-subsets 2 "
                                      "--particles-tokens 8 --particles-T 1 --ablate blocks.2.attn.hook_z:heads=1,4", model);
  std::string err;
  ASSERT_EQ(test::run_cli(fmt::format("{} --out {}", run, (dir / "out").string()), nullptr, &err), 0) << err;
  const json results = json::parse(read_file(dir / "out/results.json"));
  EXPECT_EQ(results["options"]["ablate"], json({spec}));
  auto expect_ablated = [&](const json& argv, const std::string& what) {
    const auto args = argv.get<std::vector<std::string>>();
    const auto flag = std::find(args.begin(), args.end(), "--ablate");
    ASSERT_NE(flag, args.end()) << what;
    ASSERT_NE(flag + 1, args.end()) << what;
    EXPECT_EQ(*(flag + 1), spec) << what;
  };
  for (const char* part : {"power", "power-l2", "jacobian", "topology", "particles", "init"}) {
    const json& record = results["results"]["parts"][part];
    ASSERT_EQ(record["status"], "ok") << part << ": " << record.dump();
    if (std::string(part) == "particles") {
      EXPECT_EQ(record["argv"].dump().find("--ablate"), std::string::npos) << "one head on its own: nothing of it is ablated";
    } else if (std::string(part) == "init") {
      for (const json& seed : record["seeds"])
        for (const auto& [command, argv] : seed["argv"].items()) expect_ablated(argv, "init " + command);
    } else {
      expect_ablated(record["argv"], part);
      EXPECT_EQ(json::parse(read_file(dir / "out" / part / "results.json"))["options"]["ablate"], json({spec})) << part;
    }
  }
  // The initialisation whose figures the report draws is laid out; the others, whose numbers only the verdicts read, not.
  EXPECT_TRUE(fs::exists(dir / "out/init/seed-0/topology/graph_layout.csv"));
  EXPECT_FALSE(fs::exists(dir / "out/init/scaled-0/topology/graph_layout.csv"));
  for (const char* part : {"init/seed-0/jacobian", "init/scaled-0/power", "subsets/subset-1/jacobian", "nested/half/jacobian"})
    EXPECT_EQ(json::parse(read_file(dir / "out" / part / "results.json"))["options"]["ablate"], json({spec})) << part;
  // The power part's F_2 is the ablated model's.
  auto loaded = load_model(model);
  const Transformer transformer(loaded);
  const ZeroedParts parts(transformer, Ablation::parse(std::vector<std::string>{spec}));
  const json power = json::parse(read_file(dir / "out/power/results.json"));
  const double norm = layer_matrix(*loaded, 2, parts).f.norm();
  EXPECT_NEAR(power["results"]["layers"][2]["frobenius_norm"].get<double>(), norm, 1e-12 * norm);
  EXPECT_GT(layer_matrix(*loaded, 2).f.norm() - norm, 1e-3);
  // The jacobian part's command line alone, from the ablated pass, gives the same results.
  auto argv = results["results"]["parts"]["jacobian"]["argv"].get<std::vector<std::string>>();
  const auto out_flag = std::find(argv.begin(), argv.end(), "--out");
  ASSERT_NE(out_flag, argv.end());
  *(out_flag + 1) = (dir / "alone").string();
  std::string line;
  for (size_t i = 1; i < argv.size(); ++i) line += test::shell_quote(argv[i]) + " ";
  ASSERT_EQ(test::run_cli(line, nullptr, &err), 0) << line << "\n" << err;
  EXPECT_EQ(json::parse(read_file(dir / "alone/results.json"))["results"],
            json::parse(read_file(dir / "out/jacobian/results.json"))["results"]);
  EXPECT_NE(read_file(dir / "out/index.html").find("Ablated:"), std::string::npos);

  EXPECT_EQ(test::run_cli(fmt::format("{} --particles-layer 2 --particles-head 4 --out {}", run, (dir / "bad").string()), nullptr, &err), 1);
  EXPECT_NE(err.find("--particles-head 4 of layer 2 is ablated"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir / "bad/pass")) << "the pass ran before the check";
}

// On two threads the initialisations after the first, the sample subsets and the nested sets run their parts side
// by side, one thread each: each part's command line says --threads 1 and, run alone (an initialisation from its
// checkpoint, written again by its init_argv) from its pass, gives its results again, power-l2's float32 forward
// included; the first seed keeps both threads.
TEST(Analyze, PartsSideBySideReproduceAlone) {
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  TDYN_REQUIRE_SHARED("data/wikitext-2/wiki.test.raw");
  const fs::path dir = test::scratch_dir("analyze_side_by_side");
  std::string err;
  ASSERT_EQ(test::run_cli(fmt::format("--threads 2 --quiet analyze {} --data {} --samples 8 --max-len 24 --init-seeds 2 --interval-subsets 2 "
                                      "--skip particles --out {}",
                                      (test::shared_dir() / "models/stories260K/stories260K.bin").string(),
                                      (test::shared_dir() / "data/wikitext-2/wiki.test.raw").string(), (dir / "out").string()),
                          nullptr, &err),
            0)
      << err;
  const json results = json::parse(read_file(dir / "out/results.json"));
  const json& seeds = results["results"]["parts"]["init"]["seeds"];
  ASSERT_EQ(seeds.size(), 4u);
  for (size_t s = 0; s < seeds.size(); ++s) {
    EXPECT_EQ(seeds[s]["status"], "ok") << seeds[s].dump(1);
    for (const auto& [part, argv] : seeds[s]["argv"].items()) EXPECT_EQ(argv[3], s == 0 ? "2" : "1") << part << " " << argv.dump();
  }
  const json& jacobian = results["results"]["parts"]["jacobian"];
  ASSERT_EQ(jacobian["subsets"].size(), 2u);
  ASSERT_EQ(jacobian["nested"].size(), 2u);
  for (const char* kind : {"subsets", "nested"})
    for (const json& run : jacobian[kind])
      for (const auto& [part, argv] : run["argv"].items()) EXPECT_EQ(argv[3], "1") << kind << " " << part << " " << argv.dump();
  auto run = [&](std::vector<std::string> argv) {
    std::string line;
    for (size_t i = 1; i < argv.size(); ++i) line += test::shell_quote(argv[i]) + " ";
    ASSERT_EQ(test::run_cli(line, nullptr, &err), 0) << line << "\n" << err;
  };
  auto results_of = [](const fs::path& part) {  // without where they were written
    json r = json::parse(read_file(part / "results.json"))["results"];
    if (r.contains("checkpoints"))
      for (json& c : r["checkpoints"]) c.erase("results_dir");
    return r;
  };
  // Each part's command line with its --out moved to `alone`: the same results there.
  auto expect_alone = [&](const json& record, const std::string& part, const fs::path& alone) {
    auto argv = record["argv"][part].get<std::vector<std::string>>();
    const auto out = std::find(argv.begin(), argv.end(), "--out");
    ASSERT_NE(out, argv.end());
    const fs::path was = *(out + 1);
    *(out + 1) = alone.string();
    run(argv);
    EXPECT_EQ(results_of(alone), results_of(was)) << part << " of " << record["dir"];
  };
  const json& seed = seeds[3];  // scaled-1
  run(seed["init_argv"].get<std::vector<std::string>>());
  for (const char* part : {"power", "power-l2", "jacobian", "topology"}) expect_alone(seed, part, dir / "alone" / part);
  EXPECT_EQ(read_file(dir / "alone/power-l2/alignment_after.npy"), read_file(dir / "out/init/scaled-1/power-l2/alignment_after.npy"));
  for (const char* part : {"jacobian", "topology"}) expect_alone(jacobian["subsets"][1], part, dir / "alone-subset" / part);
  expect_alone(jacobian["nested"][1], "jacobian", dir / "alone-half");
}

// Progress into a log (stderr not a terminal): every line under one prefix, and a stage's count at most once
// every 10 s while it runs (ETA lines), plus one line when it ends, so a short analysis prints a few lines.
TEST(Analyze, ProgressInALogIsOneLinePerStage) {
  TDYN_REQUIRE_SHARED(kStories);
  const fs::path dir = test::scratch_dir("analyze_progress");
  const std::string model = (test::shared_dir() / kStories).string();
  std::string err;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(test::run_cli(fmt::format("--threads 1 analyze {} --samples 8 --max-len 16 --skip particles --init-seeds 1 --out {}", model,
                                      dir.string()),
                          nullptr, &err),
            0)
      << err;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int lines = 0, running = 0;
  for (const std::string& line : split_list(err, '\n')) {
    if (line.empty()) continue;
    ++lines;
    EXPECT_TRUE(line.starts_with("tdyn analyze: ")) << line;
    EXPECT_FALSE(line.starts_with("tdyn analyze: analyze:")) << line;
    if (line.find(", ETA ") != std::string::npos) ++running;
  }
  EXPECT_LE(running, static_cast<int>(seconds / 10)) << err;
  EXPECT_LT(lines, 60) << err;
}

// The files under `dir` but results.json, relative to it.
std::set<std::string> files_under(const fs::path& dir) {
  std::set<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != "results.json") files.insert(fs::relative(e.path(), dir).string());
  return files;
}

std::set<std::string> files_listed(const fs::path& dir) {
  const json results = json::parse(read_file(dir / "results.json"));
  std::set<std::string> files;
  for (const auto& [name, what] : results["files"].items()) files.insert(name);
  return files;
}

// --out ends holding this run's files, exactly those results.json lists: none of an earlier run into the same
// directory (surgery's after a run without --surgery, a part now skipped), and no directory after an early failure.
TEST(Analyze, OutHoldsOnlyThisRunsFiles) {
  TDYN_REQUIRE_SHARED(kStories);
  const fs::path root = test::scratch_dir("analyze_out_reused");
  const std::string model = (test::shared_dir() / kStories).string();
  std::string err;
  EXPECT_EQ(test::run_cli(fmt::format("--quiet analyze {}.missing --out {}", model, (root / "never").string()), nullptr, &err), 1);
  EXPECT_NE(err.find("does not exist"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(root / "never")) << "a run that failed at once left its --out behind";

  const fs::path jacobian = root / "jacobian";
  const std::string run = fmt::format("--quiet jacobian {} --samples 4 --max-len 16 --out {}", model, jacobian.string());
  ASSERT_EQ(test::run_cli(run + " --surgery", nullptr, &err), 0) << err;
  ASSERT_TRUE(fs::exists(jacobian / "surgery.csv"));
  write_file_atomic(jacobian / "my_notes.txt", "the user's own file");
  ASSERT_EQ(test::run_cli(run, nullptr, &err), 0) << err;
  std::set<std::string> expected = files_listed(jacobian);
  expected.insert("my_notes.txt");
  EXPECT_EQ(files_under(jacobian), expected);
  for (const std::string& f : expected) EXPECT_FALSE(f.starts_with("surgery")) << f;

  const fs::path analyze = root / "analyze";
  const std::string parts = fmt::format("--quiet analyze {} --samples 4 --max-len 16 --no-init-control --out {} --skip particles,topology",
                                        model, analyze.string());
  ASSERT_EQ(test::run_cli(parts, nullptr, &err), 0) << err;
  ASSERT_TRUE(fs::exists(analyze / "power" / "results.json"));
  ASSERT_EQ(test::run_cli(parts + ",power", nullptr, &err), 0) << err;
  EXPECT_FALSE(fs::exists(analyze / "power")) << "the skipped part's earlier results are still there";
  EXPECT_EQ(json::parse(read_file(analyze / "results.json"))["results"]["parts"]["power"]["status"], "skipped");
  fs::remove_all(root);
}

}  // namespace
}  // namespace tdyn
