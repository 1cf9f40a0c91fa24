// libFuzzer target: a Hugging Face config.json, for every model_type. Input layout: fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(config)
