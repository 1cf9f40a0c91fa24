// Block-quantized rows in the formats of llama.cpp's ggml (GGUF tensor types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q4_K, Q5_K, Q6_K): decoding a row to float, a reference encoder, and the fused dot product of a quantized
// row with a float vector (the kernel of decoding one token: y = W·x with W used in place from the mapping).
//
// A row of n values is n / block_elements consecutive blocks (core/dtype.h: dtype_layout); a block never
// straddles two rows. Blocks are packed back to back with no padding, so they are not aligned: every
// multi-byte field is read byte by byte. fp16 is IEEE binary16, little-endian. "value i" below is the i-th
// of the block's values; nibble "lo" is bits 0-3 of a byte, "hi" bits 4-7.
//
// Legacy types: 32 values per block.
//
//   Q4_0 (18 bytes)  [0,2) d fp16 | [2,18) qs[16]
//       q_i = qs[i] lo for i < 16, qs[i-16] hi for i >= 16          (0..15)
//       value_i = (q_i - 8) * d
//   Q4_1 (20 bytes)  [0,2) d fp16 | [2,4) m fp16 | [4,20) qs[16]
//       q_i as Q4_0                                                   (0..15)
//       value_i = q_i * d + m
//   Q5_0 (22 bytes)  [0,2) d fp16 | [2,6) qh[4] | [6,22) qs[16]
//       q_i = (Q4_0's nibble) | (bit i of qh) << 4, where bit i of qh is bit (i % 8) of qh[i / 8]
//       (qh read as a little-endian uint32: bit i is value i's fifth bit)   (0..31)
//       value_i = (q_i - 16) * d
//   Q5_1 (24 bytes)  [0,2) d fp16 | [2,4) m fp16 | [4,8) qh[4] | [8,24) qs[16]
//       q_i as Q5_0                                                   (0..31)
//       value_i = q_i * d + m
//   Q8_0 (34 bytes)  [0,2) d fp16 | [2,34) qs[32] int8
//       value_i = qs[i] * d
//
// K-quants: 256-value super-blocks of sub-blocks, each with its own small integer scale (and min) that is
// multiplied by the super-block's fp16 scale.
//
//   Q4_K (144 bytes) [0,2) d fp16 | [2,4) dmin fp16 | [4,16) scales[12] | [16,144) qs[128]
//       8 sub-blocks of 32 values; value i is in sub-block s = i / 32, with a 6-bit scale sc_s and a 6-bit
//       min m_s packed into scales[12]:
//         s < 4:  sc_s = scales[s] & 63                m_s = scales[s + 4] & 63
//         s >= 4: sc_s = (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4
//                 m_s  = (scales[s + 4] >> 4) | (scales[s] >> 6) << 4
//       (bytes 0-3 hold sc_0..3 in bits 0-5, bytes 4-7 hold m_0..3 in bits 0-5; bytes 8-11 hold the low
//       four bits of sc_4..7 (lo) and m_4..7 (hi); the top two bits of bytes 0-3 / 4-7 are the high bits
//       of sc_4..7 / m_4..7.)
//       Sub-blocks pair up in qs: sub-block 2c is the lo nibbles and 2c + 1 the hi nibbles of
//       qs[32c .. 32c + 32), c = 0..3; so q_i = qs[32 (i / 64) + i % 32] lo if (i / 32) is even, else hi.
//       value_i = (d * sc_s) * q_i - dmin * m_s                      (q_i 0..15)
//   Q5_K (176 bytes) [0,2) d fp16 | [2,4) dmin fp16 | [4,16) scales[12] | [16,48) qh[32] | [48,176) qs[128]
//       As Q4_K, plus a fifth bit: q_i = (Q4_K's nibble) | (bit s of qh[i % 32]) << 4, s = i / 32
//       value_i = (d * sc_s) * q_i - dmin * m_s                      (q_i 0..31)
//   Q6_K (210 bytes) [0,128) ql[128] | [128,192) qh[64] | [192,208) scales[16] int8 | [208,210) d fp16
//       16 sub-blocks of 16 values; value i has the int8 scale scales[i / 16]. The block is two halves of
//       128 values, h = i / 128; within a half, j = i % 128, k = j / 32 (0..3), l = j % 32:
//         low 4 bits:  ql[64h + l] lo (k = 0), ql[64h + 32 + l] lo (k = 1),
//                      ql[64h + l] hi (k = 2), ql[64h + 32 + l] hi (k = 3)
//         high 2 bits: bits 2k and 2k + 1 of qh[32h + l]
//       q_i = (low 4 bits | high 2 bits << 4) - 32                   (-32..31)
//       value_i = (d * scales[i / 16]) * q_i
//
// The products above are exact in float (an fp16 has an 11-bit significand, the integer factors at most 13
// bits together), so the one rounding is the final addition of the min: decoding is bit-exact however the
// product is grouped. ggml's dequantize_row_* decode to the same floats.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace tdyn {

// out[0, n) = the n values of the blocks at `blocks`. `t` is a quantized dtype and n a multiple of its block
// (TDYN_CHECK).
void dequantize_row(DType t, const std::byte* blocks, float* out, int64_t n);

// Encodes in[0, n) as n / block_elements blocks of type `t` at `blocks`: a plain reference encoder, not a
// search for the best encoding (it does not reproduce llama.cpp's bytes). Values are rounded to the nearest
// step; scales are rounded up to fp16 (mins down), so the grid reaches every value of its block. Values must
// be finite and the scales must fit fp16 (|x| up to about 65504 * 127 for Q8_0, less for the others); the
// bounds below hold while the scales are normal fp16 numbers (>= 2^-14).
//   Q4_0, Q5_0: d = (the value of largest magnitude) / -8 (-16), as llama.cpp's reference: a value of that
//     magnitude but the opposite sign is clamped to q = 15 (31) and off by up to |d|, every other by |d| / 2.
//   Q4_1, Q5_1: m = min, d = (max - m) / 15 (31): error at most d / 2.
//   Q8_0: d = max|x| / 127: error at most d / 2.
//   Q4_K, Q5_K: per 32-value sub-block the range [min(lo, 0), hi]; dmin = max_s(-min(lo_s, 0)) / 63,
//     m_s = ceil(-min(lo_s, 0) / dmin), d = max_s(hi_s + dmin m_s) / (15 * 63) (31 * 63), sc_s rounded up:
//     error at most d sc_s / 2 < (hi_s - min(lo_s, 0) + dmin) / 30 (62) + d / 2.
//   Q6_K: per 16-value sub-block a step of max|x_s| / 31, d = max step / 127, the int8 scale rounded up:
//     error at most d sc_s / 2 < max|x_s| / 62 + d / 2.
void quantize_row(DType t, const float* in, std::byte* blocks, int64_t n);

// sum_i dequantized(blocks)_i * x_i for i in [0, n), without materialising the row; accumulated in float,
// block by block (so it equals the dot product of dequantize_row's output with x up to float round-off).
float dot_row(DType t, const std::byte* blocks, const float* x, int64_t n);

}  // namespace tdyn
