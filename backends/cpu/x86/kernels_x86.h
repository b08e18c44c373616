// kernels_x86.h — the x86 SIMD kernels of each level (namespaces avx2 and avx512), with the
// signatures of vec_dot.h. Each is bit-identical to the scalar kernel of the same name
// (kernels_x86.inl says why); call them only when cpu_level_supported() says so.
#pragma once

#include <cstddef>
#include <cstdint>

#define KVRUN_X86_KERNEL_DECLS                                                                     \
  void silu_mul(const float* gate, const float* up, float* out, int64_t n);                        \
  double exp_blocks(const float* x, float* y, int64_t n, float max);                               \
  void rope_rotate(float* v, const float* cs, const float* sn, int64_t half, bool neox);           \
  void f16_to_f32(const uint16_t* src, float* dst, int64_t n);                                     \
  void act_from_float_f16(const float* src, void* dst, int64_t n);                                 \
  void act_from_float_q8_0(const float* src, void* dst, int64_t n);                                \
  void act_from_float_q8_K(const float* src, void* dst, int64_t n);                                \
  float vec_dot_f32(int64_t n, const void* w, const void* x);                                      \
  float vec_dot_f16(int64_t n, const void* w, const void* x);                                      \
  float vec_dot_bf16(int64_t n, const void* w, const void* x);                                     \
  float gemm_dot_f32(int64_t n, const void* w, const void* x);                                     \
  float gemm_dot_f16(int64_t n, const void* w, const void* x);                                     \
  float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* x);                                \
  float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* x);                                \
  float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* x);                                \
  float repack_dot_q4_0_q8_0(int64_t n, const void* w, const void* x);                             \
  float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* x);                                \
  float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* x);                                \
  float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* x);                                \
  void tile_gemm_f32(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs, \
                     int64_t nx, float* y, size_t ys);                                             \
  void tile_gemm_f16(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs, \
                     int64_t nx, float* y, size_t ys);                                             \
  void tile_q4_0_q8_0(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x,           \
                      size_t xs, int64_t nx, float* y, size_t ys);                                 \
  void tile_q5_0_q8_0(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x,           \
                      size_t xs, int64_t nx, float* y, size_t ys);                                 \
  void tile_q8_0_q8_0(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x,           \
                      size_t xs, int64_t nx, float* y, size_t ys);                                 \
  void tile_repack_q4_0_q8_0(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x,    \
                             size_t xs, int64_t nx, float* y, size_t ys);                          \
  void tile_q4_K_q8_K(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x,           \
                      size_t xs, int64_t nx, float* y, size_t ys);                                 \
  void tile_q5_K_q8_K(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x,           \
                      size_t xs, int64_t nx, float* y, size_t ys);                                 \
  void tile_q6_K_q8_K(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x,           \
                      size_t xs, int64_t nx, float* y, size_t ys);                                 \
  void packed_q4_0_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,      \
                        const int32_t* xoff, int64_t nx, float* y, size_t ys);                     \
  /* packed_q8_0_q8_0 is defined at the avx512 level only (it needs VNNI) */                       \
  void packed_q8_0_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,      \
                        const int32_t* xoff, int64_t nx, float* y, size_t ys);                     \
  /* packed_q6_K_q8_K is defined at the avx512 level only (VNNI, zmm) */                           \
  void packed_q6_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,      \
                        const int32_t* xoff, int64_t nx, float* y, size_t ys);

namespace kvrun::cpu::avx2 {
KVRUN_X86_KERNEL_DECLS
}  // namespace kvrun::cpu::avx2

namespace kvrun::cpu::avx512 {
KVRUN_X86_KERNEL_DECLS
}  // namespace kvrun::cpu::avx512

#undef KVRUN_X86_KERNEL_DECLS
