// neon_lanes.h — the lane helpers the NEON kernels share (backends/cpu/arm/*.cpp only): the
// scalar reference's SIMD lanes as 128-bit registers, their folds in the reference's order, and
// the loop over R × C tiles of a DotTileFn (vec_dot.h).
//
// The scalar code (vec_dot.h, vec_dot_legacy.cpp, vec_dot_float.cpp, vec_dot_k.cpp) emulates
// llama.cpp's x86 lanes: 8 float lanes for the quantized dots (two registers here) and 16 for
// the f32/f16/bf16 dots (four registers). Every helper performs the reference's operations lane
// for lane, so the kernels built from them are bit-identical to it.
#pragma once

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>

namespace kvrun::cpu::neon {

/// 8 int32 lanes as two registers: lane i (0..7) of the scalar code is lo[i] or hi[i − 4].
struct I8Lanes {
  int32x4_t lo, hi;
};

inline I8Lanes zero_lanes() { return {vdupq_n_s32(0), vdupq_n_s32(0)}; }

/// The 8 lane sums of one 32-element block: lane i = Σ_{e=4i..4i+3} a[e]·b[e], with a = a0:a1
/// and b = b0:b1 (exact: each int8 product fits int16, their sums int32). Baseline Advanced
/// SIMD: widening multiplies and pairwise adds.
inline I8Lanes block_lanes(int8x16_t a0, int8x16_t a1, int8x16_t b0, int8x16_t b1) {
  auto quad_sums = [](int8x16_t a, int8x16_t b) {
    const int32x4_t p0 = vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)));  // pairs 0..7
    const int32x4_t p1 = vpaddlq_s16(vmull_high_s8(a, b));                       // pairs 8..15
    return vpaddq_s32(p0, p1);  // sums of elements 0..3, 4..7, 8..11, 12..15
  };
  return {quad_sums(a0, b0), quad_sums(a1, b1)};
}

/// block_lanes of 32 int8 values at a and 32 at b.
inline I8Lanes block_lanes(const int8_t* a, const int8_t* b) {
  return block_lanes(vld1q_s8(a), vld1q_s8(a + 16), vld1q_s8(b), vld1q_s8(b + 16));
}

/// acc += sc_lo · s for lanes 0..3 and sc_hi · s for lanes 4..7 (exact).
inline void lanes_mla(I8Lanes& acc, const I8Lanes& s, int32_t sc_lo, int32_t sc_hi) {
  acc.lo = vmlaq_n_s32(acc.lo, s.lo, sc_lo);
  acc.hi = vmlaq_n_s32(acc.hi, s.hi, sc_hi);
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

/// acc + a·b, fused, lane for lane.
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

/// The tiles of a DotTileFn: k.template operator()<R', C'>(weight row r, activation row j,
/// &y[j·ys + r]) for every R × C tile of the nrows × nx outputs, then 1-row / 1-column passes
/// for the rest.
template <int R, int C, typename Kernel>
inline void for_tiles(const void* w, size_t ws, int64_t nrows, const void* x, size_t xs, int64_t nx,
                      float* y, size_t ys, Kernel k) {
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  auto columns = [&]<int CC>(int64_t j) {
    int64_t r = 0;
    for (; r + R <= nrows; r += R)
      k.template operator()<R, CC>(wb + size_t(r) * ws, xb + size_t(j) * xs,
                                   y + size_t(j) * ys + r);
    for (; r < nrows; ++r)
      k.template operator()<1, CC>(wb + size_t(r) * ws, xb + size_t(j) * xs,
                                   y + size_t(j) * ys + r);
  };
  int64_t j = 0;
  for (; j + C <= nx; j += C) columns.template operator()<C>(j);
  for (; j < nx; ++j) columns.template operator()<1>(j);
}

}  // namespace kvrun::cpu::neon
