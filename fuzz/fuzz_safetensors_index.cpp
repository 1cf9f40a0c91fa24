// libFuzzer target: model.safetensors.index.json and the shards it names. Input layout: fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(safetensors_index)
