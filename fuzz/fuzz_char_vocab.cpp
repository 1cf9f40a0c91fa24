// libFuzzer target: a character vocabulary vocab.json, then encode / decode. Input layout: fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(char_vocab)
