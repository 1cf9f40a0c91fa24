// tdyn tokenize (MODEL | --tokenizer FILE) (--text TEXT | --file F) [--json] [--no-special]: the token ids of a
// text, space-separated on one line as llama.cpp's tokenize tool prints them with --ids (without its brackets), or
// with --json each id with its vocabulary piece. The quickest way to check which tokenizer a model gets and what
// it makes of a text.
#include <iostream>

#include <nlohmann/json.hpp>

#include "command.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tdyn::cli {
namespace {

struct TokenizeArgs {
  std::string model, tokenizer, text, file;
  bool json = false, no_special = false;
};

int tokenize(const TokenizeArgs& a) {
  std::unique_ptr<Tokenizer> tok = a.tokenizer.empty() ? load_tokenizer_for_model(a.model) : load_tokenizer(a.tokenizer);
  std::error_code ec;
  if (!a.file.empty() && fs::is_directory(a.file, ec)) fail("--file '{}' is a directory, not a text file", a.file);
  const std::string text = a.file.empty() ? a.text : read_file(a.file);
  const std::vector<int32_t> ids = tok->encode(text, !a.no_special);
  if (a.json) {
    nlohmann::json tokens = nlohmann::json::array();
    for (int32_t id : ids) tokens.push_back({{"id", id}, {"piece", tok->piece(id)}});
    nlohmann::json out = {{"tokenizer", tok->kind()}, {"n_tokens", ids.size()}, {"tokens", tokens}};
    // A piece need not be valid UTF-8 (byte pieces, GPT-2's pieces are); invalid bytes print as U+FFFD.
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::cout << line << "\n";
  return 0;
}

std::function<int()> setup_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "tokenize",
      "Print the token ids of a text, space-separated (--json: with their pieces), as the model's tokenizer or a "
      "tokenizer file encodes it. The tokenizer is found as for every other command: see docs/tokenizers.md");
  auto a = std::make_shared<TokenizeArgs>();
  auto* model = cmd->add_option("model", a->model,
                                "Model directory or file whose tokenizer to use (tokenizer.json, tokenizer.model, "
                                "vocab files; a .gguf: the tokenizer in its metadata; llama2.c: tokenizer.bin beside "
                                "the .bin)");
  auto* tokenizer = cmd->add_option("--tokenizer", a->tokenizer,
                                    "Tokenizer file instead of a model (tokenizer.json, a SentencePiece .model, a "
                                    "llama2.c tokenizer .bin, a .gguf carrying one, vocab.txt, vocab.json, merges.txt, "
                                    "...)");
  model->excludes(tokenizer);
  auto* text = cmd->add_option("--text", a->text, "The text to encode");
  auto* file = cmd->add_option("--file", a->file, "Encode the whole content of this file (bytes as they are)");
  text->excludes(file);
  cmd->add_flag("--json", a->json, "Print JSON: {tokenizer, n_tokens, tokens: [{id, piece}, ...]}");
  cmd->add_flag("--no-special", a->no_special, "Do not add the special tokens (BOS, [CLS] ... [SEP]) around the text");
  return [a, model, tokenizer, text, file] {
    if (model->count() + tokenizer->count() == 0) throw CLI::ValidationError("tokenize", "give a MODEL or --tokenizer FILE");
    if (text->count() + file->count() == 0) throw CLI::ValidationError("tokenize", "give --text TEXT or --file F");
    return tokenize(*a);
  };
}

TDYN_REGISTER_COMMAND("tokenize", 15, setup_tokenize);

}  // namespace
}  // namespace tdyn::cli
