// libFuzzer target: a PyTorch zip checkpoint (pytorch_model.bin: zip central directory, the restricted pickle
// of data.pkl, storages), then the data converted to floats. Input layout: fuzz/entry_points.h.
#include "entry_points.h"

TDYN_FUZZ_TARGET(torch_checkpoint)
