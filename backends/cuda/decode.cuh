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

#include "blocks.h"

namespace kvrun::cuda {

/// binary16 bits → float (exact).
__device__ __forceinline__ float f16_to_f32(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

/// bfloat16 bits → float (exact).
__device__ __forceinline__ float bf16_to_f32(uint16_t h) {
  return __uint_as_float(uint32_t(h) << 16);
}

/// An f16 field of a block at a 2-byte aligned address.
__device__ __forceinline__ float load_f16(const uint16_t* p) { return f16_to_f32(*p); }

/// FP8 E4M3 (OCP, "E4M3FN") code → float; 0x7F / 0xFF → NaN (quants_kv.h fp8_e4m3_to_f32).
__device__ __forceinline__ float fp8_e4m3_to_f32(uint8_t c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E4M3)));
#else
  const uint32_t sign = uint32_t(c & 0x80u) << 24;
  const int e = (c & 0x7f) >> 3;
  const uint32_t m = c & 7u;
  if ((c & 0x7f) == 0x7f) return __uint_as_float(0x7fc00000u);  // std::nanf("")
  if (e == 0) {
    const float v = float(m) * 0.001953125f;  // m · 2^-9
    return sign ? -v : v;
  }
  return __uint_as_float(sign | (uint32_t(e - 7 + 127) << 23) | (m << 20));
#endif
}

/// FP8 E5M2 code → float; S.11111.00 → ±inf, S.11111.xx → NaN (quants_kv.h fp8_e5m2_to_f32).
__device__ __forceinline__ float fp8_e5m2_to_f32(uint8_t c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E5M2)));
#else
  // E5M2 is the upper byte of a binary16: widen and convert (exact, inf and NaN kept).
  return f16_to_f32(uint16_t(uint16_t(c) << 8));
#endif
}

/// E2M1 code (low 4 bits, sign in bit 3) → ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
__device__ __forceinline__ float e2m1_to_f32(uint8_t code) {
  const int m = code & 7;
  const float v =
      m < 2 ? 0.5f * float(m) : float(1 << ((m >> 1) - 1)) * (1.0f + 0.5f * float(m & 1));
  return (code & 8) ? -v : v;
}

/// E8M0 scale byte b → 2^(b − 127); 255 → NaN.
__device__ __forceinline__ float e8m0_to_f32(uint8_t b) {
  return b == 255 ? __uint_as_float(0x7fc00000u) : ldexpf(1.0f, int(b) - 127);
}

/// The 6-bit scale and min of sub-block j of a q4_K / q5_K super-block (scales[12]), as
/// quants_k.cpp unpack_scale_min_k4.
__device__ __forceinline__ void k4_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace kvrun::cuda
