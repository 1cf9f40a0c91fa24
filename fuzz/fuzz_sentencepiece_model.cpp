// libFuzzer target: a SentencePiece .model, then encode / decode. Input layout: fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(sentencepiece_model)
