// libFuzzer target: a whole model (HF directory, GGUF or llama2.c file) loaded with load_model, then a forward pass. Input layout: fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(model)
