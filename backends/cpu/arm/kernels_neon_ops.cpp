// kernels_neon_ops.cpp — the NEON element-wise kernels of op_kernels.h (kernels_neon.h): SiLU·up
// and softmax's exp with fast_exp.h's polynomial, RoPE's rotation, f16 → f32. Each lane performs
// the scalar reference's operations (fast_exp.h, op_kernels.cpp), so results are bit-identical.
#include <arm_neon.h>

#include <cmath>

#include "cpu/arm/kernels_neon.h"
#include "cpu/arm/neon_lanes.h"
#include "cpu/fast_exp.h"
#include "cpu/op_kernels.h"
#include "fp16.h"

namespace kvrun::cpu::neon {

namespace {

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

}  // namespace

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
  for (; i < half; ++i) rope_rotate_pair(v, cs, sn, half, neox, i);
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src + i))));
  for (; i < n; ++i) dst[i] = fp16_to_f32(src[i]);
}

}  // namespace kvrun::cpu::neon
