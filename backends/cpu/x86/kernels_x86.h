// kernels_x86.h — the x86 SIMD kernels of each level (namespaces avx2 and avx512), with the
// signatures of vec_dot.h. Each is bit-identical to the scalar kernel of the same name
// (kernels_x86.inl says why); call them only when cpu_level_supported() says so.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/simd_kernels.h"

#define KVRUN_X86_KERNEL_DECLS                                                                  \
  KVRUN_SIMD_KERNEL_DECLS                                                                       \
  /* packed_q5_K_q8_K: avx512's runs avx2's for prefill rows (packed_q4k_avx512.inl) */         \
  std::remove_pointer_t<PackedTileFn> packed_q4_0_q8_0, packed_q8_0_q8_0, packed_q4_K_q8_K,     \
      packed_q5_K_q8_K, packed_q6_K_q8_K;                                                       \
  /* the fast-order prefill kernels (packed_fast_avx2.inl, packed_fast_avx512.inl) */           \
  std::remove_pointer_t<PackedTileFn> packed_fast_q8_0_q8_0, packed_fast_q4_K_q8_K,             \
      packed_fast_q6_K_q8_K;                                                                    \
  /* packed mxfp4 (packed_mxfp4.inl), both levels */                                            \
  std::remove_pointer_t<PackedTileFn> packed_mxfp4_q8_0;                                        \
  /* fast-order mxfp4 and q5_K (both levels) */                                                 \
  std::remove_pointer_t<PackedTileFn> packed_fast_mxfp4_q8_0, packed_fast_q5_K_q8_K;            \
  /* x86 only so far (iq_x86.inl, kernels_x86.inl; NEON uses the scalar dots) */                \
  std::remove_pointer_t<VecDotFn> vec_dot_mxfp4_q8_0, vec_dot_iq4_xs_q8_K, vec_dot_q4_1_q8_1,   \
      vec_dot_q5_1_q8_1;                                                                        \
  std::remove_pointer_t<DotTileFn> tile_mxfp4_q8_0, tile_iq4_xs_q8_K, tile_q4_1_q8_1,           \
      tile_q5_1_q8_1;                                                                           \
  /* grid i-quants (iq_grid_x86.inl) */                                                         \
  std::remove_pointer_t<VecDotFn> vec_dot_iq3_s_q8_K, vec_dot_iq2_s_q8_K, vec_dot_iq3_xxs_q8_K, \
      vec_dot_iq2_xxs_q8_K, vec_dot_iq2_xs_q8_K, vec_dot_iq1_s_q8_K, vec_dot_iq1_m_q8_K;        \
  std::remove_pointer_t<DotTileFn> tile_iq3_s_q8_K, tile_iq2_s_q8_K, tile_iq3_xxs_q8_K,         \
      tile_iq2_xxs_q8_K, tile_iq2_xs_q8_K, tile_iq1_s_q8_K, tile_iq1_m_q8_K;

namespace kvrun::cpu::avx2 {
KVRUN_X86_KERNEL_DECLS
}  // namespace kvrun::cpu::avx2

namespace kvrun::cpu::avx512 {
KVRUN_X86_KERNEL_DECLS
}  // namespace kvrun::cpu::avx512

#undef KVRUN_X86_KERNEL_DECLS
