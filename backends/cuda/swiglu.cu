// swiglu.cu — element-wise SiLU(gate) · up (see swiglu.h).
#include "cuda/cuda_check.cuh"
#include "cuda/cuda_context_impl.cuh"
#include "cuda/swiglu.h"

namespace kvrun::cuda {
namespace {

__global__ void k_swiglu(const float* gate, const float* up, float* out, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  out[i] = g / (1.0f + expf(-g)) * up[i];
}

}  // namespace

void swiglu(Context& ctx, const float* gate, const float* up, float* out, int64_t n) {
  if (n <= 0) return;
  Context::Impl& c = ctx.impl();
  c.activate();
  k_swiglu<<<grid_for(n, 256), 256, 0, c.stream>>>(gate, up, out, n);
  check_launch("swiglu");
}

}  // namespace kvrun::cuda
