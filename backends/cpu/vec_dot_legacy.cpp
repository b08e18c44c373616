// vec_dot_legacy.cpp — q8_0 / q8_1 activation quantizers and the dots of the 32-element block
// formats (q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, mxfp4) against them.
//
// Per block: exact integer sums of the products in 8 lanes of 4 consecutive elements, then per
// lane one fused multiply-add with the block scale product (mxfp4: half its E8M0 scale, with
// the doubled E2M1 levels as the integers):
//   lane[i] = fma(d_w·d_x, Σ_{e=4i..4i+3} q_w·q_x, lane[i])
// and at the end the 8 lanes are folded (i+4, then i+2, then i+1). Offset formats (× q8_1) add
// Σ m_w·s_x in a separate f32 sum (s_x = d_x·Σq_x is stored in the q8_1 block). This is the
// order of llama.cpp's AVX2/AVX-512 kernels (ggml_vec_dot_q8_0_q8_0 and llamafile's
// tinyBLAS_Q0_AVX), which the reference fixtures were made with; matching it keeps the rounding
// of the next activation quantization identical. Layouts: ggml-like/blocks.h.
#include <cmath>
#include <cstring>

#include "blocks.h"
#include "cpu/vec_dot.h"
#include "fp16.h"

namespace kvrun::cpu {

namespace {

/// Low nibbles are elements 0..15, high nibbles elements 16..31 (GGUF legacy layout).
inline void unpack_nibbles(const uint8_t* qs, int offset, int8_t* q) {
  for (int i = 0; i < 16; ++i) {
    q[i] = int8_t((qs[i] & 0x0F) - offset);
    q[i + 16] = int8_t((qs[i] >> 4) - offset);
  }
}

/// 5-bit values: nibble plus bit i of the little-endian 32-bit qh.
inline void unpack_5bit(const uint8_t* qs, const uint8_t* qh, int offset, int8_t* q) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  for (int i = 0; i < 16; ++i) {
    q[i] = int8_t(((qs[i] & 0x0F) | (((h >> i) & 1) << 4)) - offset);
    q[i + 16] = int8_t(((qs[i] >> 4) | (((h >> (i + 16)) & 1) << 4)) - offset);
  }
}

/// lane[i] = fma(d, Σ_{e=4i..4i+3} a[e]·b[e], lane[i]) for the 8 lanes of one block.
inline void lanes_fma(const int8_t* a, const int8_t* b, float d, float* lane) {
  for (int i = 0; i < 8; ++i) {
    int s = 0;
    for (int e = 4 * i; e < 4 * i + 4; ++e) s += int(a[e]) * int(b[e]);
    lane[i] = std::fma(d, float(s), lane[i]);
  }
}

/// Sum of 8 lanes as a 256-bit horizontal add does it: halves, then pairs.
inline float fold8(const float* v) {
  float t[4];
  for (int i = 0; i < 4; ++i) t[i] = v[i + 4] + v[i];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

/// Max |x| of 32 values and the quants round-half-even(x·127/max); returns max|x|.
inline float quantize_block_32(const float* x, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  for (int i = 0; i < 32; ++i) q[i] = int8_t(std::nearbyint(x[i] * id));
  return amax;
}

/// Dot of symmetric blocks against q8_0; `unpack` fills 32 signed quants of block `b` and
/// returns its scale.
template <typename Block, typename Unpack>
float dot_sym_q8_0(int64_t n, const void* w, const void* x, Unpack unpack) {
  const Block* bw = static_cast<const Block*>(w);
  const block_q8_0* bx = static_cast<const block_q8_0*>(x);
  float lane[8] = {};
  int8_t q[32];
  for (int64_t b = 0; b < n / 32; ++b) {
    const float dw = unpack(bw[b], q);
    lanes_fma(q, bx[b].qs, dw * fp16_lut(bx[b].d), lane);
  }
  return fold8(lane);
}

/// Dot of offset blocks (value = d·q + m) against q8_1.
template <typename Block, typename Unpack>
float dot_affine_q8_1(int64_t n, const void* w, const void* x, Unpack unpack) {
  const Block* bw = static_cast<const Block*>(w);
  const block_q8_1* bx = static_cast<const block_q8_1*>(x);
  float lane[8] = {};
  float summs = 0.0f;
  int8_t q[32];
  for (int64_t b = 0; b < n / 32; ++b) {
    unpack(bw[b], q);
    summs += fp16_lut(bw[b].m) * fp16_lut(bx[b].s);
    lanes_fma(q, bx[b].qs, fp16_lut(bw[b].d) * fp16_lut(bx[b].d), lane);
  }
  return fold8(lane) + summs;
}

}  // namespace

void act_from_float_q8_0(const float* src, void* dst, int64_t n) {
  block_q8_0* y = static_cast<block_q8_0*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float amax = quantize_block_32(src + 32 * b, y[b].qs);
    y[b].d = f32_to_fp16(amax / 127.0f);
  }
}

void act_from_float_q8_1(const float* src, void* dst, int64_t n) {
  block_q8_1* y = static_cast<block_q8_1*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float amax = quantize_block_32(src + 32 * b, y[b].qs);
    const float d = amax / 127.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) sum += y[b].qs[i];
    y[b].d = f32_to_fp16(d);
    y[b].s = f32_to_fp16(d * float(sum));
  }
}

float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* x) {
  return dot_sym_q8_0<block_q4_0>(n, w, x, [](const block_q4_0& b, int8_t* q) {
    unpack_nibbles(b.qs, 8, q);
    return fp16_lut(b.d);
  });
}

float repack_dot_q4_0_q8_0(int64_t n, const void* w, const void* x) {
  const block_q4_0* bw = static_cast<const block_q4_0*>(w);
  const block_q8_0* bx = static_cast<const block_q8_0*>(x);
  float acc = 0.0f;
  int8_t q[32];
  for (int64_t b = 0; b < n / 32; ++b) {
    unpack_nibbles(bw[b].qs, 8, q);
    int32_t isum = 0;
    for (int i = 0; i < 32; ++i) isum += int32_t(q[i]) * int32_t(bx[b].qs[i]);
    acc = std::fma(float(isum), fp16_lut(bw[b].d) * fp16_lut(bx[b].d), acc);
  }
  return acc;
}

float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* x) {
  return dot_sym_q8_0<block_q5_0>(n, w, x, [](const block_q5_0& b, int8_t* q) {
    unpack_5bit(b.qs, b.qh, 16, q);
    return fp16_lut(b.d);
  });
}

float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* x) {
  return dot_sym_q8_0<block_q8_0>(n, w, x, [](const block_q8_0& b, int8_t* q) {
    std::memcpy(q, b.qs, 32);
    return fp16_lut(b.d);
  });
}

float fast_dot_q8_0_q8_0(int64_t n, const void* w, const void* x) {
  const auto* bw = static_cast<const block_q8_0*>(w);
  const auto* bx = static_cast<const block_q8_0*>(x);
  float acc = 0.0f;
  for (int64_t b = 0; b < n / 32; ++b) {
    int isum = 0;
    for (int e = 0; e < 32; ++e) isum += int(bw[b].qs[e]) * int(bx[b].qs[e]);
    acc = std::fma(float(isum), fp16_lut(bw[b].d) * fp16_lut(bx[b].d), acc);
  }
  return acc;
}

float fast_dot_mxfp4_q8_0(int64_t n, const void* w, const void* x) {
  const auto* bw = static_cast<const block_mxfp4*>(w);
  const auto* bx = static_cast<const block_q8_0*>(x);
  float acc = 0.0f;
  for (int64_t b = 0; b < n / 32; ++b) {
    int isum = 0;
    for (int e = 0; e < 16; ++e)
      isum += kvalues_mxfp4[bw[b].qs[e] & 0x0F] * int(bx[b].qs[e]) +
              kvalues_mxfp4[bw[b].qs[e] >> 4] * int(bx[b].qs[e + 16]);
    acc = std::fma(float(isum), mxfp4_half_scale(bw[b].e) * fp16_lut(bx[b].d), acc);
  }
  return acc;
}

float vec_dot_iq4_nl_q8_0(int64_t n, const void* w, const void* x) {
  return dot_sym_q8_0<block_iq4_nl>(n, w, x, [](const block_iq4_nl& b, int8_t* q) {
    for (int i = 0; i < 16; ++i) {
      q[i] = kvalues_iq4nl[b.qs[i] & 0x0F];
      q[i + 16] = kvalues_iq4nl[b.qs[i] >> 4];
    }
    return fp16_lut(b.d);
  });
}

float vec_dot_mxfp4_q8_0(int64_t n, const void* w, const void* x) {
  // Doubled E2M1 levels times half the E8M0 scale (blocks.h): integer products as iq4_nl's.
  return dot_sym_q8_0<block_mxfp4>(n, w, x, [](const block_mxfp4& b, int8_t* q) {
    for (int i = 0; i < 16; ++i) {
      q[i] = kvalues_mxfp4[b.qs[i] & 0x0F];
      q[i + 16] = kvalues_mxfp4[b.qs[i] >> 4];
    }
    return mxfp4_half_scale(b.e);
  });
}

float vec_dot_q4_1_q8_1(int64_t n, const void* w, const void* x) {
  return dot_affine_q8_1<block_q4_1>(
      n, w, x, [](const block_q4_1& b, int8_t* q) { unpack_nibbles(b.qs, 0, q); });
}

float vec_dot_q5_1_q8_1(int64_t n, const void* w, const void* x) {
  return dot_affine_q8_1<block_q5_1>(
      n, w, x, [](const block_q5_1& b, int8_t* q) { unpack_5bit(b.qs, b.qh, 0, q); });
}

}  // namespace kvrun::cpu
