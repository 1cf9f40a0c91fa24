// libFuzzer target: a GGUF file (header, metadata, tensor infos, data), the model config built from its metadata and
// the tokenizer it carries. Input layout: fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(gguf)
