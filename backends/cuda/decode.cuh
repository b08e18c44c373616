// decode.cuh — device-side decoders of the weight and KV element formats, the CUDA
// counterparts of ggml-like's scalar codecs (blocks.h, quants_*.cpp, quants_kv.cpp, fp16.h).
// Every decode here is exact in f32 and equals the scalar reference bit for bit.
//
// FP8: the hardware conversion (cvt from e4m3/e5m2, sm_89 and newer) where the compiled
// architecture has it, a bit-level software decode below that.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>

#include "blocks.h"

/// Device-side helpers that are also compiled for the host, so that tests/test_cuda_host_codecs
/// can check them against the scalar reference on a machine without a GPU.
#define KVRUN_HD __host__ __device__ __forceinline__
/// `#pragma unroll` for the device pass only (the host compiler does not know it).
#ifdef __CUDA_ARCH__
#define KVRUN_UNROLL _Pragma("unroll")
#else
#define KVRUN_UNROLL
#endif

namespace kvrun::cuda {

/// The bits of a float and back (__float_as_uint / __uint_as_float on the device).
KVRUN_HD uint32_t f32_as_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
KVRUN_HD float bits_as_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// Correctly rounded f32 / f64 operations the compiler may not contract into FMAs (the host build
// of the reference has no FMA contraction; nvcc contracts a·b + c by default).
#ifdef __CUDA_ARCH__
KVRUN_HD float mul_rn(float a, float b) { return __fmul_rn(a, b); }
KVRUN_HD float add_rn(float a, float b) { return __fadd_rn(a, b); }
KVRUN_HD float sub_rn(float a, float b) { return __fsub_rn(a, b); }
KVRUN_HD float div_rn(float a, float b) { return __fdiv_rn(a, b); }
KVRUN_HD double dmul_rn(double a, double b) { return __dmul_rn(a, b); }
KVRUN_HD double dadd_rn(double a, double b) { return __dadd_rn(a, b); }
KVRUN_HD double dsub_rn(double a, double b) { return __dsub_rn(a, b); }
#else
KVRUN_HD float mul_rn(float a, float b) { return a * b; }
KVRUN_HD float add_rn(float a, float b) { return a + b; }
KVRUN_HD float sub_rn(float a, float b) { return a - b; }
KVRUN_HD float div_rn(float a, float b) { return a / b; }
KVRUN_HD double dmul_rn(double a, double b) { return a * b; }
KVRUN_HD double dadd_rn(double a, double b) { return a + b; }
KVRUN_HD double dsub_rn(double a, double b) { return a - b; }
#endif

/// binary16 bits → float (exact).
KVRUN_HD float f16_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }

/// bfloat16 bits → float (exact).
KVRUN_HD float bf16_to_f32(uint16_t h) { return bits_as_f32(uint32_t(h) << 16); }

/// An f16 field of a block at a 2-byte aligned address.
KVRUN_HD float load_f16(const uint16_t* p) { return f16_to_f32(*p); }

/// FP8 E4M3 (OCP, "E4M3FN") code → float; 0x7F / 0xFF → NaN (quants_kv.h fp8_e4m3_to_f32).
KVRUN_HD float fp8_e4m3_to_f32(uint8_t c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E4M3)));
#else
  const uint32_t sign = uint32_t(c & 0x80u) << 24;
  const int e = (c & 0x7f) >> 3;
  const uint32_t m = c & 7u;
  if ((c & 0x7f) == 0x7f) return bits_as_f32(0x7fc00000u);  // std::nanf("")
  if (e == 0) {
    const float v = float(m) * 0.001953125f;  // m · 2^-9
    return sign ? -v : v;
  }
  return bits_as_f32(sign | (uint32_t(e - 7 + 127) << 23) | (m << 20));
#endif
}

/// FP8 E5M2 code → float; S.11111.00 → ±inf, S.11111.xx → NaN (quants_kv.h fp8_e5m2_to_f32).
KVRUN_HD float fp8_e5m2_to_f32(uint8_t c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E5M2)));
#else
  // E5M2 is the upper byte of a binary16: widen and convert (exact, inf and NaN kept).
  return f16_to_f32(uint16_t(uint16_t(c) << 8));
#endif
}

/// E2M1 code (low 4 bits, sign in bit 3) → ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
KVRUN_HD float e2m1_to_f32(uint8_t code) {
  const int m = code & 7;
  const float v =
      m < 2 ? 0.5f * float(m) : float(1 << ((m >> 1) - 1)) * (1.0f + 0.5f * float(m & 1));
  return (code & 8) ? -v : v;
}

/// E8M0 scale byte b → 2^(b − 127); 255 → NaN.
KVRUN_HD float e8m0_to_f32(uint8_t b) {
  return b == 255 ? bits_as_f32(0x7fc00000u) : ldexpf(1.0f, int(b) - 127);
}

/// The 6-bit scale and min of sub-block j of a q4_K / q5_K super-block (scales[12]), as
/// quants_k.cpp unpack_scale_min_k4.
KVRUN_HD void k4_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace kvrun::cuda
