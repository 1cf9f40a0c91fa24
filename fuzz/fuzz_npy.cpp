// libFuzzer target: a NumPy .npy array. Input layout: fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(npy)
