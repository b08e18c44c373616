// kv_encode.cuh — device ports of the scalar KV row encoders (ggml-like/kv_layout.cpp,
// quants_kv.cpp, fp16.h), operation for operation, so the GPU writes the same bytes as
// kv_encode_row. Each function encodes one unit of a row: an element (f32/f16/bf16), a block of
// 32 (q8_0/q4_0), a head (fp8) or a scale group (nvfp4).
#pragma once

#include <cfloat>
#include <cstdint>

#include "blocks.h"
#include "cuda/decode.cuh"
#include "cuda/kv_format.cuh"

namespace kvrun::cuda {

/// float → binary16 bits, round to nearest even; overflow → ±inf; NaN keeps a NaN (fp16.h).
KVRUN_HD uint16_t enc_f16(float f) {
  const uint32_t x = f32_as_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
  if (ax < 0x38800000u) {
    if (ax < 0x33000000u) return sign;
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return uint16_t(sign | q);
  }
  uint32_t r = ax - 0x38000000u;
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
  return uint16_t(sign | r);
}

/// As enc_f16, non-finite results clamped to ±65504 (fp16.h f32_to_fp16_sat; block scales).
KVRUN_HD uint16_t enc_f16_sat(float f) {
  uint16_t h = enc_f16(f);
  if ((h & 0x7fffu) >= 0x7c00u) h = uint16_t((h & 0x8000u) | 0x7bffu);
  return h;
}

/// float → bfloat16 bits, round to nearest even; NaN → quiet NaN (fp16.h f32_to_bf16).
KVRUN_HD uint16_t enc_bf16(float f) {
  const uint32_t x = f32_as_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  return uint16_t((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

/// q8_0 block of 32 values as llama.cpp's CPU from_float (kv_layout.cpp encode_block_q8_0).
KVRUN_HD void enc_q8_0(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int i = 0; i < QK8_0; ++i) amax = fmaxf(amax, fabsf(x[i]));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const uint16_t d = enc_f16_sat(amax / 127.0f);
  out[0] = uint8_t(d);
  out[1] = uint8_t(d >> 8);
  for (int i = 0; i < QK8_0; ++i) out[2 + i] = uint8_t(int8_t(rintf(mul_rn(x[i], id))));
}

/// q4_0 block of 32 values as quantize_row_q4_0_ref contracted (kv_layout.cpp).
KVRUN_HD void enc_q4_0(const float* x, uint8_t* out) {
  float amax = 0.0f, m = 0.0f;
  for (int i = 0; i < QK4_0; ++i) {
    if (amax < fabsf(x[i])) {
      amax = fabsf(x[i]);
      m = x[i];
    }
  }
  const float d = m / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t dh = enc_f16_sat(d);
  out[0] = uint8_t(dh);
  out[1] = uint8_t(dh >> 8);
  auto code = [id](float v) {
    const float t = fmaf(v, id, 8.5f);
    const int c = t >= 0.0f ? int(t) : 0;
    return uint8_t(c < 0 ? 0 : (c > 15 ? 15 : c));
  };
  for (int j = 0; j < QK4_0 / 2; ++j)
    out[2 + j] = uint8_t(code(x[j]) | (code(x[j + QK4_0 / 2]) << 4));
}

/// float → FP8 code (e4m3: mbits 3, bias 7, max code 0x7E, max 448; e5m2: 2, 15, 0x7B, 57344),
/// round to nearest even, saturating (quants_kv.cpp fp8_encode).
KVRUN_HD uint8_t enc_fp8(float x, bool e4m3) {
  const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const uint32_t max_code = e4m3 ? 0x7Eu : 0x7Bu;
  const float fmax = e4m3 ? 448.0f : 57344.0f;
  const uint32_t bits = f32_as_bits(x);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80u);
  if (isnan(x)) return uint8_t(sign | 0x7F);
  if (!(fabsf(x) < fmax)) return uint8_t(sign | max_code);
  const int biased = int((bits >> 23) & 0xffu);
  if (biased == 0) return sign;
  const int e = biased - 127;
  const uint32_t m24 = (bits & 0x7fffffu) | 0x800000u;
  const int emin = 1 - bias;
  auto round_shift = [](uint32_t m, int shift) -> uint32_t {
    if (shift >= 32) return 0;
    const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    return (rem > half || (rem == half && (q & 1u))) ? q + 1 : q;
  };
  uint32_t code;
  if (e < emin) {
    code = round_shift(m24, 23 - mbits + (emin - e));
  } else {
    const uint32_t q = round_shift(m24, 23 - mbits);
    code = (uint32_t(e + bias) << mbits) + (q - (1u << mbits));
  }
  if (code > max_code) code = max_code;
  return uint8_t(sign | code);
}

/// float → E2M1 code: nearest level, ties to even, saturating at ±6 (quants_kv.cpp).
KVRUN_HD uint8_t enc_e2m1(float x) {
  if (isnan(x)) return 0;
  const uint8_t sign = signbit(x) ? 8 : 0;
  const float a = fabsf(x);
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

/// Largest finite |x[i]| of n values (0 when none).
KVRUN_HD float finite_absmax(const float* x, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = fabsf(x[i]);
    if (isfinite(a) && a > m) m = a;
  }
  return m;
}

/// The power-of-two exponent e of a head's FP8 scale 2^e for its largest finite magnitude
/// `amax` (quants_kv.cpp quantize_row_fp8_scaled): the smallest e ≥ −127 with amax / 2^e in the
/// format's range.
KVRUN_HD int fp8_scale_exp(float amax, bool e4m3) {
  const float fmax = e4m3 ? 448.0f : 57344.0f;
  int e = 0;
  if (amax > 0.0f) {
    e = ilogbf(amax) - ilogbf(fmax) - 1;
    while (ldexpf(amax, -e) > fmax) ++e;
    if (e < -127) e = -127;
  }
  return e;
}

/// One head of n values to FP8 with a per-head power-of-two scale; returns the E8M0 byte
/// (quants_kv.cpp quantize_row_fp8_scaled).
KVRUN_HD uint8_t enc_fp8_scaled(const float* x, uint8_t* q, int n, bool e4m3) {
  const int e = fp8_scale_exp(finite_absmax(x, n), e4m3);
  for (int i = 0; i < n; ++i) q[i] = enc_fp8(ldexpf(x[i], -e), e4m3);
  return uint8_t(e + 127);
}

/// Squared error of 16 values coded with factor f; writes the codes (quants_kv.cpp).
KVRUN_HD double nvfp4_block_error(const float* x, float f, uint8_t* codes) {
  double err = 0.0;
  for (int i = 0; i < QK_NVFP4; ++i) {
    codes[i] = f > 0.0f ? enc_e2m1(x[i] / f) : 0;
    // Unfused, as the x86-64 baseline build of the reference computes it (nvcc would
    // contract these into FMAs and could flip the lo/hi choice on a near tie).
    const double e = dsub_rn(double(x[i]), dmul_rn(double(f), double(e2m1_to_f32(codes[i]))));
    err = dadd_rn(err, dmul_rn(e, e));
  }
  return err;
}

/// One NVFP4 block of 16 values for second-level scale s2 (quants_kv.cpp quantize_block_nvfp4).
KVRUN_HD void enc_nvfp4_block(const float* x, float s2, uint8_t* out) {
  const float target = finite_absmax(x, QK_NVFP4) / 6.0f / s2;
  uint8_t codes_lo[QK_NVFP4] = {}, codes_hi[QK_NVFP4] = {};
  uint8_t lo = 0, hi = 0;
  double err_lo = 0, err_hi = 0;
  if (target > 0.0f) {
    lo = enc_fp8(target, true);
    if (fp8_e4m3_to_f32(lo) > target) --lo;
    hi = lo < 0x7E ? uint8_t(lo + 1) : lo;
    err_lo = nvfp4_block_error(x, s2 * fp8_e4m3_to_f32(lo), codes_lo);
    err_hi = hi == lo ? err_lo : nvfp4_block_error(x, s2 * fp8_e4m3_to_f32(hi), codes_hi);
  }
  const bool use_lo = err_lo <= err_hi;
  const uint8_t* codes = use_lo ? codes_lo : codes_hi;
  out[0] = use_lo ? lo : hi;
  for (int j = 0; j < QK_NVFP4 / 2; ++j)
    out[1 + j] = uint8_t((codes[2 * j] & 0x0f) | ((codes[2 * j + 1] & 0x0f) << 4));
}

/// The second-level scale of a scale group whose largest finite magnitude is `amax`
/// (quants_kv.cpp quantize_row_nvfp4_scaled).
KVRUN_HD float nvfp4_s2_of_absmax(float amax) {
  float s2 = 1.0f;
  if (amax > 0.0f) {
    s2 = amax / (6.0f * 448.0f);
    if (s2 < FLT_MIN) s2 = FLT_MIN;
    while (amax / 6.0f / s2 > 448.0f) s2 = nextafterf(s2, INFINITY);
  }
  return s2;
}

/// The second-level scale of a scale group of n values.
KVRUN_HD float nvfp4_s2(const float* x, int n) { return nvfp4_s2_of_absmax(finite_absmax(x, n)); }

/// Encoding units of one row of format f: elements (f32, f16, bf16), blocks of 32 (q8_0, q4_0),
/// heads (fp8) or nvfp4 scale groups. Each unit is encoded independently (one GPU thread each).
inline int64_t kv_units_per_row(const KvFormat& f) {
  const int64_t n = int64_t(f.n_head_kv) * f.head_dim;
  switch (f.type) {
    case DType::Q8_0:
    case DType::Q4_0:
      return (n + 31) / 32;
    case DType::FP8_E4M3:
    case DType::FP8_E5M2:
      return f.n_head_kv;
    case DType::NVFP4:
      return (n + f.nvfp4_group - 1) / f.nvfp4_group;
    default:
      return n;
  }
}

/// Largest nvfp4 scale group encode_kv_unit handles (lcm(head_dim, 16) ≤ this).
constexpr int kMaxNvfp4Group = 256;

/// Encodes unit u of one row: x holds the row's n_head_kv × head_dim floats, `row` receives the
/// encoded bytes of that unit (the bytes kv_encode_row writes there).
KVRUN_HD void encode_kv_unit(const KvFormat& f, const float* x, uint8_t* row, int64_t u) {
  const int n = f.n_head_kv * f.head_dim;
  switch (f.type) {
    case DType::F32:
      reinterpret_cast<float*>(row)[u] = x[u];
      return;
    case DType::F16:
      reinterpret_cast<uint16_t*>(row)[u] = enc_f16(x[u]);
      return;
    case DType::BF16:
      reinterpret_cast<uint16_t*>(row)[u] = enc_bf16(x[u]);
      return;
    case DType::Q8_0:
    case DType::Q4_0: {
      float tmp[32];
      for (int j = 0; j < 32; ++j) tmp[j] = u * 32 + j < n ? x[u * 32 + j] : 0.0f;
      if (f.type == DType::Q8_0)
        enc_q8_0(tmp, row + u * int64_t(sizeof(block_q8_0)));
      else
        enc_q4_0(tmp, row + u * int64_t(sizeof(block_q4_0)));
      return;
    }
    case DType::FP8_E4M3:
    case DType::FP8_E5M2:
      row[n + u] = enc_fp8_scaled(x + u * f.head_dim, row + u * f.head_dim, f.head_dim,
                                  f.type == DType::FP8_E4M3);
      return;
    default: {  // NVFP4: one scale group, zero-padded past the row's end
      const int g = f.nvfp4_group;
      float tmp[kMaxNvfp4Group];
      for (int j = 0; j < g; ++j) tmp[j] = u * g + j < n ? x[u * g + j] : 0.0f;
      const float s2 = nvfp4_s2(tmp, g);
      uint8_t* blocks = row + u * (g / QK_NVFP4) * int64_t(sizeof(block_nvfp4));
      for (int b = 0; b < g / QK_NVFP4; ++b)
        enc_nvfp4_block(tmp + b * QK_NVFP4, s2, blocks + b * int64_t(sizeof(block_nvfp4)));
      const uint32_t bits = f32_as_bits(s2);
      uint8_t* sp = row + f.nvfp4_scale_off + 4 * u;
      for (int j = 0; j < 4; ++j) sp[j] = uint8_t(bits >> (8 * j));
      return;
    }
  }
}

}  // namespace kvrun::cuda
