// kv_format.cuh — where head h, element d of one encoded KV row lies, and its value, for every
// KV cache type (layout: ggml-like/kv_layout.h). Read in place by paged attention; the values
// equal ggml-like's kv_decode_row bit for bit.
#pragma once

#include <cstdint>

#include "backend.h"
#include "blocks.h"
#include "cuda/decode.cuh"
#include "dtype.h"

namespace kvrun::cuda {

/// One KV row format: the type, the row's shape and (nvfp4) its scale-group geometry. Built on
/// the host by make_kv_format.
struct KvFormat {
  DType type;
  int n_head_kv;
  int head_dim;
  int nvfp4_group;      ///< nvfp4: values per scale group, lcm(head_dim, 16)
  int nvfp4_scale_off;  ///< nvfp4: byte offset of the FP32 group scales in the row
};

/// Where one layer's K (or V) rows are: cell c (slot · block_size + row in the block, as
/// AttnBatch::cells and the slot tables give them) of a fast-tier slot (c < n_fast_cells) at
/// fast + c · row_bytes in device memory, of a host-tier slot at slow + (c − n_fast_cells) ·
/// row_bytes in pinned host memory the kernels read and write in place (KvLayer::k_slow: a
/// mapped cudaHostAlloc buffer's device pointer). Built on the host by kv_rows.
struct KvRows {
  uint8_t* fast;
  uint8_t* slow;         ///< null without a host tier
  int64_t n_fast_cells;  ///< KvLayer::n_fast · block_size; INT64_MAX without a host tier
  int64_t row_bytes;

  __host__ __device__ uint8_t* row(int64_t cell) const {
    return cell < n_fast_cells ? fast + cell * row_bytes : slow + (cell - n_fast_cells) * row_bytes;
  }
};

/// The K (v false) or V rows of `kv` as KvRows.
inline KvRows kv_rows(const KvLayer& kv, bool v) {
  KvRows r{v ? kv.v : kv.k, v ? kv.v_slow : kv.k_slow, INT64_MAX,
           v ? kv.v_row_bytes : kv.k_row_bytes};
  if (r.slow && kv.n_fast < INT64_MAX / kv.block_size) r.n_fast_cells = kv.n_fast * kv.block_size;
  return r;
}

/// The format of rows of n_head_kv × head_dim values of `type` (any KV cache type).
inline KvFormat make_kv_format(DType type, int64_t n_head_kv, int64_t head_dim) {
  KvFormat f{type, int(n_head_kv), int(head_dim), 0, 0};
  if (type == DType::NVFP4) {
    int64_t a = head_dim, b = QK_NVFP4;
    while (b) {
      const int64_t t = a % b;
      a = b;
      b = t;
    }
    const int64_t group = head_dim / a * QK_NVFP4;
    const int64_t n = n_head_kv * head_dim, count = (n + group - 1) / group;
    f.nvfp4_group = int(group);
    f.nvfp4_scale_off = int(count * (group / QK_NVFP4) * int64_t(sizeof(block_nvfp4)));
  }
  return f;
}

/// The nvfp4 block holding value e of an encoded row of format f (its E4M3 scale byte, then the
/// E2M1 codes, value e at code e % 16), with *fac = the group's FP32 scale × the block's E4M3
/// scale, the factor its codes are multiplied by.
KVRUN_HD const uint8_t* nvfp4_block(const KvFormat& f, const uint8_t* row, int e, float* fac) {
  const int g = e / f.nvfp4_group, w = e % f.nvfp4_group;
  const uint8_t* blk =
      row + (g * (f.nvfp4_group / QK_NVFP4) + w / QK_NVFP4) * int(sizeof(block_nvfp4));
  const uint8_t* sp = row + f.nvfp4_scale_off + 4 * g;
  const float s2 = bits_as_f32(uint32_t(sp[0]) | uint32_t(sp[1]) << 8 | uint32_t(sp[2]) << 16 |
                               uint32_t(sp[3]) << 24);
  *fac = s2 * fp8_e4m3_to_f32(blk[0]);
  return blk;
}

/// Value e (= h·head_dim + d; head h for the fp8 scale) of an encoded row.
KVRUN_HD float kv_value(const KvFormat& f, const uint8_t* row, int h, int e) {
  switch (f.type) {
    case DType::F32:
      return reinterpret_cast<const float*>(row)[e];
    case DType::F16:
      return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[e]);
    case DType::BF16:
      return bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[e]);
    case DType::Q8_0: {
      const uint8_t* b = row + (e / QK8_0) * int(sizeof(block_q8_0));
      return load_f16(reinterpret_cast<const uint16_t*>(b)) * float(int8_t(b[2 + e % QK8_0]));
    }
    case DType::Q4_0: {
      const uint8_t* b = row + (e / QK4_0) * int(sizeof(block_q4_0));
      const int j = e % QK4_0;
      const int q = j < QK4_0 / 2 ? (b[2 + j] & 0x0f) : (b[2 + j - QK4_0 / 2] >> 4);
      return load_f16(reinterpret_cast<const uint16_t*>(b)) * float(q - 8);
    }
    case DType::FP8_E4M3:
    case DType::FP8_E5M2: {
      const uint8_t sb = row[f.n_head_kv * f.head_dim + h];
      const uint8_t c = row[e];
      const float v = f.type == DType::FP8_E4M3 ? fp8_e4m3_to_f32(c) : fp8_e5m2_to_f32(c);
      return sb == 255 ? bits_as_f32(0x7fc00000u) : ldexpf(v, int(sb) - 127);
    }
    default: {  // NVFP4
      float fac;
      const uint8_t* blk = nvfp4_block(f, row, e, &fac);
      const int k = e % QK_NVFP4;
      const uint8_t byte = blk[1 + k / 2];
      return fac * e2m1_to_f32(uint8_t(k & 1 ? byte >> 4 : byte & 0x0f));
    }
  }
}

}  // namespace kvrun::cuda
