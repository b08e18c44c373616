// weight_decode.cuh — per-type decoders of a weight row in chunks, for the matmul and
// get_rows kernels. WeightChunk<T>::kValues consecutive values of a row are decoded by one call;
// chunks are read with 16-byte loads where the block layout keeps them 16-byte aligned (f32,
// f16, bf16 and the quants of q4_K / q5_K), with 2-byte or byte loads otherwise (q8_0, q4_0 and
// q6_K blocks are 34, 18 and 210 bytes, so their blocks are not 16-byte aligned in a row).
// Values equal the scalar reference decoders (quants_float/legacy/k.cpp) up to the rounding
// of the contracted d·q − m of the K-quants.
#pragma once

#include <cstdint>
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

/// Quant bytes per block of the split layout (0: the type has none).
inline int split_quant_bytes(DType t) {
  return t == DType::Q4_0 ? QK4_0 / 2 : t == DType::Q8_0 ? QK8_0 : 0;
}

/// Calls f(reader) with the SplitRows reader of device weight `w` when it was uploaded in the
/// split layout (w.packed set, q4_0 / q8_0); returns false (f not called) otherwise.
template <typename F>
bool with_split_reader(const Tensor& w, F&& f) {
  if (!w.packed || split_quant_bytes(w.type) == 0) return false;
  const auto* wd = static_cast<const uint8_t*>(w.data);
  const int64_t nb = w.ne[0] / 32, blocks = nb * w.n_rows();
  const auto* q = reinterpret_cast<const uint4*>(wd);
  const auto* d = reinterpret_cast<const uint16_t*>(wd + blocks * split_quant_bytes(w.type));
  if (w.type == DType::Q4_0)
    f(SplitRows<DType::Q4_0>{q, d, nb});
  else
    f(SplitRows<DType::Q8_0>{q, d, nb});
  return true;
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
