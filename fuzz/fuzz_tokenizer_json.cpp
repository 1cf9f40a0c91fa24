// libFuzzer target: a Hugging Face tokenizer.json (+ tokenizer_config.json), then encode / decode. Input layout: fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(tokenizer_json)
