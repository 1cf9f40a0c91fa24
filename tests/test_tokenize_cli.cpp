// tdyn tokenize through the CLI: ids and pieces against run.c's goldens (stories260K tokenize.json), the model's
// own tokenizer vs --tokenizer, --file, --no-special, and the errors for a missing tokenizer, an unreadable file and
// bad flag combinations.
#include <sstream>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace tdyn {
namespace {

using test::run_cli;
using test::shell_quote;

fs::path stories() { return test::shared_dir() / "models" / "stories260K"; }

std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  for (int32_t id; in >> id;) ids.push_back(id);
  return ids;
}

TEST(TokenizeCli, IdsAndPiecesMatchRunCGoldens) {
  TDYN_REQUIRE_SHARED("models/stories260K/tokenize.json");
  auto cases = nlohmann::json::parse(read_file(stories() / "tokenize.json"));
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const auto expected = c["ids"].get<std::vector<int32_t>>();
    std::string out, err;
    // The model's own tokenizer (tokenizer found beside the .bin) ...
    ASSERT_EQ(run_cli("tokenize " + (stories() / "stories260K.bin").string() + " --text " + shell_quote(text), &out, &err), 0)
        << err;
    ASSERT_TRUE(out.ends_with("\n")) << out;
    EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line expected: " << out;
    EXPECT_EQ(parse_ids(out), expected) << "text: '" << text << "'";
    // ... and the same file named with --tokenizer, as JSON with the pieces.
    ASSERT_EQ(run_cli("tokenize --json --tokenizer " + (stories() / "tok512.bin").string() + " --text " + shell_quote(text),
                      &out, &err),
              0)
        << err;
    auto j = nlohmann::json::parse(out);
    EXPECT_EQ(j["tokenizer"], "llama2c");
    ASSERT_EQ(j["n_tokens"].get<size_t>(), expected.size());
    const auto pieces = c["pieces"].get<std::vector<std::string>>();
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(j["tokens"][i]["id"], expected[i]) << "text: '" << text << "' token " << i;
      // Pieces that are valid UTF-8 come back unchanged (the goldens' are).
      EXPECT_EQ(j["tokens"][i]["piece"], pieces[i]) << "text: '" << text << "' token " << i;
    }
  }
}

TEST(TokenizeCli, FileAndNoSpecial) {
  TDYN_REQUIRE_SHARED("models/stories260K/tok512.bin");
  fs::path dir = test::scratch_dir("tokenize_cli_file");
  const std::string text = "Once upon a time\nthere was a cat.";
  write_file_atomic(dir / "text.txt", text);
  std::string with_text, with_file, err;
  const std::string tok = " --tokenizer " + (stories() / "tok512.bin").string();
  ASSERT_EQ(run_cli("tokenize" + tok + " --text " + shell_quote(text), &with_text, &err), 0) << err;
  ASSERT_EQ(run_cli("tokenize" + tok + " --file " + (dir / "text.txt").string(), &with_file, &err), 0) << err;
  EXPECT_EQ(with_file, with_text);
  std::string plain;
  ASSERT_EQ(run_cli("tokenize" + tok + " --no-special --file " + (dir / "text.txt").string(), &plain, &err), 0) << err;
  // llama2.c adds only BOS (id 1) in front.
  std::vector<int32_t> ids = parse_ids(with_text), no_special = parse_ids(plain);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.end()), no_special);
  fs::remove_all(dir);
}

TEST(TokenizeCli, ClearErrors) {
  fs::path dir = test::scratch_dir("tokenize_cli_errors");
  std::string out, err;
  // A model directory with no tokenizer in it.
  fs::create_directories(dir / "empty_model");
  EXPECT_EQ(run_cli("tokenize " + (dir / "empty_model").string() + " --text hi", &out, &err), 1);
  EXPECT_NE(err.find("no tokenizer in model directory"), std::string::npos) << err;
  EXPECT_TRUE(out.empty()) << out;
  // A tokenizer file that does not exist.
  EXPECT_EQ(run_cli("tokenize --tokenizer " + (dir / "missing.json").string() + " --text hi", &out, &err), 1);
  EXPECT_NE(err.find("does not exist"), std::string::npos) << err;
  // An unreadable --file: missing, or a directory.
  TDYN_REQUIRE_SHARED("models/stories260K/tok512.bin");
  const std::string tok = " --tokenizer " + (stories() / "tok512.bin").string();
  EXPECT_EQ(run_cli("tokenize" + tok + " --file " + (dir / "nope.txt").string(), &out, &err), 1);
  EXPECT_NE(err.find("cannot open"), std::string::npos) << err;
  EXPECT_NE(err.find("nope.txt"), std::string::npos) << err;
  EXPECT_EQ(run_cli("tokenize" + tok + " --file " + dir.string(), &out, &err), 1);
  EXPECT_NE(err.find("is a directory"), std::string::npos) << err;
  // A UTF-16 file, to tokenize and as an analysis corpus: refused with the byte, not cut at its first NUL.
  write_file_atomic(dir / "utf16.txt", std::string("\xFF\xFEO\0n\0c\0e\0", 10));
  EXPECT_EQ(run_cli("tokenize" + tok + " --file " + (dir / "utf16.txt").string(), &out, &err), 1);
  EXPECT_NE(err.find("not valid UTF-8 (byte 0): it starts with a UTF-16 byte-order mark"), std::string::npos) << err;
  write_file_atomic(dir / "utf16.txt", std::string("O\0n\0c\0e\0\n\0", 10));
  EXPECT_EQ(run_cli("jacobian " + (stories() / "stories260K.bin").string() + " --data " + (dir / "utf16.txt").string() +
                        " --samples 2 --out " + (dir / "out").string(),
                    &out, &err),
            1);
  EXPECT_NE(err.find("utf16.txt' is not UTF-8 text: it has a NUL character at byte 1 (is it UTF-16?)"), std::string::npos) << err;
  // Usage: no text, no tokenizer, both text sources, both tokenizer sources.
  EXPECT_EQ(run_cli("tokenize" + tok, &out, &err), 2);
  EXPECT_NE(err.find("--text"), std::string::npos) << err;
  EXPECT_EQ(run_cli("tokenize --text hi", &out, &err), 2);
  EXPECT_NE(err.find("--tokenizer"), std::string::npos) << err;
  EXPECT_EQ(run_cli("tokenize" + tok + " --text hi --file " + (dir / "x").string(), &out, &err), 2);
  EXPECT_EQ(run_cli("tokenize " + stories().string() + tok + " --text hi", &out, &err), 2);
  // --help explains the command.
  EXPECT_EQ(run_cli("tokenize --help", &out, &err), 0);
  EXPECT_NE(out.find("--json"), std::string::npos) << out;
  EXPECT_NE(out.find("--no-special"), std::string::npos) << out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tdyn
