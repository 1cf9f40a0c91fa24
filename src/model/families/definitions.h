// One file per model family in this folder, each holding the family's config.json and GGUF parsers beside its
// tensor tables; family_definitions() (families.cpp) lists them.
#pragma once

#include "model/families.h"

namespace tdyn {

FamilyDefinition llama_family();     // llama, mistral, qwen2, qwen3
FamilyDefinition phi3_family();      // phi3
FamilyDefinition gpt_family();       // gpt2, gpt_neo, gpt_neox
FamilyDefinition encoders_family();  // bert, albert
FamilyDefinition olmo3_family();     // olmo3
FamilyDefinition gemma4_family();    // gemma4, gemma4_text

}  // namespace tdyn
