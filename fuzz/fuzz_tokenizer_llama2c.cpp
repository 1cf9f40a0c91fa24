// libFuzzer target: a llama2.c tokenizer.bin, then encode / decode. Input layout: fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(tokenizer_llama2c)
