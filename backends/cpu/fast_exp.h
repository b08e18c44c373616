// fast_exp.h — the polynomial e^x and SiLU that llama.cpp's CPU backend evaluates in SIMD lanes.
//
// llama.cpp does not call expf in the vector bodies of its softmax and SiLU: ggml-cpu.c
// (ggml/src/ggml-cpu/ggml-cpu.c, functions ggml_v_expf and ggml_v_silu, used by
// ggml_vec_soft_max_f32 and ggml_vec_silu_f32; checked at llama.cpp commit c392e509, Feb 2025)
// has its own e^x, which its comments say is adapted from Arm Limited's optimized-routines
// single-precision vector expf (github.com/ARM-software/optimized-routines, math/v_expf.c):
//
//   n = round(x / ln 2)                       (by the 1.5·2^23 shifter trick)
//   b = x − n·ln2_hi − n·ln2_lo               (Cody–Waite reduction, |b| ≤ ln2 / 2)
//   e^b ≈ 1 + c0·b + c1·b² + c2·b³ + c3·b⁴ + c4·b⁵   (evaluated as two Estrin halves)
//   e^x = e^b · 2^n
//
// with a stated maximum error of 1.45358 + 0.5 ulp. The functions here evaluate that algorithm
// one lane at a time with the same constants and the same sequence of fused and unfused f32
// operations as the AVX-512F/DQ variant (the one taken by llama.cpp built with -march=native on
// an AVX-512 machine, which made the reference fixtures), so each lane's result is the same
// float. In that variant the scaling by 2^n is VSCALEFPS (one rounding, gradual underflow, and
// overflow to +inf), and lanes with |n| > 192 give +inf (n > 0) or +0 (n ≤ 0); NaN stays NaN.
//
// Where llama.cpp uses these: the full 16-lane blocks of a row (i + 15 < n); the remaining
// n % 16 elements of the row (the scalar tail) use libm expf instead (see silu_tail and the
// softmax in ops.cpp). Other SIMD widths (AVX2, SSE2, NEON) use different scaling code and
// block widths and are not reproduced here.
//
// Written as plain scalar code (std::fma is one fused operation, like the vector FMA); no
// intrinsics are needed, so the result does not depend on the build machine.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace kvrun::cpu {

/// Lanes per block in llama.cpp's AVX-512 softmax and SiLU loops: element i of a row is in the
/// vector body when i < n − n % kExpBlock, otherwise in the libm tail.
constexpr int64_t kExpBlock = 16;

/// j · 2^n rounded once to f32, for an integral n; as VSCALEFPS does for |n| ≤ 192. The product
/// is exact in double (24-bit j, exponent within double's range), so converting it to float is
/// the single rounding. n is clamped only to keep the exponent bits valid: a NaN n comes with
/// a NaN j, and |n| > 192 is handled by the caller.
inline float scale_pow2(float j, float n) {
  const float nc = std::fmin(std::fmax(n, -192.0f), 192.0f);
  const uint64_t bits = uint64_t(int64_t(nc) + 1023) << 52;
  return float(double(j) * std::bit_cast<double>(bits));
}

/// e^x as one lane of ggml_v_expf (AVX-512F/DQ variant); see the file comment. Relative error
/// ≤ about 2 ulp against the exact value; e^x = +inf for x ≥ ~88.73, gradual underflow to +0
/// below ~−87.3 (exactly 0 for x < ~−103.97), e^−inf = 0, e^+inf = +inf, NaN → NaN.
inline float expf_lane(float x) {
  constexpr float kShift = 0x1.8p23f;        // 1.5 · 2^23: adding it rounds to an integer
  constexpr float kInvLn2 = 0x1.715476p+0f;  // 1 / ln 2
  constexpr float kLn2Hi = 0x1.62e4p-1f;     // ln 2, high part (exact product with small n)
  constexpr float kLn2Lo = 0x1.7f7d1cp-20f;  // ln 2 − kLn2Hi
  constexpr float kC0 = 0x1.ffffecp-1f;      // polynomial for e^b − 1, b in [−ln2/2, ln2/2]
  constexpr float kC1 = 0x1.fffdb6p-2f;
  constexpr float kC2 = 0x1.555e66p-3f;
  constexpr float kC3 = 0x1.573e2ep-5f;
  constexpr float kC4 = 0x1.0e4020p-7f;
  const float z = std::fma(x, kInvLn2, kShift);
  const float n = z - kShift;
  const float b = std::fma(-n, kLn2Lo, std::fma(-n, kLn2Hi, x));  // two fused x − n·c
  const float u = b * b;
  const float hi = std::fma(std::fma(kC4, b, kC3), u, std::fma(kC2, b, kC1));
  const float j = std::fma(hi, u, std::fma(kC0, b, 1.0f));
  const float res = scale_pow2(j, n);
  const float big = n <= 0.0f ? 0.0f : INFINITY;
  return std::fabs(n) > 192.0f ? big : res;  // false for NaN: res is NaN then
}

/// SiLU x / (1 + e^−x) as one lane of ggml_v_silu: −x formed as 0 − x, the polynomial e^x,
/// an f32 add and an f32 division.
inline float silu_lane(float x) { return x / (1.0f + expf_lane(0.0f - x)); }

/// SiLU as llama.cpp's scalar tail computes it (ggml_silu_f32): libm expf.
inline float silu_tail(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace kvrun::cpu
