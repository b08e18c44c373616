// fp16.h — scalar IEEE binary16 and bfloat16 conversions (the reference; round to nearest even).
//
// binary16: IEEE 754-2008. bfloat16: the upper 16 bits of an IEEE binary32, rounded to nearest
// even; NaN stays NaN (quiet bit forced) — the same rule as GGUF/ggml's BF16 type.
#pragma once

#include <cstdint>
#include <cstring>

namespace kvrun {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// binary16 bit pattern → float (exact: every binary16 value is a binary32 value).
inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return f32_from_bits(sign);  // ±0
  // subnormal: mant * 2^-24
  float v = float(mant) * 5.9604644775390625e-08f;
  return sign ? -v : v;
}

/// float → binary16 bit pattern, round to nearest even; overflow gives ±inf, NaN stays NaN.
inline uint16_t f32_to_fp16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520 → inf
  if (ax < 0x38800000u) {                                  // below the smallest normal 2^-14
    if (ax < 0x33000000u) return sign;                     // below half the smallest subnormal
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return uint16_t(sign | q);
  }
  uint32_t r = ax - 0x38000000u;  // rebias exponent 127 → 15
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
  return uint16_t(sign | r);
}

/// float → binary16 bit pattern for a block scale: as f32_to_fp16, but any non-finite result
/// (a value too large for binary16, inf or NaN) becomes ±65504, the largest finite binary16.
inline uint16_t f32_to_fp16_sat(float f) {
  uint16_t h = f32_to_fp16(f);
  if ((h & 0x7fffu) >= 0x7c00u) h = uint16_t((h & 0x8000u) | 0x7bffu);
  return h;
}

/// bfloat16 bit pattern → float (exact).
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

/// float → bfloat16 bit pattern, round to nearest even; NaN stays a (quiet) NaN.
inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  return uint16_t((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

}  // namespace kvrun
