// split_rows.cuh — the split layouts the CUDA backend uploads q4_0, q8_0, q6_K (and, with
// KVRUN_CUDA_SPLIT_K=1, q4_K and q5_K) matrices in (matmul.h split_weight), their readers
// (SplitRows: 16-byte loads of the quants, and the integer dot product against activations
// quantized to int8 blocks of 32, ActQ8) and the host-side rearrangement (split_bytes). Host and
// device code alike (KVRUN_HD): the host-side codec tests run the readers on the CPU.
#pragma once

#include <cstdint>
#include <cstring>

#include "blocks.h"
#include "cuda/decode.cuh"
#include "dtype.h"

namespace kvrun::cuda {

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

/// q4_K / q5_K in the split layout (split_weight in matmul.cu), per 32-value chunk c of a row
/// (sub-block j = c % 8 of super-block c / 8) with q_i its 4-bit (q4_K) or 5-bit (q5_K) value:
///   lo [chunks] 16 bytes: byte i = (q_i & 15) | (q_{i+16} & 15) << 4 (q4_0's nibble order);
///   hi [chunks] (q5_K) 4 bytes, a uint32 whose bit 8b + 2i + h is q_{16h+4i+b} >> 4, so that
///      word i of lo and (hi >> (2i + h)) & 0x01010101 give values 16h + 4i … as whole bytes;
///   sc [chunks / 8] the super-block's 12 bytes of packed 6-bit scales and mins, as stored;
///   dm [chunks / 8] its f16 d and dmin, one uint32 (d in the low half).
/// 144 (q4_K) and 176 (q5_K) bytes per 256 values, as stored; one 16-byte load (and one 4-byte
/// load) per chunk instead of the stored block's byte loads. Values are d · sc · q − dmin · m,
/// the products formed as WeightChunk<Q4_K / Q5_K> forms them.
template <bool Q5>
struct SplitRowsK {
  static constexpr int kValues = 32;
  /// Byte offsets of the hi (q5_K), sc and dm arrays in the split bytes of `chunks` chunks.
  static constexpr int64_t hi_offset(int64_t chunks) { return chunks * 16; }
  static constexpr int64_t sc_offset(int64_t chunks) { return chunks * (Q5 ? 20 : 16); }
  static constexpr int64_t dm_offset(int64_t chunks) { return sc_offset(chunks) + chunks / 8 * 12; }
  const uint4* lo;
  const uint32_t* hi;  ///< q5_K only (null for q4_K)
  const uint8_t* sc;
  const uint32_t* dm;
  int64_t nb;  ///< chunks (32 values) per row
  struct Block {
    uint4 lo;
    uint32_t hi;
    float dl, ml;  ///< d · sc and dmin · m of the chunk's sub-block
  };
  KVRUN_HD Block load(int64_t r, int64_t c) const {
    const int64_t b = r * nb + c, s = b / 8;
    int scale, min;
    k4_scale_min(int(b % 8), sc + 12 * s, scale, min);
    const uint32_t w = dm[s];
    const float d = f16_to_f32(uint16_t(w & 0xffffu)), dmin = f16_to_f32(uint16_t(w >> 16));
    uint32_t h = 0;
    if constexpr (Q5) h = hi[b];
    return {lo[b], h, d * float(scale), dmin * float(min)};
  }
  /// Values 16·half + 4i … + 3 as four bytes (0 … 15, or 0 … 31 for q5_K).
  KVRUN_HD static uint32_t quad(const Block& w, int half, int i) {
    const uint32_t l[4] = {w.lo.x, w.lo.y, w.lo.z, w.lo.w};
    uint32_t q = (l[i] >> (4 * half)) & 0x0f0f0f0fu;
    if constexpr (Q5) q |= ((w.hi >> (2 * i + half)) & 0x01010101u) << 4;
    return q;
  }
  KVRUN_HD void decode(int64_t r, int64_t c, float* v) const {
    const Block w = load(r, c);
    KVRUN_UNROLL
    for (int half = 0; half < 2; ++half) {
      KVRUN_UNROLL
      for (int i = 0; i < 4; ++i) {
        const uint32_t q = quad(w, half, i);
        KVRUN_UNROLL
        for (int b = 0; b < 4; ++b)
          v[16 * half + 4 * i + b] = w.dl * float((q >> (8 * b)) & 0xffu) - w.ml;
      }
    }
  }
  /// Σ_j value_j · a_j over the chunk: d_a · (dl · Σ q_j · xq_j − ml · Σ xq_j), the integer sums
  /// exact. (The CPU quantizes x to q8_K for these types, one scale per 256 values: the sums
  /// differ from the CPU's by that rounding, as q6_K's do.)
  KVRUN_HD static float dot_q8(const Block& w, const ActQ8& a) {
    int sum = 0;
    KVRUN_UNROLL
    for (int i = 0; i < 4; ++i) {
      sum = dot4_i8(int(quad(w, 0, i)), a.xq[i], sum);
      sum = dot4_i8(int(quad(w, 1, i)), a.xq[i + 4], sum);
    }
    return a.d * (w.dl * float(sum) - w.ml * float(a.sum));
  }
};

template <>
struct SplitRows<DType::Q4_K> : SplitRowsK<false> {};
template <>
struct SplitRows<DType::Q5_K> : SplitRowsK<true> {};

/// Quant bytes per 32-value block of the split layout's first array (0: the type has none).
inline int split_quant_bytes(DType t) {
  return t == DType::Q4_0                                             ? QK4_0 / 2
         : t == DType::Q8_0                                           ? QK8_0
         : (t == DType::Q6_K || t == DType::Q4_K || t == DType::Q5_K) ? 16
                                                                      : 0;
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
    case DType::Q4_K:
    case DType::Q5_K: {
      auto make = [&](auto rd) {
        using R = decltype(rd);
        rd.lo = reinterpret_cast<const uint4*>(wd);
        rd.hi = t == DType::Q5_K ? reinterpret_cast<const uint32_t*>(wd + R::hi_offset(blocks))
                                 : nullptr;
        rd.sc = wd + R::sc_offset(blocks);
        rd.dm = reinterpret_cast<const uint32_t*>(wd + R::dm_offset(blocks));
        rd.nb = nb;
        f(rd);
      };
      if (t == DType::Q4_K)
        make(SplitRows<DType::Q4_K>{});
      else
        make(SplitRows<DType::Q5_K>{});
      return true;
    }
    default:
      return false;
  }
}

/// Writes the split layout of `rows` rows of `k` values of type `t` (q4_0, q8_0, q6_K, q4_K, q5_K;
/// GGUF blocks, rows packed) at `src` to `out` (the same byte count; host memory): the layouts
/// SplitRows reads (above). For q6_K, chunk t of a super-block takes its 6-bit values as
/// WeightChunk<Q6_K> reads them.
inline void split_bytes(DType t, const uint8_t* src, int64_t k, int64_t rows, uint8_t* out) {
  if (t == DType::Q4_K || t == DType::Q5_K) {  // SplitRowsK's arrays
    const bool q5 = t == DType::Q5_K;
    const int64_t supers = k / QK_K * rows, chunks = supers * 8;
    const int64_t hi_off = SplitRowsK<true>::hi_offset(chunks);
    const int64_t sc_off =
        q5 ? SplitRowsK<true>::sc_offset(chunks) : SplitRowsK<false>::sc_offset(chunks);
    const int64_t dm_off = sc_off + supers * 12;
    const size_t block = q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    for (int64_t s = 0; s < supers; ++s) {
      const uint8_t* b = src + size_t(s) * block;  // d, dmin, scales[12], (qh[32]), qs[128]
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (q5 ? 48 : 16);
      std::memcpy(out + dm_off + 4 * s, b, 4);
      std::memcpy(out + sc_off + 12 * s, b + 4, 12);
      for (int j = 0; j < 8; ++j) {
        const int64_t c = s * 8 + j;
        uint8_t q[32];
        for (int i = 0; i < 32; ++i)
          q[i] = uint8_t(((qs[32 * (j / 2) + i] >> (4 * (j % 2))) & 0x0f) |
                         (q5 ? ((qh[i] >> j) & 1) << 4 : 0));
        for (int i = 0; i < 16; ++i) out[c * 16 + i] = uint8_t((q[i] & 15) | (q[i + 16] & 15) << 4);
        if (!q5) continue;
        uint32_t h = 0;  // bit 8b + 2i + half: value 16·half + 4i + b's fifth bit
        for (int half = 0; half < 2; ++half)
          for (int i = 0; i < 4; ++i)
            for (int bb = 0; bb < 4; ++bb)
              h |= uint32_t(q[16 * half + 4 * i + bb] >> 4) << (8 * bb + 2 * i + half);
        std::memcpy(out + hi_off + 4 * c, &h, 4);
      }
    }
    return;
  }
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

}  // namespace kvrun::cuda
