// kernels_x86.h — the x86 SIMD kernels of each level (namespaces avx2 and avx512), with the
// signatures of vec_dot.h. Each is bit-identical to the scalar kernel of the same name
// (kernels_x86.inl says why); call them only when cpu_level_supported() says so.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/simd_kernels.h"

#define KVRUN_X86_KERNEL_DECLS                                                                \
  KVRUN_SIMD_KERNEL_DECLS                                                                     \
  void packed_q4_0_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs, \
                        const int32_t* xoff, int64_t nx, float* y, size_t ys);                \
  /* packed_q8_0_q8_0 is defined at the avx512 level only (it needs VNNI) */                  \
  void packed_q8_0_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs, \
                        const int32_t* xoff, int64_t nx, float* y, size_t ys);                \
  /* packed_q6_K_q8_K is defined at the avx512 level only (VNNI, zmm) */                      \
  void packed_q6_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs, \
                        const int32_t* xoff, int64_t nx, float* y, size_t ys);

namespace kvrun::cpu::avx2 {
KVRUN_X86_KERNEL_DECLS
}  // namespace kvrun::cpu::avx2

namespace kvrun::cpu::avx512 {
KVRUN_X86_KERNEL_DECLS
}  // namespace kvrun::cpu::avx512

#undef KVRUN_X86_KERNEL_DECLS
