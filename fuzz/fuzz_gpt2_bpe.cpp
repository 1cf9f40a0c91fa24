// libFuzzer target: a GPT-2 vocab.json + merges.txt pair, then encode / decode. Input layout: fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(gpt2_bpe)
