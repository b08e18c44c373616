// kv_row_ops.cpp — per-head decoding of KV cache rows (see kv_row_ops.h; row layout:
// ggml-like/kv_layout.h).
#include "cpu/kv_row_ops.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>

#include "blocks.h"
#include "cpu/op_kernels.h"
#include "cpu/vec_dot.h"
#include "fp16.h"
#include "quants.h"
#include "quants_kv.h"

namespace kvrun::cpu {

namespace {

/// Values [off, off + len) of a run of blocks of `per` values each, decoded block by block with
/// `dec(block_index, float* out_per_values)`.
template <typename Dec>
void decode_span(int64_t off, int64_t len, int64_t per, float* out, Dec dec) {
  float tmp[32];
  for (int64_t b = off / per; b * per < off + len; ++b) {
    dec(b, tmp);
    const int64_t lo = std::max(off, b * per), hi = std::min(off + len, (b + 1) * per);
    std::copy(tmp + (lo - b * per), tmp + (hi - b * per), out + (lo - off));
  }
}

/// The 256 FP8 codes of format `t` (E4M3 or E5M2) as floats, built once.
const float* fp8_table(DType t) {
  static const auto tables = [] {
    std::array<std::array<float, 256>, 2> tb{};
    for (int c = 0; c < 256; ++c) {
      tb[0][size_t(c)] = fp8_e4m3_to_f32(uint8_t(c));
      tb[1][size_t(c)] = fp8_e5m2_to_f32(uint8_t(c));
    }
    return tb;
  }();
  return tables[t == DType::FP8_E4M3 ? 0 : 1].data();
}

/// dequantize_row_fp8_scaled through the code table: y = table[q] · 2^(b − 127). Multiplying by
/// a normal power of two rounds once, as ldexp does, so the values are the same; scales whose
/// 2^e is not a normal float (and the NaN scale 255) take the reference path.
void decode_fp8_head(DType t, const uint8_t* q, uint8_t b, float* y, int64_t n) {
  const int e = int(b) - 127;
  if (e < -126 || e > 127) {
    dequantize_row_fp8_scaled(t, q, b, y, n);
    return;
  }
  const float* tb = fp8_table(t);
  const float sc = f32_from_bits(uint32_t(e + 127) << 23);
  for (int64_t i = 0; i < n; ++i) y[i] = tb[q[i]] * sc;
}

void decode_nvfp4_head(int64_t n_head_kv, int64_t head_dim, const uint8_t* row, int64_t h,
                       float* out) {
  const int64_t g = std::lcm(head_dim, int64_t(QK_NVFP4));
  const int64_t n_groups = (n_head_kv * head_dim + g - 1) / g;
  const int64_t bpg = g / QK_NVFP4;
  const auto* blocks = reinterpret_cast<const block_nvfp4*>(row);
  const uint8_t* scales = row + n_groups * bpg * int64_t(sizeof(block_nvfp4));
  // A block never straddles two groups (g is a multiple of 16), so block b's group is b / bpg.
  decode_span(h * head_dim, head_dim, QK_NVFP4, out, [&](int64_t b, float* y) {
    uint32_t bits = 0;
    for (int i = 0; i < 4; ++i) bits |= uint32_t(scales[4 * (b / bpg) + i]) << (8 * i);
    dequantize_row_nvfp4_scaled(blocks + b, f32_from_bits(bits), y, QK_NVFP4);
  });
}

}  // namespace

void kv_decode_head(DType t, int64_t n_head_kv, int64_t head_dim, const uint8_t* row, int64_t h,
                    float* out) {
  const int64_t off = h * head_dim;
  switch (t) {
    case DType::F32:
      std::memcpy(out, row + off * 4, size_t(head_dim) * 4);
      return;
    case DType::F16: {
      op_kernels().f16_to_f32(reinterpret_cast<const uint16_t*>(row) + off, out, head_dim);
      return;
    }
    case DType::BF16: {
      const auto* p = reinterpret_cast<const uint16_t*>(row) + off;
      for (int64_t i = 0; i < head_dim; ++i) out[i] = bf16_to_f32(p[i]);
      return;
    }
    case DType::Q8_0:
      decode_span(off, head_dim, QK8_0, out, [row](int64_t b, float* y) {
        dequantize_row_q8_0(row + b * int64_t(sizeof(block_q8_0)), y, QK8_0);
      });
      return;
    case DType::Q4_0:
      decode_span(off, head_dim, QK4_0, out, [row](int64_t b, float* y) {
        dequantize_row_q4_0(row + b * int64_t(sizeof(block_q4_0)), y, QK4_0);
      });
      return;
    case DType::FP8_E4M3:
    case DType::FP8_E5M2:
      decode_fp8_head(t, row + off, row[n_head_kv * head_dim + h], out, head_dim);
      return;
    default:  // NVFP4 (callers pass KV cache types only)
      decode_nvfp4_head(n_head_kv, head_dim, row, h, out);
      return;
  }
}

int64_t kv_head_offset(DType t, int64_t head_dim, int64_t h) {
  switch (t) {
    case DType::F32:
      return h * head_dim * 4;
    case DType::F16:
    case DType::BF16:
      return h * head_dim * 2;
    case DType::FP8_E4M3:
    case DType::FP8_E5M2:
      return h * head_dim;
    case DType::Q8_0:
      return head_dim % QK8_0 == 0 ? h * (head_dim / QK8_0) * int64_t(sizeof(block_q8_0)) : -1;
    case DType::Q4_0:
      return head_dim % QK4_0 == 0 ? h * (head_dim / QK4_0) * int64_t(sizeof(block_q4_0)) : -1;
    default:
      return -1;
  }
}

}  // namespace kvrun::cpu
