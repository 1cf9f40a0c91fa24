// libFuzzer target: a BERT vocab.txt (+ tokenizer_config.json), then encode / decode. Input layout: fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(vocab_txt)
