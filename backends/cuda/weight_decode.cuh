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
#include "cuda/split_rows.cuh"
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

/// Calls f(reader) with the SplitRows reader of device weight `w` when it was uploaded in the
/// split layout (w.packed set; q4_0, q8_0, q6_K, q4_K, q5_K); returns false (f not called)
/// otherwise.
template <typename F>
bool with_split_reader(const Tensor& w, F&& f) {
  if (!w.packed) return false;
  return with_split_bytes(w.type, static_cast<const uint8_t*>(w.data), w.ne[0], w.n_rows(), f);
}

/// Calls f(reader) with the reader of device weight `w`: SplitRows when it was uploaded in the
/// split layout (w.packed set), StoredRows otherwise. Returns false for a type
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
