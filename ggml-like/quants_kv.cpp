// quants_kv.cpp — scalar reference codecs of the KV-cache formats (FP8 E4M3/E5M2, scaled FP8,
// NVFP4). Format definitions and sources: quants_kv.h.
#include "quants_kv.h"

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "fp16.h"
#include "quants.h"

namespace kvrun {
namespace {

/// The parameters of one FP8 format (OCP OFP8 v1.0).
struct Fp8Format {
  int mbits;         ///< mantissa bits
  int bias;          ///< exponent bias
  uint8_t max_code;  ///< code of the largest finite magnitude (sign bit clear)
  float max;         ///< that magnitude
};

constexpr Fp8Format kE4M3 = {3, 7, 0x7E, kFp8E4M3Max};
constexpr Fp8Format kE5M2 = {2, 15, 0x7B, kFp8E5M2Max};
constexpr uint8_t kFp8NaN = 0x7F;  // a NaN code in both formats (S.1111.111 / S.11111.11)

/// m >> shift rounded to nearest, ties to even (shift >= 1).
uint32_t shift_round_even(uint32_t m, int shift) {
  if (shift >= 32) return 0;
  const uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return (rem > half || (rem == half && (q & 1u))) ? q + 1 : q;
}

/// float → FP8 code of format `f`: round to nearest even on the binary32 bits, saturate.
uint8_t fp8_encode(const Fp8Format& f, float x) {
  const uint32_t bits = f32_bits(x);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80u);
  if (std::isnan(x)) return uint8_t(sign | kFp8NaN);
  if (!(std::fabs(x) < f.max)) return uint8_t(sign | f.max_code);  // >= max, or ±inf
  const int biased = int((bits >> 23) & 0xffu);
  if (biased == 0) return sign;  // ±0 or a float subnormal: far below half the FP8 quantum
  const int e = biased - 127;    // x = m24 * 2^(e - 23)
  const uint32_t m24 = (bits & 0x7fffffu) | 0x800000u;
  const int emin = 1 - f.bias;
  uint32_t code;
  if (e < emin) {
    // Subnormal range: quantum 2^(emin - mbits); q = 2^mbits (rounding up) is the smallest
    // normal, whose code is exactly 2^mbits too.
    code = shift_round_even(m24, 23 - f.mbits + (emin - e));
  } else {
    // Normal: q in [2^mbits, 2^(mbits+1)]; q = 2^(mbits+1) carries into the exponent field.
    const uint32_t q = shift_round_even(m24, 23 - f.mbits);
    code = (uint32_t(e + f.bias) << f.mbits) + (q - (1u << f.mbits));
  }
  if (code > f.max_code) code = f.max_code;  // values in (max, next) rounding up
  return uint8_t(sign | code);
}

/// FP8 code → float for the finite codes of format `f` (the caller handles inf/NaN codes).
float fp8_decode_finite(const Fp8Format& f, uint8_t c) {
  const uint32_t sign = uint32_t(c & 0x80u) << 24;
  const int e = (c & 0x7f) >> f.mbits;
  const uint32_t m = c & ((1u << f.mbits) - 1u);
  if (e == 0) {  // subnormal: m * 2^(1 - bias - mbits)
    const float quantum = f32_from_bits(uint32_t(127 + 1 - f.bias - f.mbits) << 23);
    const float v = float(m) * quantum;
    return sign ? -v : v;
  }
  return f32_from_bits(sign | (uint32_t(e - f.bias + 127) << 23) | (m << (23 - f.mbits)));
}

const Fp8Format& fp8_format(DType t) {
  if (t == DType::FP8_E4M3) return kE4M3;
  if (t == DType::FP8_E5M2) return kE5M2;
  std::fprintf(stderr, "kvrun: internal error: dtype %u is not an FP8 type\n", unsigned(t));
  std::abort();
}

float fp8_decode(DType t, uint8_t c) {
  return t == DType::FP8_E4M3 ? fp8_e4m3_to_f32(c) : fp8_e5m2_to_f32(c);
}

/// Largest finite |x[i]| (0 when there is none).
float finite_absmax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (std::isfinite(a) && a > m) m = a;
  }
  return m;
}

/// Squared error of coding 16 values with block factor `f` (= s2 * scale); writes the codes.
double nvfp4_block_error(const float* x, float f, uint8_t* codes) {
  double err = 0.0;
  for (int i = 0; i < QK_NVFP4; ++i) {
    codes[i] = f > 0.0f ? e2m1_from_f32(x[i] / f) : 0;
    const double e = double(x[i]) - double(f) * e2m1_to_f32(codes[i]);
    err += e * e;
  }
  return err;
}

/// One NVFP4 block: t = absmax / 6 / s2 (float arithmetic); try lo = the largest E4M3 code with
/// value <= t and hi = lo + 1 (the next value up; none when lo is 448) and keep the one with the
/// smaller squared error (lo on a tie). An all-zero block gets scale 0 and zero codes.
void quantize_block_nvfp4(const float* x, float s2, block_nvfp4* y) {
  const float target = finite_absmax(x, QK_NVFP4) / kE2M1Max / s2;
  uint8_t codes_lo[QK_NVFP4] = {}, codes_hi[QK_NVFP4] = {};
  uint8_t lo = 0, hi = 0;
  double err_lo = 0, err_hi = 0;
  if (target > 0.0f) {
    lo = fp8_e4m3_from_f32(target);          // positive code, 0..0x7E
    if (fp8_e4m3_to_f32(lo) > target) --lo;  // rounded up: step down (lo > 0 as target > 0)
    hi = lo < kE4M3.max_code ? uint8_t(lo + 1) : lo;
    err_lo = nvfp4_block_error(x, s2 * fp8_e4m3_to_f32(lo), codes_lo);
    err_hi = hi == lo ? err_lo : nvfp4_block_error(x, s2 * fp8_e4m3_to_f32(hi), codes_hi);
  }
  const bool use_lo = err_lo <= err_hi;
  const uint8_t* codes = use_lo ? codes_lo : codes_hi;
  y->scale = use_lo ? lo : hi;
  for (int j = 0; j < QK_NVFP4 / 2; ++j)
    y->qs[j] = uint8_t((codes[2 * j] & 0x0f) | ((codes[2 * j + 1] & 0x0f) << 4));
}

}  // namespace

uint8_t fp8_e4m3_from_f32(float x) { return fp8_encode(kE4M3, x); }

float fp8_e4m3_to_f32(uint8_t c) {
  if ((c & 0x7f) == 0x7f) return std::nanf("");
  return fp8_decode_finite(kE4M3, c);
}

uint8_t fp8_e5m2_from_f32(float x) { return fp8_encode(kE5M2, x); }

float fp8_e5m2_to_f32(uint8_t c) {
  if ((c & 0x7c) == 0x7c) {  // exponent field all ones
    if ((c & 0x03) != 0) return std::nanf("");
    return (c & 0x80) ? -INFINITY : INFINITY;
  }
  return fp8_decode_finite(kE5M2, c);
}

float e2m1_to_f32(uint8_t code) {
  static constexpr float kLevels[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kLevels[code & 7];
  return (code & 8) ? -v : v;
}

uint8_t e2m1_from_f32(float x) {
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 8 : 0;
  const float a = std::fabs(x);
  // Midpoints between levels; at a midpoint the even code wins (<= keeps the lower, even code
  // at 0.25, 1.25, 2.5, 5; < lets the upper, even code take 0.75, 1.75, 3.5).
  uint8_t c;
  if (a <= 0.25f)
    c = 0;
  else if (a < 0.75f)
    c = 1;
  else if (a <= 1.25f)
    c = 2;
  else if (a < 1.75f)
    c = 3;
  else if (a <= 2.5f)
    c = 4;
  else if (a < 3.5f)
    c = 5;
  else if (a <= 5.0f)
    c = 6;
  else
    c = 7;
  return uint8_t(sign | c);
}

float e8m0_to_f32(uint8_t b) {
  if (b == 255) return std::nanf("");
  return std::ldexp(1.0f, int(b) - 127);
}

uint8_t quantize_row_fp8_scaled(DType t, const float* x, uint8_t* q, int64_t n) {
  const Fp8Format& f = fp8_format(t);
  const float amax = finite_absmax(x, n);
  int e = 0;
  if (amax > 0.0f) {
    e = std::ilogb(amax) - std::ilogb(f.max) - 1;  // amax / 2^e > max here; step up
    while (std::ldexp(amax, -e) > f.max) ++e;
    if (e < -127) e = -127;  // E8M0's smallest scale; nothing saturates at it either
  }
  for (int64_t i = 0; i < n; ++i) q[i] = fp8_encode(f, std::ldexp(x[i], -e));
  return uint8_t(e + 127);
}

void dequantize_row_fp8_scaled(DType t, const uint8_t* q, uint8_t b, float* y, int64_t n) {
  fp8_format(t);  // validates t
  if (b == 255) {
    for (int64_t i = 0; i < n; ++i) y[i] = std::nanf("");
    return;
  }
  const int e = int(b) - 127;
  for (int64_t i = 0; i < n; ++i) y[i] = std::ldexp(fp8_decode(t, q[i]), e);
}

void quantize_row_nvfp4_with_s2(const float* x, float s2, block_nvfp4* y, int64_t n) {
  for (int64_t ib = 0; ib < n / QK_NVFP4; ++ib) quantize_block_nvfp4(x + ib * QK_NVFP4, s2, &y[ib]);
}

float quantize_row_nvfp4_scaled(const float* x, block_nvfp4* y, int64_t n) {
  const float amax = finite_absmax(x, n);
  float s2 = 1.0f;
  if (amax > 0.0f) {
    s2 = amax / (kE2M1Max * kFp8E4M3Max);
    if (s2 < FLT_MIN) s2 = FLT_MIN;  // keep s2 normal (inputs below ~3e-35 lose precision)
    while (amax / kE2M1Max / s2 > kFp8E4M3Max) s2 = std::nextafter(s2, INFINITY);
  }
  quantize_row_nvfp4_with_s2(x, s2, y, n);
  return s2;
}

void dequantize_row_nvfp4_scaled(const block_nvfp4* x, float s2, float* y, int64_t n) {
  for (int64_t ib = 0; ib < n / QK_NVFP4; ++ib, y += QK_NVFP4) {
    const float f = s2 * fp8_e4m3_to_f32(x[ib].scale);
    for (int j = 0; j < QK_NVFP4 / 2; ++j) {
      y[2 * j] = f * e2m1_to_f32(x[ib].qs[j] & 0x0f);
      y[2 * j + 1] = f * e2m1_to_f32(x[ib].qs[j] >> 4);
    }
  }
}

// ---- traits-table row codecs (unit scale) ----

/// FP8 E4M3 row → float (unit scale).
void dequantize_row_fp8_e4m3(const void* src, float* dst, int64_t n) {
  const auto* q = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_to_f32(q[i]);
}

/// float → FP8 E4M3 row (unit scale; saturating).
void quantize_row_fp8_e4m3(const float* src, void* dst, int64_t n) {
  auto* q = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) q[i] = fp8_e4m3_from_f32(src[i]);
}

/// FP8 E5M2 row → float (unit scale).
void dequantize_row_fp8_e5m2(const void* src, float* dst, int64_t n) {
  const auto* q = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp8_e5m2_to_f32(q[i]);
}

/// float → FP8 E5M2 row (unit scale; saturating).
void quantize_row_fp8_e5m2(const float* src, void* dst, int64_t n) {
  auto* q = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) q[i] = fp8_e5m2_from_f32(src[i]);
}

/// NVFP4 blocks → float with second-level scale 1.
void dequantize_row_nvfp4(const void* src, float* dst, int64_t n) {
  dequantize_row_nvfp4_scaled(static_cast<const block_nvfp4*>(src), 1.0f, dst, n);
}

/// float → NVFP4 blocks with second-level scale 1 (block scales saturate at 448).
void quantize_row_nvfp4(const float* src, void* dst, int64_t n) {
  quantize_row_nvfp4_with_s2(src, 1.0f, static_cast<block_nvfp4*>(dst), n);
}

}  // namespace kvrun
