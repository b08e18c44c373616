// flash_decode.h — the flash-attention block kernel for small query tiles (decode): one block of
// one KV head's K/V rows, read in place in their cache type, against a few query rows at once.
// Internal to paged_attention_decode.cpp (and its tests through paged_attention_at_level).
//
// Per block (FlashAttention-2's online softmax, Dao 2023): the scores of every query row against
// every K row, each K row converted to f32 once in registers (F16C / integer widening) and dotted
// with all rows; per row the block max, one rescale of the accumulator when the running max
// grows, e^(s − max) and the running sum; then acc[r] += p[r][j] · v_j with each V row converted
// once in registers and shared by all rows. Compiled three times (baseline, AVX2+FMA+F16C,
// AVX-512) from flash_decode.inl and picked by kernel level.
#pragma once

#include <cstdint>

#include "cpu/cpu_level.h"
#include "dtype.h"

namespace kvrun::cpu {

/// One call of the decode block kernel: one block, one KV head, `rows` query rows.
struct FlashDecodeBlock {
  int64_t rows = 0;             ///< query rows (any number; processed 4 at a time)
  const int64_t* nv = nullptr;  ///< [rows] row r sees the block's positions j < nv[r] …
  const int64_t* lo = nullptr;  ///< [rows] … and j ≥ lo[r] (sliding window; may be negative)
  int64_t n = 0;                ///< K/V rows that may be read: max nv[r] (≤ block size)
  int64_t hd = 0, hdv = 0;      ///< head_dim, head_dim_v: multiples of 16
  int64_t bsp = 0;              ///< row stride of s: block size rounded up to 16
  float scale = 1.0f;           ///< score scale (1/√head_dim)
  float softcap = 0.0f;         ///< s ← cap · tanh(s / cap) after scaling (0: off)
  const float* q = nullptr;     ///< [rows][hd] f32 query heads
  /// Q quantized to q8_0 for an in-place Q8_0 / Q4_0 K (null: dot in f32 with q), as
  /// llama.cpp pairs them (its vec_dot_type): qx [rows][hd] int8 values, qd [rows][hd/32] their
  /// block scales, qcorr [rows][hd/4] −o · (sum of each 4 consecutive values), o = 128 for a
  /// Q8_0 K and 8 for a Q4_0 K (the offset that makes K unsigned for VNNI's dpbusd).
  const int8_t* qx = nullptr;
  const float* qd = nullptr;
  const int32_t* qcorr = nullptr;
  /// K row j of the head at k + j·k_stride, in k_type: F32, F16, BF16, Q8_0 / Q4_0 with the
  /// head starting on a block boundary (hd % 32 == 0), or FP8_E4M3 / FP8_E5M2 (one byte per
  /// value; kv_layout.h) whose E8M0 scale byte is at k + j·k_stride + k_scale_off and must be
  /// in 1..254 (a normal power of two: value = fp8 · 2^(b − 127), one rounding, as the codec).
  const uint8_t* k = nullptr;
  int64_t k_stride = 0;
  int64_t k_scale_off = 0;
  DType k_type = DType::F32;
  const uint8_t* v = nullptr;  ///< V row j at v + j·v_stride in v_type (the same types as K)
  int64_t v_stride = 0;
  int64_t v_scale_off = 0;  ///< as k_scale_off, for an FP8 V
  DType v_type = DType::F32;
  float* s = nullptr;     ///< [rows][bsp] scratch: scores, then weights
  float* m = nullptr;     ///< [rows] running max of the scaled scores (−inf before any)
  float* l = nullptr;     ///< [rows] running sum of e^(s − m)
  float* acc = nullptr;   ///< [rows][hdv] unnormalized output Σ e^(s − m) · v
  float* corr = nullptr;  ///< [rows] scratch: each row's rescale factor for this block
};

/// Processes one block: updates m, l and acc of every row. Every level performs the same float
/// operations (16-lane partial sums for the f32 dots folded by one fixed tree, 8-lane ones for
/// the q8_0 dots as vec_dot_q8_0_q8_0, fused multiply-adds where the SIMD levels fuse them: the
/// baseline copy calls std::fma), so all levels give bit-identical results.
using FlashDecodeFn = void (*)(const FlashDecodeBlock& b);

/// The kernel for kernel level `level` (which must be supported: cpu_level_supported).
FlashDecodeFn flash_decode_kernel(CpuLevel level);

/// True when the kernel reads type `t` in place for heads of `head_dim` values (F32, F16, BF16,
/// FP8_E4M3, FP8_E5M2 always — FP8 rows whose scale byte is 0 or 255 excepted, see
/// FlashDecodeBlock::k_scale_off; Q8_0 / Q4_0 when head_dim % 32 == 0); other types are decoded
/// to f32 rows first.
bool flash_decode_in_place(DType t, int64_t head_dim);

}  // namespace kvrun::cpu
