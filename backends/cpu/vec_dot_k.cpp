// vec_dot_k.cpp — the q8_K activation quantizer and the K-quant (q2_K … q6_K) and iq4_xs dots
// against it.
//
// Per super-block of 256: unpack the weight quants to int8, form exact integer sums per
// sub-block, weight them by the integer sub-block scales, then one float step:
//   acc += d_w·d_x · Σ_j sc_j·Σ q_w·q_x  −  dmin_w·d_x · Σ_j m_j·Σ q_x
// (the min term only for q2_K/q4_K/q5_K; Σ q_x per 16 comes from q8_K's bsums). Bit layouts
// follow the GGUF K-quant definitions (ggml-like/blocks.h, ggml-like/quants_k.cpp).
#include <algorithm>
#include <cmath>

#include "blocks.h"
#include "cpu/vec_dot.h"
#include "fp16.h"

namespace kvrun::cpu {

namespace {

/// Σ a[i]·b[i] over `len` int8 values.
inline int dot_i8(const int8_t* a, const int8_t* b, int len) {
  int s = 0;
  for (int i = 0; i < len; ++i) s += int(a[i]) * int(b[i]);
  return s;
}

/// q3_K: signed scale of sub-block s (6-bit code minus 32).
inline int scale_q3(int s, const uint8_t* scales) {
  const int low = s < 8 ? (scales[s] & 0x0F) : (scales[s - 8] >> 4);
  const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | (high << 4)) - 32;
}

/// 2-bit fields of q2_K / q3_K: value i sits in byte 32·(i/128) + i%32 at bit 2·((i%128)/32).
inline int low2(const uint8_t* qs, int i) {
  return (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
}

/// Nibble of q4_K / q5_K value i: byte 32·(i/64) + i%32, low nibble for the first 32 of 64.
inline int nibble(const uint8_t* qs, int i) {
  return (qs[32 * (i / 64) + i % 32] >> ((i % 64) < 32 ? 0 : 4)) & 0x0F;
}

/// Σ_j m_j · (Σ q_x over sub-block j) for `n_sub` (16 or 8) sub-blocks of a super-block.
inline int min_sum(const int* m, const block_q8_K& y, int n_sub) {
  int s = 0;
  const int groups = (QK_K / 16) / n_sub;  // bsums per sub-block
  for (int j = 0; j < n_sub; ++j) {
    int bs = 0;
    for (int g = 0; g < groups; ++g) bs += y.bsums[j * groups + g];
    s += m[j] * bs;
  }
  return s;
}

/// The 256 signed values (−32..31) of a q6_K super-block, in element order.
inline void unpack_q6_K(const block_q6_K& blk, int8_t* q) {
  for (int i = 0; i < QK_K; ++i) {
    const int r = i % 128;
    const int lo = (blk.ql[64 * (i / 128) + i % 32 + 32 * ((r / 32) & 1)] >> (r < 64 ? 0 : 4));
    const int hi = (blk.qh[32 * (i / 128) + i % 32] >> (2 * (r / 32))) & 3;
    q[i] = int8_t(((lo & 0x0F) | (hi << 4)) - 32);
  }
}

/// Σ_j sc_j · Σ q·q_x over `n_sub` sub-blocks of QK_K / n_sub values.
inline int scaled_sum(const int8_t* q, const int8_t* qx, const int* sc, int n_sub) {
  const int len = QK_K / n_sub;
  int s = 0;
  for (int j = 0; j < n_sub; ++j) s += sc[j] * dot_i8(q + j * len, qx + j * len, len);
  return s;
}

/// q4_K / q5_K main term in llama.cpp's AVX2 order: per super-block, 8 integer lanes
/// (lane i = Σ over the 8 sub-blocks of sc_j · Σ_{e=4i..4i+3} q·q_x of that sub-block), each
/// lane converted and fused-multiply-added with d into a float lane.
inline void k4_lanes_fma(const int8_t* q, const int8_t* qx, const int* sc, float d, float* acc) {
  int lane[8] = {};
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 8; ++i) {
      int s = 0;
      for (int e = 32 * j + 4 * i; e < 32 * j + 4 * i + 4; ++e) s += int(q[e]) * int(qx[e]);
      lane[i] += sc[j] * s;
    }
  for (int i = 0; i < 8; ++i) acc[i] = std::fma(d, float(lane[i]), acc[i]);
}

/// Sum of 8 lanes as a 256-bit horizontal add does it: halves, then pairs.
inline float fold8(const float* v) {
  float t[4];
  for (int i = 0; i < 4; ++i) t[i] = v[i + 4] + v[i];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

}  // namespace

void act_from_float_q8_K(const float* src, void* dst, int64_t n) {
  block_q8_K* y = static_cast<block_q8_K*>(dst);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float* x = src + b * QK_K;
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < QK_K; ++i) {
      const float ax = std::fabs(x[i]);
      if (ax > amax) {
        amax = ax;
        max = x[i];
      }
    }
    if (amax == 0.0f) {
      y[b] = block_q8_K{};
      continue;
    }
    const float iscale = -127.0f / max;
    for (int i = 0; i < QK_K; ++i)
      y[b].qs[i] = int8_t(std::min(127, int(std::nearbyint(iscale * x[i]))));
    for (int s = 0; s < QK_K / 16; ++s) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[b].qs[16 * s + l];
      y[b].bsums[s] = int16_t(sum);
    }
    y[b].d = 1.0f / iscale;
  }
}

float vec_dot_q2_K_q8_K(int64_t n, const void* w, const void* x) {
  const auto* bw = static_cast<const block_q2_K*>(w);
  const auto* bx = static_cast<const block_q8_K*>(x);
  float acc = 0.0f;
  int8_t q[QK_K];
  int sc[16], m[16];
  for (int64_t b = 0; b < n / QK_K; ++b) {
    for (int i = 0; i < QK_K; ++i) q[i] = int8_t(low2(bw[b].qs, i));
    for (int j = 0; j < 16; ++j) {
      sc[j] = bw[b].scales[j] & 0x0F;
      m[j] = bw[b].scales[j] >> 4;
    }
    const float dx = bx[b].d;
    acc += dx * fp16_lut(bw[b].d) * float(scaled_sum(q, bx[b].qs, sc, 16)) -
           dx * fp16_lut(bw[b].dmin) * float(min_sum(m, bx[b], 16));
  }
  return acc;
}

float vec_dot_q3_K_q8_K(int64_t n, const void* w, const void* x) {
  const auto* bw = static_cast<const block_q3_K*>(w);
  const auto* bx = static_cast<const block_q8_K*>(x);
  float acc = 0.0f;
  int8_t q[QK_K];
  int sc[16];
  for (int64_t b = 0; b < n / QK_K; ++b) {
    for (int i = 0; i < QK_K; ++i) {
      const int hbit = 4 * (i / 128) + (i % 128) / 32;
      const bool high = (bw[b].hmask[i % 32] >> hbit) & 1;
      q[i] = int8_t(low2(bw[b].qs, i) - (high ? 0 : 4));
    }
    for (int j = 0; j < 16; ++j) sc[j] = scale_q3(j, bw[b].scales);
    acc += fp16_lut(bw[b].d) * bx[b].d * float(scaled_sum(q, bx[b].qs, sc, 16));
  }
  return acc;
}

float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* x) {
  // Order of llama.cpp's AVX2 kernel: mins in 4 float lanes (lane k = m_2k·Σq_x(2k) +
  // m_2k+1·Σq_x(2k+1)), the main term in 8 lanes (k4_lanes_fma).
  const auto* bw = static_cast<const block_q4_K*>(w);
  const auto* bx = static_cast<const block_q8_K*>(x);
  float acc[8] = {}, acc_m[4] = {};
  int8_t q[QK_K];
  int sc[8], m[8];
  for (int64_t b = 0; b < n / QK_K; ++b) {
    for (int i = 0; i < QK_K; ++i) q[i] = int8_t(nibble(bw[b].qs, i));
    for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, bw[b].scales, &sc[j], &m[j]);
    const float d = bx[b].d * fp16_lut(bw[b].d);
    const float dmin = -bx[b].d * fp16_lut(bw[b].dmin);
    for (int k = 0; k < 4; ++k) {
      const int s0 = bx[b].bsums[4 * k] + bx[b].bsums[4 * k + 1];
      const int s1 = bx[b].bsums[4 * k + 2] + bx[b].bsums[4 * k + 3];
      acc_m[k] = std::fma(dmin, float(m[2 * k] * s0 + m[2 * k + 1] * s1), acc_m[k]);
    }
    k4_lanes_fma(q, bx[b].qs, sc, d, acc);
  }
  const float m01 = acc_m[0] + acc_m[2], m23 = acc_m[1] + acc_m[3];
  return fold8(acc) + (m01 + m23);
}

namespace {

/// The 256 5-bit values of a q5_K super-block: the nibble and, from qh, the fifth bit.
inline void q5_K_values(const block_q5_K& b, int8_t* q) {
  for (int i = 0; i < QK_K; ++i)
    q[i] = int8_t(nibble(b.qs, i) | (((b.qh[i % 32] >> (i / 32)) & 1) << 4));
}

/// The fast-order dot (vec_dot.h) of a q4_K or q5_K row, values(block, q) giving a super-block's
/// 256 unsigned values: per super-block acc = fma(d_x·d_w, float(main), acc), then
/// acc = fma(−d_x·dmin_w, float(min), acc).
template <typename Block, typename Values>
float fast_dot_k4(int64_t n, const void* w, const void* x, Values values) {
  const auto* bw = static_cast<const Block*>(w);
  const auto* bx = static_cast<const block_q8_K*>(x);
  float acc = 0.0f;
  int8_t q[QK_K];
  int sc[8], m[8];
  for (int64_t b = 0; b < n / QK_K; ++b) {
    values(bw[b], q);
    for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, bw[b].scales, &sc[j], &m[j]);
    const float d = bx[b].d * fp16_lut(bw[b].d);
    const float dmin = -bx[b].d * fp16_lut(bw[b].dmin);
    acc = std::fma(d, float(scaled_sum(q, bx[b].qs, sc, 8)), acc);
    acc = std::fma(dmin, float(min_sum(m, bx[b], 8)), acc);
  }
  return acc;
}

}  // namespace

float fast_dot_q4_K_q8_K(int64_t n, const void* w, const void* x) {
  return fast_dot_k4<block_q4_K>(n, w, x, [](const block_q4_K& b, int8_t* q) {
    for (int i = 0; i < QK_K; ++i) q[i] = int8_t(nibble(b.qs, i));
  });
}

float fast_dot_q5_K_q8_K(int64_t n, const void* w, const void* x) {
  return fast_dot_k4<block_q5_K>(n, w, x, q5_K_values);
}

float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* x) {
  // Order of llama.cpp's AVX2 kernel: the min term in one f32 sum, the main term in 8 lanes.
  const auto* bw = static_cast<const block_q5_K*>(w);
  const auto* bx = static_cast<const block_q8_K*>(x);
  float acc[8] = {}, summs = 0.0f;
  int8_t q[QK_K];
  int sc[8], m[8];
  for (int64_t b = 0; b < n / QK_K; ++b) {
    q5_K_values(bw[b], q);
    for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, bw[b].scales, &sc[j], &m[j]);
    const float d = bx[b].d * fp16_lut(bw[b].d);
    const float dmin = -bx[b].d * fp16_lut(bw[b].dmin);
    summs += dmin * float(min_sum(m, bx[b], 8));
    k4_lanes_fma(q, bx[b].qs, sc, d, acc);
  }
  return fold8(acc) + summs;
}

float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* x) {
  // Order of llama.cpp's AVX2 kernel (ggml_vec_dot_q6_K_q8_K): per super-block 8 integer lanes,
  // lane l = Σ over the eight 32-value groups of sc · q·q_x for values 4l … 4l+3 of the group
  // (sc the scale of the value's 16-value sub-block); each lane converted and fused-multiply-
  // added with d = d_x · d_w into a float lane; the 8 lanes folded at the end.
  const auto* bw = static_cast<const block_q6_K*>(w);
  const auto* bx = static_cast<const block_q8_K*>(x);
  float acc[8] = {};
  int8_t q[QK_K];
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const block_q6_K& blk = bw[b];
    unpack_q6_K(blk, q);
    int lane[8] = {};
    for (int e = 0; e < QK_K; ++e)
      lane[(e % 32) / 4] += int(blk.scales[e / 16]) * int(q[e]) * int(bx[b].qs[e]);
    const float d = bx[b].d * fp16_lut(blk.d);
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, float(lane[l]), acc[l]);
  }
  return fold8(acc);
}

float fast_dot_q6_K_q8_K(int64_t n, const void* w, const void* x) {
  const auto* bw = static_cast<const block_q6_K*>(w);
  const auto* bx = static_cast<const block_q8_K*>(x);
  float acc = 0.0f;
  int8_t q[QK_K];
  int sc[16];
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const block_q6_K& blk = bw[b];
    unpack_q6_K(blk, q);
    for (int j = 0; j < 16; ++j) sc[j] = blk.scales[j];
    acc = std::fma(bx[b].d * fp16_lut(blk.d), float(scaled_sum(q, bx[b].qs, sc, 16)), acc);
  }
  return acc;
}

float vec_dot_iq4_xs_q8_K(int64_t n, const void* w, const void* x) {
  // q4_K's main term (k4_lanes_fma) with the iq4_nl levels as the integers and the signed
  // sub-block scales ls_j − 32; no min term.
  const auto* bw = static_cast<const block_iq4_xs*>(w);
  const auto* bx = static_cast<const block_q8_K*>(x);
  float acc[8] = {};
  int8_t q[QK_K];
  int sc[8];
  for (int64_t b = 0; b < n / QK_K; ++b) {
    for (int j = 0; j < 8; ++j) {
      sc[j] = iq4_xs_scale_code(bw[b], j) - 32;
      for (int i = 0; i < 16; ++i) {
        q[32 * j + i] = kvalues_iq4nl[bw[b].qs[16 * j + i] & 0x0F];
        q[32 * j + i + 16] = kvalues_iq4nl[bw[b].qs[16 * j + i] >> 4];
      }
    }
    k4_lanes_fma(q, bx[b].qs, sc, bx[b].d * fp16_lut(bw[b].d), acc);
  }
  return fold8(acc);
}

}  // namespace kvrun::cpu
