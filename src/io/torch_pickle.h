// PyTorch checkpoints (`pytorch_model.bin`, torch.save of a state dict, PyTorch >= 1.6): reader, sharded index,
// and a writer for tests and the fuzz seeds.
//
// On-disk format: a zip archive (io/zip.h) of stored, 64-byte-aligned entries under one top folder, usually
// "archive/" (older versions use the file's stem): `data.pkl`, a Python pickle of the state dict;
// `data/<key>`, the raw little-endian bytes of each storage; `version`; newer versions add `byteorder` and
// `.data/serialization_id`. The pickle (protocol 2) builds `collections.OrderedDict()` (or `{}`), then for each
// entry calls `torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks
// [, metadata])` (parameters wrapped in `torch._utils._rebuild_parameter(tensor, requires_grad, hooks)`; newer
// versions write `_rebuild_tensor_v3(..., dtype[, metadata])` over a `torch.UntypedStorage` for dtypes without
// a typed storage), where `storage` is a persistent id `('storage', torch.FloatStorage, key, location, numel)`
// that names the file data/<key> holding `numel` elements of the storage's type. Several tensors may view
// one storage at different offsets (tied or sliced weights).
//
// A pickle is a program that may call any Python function, so torch.load of a stranger's file can run code.
// This reader is a restricted unpickler: it interprets only the opcodes torch.save writes, resolves only the
// globals listed above (plus torch dtypes), and refuses any other global by its module.name at the opcode that
// names it. Nothing is ever called: "calls" of the allowed globals build a dict, a tensor record or a storage
// record. Tensors must be contiguous; their data is used in place from the mapping, like safetensors.
// Refused with a message saying what to do: compressed entries, the legacy pre-1.6 format (a bare pickle
// stream), TorchScript archives, big-endian archives, nested or non-tensor values in the state dict.
//
// Sharded checkpoints: pytorch_model.bin.index.json, the same {"weight_map": {tensor: shard}} as
// model.safetensors.index.json.
#pragma once

#include <map>
#include <string>

#include "io/safetensors.h"
#include "io/tensor_store.h"

namespace tdyn {

// Adds every tensor of a torch.save zip checkpoint to `store`; errors name the file, the entry and the pickle
// byte offset.
void read_torch(const fs::path& file, TensorStore& store);
void read_torch(std::shared_ptr<const MappedFile> file, TensorStore& store);

// Reads pytorch_model.bin.index.json and every shard it names.
void read_torch_index(const fs::path& index_file, TensorStore& store);

// What torch.save(OrderedDict(tensors)) writes (protocol-2 pickle, one storage per tensor, in name order),
// as the bytes of a zip archive whose top folder is `archive`.
std::string torch_checkpoint_bytes(const std::map<std::string, TensorToWrite>& tensors,
                                   const std::string& archive = "archive");

}  // namespace tdyn
