// quants.h — scalar reference codecs of every block format (declarations).
//
// Each `dequantize_row_X` decodes `n` values (n a multiple of the block size) from blocks of X;
// each `quantize_row_X` is kvrun's own reference quantizer producing valid blocks of X. These
// are the functions the traits table (dtype.cpp) points at, and the oracle for SIMD and CUDA
// kernels. Layouts: blocks.h. Decoders are bit-exact with GGUF's definitions; the quantizers
// are kvrun's own (absmax or min/max rules for the legacy formats, a least-squares scale search
// for iq4_nl, iq4_xs, mxfp4 and the K-quants), not copies of llama.cpp's.
#pragma once

#include <cstdint>

#include "blocks.h"
#include "dtype.h"

namespace kvrun {

// Plain float formats (one element per "block").
void dequantize_row_f32(const void* src, float* dst, int64_t n);
void quantize_row_f32(const float* src, void* dst, int64_t n);
void dequantize_row_f16(const void* src, float* dst, int64_t n);
void quantize_row_f16(const float* src, void* dst, int64_t n);
void dequantize_row_bf16(const void* src, float* dst, int64_t n);
void quantize_row_bf16(const float* src, void* dst, int64_t n);
void dequantize_row_f64(const void* src, float* dst, int64_t n);
void quantize_row_f64(const float* src, void* dst, int64_t n);

// Legacy GGUF block quants (quants_legacy.cpp).
void dequantize_row_q4_0(const void* src, float* dst, int64_t n);
void quantize_row_q4_0(const float* src, void* dst, int64_t n);
void dequantize_row_q4_1(const void* src, float* dst, int64_t n);
void quantize_row_q4_1(const float* src, void* dst, int64_t n);
void dequantize_row_q5_0(const void* src, float* dst, int64_t n);
void quantize_row_q5_0(const float* src, void* dst, int64_t n);
void dequantize_row_q5_1(const void* src, float* dst, int64_t n);
void quantize_row_q5_1(const float* src, void* dst, int64_t n);
void dequantize_row_q8_0(const void* src, float* dst, int64_t n);
void quantize_row_q8_0(const float* src, void* dst, int64_t n);
void dequantize_row_q8_1(const void* src, float* dst, int64_t n);
void quantize_row_q8_1(const float* src, void* dst, int64_t n);
void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n);
void quantize_row_iq4_nl(const float* src, void* dst, int64_t n);
// The other 4-bit non-linear formats (quants_legacy.cpp too: they share iq4_nl's level search).
void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n);
void quantize_row_iq4_xs(const float* src, void* dst, int64_t n);
void dequantize_row_mxfp4(const void* src, float* dst, int64_t n);
void quantize_row_mxfp4(const float* src, void* dst, int64_t n);

// Grid-based i-quants (quants_iq.cpp; grids in iq_grids.h): decoders only. kvrun has no
// quantizer for them (their traits' from_float is null); `kvrun synth` writes random valid
// blocks of them instead (tools/synth).
void dequantize_row_iq3_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq2_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq3_xxs(const void* src, float* dst, int64_t n);
void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n);
void dequantize_row_iq2_xs(const void* src, float* dst, int64_t n);
void dequantize_row_iq1_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq1_m(const void* src, float* dst, int64_t n);

/// Fills the blocks of `n` values (a multiple of QK_K) of grid i-quant `t` (iq3_s, iq2_s, iq3_xxs,
/// iq2_xxs, iq2_xs, iq1_s, iq1_m; iq1_m's d goes into its scale words) with pseudo-random valid
/// content: every grid index, sign and scale bit drawn from `seed` (any bit pattern of these fields
/// is a valid block), each super-block's f16 d = d_mag · u, u uniform in [0.5, 1). Returns false,
/// writing nothing, for any other type. For tests and synthetic models; it is not a quantizer.
bool fill_random_iq_blocks(DType t, float d_mag, uint32_t seed, void* dst, int64_t n);

// K-quants, super-blocks of QK_K = 256 (quants_k.cpp).
void dequantize_row_q2_K(const void* src, float* dst, int64_t n);
void quantize_row_q2_K(const float* src, void* dst, int64_t n);
void dequantize_row_q3_K(const void* src, float* dst, int64_t n);
void quantize_row_q3_K(const float* src, void* dst, int64_t n);
void dequantize_row_q4_K(const void* src, float* dst, int64_t n);
void quantize_row_q4_K(const float* src, void* dst, int64_t n);
void dequantize_row_q5_K(const void* src, float* dst, int64_t n);
void quantize_row_q5_K(const float* src, void* dst, int64_t n);
void dequantize_row_q6_K(const void* src, float* dst, int64_t n);
void quantize_row_q6_K(const float* src, void* dst, int64_t n);
void dequantize_row_q8_K(const void* src, float* dst, int64_t n);
void quantize_row_q8_K(const float* src, void* dst, int64_t n);

// KV formats at unit second-level scale (quants_kv.cpp; scaled forms in quants_kv.h).
void dequantize_row_fp8_e4m3(const void* src, float* dst, int64_t n);
void quantize_row_fp8_e4m3(const float* src, void* dst, int64_t n);
void dequantize_row_fp8_e5m2(const void* src, float* dst, int64_t n);
void quantize_row_fp8_e5m2(const float* src, void* dst, int64_t n);
void dequantize_row_nvfp4(const void* src, float* dst, int64_t n);
void quantize_row_nvfp4(const float* src, void* dst, int64_t n);

}  // namespace kvrun
