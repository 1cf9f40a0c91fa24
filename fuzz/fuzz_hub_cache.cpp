// libFuzzer target: a Hugging Face hub cache directory and a DIR@REVISION to resolve in it. Input layout:
// fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(hub_cache)
