// weight_decode.cuh — per-type decoders of a weight row in chunks, for the matmul and
// get_rows kernels. WeightChunk<T>::kValues consecutive values of a row are decoded by one call;
// chunks are read with 16-byte loads where the block layout keeps them 16-byte aligned (f32,
// f16, bf16 and the quants of q4_K / q5_K), with 2-byte or byte loads otherwise (q8_0, q4_0 and
// q6_K blocks are 34, 18 and 210 bytes, so their blocks are not 16-byte aligned in a row).
// Values equal the scalar reference decoders (quants_float/legacy/k.cpp) up to the rounding
// of the contracted d·q − m of the K-quants.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "blocks.h"
#include "cuda/decode.cuh"
#include "dtype.h"
#include "tensor.h"

namespace kvrun::cuda {

template <DType T>
struct WeightChunk;

template <>
struct WeightChunk<DType::F32> {
  static constexpr int kValues = 4;
  KVRUN_HD static void decode(const uint8_t* row, int64_t c, float* v) {
    const float4 f = reinterpret_cast<const float4*>(row)[c];
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
  }
};

template <>
struct WeightChunk<DType::F16> {
  static constexpr int kValues = 8;
  KVRUN_HD static void decode(const uint8_t* row, int64_t c, float* v) {
    const uint4 u = reinterpret_cast<const uint4*>(row)[c];
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    KVRUN_UNROLL
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = f16_to_f32(uint16_t(w[i]));
      v[2 * i + 1] = f16_to_f32(uint16_t(w[i] >> 16));
    }
  }
};

template <>
struct WeightChunk<DType::BF16> {
  static constexpr int kValues = 8;
  KVRUN_HD static void decode(const uint8_t* row, int64_t c, float* v) {
    const uint4 u = reinterpret_cast<const uint4*>(row)[c];
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    KVRUN_UNROLL
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = bits_as_f32(w[i] << 16);
      v[2 * i + 1] = bits_as_f32(w[i] & 0xffff0000u);
    }
  }
};

template <>
struct WeightChunk<DType::Q8_0> {
  static constexpr int kValues = QK8_0;
  KVRUN_HD static void decode(const uint8_t* row, int64_t c, float* v) {
    const uint16_t* b = reinterpret_cast<const uint16_t*>(row + c * int64_t(sizeof(block_q8_0)));
    const float d = f16_to_f32(b[0]);
    KVRUN_UNROLL
    for (int i = 0; i < QK8_0 / 2; ++i) {
      const uint16_t q = b[1 + i];
      v[2 * i] = d * float(int8_t(q & 0xff));
      v[2 * i + 1] = d * float(int8_t(q >> 8));
    }
  }
};

template <>
struct WeightChunk<DType::Q4_0> {
  static constexpr int kValues = QK4_0;
  KVRUN_HD static void decode(const uint8_t* row, int64_t c, float* v) {
    const uint16_t* b = reinterpret_cast<const uint16_t*>(row + c * int64_t(sizeof(block_q4_0)));
    const float d = f16_to_f32(b[0]);
    KVRUN_UNROLL
    for (int i = 0; i < QK4_0 / 4; ++i) {
      const uint16_t q = b[1 + i];
      v[2 * i] = d * float(int(q & 0x0f) - 8);
      v[2 * i + 1] = d * float(int((q >> 8) & 0x0f) - 8);
      v[2 * i + 16] = d * float(int((q >> 4) & 0x0f) - 8);
      v[2 * i + 17] = d * float(int(q >> 12) - 8);
    }
  }
};

/// 32 bytes at a 16-byte aligned address as two 16-byte loads.
KVRUN_HD void load32(const uint8_t* p, uint8_t* out) {
  const uint4 a = reinterpret_cast<const uint4*>(p)[0], b = reinterpret_cast<const uint4*>(p)[1];
  const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  KVRUN_UNROLL
  for (int i = 0; i < 32; ++i) out[i] = uint8_t(w[i / 4] >> (8 * (i % 4)));
}

/// q4_K: chunk = sub-block j (32 values) of super-block c / 8.
template <>
struct WeightChunk<DType::Q4_K> {
  static constexpr int kValues = 32;
  KVRUN_HD static void decode(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c / 8) * int64_t(sizeof(block_q4_K));
    const int j = int(c % 8);
    const uint16_t* h = reinterpret_cast<const uint16_t*>(b);
    int sc, m;
    k4_scale_min(j, b + 4, sc, m);
    const float dl = f16_to_f32(h[0]) * float(sc), ml = f16_to_f32(h[1]) * float(m);
    uint8_t q[32];
    load32(b + 16 + 32 * (j / 2), q);
    const int shift = (j % 2) * 4;
    KVRUN_UNROLL
    for (int i = 0; i < 32; ++i) v[i] = dl * float((q[i] >> shift) & 0x0f) - ml;
  }
};

/// q5_K: as q4_K plus bit j of qh[i] as the fifth bit.
template <>
struct WeightChunk<DType::Q5_K> {
  static constexpr int kValues = 32;
  KVRUN_HD static void decode(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c / 8) * int64_t(sizeof(block_q5_K));
    const int j = int(c % 8);
    const uint16_t* h = reinterpret_cast<const uint16_t*>(b);
    int sc, m;
    k4_scale_min(j, b + 4, sc, m);
    const float dl = f16_to_f32(h[0]) * float(sc), ml = f16_to_f32(h[1]) * float(m);
    uint8_t q[32], qh[32];
    load32(b + 48 + 32 * (j / 2), q);
    load32(b + 16, qh);
    const int shift = (j % 2) * 4;
    KVRUN_UNROLL
    for (int i = 0; i < 32; ++i)
      v[i] = dl * float(((q[i] >> shift) & 0x0f) | (((qh[i] >> j) & 1) << 4)) - ml;
  }
};

/// q6_K: chunk = values 32t … 32t+31 of super-block c / 8 (t = c % 8).
template <>
struct WeightChunk<DType::Q6_K> {
  static constexpr int kValues = 32;
  KVRUN_HD static void decode(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c / 8) * int64_t(sizeof(block_q6_K));
    const int t = int(c % 8), t4 = t % 4;
    const uint8_t* ql = b + 64 * (t / 4) + 32 * (t4 & 1);
    const uint8_t* qh = b + 128 + 32 * (t / 4);
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
    const float d = f16_to_f32(uint16_t(b[208] | (b[209] << 8)));
    const int lshift = t4 < 2 ? 0 : 4, hshift = 2 * t4;
    KVRUN_UNROLL
    for (int u = 0; u < 32; ++u) {
      const int q = (((ql[u] >> lshift) & 0x0f) | (((qh[u] >> hshift) & 3) << 4)) - 32;
      v[u] = d * float(scales[2 * t + u / 16]) * float(q);
    }
  }
};

// ---- the other GGUF weight types (quants_legacy.cpp, quants_k.cpp): byte or 2-byte loads ----
// Their d·q + m products are rounded separately (mul_rn / add_rn), as the reference computes
// them, so the values equal its decoders bit for bit on the device too.

/// The 32 nibbles of a legacy block's 16 `qs` bytes at `qs` (2-byte aligned): value j (j < 16)
/// is byte j's low nibble, value j + 16 its high nibble.
KVRUN_HD void nibbles32(const uint8_t* qs, int* q) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(qs);
  KVRUN_UNROLL
  for (int i = 0; i < 8; ++i) {
    const int w = h[i];
    q[2 * i] = w & 0x0f;
    q[2 * i + 1] = (w >> 8) & 0x0f;
    q[2 * i + 16] = (w >> 4) & 0x0f;
    q[2 * i + 17] = w >> 12;
  }
}

/// The 32 bits of q5_0 / q5_1's `qh` (little-endian; bit i is value i's fifth bit).
KVRUN_HD uint32_t qh32(const uint8_t* qh) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(qh);
  return uint32_t(h[0]) | uint32_t(h[1]) << 16;
}

/// q4_1: x = d · q + m (20-byte blocks: d, m, 16 bytes of nibbles).
template <>
struct WeightChunk<DType::Q4_1> {
  static constexpr int kValues = QK4_1;
  KVRUN_HD static void decode(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + c * int64_t(sizeof(block_q4_1));
    const uint16_t* h = reinterpret_cast<const uint16_t*>(b);
    const float d = f16_to_f32(h[0]), m = f16_to_f32(h[1]);
    int q[32];
    nibbles32(b + 4, q);
    KVRUN_UNROLL
    for (int i = 0; i < 32; ++i) v[i] = add_rn(mul_rn(d, float(q[i])), m);
  }
};

/// q5_0: x = d · (q − 16), q = nibble | qh bit << 4 (22-byte blocks: d, qh, qs).
template <>
struct WeightChunk<DType::Q5_0> {
  static constexpr int kValues = QK5_0;
  KVRUN_HD static void decode(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + c * int64_t(sizeof(block_q5_0));
    const float d = f16_to_f32(reinterpret_cast<const uint16_t*>(b)[0]);
    const uint32_t qh = qh32(b + 2);
    int q[32];
    nibbles32(b + 6, q);
    KVRUN_UNROLL
    for (int i = 0; i < 32; ++i) v[i] = d * float((q[i] | int((qh >> i) & 1) << 4) - 16);
  }
};

/// q5_1: x = d · q + m, q = nibble | qh bit << 4 (24-byte blocks: d, m, qh, qs).
template <>
struct WeightChunk<DType::Q5_1> {
  static constexpr int kValues = QK5_1;
  KVRUN_HD static void decode(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + c * int64_t(sizeof(block_q5_1));
    const uint16_t* h = reinterpret_cast<const uint16_t*>(b);
    const float d = f16_to_f32(h[0]), m = f16_to_f32(h[1]);
    const uint32_t qh = qh32(b + 4);
    int q[32];
    nibbles32(b + 8, q);
    KVRUN_UNROLL
    for (int i = 0; i < 32; ++i) v[i] = add_rn(mul_rn(d, float(q[i] | int((qh >> i) & 1) << 4)), m);
  }
};

/// kvalues_iq4nl (blocks.h) as two 64-bit constants: byte i = level i (lo) and 8 + i (hi).
constexpr uint64_t kIq4nlLo = 0xf6eaddcfbfad9881ull, kIq4nlHi = 0x7159453526190d01ull;

constexpr bool iq4nl_levels_match() {
  for (int q = 0; q < 16; ++q)
    if (int8_t(uint8_t((q < 8 ? kIq4nlLo : kIq4nlHi) >> (8 * (q % 8)))) != kvalues_iq4nl[q])
      return false;
  return true;
}
static_assert(iq4nl_levels_match(), "kIq4nlLo / kIq4nlHi differ from kvalues_iq4nl");

/// iq4_nl level q (0 … 15): kvalues_iq4nl[q], taken from constants in registers (a table in
/// device code would be a memory load per value).
KVRUN_HD int iq4nl_level(int q) {
  return int(int8_t(uint8_t((q < 8 ? kIq4nlLo : kIq4nlHi) >> (8 * (q & 7)))));
}

/// iq4_nl: x = d · kvalues_iq4nl[nibble] (18-byte blocks: d, 16 bytes of nibbles).
template <>
struct WeightChunk<DType::IQ4_NL> {
  static constexpr int kValues = QK4_NL;
  KVRUN_HD static void decode(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + c * int64_t(sizeof(block_iq4_nl));
    const float d = f16_to_f32(reinterpret_cast<const uint16_t*>(b)[0]);
    int q[32];
    nibbles32(b + 2, q);
    KVRUN_UNROLL
    for (int i = 0; i < 32; ++i) v[i] = d * float(iq4nl_level(q[i]));
  }
};

/// iq4_xs: chunk = sub-block j (32 values) of super-block c / 8: x = (d · (ls_j − 32)) ·
/// kvalues_iq4nl[nibble], the sub-block scale rounded to float first as the reference does.
template <>
struct WeightChunk<DType::IQ4_XS> {
  static constexpr int kValues = 32;
  KVRUN_HD static void decode(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c / 8) * int64_t(sizeof(block_iq4_xs));
    const int j = int(c % 8);
    const uint16_t* h = reinterpret_cast<const uint16_t*>(b);
    const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 0x0f) | (((h[1] >> (2 * j)) & 3) << 4);
    const float dl = mul_rn(f16_to_f32(h[0]), float(ls - 32));
    int q[32];
    nibbles32(b + 8 + 16 * j, q);
    KVRUN_UNROLL
    for (int i = 0; i < 32; ++i) v[i] = dl * float(iq4nl_level(q[i]));
  }
};

/// q2_K: chunk = values 32t … 32t+31 of super-block c / 8 (t = c % 8): x = (d · sc) · q −
/// (dmin · m) with the 4-bit scale / min of the value's 16-value sub-block (84-byte blocks:
/// scales, qs, d, dmin; value i's 2 bits at qs[32·(i / 128) + i % 32] >> 2·((i % 128) / 32)).
template <>
struct WeightChunk<DType::Q2_K> {
  static constexpr int kValues = 32;
  KVRUN_HD static void decode(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c / 8) * int64_t(sizeof(block_q2_K));
    const int t = int(c % 8);
    const uint16_t* h = reinterpret_cast<const uint16_t*>(b + 80);
    const float d = f16_to_f32(h[0]), dmin = f16_to_f32(h[1]);
    const uint16_t* qs = reinterpret_cast<const uint16_t*>(b + 16 + 32 * (t / 4));
    const int shift = 2 * (t % 4);
    KVRUN_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int sc = b[2 * t + half];
      const float dl = mul_rn(d, float(sc & 0x0f)), ml = mul_rn(dmin, float(sc >> 4));
      KVRUN_UNROLL
      for (int u = 0; u < 8; ++u) {
        const int w = qs[8 * half + u];
        v[16 * half + 2 * u] = sub_rn(mul_rn(dl, float((w >> shift) & 3)), ml);
        v[16 * half + 2 * u + 1] = sub_rn(mul_rn(dl, float((w >> (8 + shift)) & 3)), ml);
      }
    }
  }
};

/// q3_K: chunk = values 32t … 32t+31 of super-block c / 8 (t = c % 8): x = (d · (s − 32)) ·
/// (q − 4·(1 − hbit)) with the 6-bit scale s of the value's 16-value sub-block (110-byte blocks:
/// hmask, qs, scales, d; value i's high bit at hmask[i % 32] >> (4·(i / 128) + (i % 128) / 32)).
template <>
struct WeightChunk<DType::Q3_K> {
  static constexpr int kValues = 32;
  KVRUN_HD static void decode(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c / 8) * int64_t(sizeof(block_q3_K));
    const int t = int(c % 8);
    const float d = f16_to_f32(reinterpret_cast<const uint16_t*>(b + 108)[0]);
    const uint16_t* hm = reinterpret_cast<const uint16_t*>(b);
    const uint16_t* qs = reinterpret_cast<const uint16_t*>(b + 32 + 32 * (t / 4));
    const uint8_t* scales = b + 96;
    const int shift = 2 * (t % 4), hbit = 4 * (t / 4) + t % 4;
    KVRUN_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int s = 2 * t + half;
      const int low = s < 8 ? (scales[s] & 0x0f) : (scales[s - 8] >> 4);
      const int sc = low | (((scales[8 + s % 4] >> (2 * (s / 4))) & 3) << 4);
      const float dl = mul_rn(d, float(sc - 32));
      KVRUN_UNROLL
      for (int u = 0; u < 8; ++u) {
        const int w = qs[8 * half + u], m = hm[8 * half + u];
        const int q0 = ((w >> shift) & 3) - (((m >> hbit) & 1) ? 0 : 4);
        const int q1 = ((w >> (8 + shift)) & 3) - (((m >> (8 + hbit)) & 1) ? 0 : 4);
        v[16 * half + 2 * u] = dl * float(q0);
        v[16 * half + 2 * u + 1] = dl * float(q1);
      }
    }
  }
};

/// The type of a weight format as a compile-time tag for dispatch_weight_type's callback.
template <DType T>
using WeightTag = std::integral_constant<DType, T>;

/// Calls f(WeightTag<t>{}) for the weight type `t` (f reads the type as decltype(tag)::value);
/// returns false when `t` has no WeightChunk (the caller reports the unsupported type).
template <typename F>
bool dispatch_weight_type(DType t, F&& f) {
  switch (t) {
    case DType::F32:
      f(WeightTag<DType::F32>{});
      return true;
    case DType::F16:
      f(WeightTag<DType::F16>{});
      return true;
    case DType::BF16:
      f(WeightTag<DType::BF16>{});
      return true;
    case DType::Q8_0:
      f(WeightTag<DType::Q8_0>{});
      return true;
    case DType::Q4_0:
      f(WeightTag<DType::Q4_0>{});
      return true;
    case DType::Q4_K:
      f(WeightTag<DType::Q4_K>{});
      return true;
    case DType::Q5_K:
      f(WeightTag<DType::Q5_K>{});
      return true;
    case DType::Q6_K:
      f(WeightTag<DType::Q6_K>{});
      return true;
    case DType::Q4_1:
      f(WeightTag<DType::Q4_1>{});
      return true;
    case DType::Q5_0:
      f(WeightTag<DType::Q5_0>{});
      return true;
    case DType::Q5_1:
      f(WeightTag<DType::Q5_1>{});
      return true;
    case DType::IQ4_NL:
      f(WeightTag<DType::IQ4_NL>{});
      return true;
    case DType::IQ4_XS:
      f(WeightTag<DType::IQ4_XS>{});
      return true;
    case DType::Q2_K:
      f(WeightTag<DType::Q2_K>{});
      return true;
    case DType::Q3_K:
      f(WeightTag<DType::Q3_K>{});
      return true;
    default:
      return false;
  }
}

/// A weight matrix in its stored (GGUF) layout as the kernels read it: chunk c of row r is
/// WeightChunk<T>::decode of the row `stride` bytes after the previous one.
template <DType T>
struct StoredRows {
  static constexpr int kValues = WeightChunk<T>::kValues;
  const uint8_t* w;
  size_t stride;
  KVRUN_HD void decode(int64_t r, int64_t c, float* v) const {
    WeightChunk<T>::decode(w + r * int64_t(stride), c, v);
  }
};

/// Σ_{i<4} a_i · b_i over the four signed bytes of a and b, plus c: CUDA's __dp4a on the GPU,
/// a loop on the host (the host-side codec tests).
KVRUN_HD int dot4_i8(int a, int b, int c) {
#ifdef __CUDA_ARCH__
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 4; ++i)
    c += int(int8_t(uint32_t(a) >> (8 * i))) * int(int8_t(uint32_t(b) >> (8 * i)));
  return c;
#endif
}

/// One block of 32 activations quantized to int8 as the CPU quantizes them for q4_0 / q8_0
/// weights (backends/cpu act_from_float_q8_0: q = round(x · 127 / absmax), d = f16(absmax /
/// 127)): value i = d · xq byte i, bytes little-endian in 8 words (value i in byte i % 4 of word
/// i / 4), and sum = Σ xq (which turns q4_0's −8 offset into one integer multiply).
struct ActQ8 {
  int xq[8];
  float d;
  int sum;
};

/// Block c of activations quantized by the decode matmul (matmul.cu k_quantize_act_q8): its 32
/// int8 values at xq + 32·c (16-byte aligned) and (d, Σ xq) at ds[c].
KVRUN_HD ActQ8 load_act_q8(const int8_t* xq, const float2* ds, int64_t c) {
  const int4* p = reinterpret_cast<const int4*>(xq + c * 32);
  const int4 a0 = p[0], a1 = p[1];
  const float2 t = ds[c];
  return {{a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w}, t.x, int(t.y)};
}

/// The split layout the CUDA backend uploads q4_0 and q8_0 matrices in (split_weight in
/// matmul.cu): the quants of every block first, in row-major block order, each block's 16
/// (q4_0) or 32 (q8_0) bytes 16-byte aligned, then every block's f16 scale. One or two 16-byte
/// loads and one 2-byte load per 32 values instead of 9 or 17 2-byte loads; the same values as
/// the stored blocks (the same d · q products).
template <DType T>
struct SplitRows;

template <>
struct SplitRows<DType::Q4_0> {
  static constexpr int kValues = QK4_0;
  const uint4* q;     ///< [m · nb] 16 bytes of quants per block
  const uint16_t* d;  ///< [m · nb] f16 scales
  int64_t nb;         ///< blocks per row
  KVRUN_HD void decode(int64_t r, int64_t c, float* v) const {
    const int64_t b = r * nb + c;
    const uint4 p = q[b];
    const float s = f16_to_f32(d[b]);
    const uint32_t w[4] = {p.x, p.y, p.z, p.w};
    KVRUN_UNROLL
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const uint32_t byte = (w[j / 4] >> (8 * (j % 4))) & 0xffu;
      v[j] = s * float(int(byte & 0x0fu) - 8);
      v[j + QK4_0 / 2] = s * float(int(byte >> 4) - 8);
    }
  }
  /// Block c of row r as stored: byte j holds value j (low nibble) and j + 16 (high), offset 8.
  struct Block {
    uint4 q;
    float d;
  };
  KVRUN_HD Block load(int64_t r, int64_t c) const {
    const int64_t b = r * nb + c;
    return {q[b], f16_to_f32(d[b])};
  }
  /// Σ_j value_j · a_j over the block: d_w · d_a · (Σ q_j · xq_j − 8 · Σ xq_j), the integer sum
  /// exact, as the CPU's q4_0 × q8_0 dot forms it.
  KVRUN_HD static float dot_q8(const Block& w, const ActQ8& a) {
    const uint32_t u[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
    int sum = 0;
    KVRUN_UNROLL
    for (int j = 0; j < 4; ++j) {
      sum = dot4_i8(int(u[j] & 0x0f0f0f0fu), a.xq[j], sum);
      sum = dot4_i8(int((u[j] >> 4) & 0x0f0f0f0fu), a.xq[j + 4], sum);
    }
    return w.d * a.d * float(sum - 8 * a.sum);
  }
};

template <>
struct SplitRows<DType::Q8_0> {
  static constexpr int kValues = QK8_0;
  const uint4* q;     ///< [m · nb] 32 bytes of quants per block (two uint4)
  const uint16_t* d;  ///< [m · nb] f16 scales
  int64_t nb;         ///< blocks per row
  KVRUN_HD void decode(int64_t r, int64_t c, float* v) const {
    const int64_t b = r * nb + c;
    const uint4 p0 = q[2 * b], p1 = q[2 * b + 1];
    const float s = f16_to_f32(d[b]);
    const uint32_t w[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
    KVRUN_UNROLL
    for (int j = 0; j < QK8_0; ++j) v[j] = s * float(int8_t((w[j / 4] >> (8 * (j % 4))) & 0xffu));
  }
  /// Block c of row r as stored: 32 int8 values.
  struct Block {
    uint4 q0, q1;
    float d;
  };
  KVRUN_HD Block load(int64_t r, int64_t c) const {
    const int64_t b = r * nb + c;
    return {q[2 * b], q[2 * b + 1], f16_to_f32(d[b])};
  }
  /// Σ_j value_j · a_j over the block: d_w · d_a · Σ q_j · xq_j.
  KVRUN_HD static float dot_q8(const Block& w, const ActQ8& a) {
    const uint32_t u[8] = {w.q0.x, w.q0.y, w.q0.z, w.q0.w, w.q1.x, w.q1.y, w.q1.z, w.q1.w};
    int sum = 0;
    KVRUN_UNROLL
    for (int j = 0; j < 8; ++j) sum = dot4_i8(int(u[j]), a.xq[j], sum);
    return w.d * a.d * float(sum);
  }
};

/// q6_K in the split layout (split_weight in matmul.cu), per 32-value chunk c of a row (chunk t
/// = c % 8 of super-block c / 8, values 32t … 32t+31 of the GGUF block as WeightChunk<Q6_K>
/// numbers them) with q_i the 6-bit value (0 … 63, the stored value + 32):
///   lo [chunks] 16 bytes: byte j = (q_j & 15) | (q_{j+16} & 15) << 4 (q4_0's nibble order);
///   hi [chunks] 8 bytes: byte b of word h (0, 1), bits 2i … 2i+1 = q_{16h + 4i + b} >> 4, so
///      that word i of lo and bits 2i of hi give values 4i … 4i+3 as whole bytes;
///   sc [chunks] the chunk's two int8 scales (values 0 … 15, 16 … 31);
///   d  [chunks / 8] the super-block's f16 scale.
/// 210 bytes per 256 values as stored; one 16-, one 8- and two 2-byte loads per 32 values
/// instead of a 210-byte block read byte by byte. Values are d · sc · (q − 32) as the stored
/// blocks give them.
template <>
struct SplitRows<DType::Q6_K> {
  static constexpr int kValues = 32;
  /// Byte offsets of the hi, sc and d arrays in the split bytes of `chunks` chunks (lo first).
  static constexpr int64_t hi_offset(int64_t chunks) { return chunks * 16; }
  static constexpr int64_t sc_offset(int64_t chunks) { return chunks * 24; }
  static constexpr int64_t d_offset(int64_t chunks) { return chunks * 26; }
  const uint4* lo;
  const uint2* hi;
  const uint16_t* sc;
  const uint16_t* d;
  int64_t nb;  ///< chunks (32 values) per row
  struct Block {
    uint4 lo;
    uint2 hi;
    int sc0, sc1;
    float d;
  };
  KVRUN_HD Block load(int64_t r, int64_t c) const {
    const int64_t b = r * nb + c;
    const uint16_t s = sc[b];
    return {lo[b], hi[b], int(int8_t(s & 0xffu)), int(int8_t(s >> 8)), f16_to_f32(d[b / 8])};
  }
  /// Values 4i … 4i+3 (half 0) or 16 + 4i … (half 1) as four bytes 0 … 63.
  KVRUN_HD static int quad(const Block& w, int half, int i) {
    const uint32_t l[4] = {w.lo.x, w.lo.y, w.lo.z, w.lo.w};
    const uint32_t h = half ? w.hi.y : w.hi.x;
    return int(((l[i] >> (4 * half)) & 0x0f0f0f0fu) | (((h >> (2 * i)) & 0x03030303u) << 4));
  }
  KVRUN_HD void decode(int64_t r, int64_t c, float* v) const {
    const Block w = load(r, c);
    KVRUN_UNROLL
    for (int half = 0; half < 2; ++half) {
      const float ds = w.d * float(half ? w.sc1 : w.sc0);
      KVRUN_UNROLL
      for (int i = 0; i < 4; ++i) {
        const uint32_t q = uint32_t(quad(w, half, i));
        KVRUN_UNROLL
        for (int b = 0; b < 4; ++b)
          v[16 * half + 4 * i + b] = ds * float(int((q >> (8 * b)) & 63u) - 32);
      }
    }
  }
  /// Σ_j value_j · a_j over the chunk: d · d_a · Σ_halves sc_h · (Σ q_j · xq_j − 32 · Σ xq_j), the
  /// integer sums exact (|Σ| ≤ 16 · 63 · 127 · 127 per half fits an int).
  KVRUN_HD static float dot_q8(const Block& w, const ActQ8& a) {
    int s0 = 0, s1 = 0, x0 = 0;
    KVRUN_UNROLL
    for (int i = 0; i < 4; ++i) {
      s0 = dot4_i8(quad(w, 0, i), a.xq[i], s0);
      s1 = dot4_i8(quad(w, 1, i), a.xq[i + 4], s1);
      x0 = dot4_i8(0x01010101, a.xq[i], x0);
    }
    const int x1 = a.sum - x0;
    return w.d * a.d * float(w.sc0 * (s0 - 32 * x0) + w.sc1 * (s1 - 32 * x1));
  }
};

/// Quant bytes per 32-value block of the split layout's first array (0: the type has none).
inline int split_quant_bytes(DType t) {
  return t == DType::Q4_0 ? QK4_0 / 2 : t == DType::Q8_0 ? QK8_0 : t == DType::Q6_K ? 16 : 0;
}

/// Calls f(reader) with the SplitRows reader of the split-layout bytes at `wd` (device memory
/// for the kernels, host memory for the host tests) of a `t` matrix of `rows` rows of `k`
/// values; returns false (f not called) for a type without a split layout.
template <typename F>
bool with_split_bytes(DType t, const uint8_t* wd, int64_t k, int64_t rows, F&& f) {
  const int64_t nb = k / 32, blocks = nb * rows;
  switch (t) {
    case DType::Q4_0:
    case DType::Q8_0: {
      const auto* q = reinterpret_cast<const uint4*>(wd);
      const auto* d = reinterpret_cast<const uint16_t*>(wd + blocks * split_quant_bytes(t));
      if (t == DType::Q4_0)
        f(SplitRows<DType::Q4_0>{q, d, nb});
      else
        f(SplitRows<DType::Q8_0>{q, d, nb});
      return true;
    }
    case DType::Q6_K: {
      using R = SplitRows<DType::Q6_K>;
      const auto* lo = reinterpret_cast<const uint4*>(wd);
      const auto* hi = reinterpret_cast<const uint2*>(wd + R::hi_offset(blocks));
      const auto* sc = reinterpret_cast<const uint16_t*>(wd + R::sc_offset(blocks));
      const auto* d = reinterpret_cast<const uint16_t*>(wd + R::d_offset(blocks));
      f(R{lo, hi, sc, d, nb});
      return true;
    }
    default:
      return false;
  }
}

/// Writes the split layout of `rows` rows of `k` values of type `t` (q4_0, q8_0, q6_K; GGUF
/// blocks, rows packed) at `src` to `out` (the same byte count; host memory): the layouts
/// SplitRows reads (above). For q6_K, chunk t of a super-block takes its 6-bit values as
/// WeightChunk<Q6_K> reads them.
inline void split_bytes(DType t, const uint8_t* src, int64_t k, int64_t rows, uint8_t* out) {
  if (t == DType::Q6_K) {
    using R = SplitRows<DType::Q6_K>;
    const int64_t supers = k / QK_K * rows, chunks = supers * 8;
    uint8_t* lo = out;
    uint8_t* hi = out + R::hi_offset(chunks);
    uint8_t* sc = out + R::sc_offset(chunks);
    uint8_t* d = out + R::d_offset(chunks);
    for (int64_t s = 0; s < supers; ++s) {
      const auto* b = reinterpret_cast<const block_q6_K*>(src) + s;
      std::memcpy(d + 2 * s, &b->d, 2);
      for (int ct = 0; ct < 8; ++ct) {
        const int64_t c = s * 8 + ct;
        const int t4 = ct % 4;  // the codes as WeightChunk<Q6_K> reads them
        const uint8_t* ql = b->ql + 64 * (ct / 4) + 32 * (t4 & 1);
        const uint8_t* qh = b->qh + 32 * (ct / 4);
        uint8_t q[32];
        for (int u = 0; u < 32; ++u)
          q[u] = uint8_t(((ql[u] >> (t4 < 2 ? 0 : 4)) & 0x0f) | (((qh[u] >> (2 * t4)) & 3) << 4));
        for (int j = 0; j < 16; ++j) lo[c * 16 + j] = uint8_t((q[j] & 15) | (q[j + 16] & 15) << 4);
        for (int h = 0; h < 2; ++h)
          for (int by = 0; by < 4; ++by) {
            uint8_t v = 0;
            for (int i = 0; i < 4; ++i) v |= uint8_t((q[16 * h + 4 * i + by] >> 4) << (2 * i));
            hi[c * 8 + 4 * h + by] = v;
          }
        sc[c * 2] = uint8_t(b->scales[2 * ct]);
        sc[c * 2 + 1] = uint8_t(b->scales[2 * ct + 1]);
      }
    }
    return;
  }
  const int qb = split_quant_bytes(t);
  const size_t block = size_t(qb) + 2;  // q4_0 / q8_0: f16 scale, then the quants
  const int64_t blocks = k / 32 * rows;
  uint8_t* q = out;
  uint8_t* d = out + blocks * qb;
  for (int64_t b = 0; b < blocks; ++b) {
    std::memcpy(d + 2 * b, src + size_t(b) * block, 2);
    std::memcpy(q + b * qb, src + size_t(b) * block + 2, size_t(qb));
  }
}

/// Calls f(reader) with the SplitRows reader of device weight `w` when it was uploaded in the
/// split layout (w.packed set; q4_0, q8_0, q6_K); returns false (f not called) otherwise.
template <typename F>
bool with_split_reader(const Tensor& w, F&& f) {
  if (!w.packed) return false;
  return with_split_bytes(w.type, static_cast<const uint8_t*>(w.data), w.ne[0], w.n_rows(), f);
}

/// Calls f(reader) with the reader of device weight `w`: SplitRows when it was uploaded in the
/// split layout (w.packed set, q4_0 / q8_0), StoredRows otherwise. Returns false for a type
/// without a decoder (the caller reports it).
template <typename F>
bool with_reader(const Tensor& w, F&& f) {
  if (with_split_reader(w, f)) return true;
  const auto* wd = static_cast<const uint8_t*>(w.data);
  return dispatch_weight_type(w.type, [&](auto tag) {
    f(StoredRows<decltype(tag)::value>{wd, size_t(w.nb[1])});
  });
}

/// Values per WeightChunk of type `t` (the granularity of the matmul and get_rows kernels); 0
/// for a type without one.
inline int weight_chunk_values(DType t) {
  int n = 0;
  dispatch_weight_type(t, [&](auto tag) { n = WeightChunk<decltype(tag)::value>::kValues; });
  return n;
}

}  // namespace kvrun::cuda
