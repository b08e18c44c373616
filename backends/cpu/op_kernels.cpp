// op_kernels.cpp — the per-level element-wise kernel tables (see op_kernels.h).
#include "cpu/op_kernels.h"

#include <cmath>

#include "cpu/fast_exp.h"
#include "cpu/vec_dot.h"

#if defined(__x86_64__)
#include "cpu/x86/kernels_x86.h"
#endif
#if defined(__aarch64__)
#include "cpu/arm/kernels_neon.h"
#endif

namespace kvrun::cpu {

namespace {

void silu_mul_scalar(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu_lane(gate[i]) * up[i];
}

double exp_blocks_scalar(const float* x, float* y, int64_t n, float max) {
  double sum = 0.0;
  for (int64_t i = 0; i + kExpBlock <= n; i += kExpBlock) {
    float v[kExpBlock];
    for (int64_t l = 0; l < kExpBlock; ++l) v[l] = expf_lane(x[i + l] - max);
    for (int64_t l = 0; l < kExpBlock; ++l) y[i + l] = v[l];
    float h[8], q[4];
    for (int l = 0; l < 8; ++l) h[l] = v[l + 8] + v[l];
    for (int l = 0; l < 4; ++l) q[l] = h[l + 4] + h[l];
    sum += double((q[0] + q[2]) + (q[1] + q[3]));
  }
  return sum;
}

void rope_rotate_scalar(float* v, const float* cs, const float* sn, int64_t half, bool neox) {
  for (int64_t i = 0; i < half; ++i) rope_rotate_pair(v, cs, sn, half, neox, i);
}

void f16_to_f32_scalar(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_lut(src[i]);
}

constexpr OpKernels kScalar = {silu_mul_scalar, exp_blocks_scalar, rope_rotate_scalar,
                               f16_to_f32_scalar};
#if defined(__x86_64__)
constexpr OpKernels kAvx2 = {avx2::silu_mul, avx2::exp_blocks, avx2::rope_rotate, avx2::f16_to_f32};
constexpr OpKernels kAvx512 = {avx512::silu_mul, avx512::exp_blocks, avx512::rope_rotate,
                               avx512::f16_to_f32};
#endif
#if defined(__aarch64__)
constexpr OpKernels kNeon = {neon::silu_mul, neon::exp_blocks, neon::rope_rotate, neon::f16_to_f32};
#endif

}  // namespace

const OpKernels& op_kernels(CpuLevel level) {
#if defined(__x86_64__)
  if (level == CpuLevel::avx512) return kAvx512;
  if (level == CpuLevel::avx2) return kAvx2;
#endif
#if defined(__aarch64__)
  if (level == CpuLevel::neon) return kNeon;
#endif
  (void)level;
  return kScalar;
}

const OpKernels& op_kernels() {
  static const OpKernels& k = op_kernels(cpu_level());
  return k;
}

}  // namespace kvrun::cpu
