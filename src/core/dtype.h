// Element types of checkpoint tensors: the plain types of safetensors and the block-quantized types of GGUF.
//
// A quantized type stores `block_elements` consecutive values of a row in one block of `block_bytes` bytes
// (llama.cpp's ggml-common.h; the layouts themselves are documented in kernels/quant_blocks.h). A row of a
// quantized matrix is a whole number of blocks, so rows can be sliced in place but columns cannot.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tdyn {

enum class DType {
  F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL,
  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K,
};

const char* dtype_name(DType t);  // safetensors / ggml spelling: "F32", "BF16", "Q4_K", ...

struct DTypeLayout {
  int64_t block_elements = 1;  // values per block (1 for plain types)
  int64_t block_bytes = 0;     // bytes per block (the element size for plain types)
};
DTypeLayout dtype_layout(DType t);

bool is_quantized(DType t);
bool is_float(DType t);  // F32, F16, BF16, F64 and every quantized type: values the model can compute with

// Bytes of a plain type's element; a quantized type has none (TDYN_CHECK): use tensor_bytes.
size_t dtype_size(DType t);
// Bytes of `n` consecutive values; for a quantized type `n` must be a whole number of blocks (TDYN_CHECK).
uint64_t tensor_bytes(DType t, int64_t n);

float half_to_float(uint16_t h);
float bf16_to_float(uint16_t b);
// Round to nearest even, as torch's .to(dtype) does; NaN stays NaN, overflow goes to ±Inf.
uint16_t float_to_half(float f);
uint16_t float_to_bf16(float f);

}  // namespace tdyn
