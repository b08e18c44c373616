// simd_kernels.h — the kernel set every SIMD level defines in its own namespace (x86: avx2 and
// avx512, kernels_x86.h; AArch64: neon, kernels_neon.h), with the signatures of vec_dot.h and
// op_kernels.h: the element-wise kernels, the activation converters, the single-row dots and
// their tiles. cpu_traits.cpp and op_kernels.cpp wire a level's namespace into its tables.
// Levels may add kernels of their own (x86: the packed-weight kernels of pack.h).
#pragma once

#include <cstddef>
#include <cstdint>

#define KVRUN_SIMD_KERNEL_DECLS                                                                    \
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
                      size_t xs, int64_t nx, float* y, size_t ys);
