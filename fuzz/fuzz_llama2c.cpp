// libFuzzer target: a llama2.c legacy checkpoint (.bin). Input layout: fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(llama2c)
