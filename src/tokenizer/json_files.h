// Reading the JSON files tokenizers ship (tokenizer.json, vocab.json, tokenizer_config.json) with errors that
// name the file, and small typed accessors that reject a wrong type instead of converting it.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/files.h"
#include "tokenizer/pipeline.h"

namespace tdyn {

using Json = nlohmann::json;

Json read_json_file(const fs::path& path);
Json parse_json_text(std::string_view text, const std::string& name_for_errors);

// {piece: id, ...} -> Vocabulary.
Vocabulary vocabulary_from_json_object(const Json& object, const std::string& name_for_errors);

// object[key] as the given type; `fallback` when the key is absent or null; Error when it has another type.
std::string json_string(const Json& object, const char* key, const std::string& fallback, const std::string& where);
bool json_bool(const Json& object, const char* key, bool fallback, const std::string& where);
int64_t json_int(const Json& object, const char* key, int64_t fallback, const std::string& where);
std::optional<std::string> json_optional_string(const Json& object, const char* key, const std::string& where);

}  // namespace tdyn
