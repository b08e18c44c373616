// kernels_neon.cpp — the AArch64 NEON kernels of CpuLevel::neon (declared in kernels_neon.h).
// Not written from llama.cpp's code; the orders are those the scalar reference documents
// (vec_dot.h, vec_dot_legacy.cpp, vec_dot_float.cpp).
//
// Every kernel computes the same floats as its scalar reference, bit for bit:
//   * the int8 products of the quantized dots are exact in any order; each of the 8 lanes of a
//     q8_0-activation block dot is the sum of 4 consecutive products (two 128-bit registers of
//     4 int32 lanes), converted and fused-multiply-added with the block scale product as the
//     scalar lanes_fma does, and the lanes are folded as fold8 does (halves, then pairs);
//   * the f32/f16 dots keep the scalar code's 16 lanes as four 128-bit registers, with the same
//     fused multiply-adds (an f16·f16 product is exact in f32, so fusing changes nothing there)
//     and the same fold16; the tails are the scalar code's;
//   * the file is built with -ffp-contract=off (as every AArch64 translation unit of kvrun, see
//     CMakeLists.txt) so that no a·b + c outside an explicit fma becomes fused.
// Only baseline Armv8-A Advanced SIMD is used (no dot-product extension), so the level runs on
// every AArch64 CPU.
#include "cpu/arm/kernels_neon.h"

#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "blocks.h"
#include "cpu/fast_exp.h"
#include "fp16.h"

namespace kvrun::cpu::neon {

namespace {

/// 8 int32 lanes as two registers: lane i (0..7) of the scalar code is lo[i] or hi[i − 4].
struct I8Lanes {
  int32x4_t lo, hi;
};

/// The 8 lane sums of one 32-element block: lane i = Σ_{e=4i..4i+3} a[e]·b[e] (exact: each
/// int8 product fits int16, their sums int32).
inline I8Lanes block_lanes(int8x16_t a0, int8x16_t a1, int8x16_t b0, int8x16_t b1) {
  auto quad_sums = [](int8x16_t a, int8x16_t b) {
    const int32x4_t p0 = vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)));  // pairs 0..7
    const int32x4_t p1 = vpaddlq_s16(vmull_high_s8(a, b));                       // pairs 8..15
    return vpaddq_s32(p0, p1);  // sums of elements 0..3, 4..7, 8..11, 12..15
  };
  return {quad_sums(a0, b0), quad_sums(a1, b1)};
}

/// lane = fma(d, float(s), lane) for the 8 lanes (the scalar lanes_fma).
inline void lanes_fma(const I8Lanes& s, float d, float32x4_t& lo, float32x4_t& hi) {
  lo = vfmaq_n_f32(lo, vcvtq_f32_s32(s.lo), d);
  hi = vfmaq_n_f32(hi, vcvtq_f32_s32(s.hi), d);
}

/// (t0 + t2) + (t1 + t3) of a 4-lane register, the last two steps of the scalar folds.
inline float fold4(float32x4_t t) {
  const float32x4_t u = vaddq_f32(t, vextq_f32(t, t, 2));  // t0+t2, t1+t3, …
  return vgetq_lane_f32(u, 0) + vgetq_lane_f32(u, 1);
}

/// The scalar fold8: t[i] = v[i+4] + v[i], then (t0 + t2) + (t1 + t3).
inline float fold8(float32x4_t lo, float32x4_t hi) { return fold4(vaddq_f32(hi, lo)); }

/// 16 float lanes: lane l is v[l / 4][l % 4].
struct F16Lanes {
  float32x4_t v[4];
};

inline F16Lanes zero16() {
  const float32x4_t z = vdupq_n_f32(0.0f);
  return {{z, z, z, z}};
}

inline F16Lanes fma16(F16Lanes acc, const F16Lanes& a, const F16Lanes& b) {
  for (int i = 0; i < 4; ++i) acc.v[i] = vfmaq_f32(acc.v[i], a.v[i], b.v[i]);
  return acc;
}

inline F16Lanes add16(F16Lanes a, const F16Lanes& b) {
  for (int i = 0; i < 4; ++i) a.v[i] = vaddq_f32(a.v[i], b.v[i]);
  return a;
}

/// The scalar fold16: s[i] = v[i+8] + v[i] (8 lanes), t[i] = s[i+4] + s[i], then fold4's pairs.
inline float fold16(const F16Lanes& a) {
  const float32x4_t s_lo = vaddq_f32(a.v[2], a.v[0]);
  const float32x4_t s_hi = vaddq_f32(a.v[3], a.v[1]);
  return fold4(vaddq_f32(s_hi, s_lo));
}

inline F16Lanes load16_f32(const float* p) {
  return {{vld1q_f32(p), vld1q_f32(p + 4), vld1q_f32(p + 8), vld1q_f32(p + 12)}};
}

/// 16 binary16 values as floats (exact).
inline F16Lanes load16_f16(const uint16_t* p) {
  F16Lanes r;
  for (int i = 0; i < 4; ++i) r.v[i] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p + 4 * i)));
  return r;
}

/// ggml_vec_dot order over the first np (a multiple of 64) elements: 4 accumulators of 16
/// lanes, acc0 + acc2 and acc1 + acc3, then their sum, folded.
template <typename Load>
inline float vec_body(int64_t np, Load load) {
  F16Lanes acc[4] = {zero16(), zero16(), zero16(), zero16()};
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j) acc[j] = fma16(acc[j], load(0, i + 16 * j), load(1, i + 16 * j));
  return fold16(add16(add16(acc[0], acc[2]), add16(acc[1], acc[3])));
}

/// tinyBLAS order: one 16-lane accumulator over n (a multiple of 16), folded.
template <typename Load>
inline float gemm_body(int64_t n, Load load) {
  F16Lanes acc = zero16();
  for (int64_t i = 0; i < n; i += 16) acc = fma16(acc, load(0, i), load(1, i));
  return fold16(acc);
}

/// The 32 signed quants of a q4_0 block: low nibbles are elements 0..15, high 16..31, minus 8.
inline void q4_0_quants(const block_q4_0& b, int8x16_t& q0, int8x16_t& q1) {
  const uint8x16_t v = vld1q_u8(b.qs);
  const int8x16_t eight = vdupq_n_s8(8);
  q0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), eight);
  q1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
}

/// expf_lane (fast_exp.h) in 4 lanes: the same constants and the same fused and unfused f32
/// operations; the scaling by 2^n is a double multiply rounded once to f32, as scale_pow2.
inline float32x4_t expf4(float32x4_t x) {
  const float32x4_t shift = vdupq_n_f32(0x1.8p23f);
  const float32x4_t z = vfmaq_f32(shift, x, vdupq_n_f32(0x1.715476p+0f));  // x/ln2 + 1.5·2^23
  const float32x4_t n = vsubq_f32(z, shift);
  const float32x4_t b = vfmsq_f32(vfmsq_f32(x, n, vdupq_n_f32(0x1.62e4p-1f)), n,
                                  vdupq_n_f32(0x1.7f7d1cp-20f));  // x − n·ln2_hi − n·ln2_lo
  const float32x4_t u = vmulq_f32(b, b);
  const float32x4_t p34 = vfmaq_f32(vdupq_n_f32(0x1.573e2ep-5f), vdupq_n_f32(0x1.0e4020p-7f), b);
  const float32x4_t p12 = vfmaq_f32(vdupq_n_f32(0x1.fffdb6p-2f), vdupq_n_f32(0x1.555e66p-3f), b);
  const float32x4_t hi = vfmaq_f32(p12, p34, u);
  const float32x4_t j =
      vfmaq_f32(vfmaq_f32(vdupq_n_f32(1.0f), vdupq_n_f32(0x1.ffffecp-1f), b), hi, u);
  // scale_pow2: n clamped to ±192 (a NaN n becomes −192, its j is NaN), 2^n built as a double.
  const float32x4_t nc = vminnmq_f32(vmaxnmq_f32(n, vdupq_n_f32(-192.0f)), vdupq_n_f32(192.0f));
  const int32x4_t e = vaddq_s32(vcvtq_s32_f32(nc), vdupq_n_s32(1023));
  const float64x2_t p_lo = vreinterpretq_f64_s64(vshlq_n_s64(vmovl_s32(vget_low_s32(e)), 52));
  const float64x2_t p_hi = vreinterpretq_f64_s64(vshlq_n_s64(vmovl_high_s32(e), 52));
  const float64x2_t r_lo = vmulq_f64(vcvt_f64_f32(vget_low_f32(j)), p_lo);
  const float64x2_t r_hi = vmulq_f64(vcvt_high_f64_f32(j), p_hi);
  const float32x4_t res = vcvt_high_f32_f64(vcvt_f32_f64(r_lo), r_hi);
  const float32x4_t big =
      vbslq_f32(vcleq_f32(n, vdupq_n_f32(0.0f)), vdupq_n_f32(0.0f), vdupq_n_f32(INFINITY));
  return vbslq_f32(vcagtq_f32(n, vdupq_n_f32(192.0f)), big, res);  // |n| > 192: false for NaN
}

/// lanes += sc · s for the 8 integer lanes (exact).
inline void lanes_mla(I8Lanes& acc, const I8Lanes& s, int32_t sc) {
  acc.lo = vmlaq_n_s32(acc.lo, s.lo, sc);
  acc.hi = vmlaq_n_s32(acc.hi, s.hi, sc);
}

}  // namespace

void act_from_float_q8_0(const float* src, void* dst, int64_t n) {
  block_q8_0* y = static_cast<block_q8_0*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* x = src + 32 * b;
    float32x4_t v[8];
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int i = 0; i < 8; ++i) {
      v[i] = vld1q_f32(x + 4 * i);
      m = vmaxnmq_f32(m, vabsq_f32(v[i]));  // fmax: a NaN is ignored, as in the scalar code
    }
    const float amax = vmaxnmvq_f32(m);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int16x8_t h[4];
    for (int i = 0; i < 4; ++i) {
      // round-half-even(x · id) as nearbyint in the default rounding mode; |x · id| ≤ 127.
      const int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(v[2 * i], id));
      const int32x4_t c = vcvtnq_s32_f32(vmulq_n_f32(v[2 * i + 1], id));
      h[i] = vcombine_s16(vqmovn_s32(a), vqmovn_s32(c));
    }
    vst1q_s8(y[b].qs, vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])));
    vst1q_s8(y[b].qs + 16, vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3])));
    y[b].d = f32_to_fp16(amax / 127.0f);
  }
}

float vec_dot_f32(int64_t n, const void* w, const void* x) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(x);
  const int64_t np = n & ~int64_t(63);
  float sum = vec_body(np, [a, b](int side, int64_t i) { return load16_f32((side ? b : a) + i); });
  // The tail as vec_dot_float.cpp: unfused up to unfused_end, fused after.
  const int64_t c = n - np;
  const int64_t unfused_end = np + c / 16 * 16 + (c % 16 >= 8 ? 8 : 0);
  for (int64_t i = np; i < n; ++i) {
    if (i < unfused_end) {
      const float p = a[i] * b[i];
      sum = sum + p;
    } else {
      sum = std::fma(a[i], b[i], sum);
    }
  }
  return sum;
}

float vec_dot_f16(int64_t n, const void* w, const void* x) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const uint16_t* b = static_cast<const uint16_t*>(x);
  const int64_t np = n & ~int64_t(63);
  double sum = vec_body(np, [a, b](int side, int64_t i) { return load16_f16((side ? b : a) + i); });
  for (int64_t i = np; i < n; ++i) sum += double(fp16_to_f32(a[i]) * fp16_to_f32(b[i]));
  return float(sum);
}

float gemm_dot_f32(int64_t n, const void* w, const void* x) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(x);
  return gemm_body(n, [a, b](int side, int64_t i) { return load16_f32((side ? b : a) + i); });
}

float gemm_dot_f16(int64_t n, const void* w, const void* x) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const uint16_t* b = static_cast<const uint16_t*>(x);
  return gemm_body(n, [a, b](int side, int64_t i) { return load16_f16((side ? b : a) + i); });
}

float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* x) {
  const block_q4_0* bw = static_cast<const block_q4_0*>(w);
  const block_q8_0* bx = static_cast<const block_q8_0*>(x);
  float32x4_t lo = vdupq_n_f32(0.0f), hi = lo;
  for (int64_t b = 0; b < n / 32; ++b) {
    int8x16_t q0, q1;
    q4_0_quants(bw[b], q0, q1);
    const I8Lanes s = block_lanes(q0, q1, vld1q_s8(bx[b].qs), vld1q_s8(bx[b].qs + 16));
    lanes_fma(s, fp16_to_f32(bw[b].d) * fp16_to_f32(bx[b].d), lo, hi);
  }
  return fold8(lo, hi);
}

float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* x) {
  const block_q8_0* bw = static_cast<const block_q8_0*>(w);
  const block_q8_0* bx = static_cast<const block_q8_0*>(x);
  float32x4_t lo = vdupq_n_f32(0.0f), hi = lo;
  for (int64_t b = 0; b < n / 32; ++b) {
    const I8Lanes s = block_lanes(vld1q_s8(bw[b].qs), vld1q_s8(bw[b].qs + 16), vld1q_s8(bx[b].qs),
                                  vld1q_s8(bx[b].qs + 16));
    lanes_fma(s, fp16_to_f32(bw[b].d) * fp16_to_f32(bx[b].d), lo, hi);
  }
  return fold8(lo, hi);
}

float repack_dot_q4_0_q8_0(int64_t n, const void* w, const void* x) {
  const block_q4_0* bw = static_cast<const block_q4_0*>(w);
  const block_q8_0* bx = static_cast<const block_q8_0*>(x);
  float acc = 0.0f;
  for (int64_t b = 0; b < n / 32; ++b) {
    int8x16_t q0, q1;
    q4_0_quants(bw[b], q0, q1);
    const I8Lanes s = block_lanes(q0, q1, vld1q_s8(bx[b].qs), vld1q_s8(bx[b].qs + 16));
    const int32_t isum = vaddvq_s32(vaddq_s32(s.lo, s.hi));  // the whole block, exact
    acc = std::fma(float(isum), fp16_to_f32(bw[b].d) * fp16_to_f32(bx[b].d), acc);
  }
  return acc;
}

void act_from_float_q8_K(const float* src, void* dst, int64_t n) {
  block_q8_K* y = static_cast<block_q8_K*>(dst);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float* x = src + b * QK_K;
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int i = 0; i < QK_K; i += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(x + i)));
    const float amax = vmaxnmvq_f32(m);
    if (amax == 0.0f) {
      y[b] = block_q8_K{};
      continue;
    }
    // The scalar rule: `max` is the first x with the largest |x|.
    int first = 0;
    while (std::fabs(x[first]) != amax) ++first;
    const float iscale = -127.0f / x[first];
    const int32x4_t hi = vdupq_n_s32(127);
    for (int i = 0; i < QK_K; i += 16) {
      int16x8_t h[2];
      for (int k = 0; k < 2; ++k) {
        // min(127, round-half-even(iscale · x)); |iscale · x| ≤ 127 up to rounding.
        const int32x4_t a =
            vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + i + 8 * k), iscale)), hi);
        const int32x4_t c =
            vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + i + 8 * k + 4), iscale)), hi);
        h[k] = vcombine_s16(vqmovn_s32(a), vqmovn_s32(c));
      }
      const int8x16_t q = vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1]));
      vst1q_s8(y[b].qs + i, q);
      y[b].bsums[i / 16] = int16_t(vaddlvq_s8(q));
    }
    y[b].d = 1.0f / iscale;
  }
}

float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* x) {
  // vec_dot_k.cpp's order: the main term in 8 float lanes, the mins in 4 (lane k = m_2k ·
  // Σq_x(sub-block 2k) + m_2k+1 · Σq_x(2k+1)), folded at the end.
  const auto* bw = static_cast<const block_q4_K*>(w);
  const auto* bx = static_cast<const block_q8_K*>(x);
  float32x4_t lo = vdupq_n_f32(0.0f), hi = lo, acc_m = lo;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    int sc[8], m[8];
    for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, bw[b].scales, &sc[j], &m[j]);
    const float d = bx[b].d * fp16_to_f32(bw[b].d);
    const float dmin = -bx[b].d * fp16_to_f32(bw[b].dmin);
    int32_t mins[4];
    for (int k = 0; k < 4; ++k) {
      const int s0 = bx[b].bsums[4 * k] + bx[b].bsums[4 * k + 1];
      const int s1 = bx[b].bsums[4 * k + 2] + bx[b].bsums[4 * k + 3];
      mins[k] = m[2 * k] * s0 + m[2 * k + 1] * s1;
    }
    acc_m = vfmaq_n_f32(acc_m, vcvtq_f32_s32(vld1q_s32(mins)), dmin);
    I8Lanes lanes = {vdupq_n_s32(0), vdupq_n_s32(0)};
    for (int j = 0; j < 4; ++j) {  // bytes 32j..32j+31: low nibbles sub-block 2j, high 2j+1
      const uint8x16_t v0 = vld1q_u8(bw[b].qs + 32 * j), v1 = vld1q_u8(bw[b].qs + 32 * j + 16);
      const uint8x16_t mask = vdupq_n_u8(0x0F);
      const int8_t* qx = bx[b].qs + 64 * j;
      lanes_mla(
          lanes,
          block_lanes(vreinterpretq_s8_u8(vandq_u8(v0, mask)),
                      vreinterpretq_s8_u8(vandq_u8(v1, mask)), vld1q_s8(qx), vld1q_s8(qx + 16)),
          sc[2 * j]);
      lanes_mla(
          lanes,
          block_lanes(vreinterpretq_s8_u8(vshrq_n_u8(v0, 4)),
                      vreinterpretq_s8_u8(vshrq_n_u8(v1, 4)), vld1q_s8(qx + 32), vld1q_s8(qx + 48)),
          sc[2 * j + 1]);
    }
    lanes_fma(lanes, d, lo, hi);
  }
  return fold8(lo, hi) + fold4(acc_m);
}

float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* x) {
  // vec_dot_k.cpp's order: per super-block 8 integer lanes, lane l = Σ over the eight 32-value
  // groups of sc · q·q_x for values 4l..4l+3 of the group (lanes 0..3 are the group's first
  // 16-value sub-block, lanes 4..7 its second), fused-multiply-added with d into 8 float lanes.
  const auto* bw = static_cast<const block_q6_K*>(w);
  const auto* bx = static_cast<const block_q8_K*>(x);
  float32x4_t lo = vdupq_n_f32(0.0f), hi = lo;
  const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(3);
  const int8x16_t off = vdupq_n_s8(32);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const block_q6_K& blk = bw[b];
    I8Lanes lanes = {vdupq_n_s32(0), vdupq_n_s32(0)};
    for (int h = 0; h < 2; ++h) {  // values 128h … 128h+127
      const uint8_t* ql = blk.ql + 64 * h;
      const uint8_t* qh = blk.qh + 32 * h;
      for (int g = 0; g < 4; ++g) {  // 32-value group 4h + g
        int8x16_t q[2];
        for (int k = 0; k < 2; ++k) {
          const uint8x16_t l = vld1q_u8(ql + 32 * (g & 1) + 16 * k);
          const uint8x16_t low = g < 2 ? vandq_u8(l, m4) : vshrq_n_u8(l, 4);
          const uint8x16_t high =
              vandq_u8(vshlq_u8(vld1q_u8(qh + 16 * k), vdupq_n_s8(int8_t(-2 * g))), m2);
          q[k] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low, vshlq_n_u8(high, 4))), off);
        }
        const int j = 4 * h + g;
        const int8_t* qx = bx[b].qs + 32 * j;
        const I8Lanes s = block_lanes(q[0], q[1], vld1q_s8(qx), vld1q_s8(qx + 16));
        lanes.lo = vmlaq_n_s32(lanes.lo, s.lo, blk.scales[2 * j]);
        lanes.hi = vmlaq_n_s32(lanes.hi, s.hi, blk.scales[2 * j + 1]);
      }
    }
    lanes_fma(lanes, bx[b].d * fp16_to_f32(blk.d), lo, hi);
  }
  return fold8(lo, hi);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    // silu_lane: −x as 0 − x, the polynomial e^x, an f32 add and an f32 division.
    const float32x4_t x = vld1q_f32(gate + i);
    const float32x4_t e = expf4(vsubq_f32(vdupq_n_f32(0.0f), x));
    vst1q_f32(out + i, vmulq_f32(vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), e)), vld1q_f32(up + i)));
  }
  for (; i < n; ++i) out[i] = silu_lane(gate[i]) * up[i];
}

double exp_blocks(const float* x, float* y, int64_t n, float max) {
  double sum = 0.0;
  const float32x4_t m = vdupq_n_f32(max);
  for (int64_t i = 0; i + kExpBlock <= n; i += kExpBlock) {
    F16Lanes v;
    for (int k = 0; k < 4; ++k) v.v[k] = expf4(vsubq_f32(vld1q_f32(x + i + 4 * k), m));
    for (int k = 0; k < 4; ++k) vst1q_f32(y + i + 4 * k, v.v[k]);
    sum += double(fold16(v));  // halves, quarters, pairs: the scalar block sum
  }
  return sum;
}

void rope_rotate(float* v, const float* cs, const float* sn, int64_t half, bool neox) {
  int64_t i = 0;
  // v[i0] = fma(x0, cs, −(x1·sn)), v[i1] = fma(x0, sn, x1·cs), four pairs at a time.
  auto rotate = [](float32x4_t x0, float32x4_t x1, float32x4_t c, float32x4_t s, float32x4_t* r0,
                   float32x4_t* r1) {
    *r0 = vfmaq_f32(vnegq_f32(vmulq_f32(x1, s)), x0, c);
    *r1 = vfmaq_f32(vmulq_f32(x1, c), x0, s);
  };
  for (; i + 4 <= half; i += 4) {
    const float32x4_t c = vld1q_f32(cs + i), s = vld1q_f32(sn + i);
    if (neox) {
      float32x4_t r0, r1;
      rotate(vld1q_f32(v + i), vld1q_f32(v + i + half), c, s, &r0, &r1);
      vst1q_f32(v + i, r0);
      vst1q_f32(v + i + half, r1);
    } else {
      float32x4x2_t p = vld2q_f32(v + 2 * i);  // even elements, odd elements
      rotate(p.val[0], p.val[1], c, s, &p.val[0], &p.val[1]);
      vst2q_f32(v + 2 * i, p);
    }
  }
  for (; i < half; ++i) {
    const int64_t i0 = neox ? i : 2 * i;
    const int64_t i1 = neox ? i + half : 2 * i + 1;
    const float x0 = v[i0], x1 = v[i1];
    v[i0] = std::fma(x0, cs[i], -(x1 * sn[i]));
    v[i1] = std::fma(x0, sn[i], x1 * cs[i]);
  }
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src + i))));
  for (; i < n; ++i) dst[i] = fp16_to_f32(src[i]);
}

}  // namespace kvrun::cpu::neon
