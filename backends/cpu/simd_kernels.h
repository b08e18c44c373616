// simd_kernels.h — the kernel set every SIMD level defines in its own namespace (x86: avx2 and
// avx512, kernels_x86.h; AArch64: neon, kernels_neon.h), with the signatures of vec_dot.h and
// op_kernels.h: the element-wise kernels, the activation converters, the single-row dots and
// their tiles. cpu_traits.cpp and op_kernels.cpp wire a level's namespace into its tables.
// Levels may add kernels of their own (x86: the packed-weight kernels of pack.h).
#pragma once

#include <type_traits>

#include "cpu/op_kernels.h"
#include "cpu/vec_dot.h"

// Each kernel is declared with the function type of its table entry (SiluMulFn, VecDotFn, …),
// so a kernel set cannot drift from the signatures the tables hold.
#define KVRUN_SIMD_KERNEL_DECLS                                                                    \
  std::remove_pointer_t<SiluMulFn> silu_mul;                                                       \
  std::remove_pointer_t<ExpBlocksFn> exp_blocks;                                                   \
  std::remove_pointer_t<RopeRotateFn> rope_rotate;                                                 \
  std::remove_pointer_t<F16ToF32Fn> f16_to_f32;                                                    \
  std::remove_pointer_t<ActFromFloatFn> act_from_float_f16, act_from_float_q8_0,                   \
      act_from_float_q8_K;                                                                         \
  std::remove_pointer_t<VecDotFn> vec_dot_f32, vec_dot_f16, vec_dot_bf16, gemm_dot_f32,            \
      gemm_dot_f16, vec_dot_q4_0_q8_0, vec_dot_q5_0_q8_0, vec_dot_q8_0_q8_0, repack_dot_q4_0_q8_0, \
      vec_dot_q4_K_q8_K, vec_dot_q5_K_q8_K, vec_dot_q6_K_q8_K;                                     \
  std::remove_pointer_t<DotTileFn> tile_gemm_f32, tile_gemm_f16, tile_q4_0_q8_0, tile_q5_0_q8_0,   \
      tile_q8_0_q8_0, tile_repack_q4_0_q8_0, tile_q4_K_q8_K, tile_q5_K_q8_K, tile_q6_K_q8_K;
