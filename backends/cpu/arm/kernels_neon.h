// kernels_neon.h — the AArch64 NEON kernels (CpuLevel::neon): the kernel set of simd_kernels.h.
// Each is bit-identical to the scalar kernel of the same name (the scalar code's lanes and folds,
// neon_lanes.h). Baseline Armv8-A Advanced SIMD (the packed kernels' SDOT path only runs when the
// CPU reports the dot-product extension), so the level runs on every AArch64 CPU. The level covers
// the dots and tiles of the types x86 has (f32, f16, bf16, q4_0 also in the repacked order, q5_0,
// q8_0, q4_K, q5_K, q6_K), the f16 converter and the q8_0 / q8_K quantizers, and the element-wise
// kernels; the other table entries of the level are the scalar kernels (cpu_traits.cpp).
// Packed-weight kernels (pack.h) exist for q4_0, q8_0, mxfp4, q4_K, q5_K and q6_K (packed_neon.cpp;
// SDOT when the CPU has it, detected at run time, the same floats). Paged attention's decode kernel
// (flash_decode.cpp) is its portable 4-lane copy, which GCC compiles to Advanced SIMD on AArch64.
#pragma once

#include "cpu/simd_kernels.h"

namespace kvrun::cpu::neon {
// kernels_neon_float.cpp: the f16 converter, the f32/f16/bf16 dots and the gemm tiles;
// kernels_neon_quant.cpp: the q8_0/q8_K quantizers, the quantized dots and their tiles;
// kernels_neon_ops.cpp: the element-wise kernels.
KVRUN_SIMD_KERNEL_DECLS
// packed_neon.cpp: the packed-weight kernels (PackedTileFn, vec_dot.h), bit-identical to
// repack_dot_q4_0_q8_0, vec_dot_q8_0_q8_0, vec_dot_mxfp4_q8_0, vec_dot_q4_K_q8_K,
// vec_dot_q5_K_q8_K and vec_dot_q6_K_q8_K.
std::remove_pointer_t<PackedTileFn> packed_q4_0_q8_0, packed_q8_0_q8_0, packed_mxfp4_q8_0,
    packed_q4_K_q8_K, packed_q5_K_q8_K, packed_q6_K_q8_K;
}  // namespace kvrun::cpu::neon
