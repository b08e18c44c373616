// attn_common.cuh — what the paged attention kernels share (paged_attention.cu's split kernel,
// prefill_attention.cu's query tiles): the per-call arguments and the 8-value K/V row decoder.
// CUDA sources only.
#pragma once

#include <cstdint>

#include "cuda/kv_format.cuh"

namespace kvrun::cuda {

/// What every block of one call reads.
struct AttnArgs {
  KvFormat kf, vf;
  KvRows k, v;  ///< fast tier and host tier (cells from n_fast_cells on: pinned host memory)
  int block_size;
  const int32_t* pos;      ///< [n_rows]
  const int32_t* row_tab;  ///< [n_rows]
  const int32_t* tables;
  const float* q;   ///< [n_rows][n_head · head_dim]
  float* partials;  ///< [n_rows][n_head][n_seg][2 + head_dim_v]: m, l, acc
  float* out;  ///< one segment: [n_rows][n_head][head_dim_v] written directly (no merge); else null
  int n_head, group, hd, hdv, seg_len, n_seg;
  int window;  ///< sliding window (0: none)
  int k_vec;   ///< K rows read 8 values at a time: 1 f16, 2 bf16, 3 fp8 (aligned rows: one
               ///< vector load), 4 q8_0, 5 nvfp4 (one scale, packed quants); 0 per element
  int v_vec;   ///< V rows read DPL values a lane at a time, the same codes (v_values)
  float scale;
  float softcap;  ///< 0: off
  int tier;       ///< KvTier: 0 every cell, 1 cells of the fast tier only, 2 of the host tier only
};

/// K values e0 … e0+7 (e = hk·head_dim + d) of head hk of one encoded row, 0 past the head:
/// one 16-byte load for f16 / bf16 rows and one 8-byte load for fp8 rows whose heads are so
/// aligned, one scale and four 2-byte (q8_0) or 1-byte (nvfp4) loads (AttnArgs::k_vec), the
/// per-element decoder otherwise. Values equal kv_value's.
__device__ __forceinline__ void k_values8(const KvFormat& f, int vec, const uint8_t* row, int hk,
                                          int e0, int e_end, float* x) {
  if (vec == 1 || vec == 2) {
    const uint4 u = *reinterpret_cast<const uint4*>(row + 2 * e0);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint16_t lo = uint16_t(w[j] & 0xffffu), hi = uint16_t(w[j] >> 16);
      x[2 * j] = vec == 1 ? f16_to_f32(lo) : bf16_to_f32(lo);
      x[2 * j + 1] = vec == 1 ? f16_to_f32(hi) : bf16_to_f32(hi);
    }
  } else if (vec == 3) {
    const uint2 u = *reinterpret_cast<const uint2*>(row + e0);
    const uint8_t sb = row[f.n_head_kv * f.head_dim + hk];
    const bool e4m3 = f.type == DType::FP8_E4M3;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint8_t c = uint8_t((j < 4 ? u.x >> (8 * j) : u.y >> (8 * (j - 4))) & 0xffu);
      const float v = e4m3 ? fp8_e4m3_to_f32(c) : fp8_e5m2_to_f32(c);
      x[j] = sb == 255 ? bits_as_f32(0x7fc00000u) : ldexpf(v, int(sb) - 127);
    }
  } else if (vec == 4) {  // q8_0: the 8 values lie in one 34-byte block (head_dim % 32 == 0)
    const uint8_t* b = row + (e0 / QK8_0) * int(sizeof(block_q8_0));
    const float d = load_f16(reinterpret_cast<const uint16_t*>(b));
    const uint16_t* qs = reinterpret_cast<const uint16_t*>(b + 2 + e0 % QK8_0);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint16_t w = qs[j];
      x[2 * j] = d * float(int8_t(w & 0xffu));
      x[2 * j + 1] = d * float(int8_t(w >> 8));
    }
  } else if (vec == 5) {  // nvfp4: the 8 values are half of one 16-value block
    float fac;
    const uint8_t* qs = nvfp4_block(f, row, e0, &fac) + 1 + e0 % QK_NVFP4 / 2;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint8_t byte = qs[j];
      x[2 * j] = fac * e2m1_to_f32(uint8_t(byte & 0x0f));
      x[2 * j + 1] = fac * e2m1_to_f32(uint8_t(byte >> 4));
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] = e0 + j < e_end ? kv_value(f, row, hk, e0 + j) : 0.0f;
  }
}

}  // namespace kvrun::cuda
