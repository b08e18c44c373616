// kernels_neon.h — the AArch64 NEON kernels (CpuLevel::neon), with the signatures of vec_dot.h.
// Each is bit-identical to the scalar kernel of the same name (kernels_neon.cpp says why). The
// level covers the f32/f16 dots, the q4_0 and q8_0 dots against q8_0 activations and the q4_K
// and q6_K dots against q8_K, with both activation quantizers, and the element-wise kernels of
// op_kernels.h; every other table entry of the neon level is the scalar kernel (cpu_traits.cpp).
#pragma once

#include <cstdint>

namespace kvrun::cpu::neon {

void act_from_float_q8_0(const float* src, void* dst, int64_t n);
float vec_dot_f32(int64_t n, const void* w, const void* x);
float vec_dot_f16(int64_t n, const void* w, const void* x);
float gemm_dot_f32(int64_t n, const void* w, const void* x);
float gemm_dot_f16(int64_t n, const void* w, const void* x);
float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* x);
float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* x);
float repack_dot_q4_0_q8_0(int64_t n, const void* w, const void* x);
void act_from_float_q8_K(const float* src, void* dst, int64_t n);
float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* x);
float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* x);
// The element-wise kernels of op_kernels.h.
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
double exp_blocks(const float* x, float* y, int64_t n, float max);
void rope_rotate(float* v, const float* cs, const float* sn, int64_t half, bool neox);
void f16_to_f32(const uint16_t* src, float* dst, int64_t n);

}  // namespace kvrun::cpu::neon
