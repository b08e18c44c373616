// quants_float.cpp — scalar row codecs of the plain float types: f32, f16, bf16, f64.
//
// Formats: f32 = IEEE 754 binary32, f16 = IEEE 754 binary16, bf16 = the upper half of a binary32
// (rounded to nearest even), f64 = IEEE 754 binary64; all little-endian as GGUF stores them. The
// scalar conversions are those of fp16.h. Rows are read and written through memcpy, so `src` and
// `dst` need no particular alignment.
#include <cstring>

#include "fp16.h"
#include "quants.h"

namespace kvrun {

/// f32 row → float (a copy).
void dequantize_row_f32(const void* src, float* dst, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

/// float → f32 row (a copy).
void quantize_row_f32(const float* src, void* dst, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

/// f16 row (IEEE binary16 bit patterns) → float; exact.
void dequantize_row_f16(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = fp16_to_f32(h);
  }
}

/// float → f16 row; round to nearest even, overflow to ±inf, NaN stays NaN (fp16.h).
void quantize_row_f16(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_fp16(src[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

/// bf16 row → float; exact.
void dequantize_row_bf16(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = bf16_to_f32(h);
  }
}

/// float → bf16 row; round to nearest even, NaN stays a quiet NaN (fp16.h).
void quantize_row_bf16(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(src[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

/// f64 row → float; rounds to nearest (the C++ double→float conversion); out of range → ±inf.
void dequantize_row_f64(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    double d;
    std::memcpy(&d, p + 8 * i, 8);
    dst[i] = static_cast<float>(d);
  }
}

/// float → f64 row; exact.
void quantize_row_f64(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const double d = src[i];
    std::memcpy(p + 8 * i, &d, 8);
  }
}

}  // namespace kvrun
