// libFuzzer target: a .safetensors file (header JSON, offsets, dtypes, then the data converted to floats). Input layout: fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(safetensors)
