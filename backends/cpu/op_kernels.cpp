// op_kernels.cpp — the per-level element-wise kernel tables (see op_kernels.h).
#include "cpu/op_kernels.h"

#include "cpu/fast_exp.h"

#if defined(__x86_64__)
#include "cpu/x86/kernels_x86.h"
#endif

namespace kvrun::cpu {

namespace {

void silu_mul_scalar(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu_lane(gate[i]) * up[i];
}

constexpr OpKernels kScalar = {silu_mul_scalar};
#if defined(__x86_64__)
constexpr OpKernels kAvx2 = {avx2::silu_mul};
constexpr OpKernels kAvx512 = {avx512::silu_mul};
#endif

}  // namespace

const OpKernels& op_kernels(CpuLevel level) {
#if defined(__x86_64__)
  if (level == CpuLevel::avx512) return kAvx512;
  if (level == CpuLevel::avx2) return kAvx2;
#endif
  (void)level;
  return kScalar;
}

const OpKernels& op_kernels() {
  static const OpKernels& k = op_kernels(cpu_level());
  return k;
}

}  // namespace kvrun::cpu
