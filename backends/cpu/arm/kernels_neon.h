// kernels_neon.h — the AArch64 NEON kernels (CpuLevel::neon), with the signatures of vec_dot.h
// and op_kernels.h. Each is bit-identical to the scalar kernel of the same name (the scalar
// code's lanes and folds, neon_lanes.h). Baseline Armv8-A Advanced SIMD only (no dot-product
// extension), so the level runs on every AArch64 CPU. The level covers the dots and tiles of the
// types x86 has (f32, f16, bf16, q4_0 also in the repacked order, q5_0, q8_0, q4_K, q5_K, q6_K),
// the f16 converter and the q8_0 / q8_K quantizers, and the element-wise kernels; the other table
// entries of the level are the scalar kernels (cpu_traits.cpp), and there are no packed-weight
// kernels (pack.h). Paged attention's decode kernel (flash_decode.cpp) is its portable 4-lane copy,
// which GCC compiles to Advanced SIMD on AArch64.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvrun::cpu::neon {

// kernels_neon_float.cpp
void act_from_float_f16(const float* src, void* dst, int64_t n);
float vec_dot_f32(int64_t n, const void* w, const void* x);
float vec_dot_f16(int64_t n, const void* w, const void* x);
float vec_dot_bf16(int64_t n, const void* w, const void* x);
float gemm_dot_f32(int64_t n, const void* w, const void* x);
float gemm_dot_f16(int64_t n, const void* w, const void* x);
void tile_gemm_f32(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs,
                   int64_t nx, float* y, size_t ys);
void tile_gemm_f16(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs,
                   int64_t nx, float* y, size_t ys);

// kernels_neon_quant.cpp
void act_from_float_q8_0(const float* src, void* dst, int64_t n);
void act_from_float_q8_K(const float* src, void* dst, int64_t n);
float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* x);
float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* x);
float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* x);
float repack_dot_q4_0_q8_0(int64_t n, const void* w, const void* x);
float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* x);
float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* x);
float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* x);
void tile_q4_0_q8_0(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs,
                    int64_t nx, float* y, size_t ys);
void tile_q5_0_q8_0(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs,
                    int64_t nx, float* y, size_t ys);
void tile_q8_0_q8_0(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs,
                    int64_t nx, float* y, size_t ys);
void tile_repack_q4_0_q8_0(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x,
                           size_t xs, int64_t nx, float* y, size_t ys);
void tile_q4_K_q8_K(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs,
                    int64_t nx, float* y, size_t ys);
void tile_q5_K_q8_K(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs,
                    int64_t nx, float* y, size_t ys);
void tile_q6_K_q8_K(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs,
                    int64_t nx, float* y, size_t ys);

// kernels_neon_ops.cpp
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
double exp_blocks(const float* x, float* y, int64_t n, float max);
void rope_rotate(float* v, const float* cs, const float* sn, int64_t half, bool neox);
void f16_to_f32(const uint16_t* src, float* dst, int64_t n);

}  // namespace kvrun::cpu::neon
