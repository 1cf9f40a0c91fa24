// libFuzzer target: a GGUF file (header, metadata, tensor infos, data) and the model config built from its metadata. Input layout: fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(gguf)
