// quants_kv.h — the KV-cache formats: FP8 E4M3 / E5M2 (plain and with a power-of-two scale per
// vector) and NVFP4 (with its FP32 second-level scale). Scalar reference codecs; the oracle for
// the SIMD and CUDA kernels.
//
// Sources:
//  * OCP 8-bit Floating Point Specification (OFP8), Revision 1.0 (2023):
//      E4M3 ("E4M3FN"): 1 sign, 4 exponent (bias 7), 3 mantissa bits. No infinities; the only
//        NaNs are S.1111.111 (0x7F, 0xFF). Max finite ±448 (S.1111.110). Subnormals
//        (exponent field 0): ±m/8 · 2^-6, smallest 2^-9.
//      E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-like: S.11111.00 = ±inf,
//        S.11111.{01,10,11} = NaN. Max finite ±57344 (S.11110.11). Subnormals ±m/4 · 2^-14,
//        smallest 2^-16.
//  * OCP Microscaling Formats (MX) Specification v1.0 (2023): E8M0 scale = an unsigned 8-bit
//    exponent, value 2^(b - 127) for b in 0..254; b = 255 is NaN.
//  * NVIDIA's NVFP4 format (NVIDIA Blackwell documentation and the "Introducing NVFP4" technical
//    blog, 2025): E2M1 elements (1 sign, 2 exponent bits with bias 1, 1 mantissa bit; magnitudes
//    {0, 0.5, 1, 1.5, 2, 3, 4, 6}, no inf/NaN) in micro-blocks of 16 sharing one FP8 E4M3 scale,
//    plus one FP32 second-level scale per tensor (here: per vector, held by the container).
//
// Conversions to these formats round to nearest, ties to even, and saturate ("satfinite", as
// NVIDIA's __NV_SATFINITE conversions): a finite value beyond the largest finite magnitude
// becomes ±max. kvrun's choice for infinities: ±inf also saturates to ±max in both FP8 formats
// (E5M2 can represent inf, but a KV cache must stay finite). NaN becomes a NaN code (0x7F / 0xFF,
// sign kept). -0 stays -0.
#pragma once

#include <cstdint>

#include "blocks.h"
#include "dtype.h"

namespace kvrun {

constexpr float kFp8E4M3Max = 448.0f;    ///< largest finite E4M3 magnitude (code 0x7E)
constexpr float kFp8E5M2Max = 57344.0f;  ///< largest finite E5M2 magnitude (code 0x7B)
constexpr float kE2M1Max = 6.0f;         ///< largest E2M1 magnitude (code 0x7)
constexpr uint8_t kE8M0Unit = 127;       ///< E8M0 byte of the scale 2^0 = 1

/// float → FP8 E4M3 code; round to nearest even, saturating to ±448 (±inf too), NaN → 0x7F|sign.
uint8_t fp8_e4m3_from_f32(float x);
/// FP8 E4M3 code → float (exact); 0x7F / 0xFF → NaN.
float fp8_e4m3_to_f32(uint8_t c);
/// float → FP8 E5M2 code; round to nearest even, saturating to ±57344 (±inf too: kvrun's
/// choice), NaN → 0x7F|sign.
uint8_t fp8_e5m2_from_f32(float x);
/// FP8 E5M2 code → float (exact); 0x7C / 0xFC → ±inf, other S.11111.xx codes → NaN.
float fp8_e5m2_to_f32(uint8_t c);

/// E2M1 code (bits 0..3, sign in bit 3; higher bits ignored) → float: ±{0,0.5,1,1.5,2,3,4,6}.
float e2m1_to_f32(uint8_t code);
/// float → E2M1 code (0..15): nearest level, ties to the even code, saturating at ±6; the sign
/// bit is kept (so -0.1 → 0x8, which decodes to -0). NaN → 0.
uint8_t e2m1_from_f32(float x);

/// E8M0 byte → its scale 2^(b - 127) as a float (b = 255, E8M0's NaN, gives NaN). Scales below
/// 2^-126 are float subnormals, still exact down to 2^-127.
float e8m0_to_f32(uint8_t b);

/// Quantizes one vector of `n` floats to FP8 (`t` = DType::FP8_E4M3 or DType::FP8_E5M2; any
/// other type aborts) with a per-vector power-of-two scale. Picks the smallest e in -127..127
/// with absmax(x) / 2^e <= the format's max finite (so no finite value saturates), writes
/// q[i] = fp8(x[i] / 2^e) and returns the E8M0 byte b = e + 127. All-zero input gives b = 127
/// (scale 1). Non-finite inputs are left out of the absmax: NaN → a NaN code, ±inf → ±max.
uint8_t quantize_row_fp8_scaled(DType t, const float* x, uint8_t* q, int64_t n);

/// Inverse of quantize_row_fp8_scaled: y[i] = fp8(q[i]) * 2^(b - 127).
void dequantize_row_fp8_scaled(DType t, const uint8_t* q, uint8_t b, float* y, int64_t n);

/// Quantizes `n` floats (a multiple of QK_NVFP4 = 16) to NVFP4 blocks with second-level scale
/// s2 = absmax(x) / (6 · 448) (nudged up by float ulps if needed so that every block scale
/// absmax_block / 6 / s2 is <= 448; s2 = 1 when absmax is 0). Returns s2, which the caller
/// stores next to the blocks. Block scale: with t = absmax_block / 6 / s2 (float arithmetic),
/// the E4M3 neighbours lo = the largest E4M3 value <= t (rounded down) and hi = the next code up
/// (rounded up) are both tried and the one whose block has the smaller squared error is kept (lo
/// on a tie; an all-zero block gets scale 0). Elements: the nearest E2M1 level of
/// x / (s2 · scale), ties to the even code, saturating at ±6.
float quantize_row_nvfp4_scaled(const float* x, block_nvfp4* y, int64_t n);

/// Decodes NVFP4 blocks: y = (s2 · e4m3(block.scale)) · e2m1(code); `n` a multiple of 16.
void dequantize_row_nvfp4_scaled(const block_nvfp4* x, float s2, float* y, int64_t n);

/// Quantizes `n` floats to NVFP4 blocks for a given second-level scale `s2` (> 0); the block
/// codec used by quantize_row_nvfp4_scaled and, with s2 = 1, by quantize_row_nvfp4. Block
/// scales beyond 448 saturate (then elements saturate at ±6).
void quantize_row_nvfp4_with_s2(const float* x, float s2, block_nvfp4* y, int64_t n);

}  // namespace kvrun
