// add.cu — y += x, 16-byte loads for the aligned body (see add.h).
#include <cstdint>

#include "cuda/add.h"
#include "cuda/cuda_check.cuh"
#include "cuda/cuda_context_impl.cuh"

namespace kvrun::cuda {
namespace {

__global__ void k_add4(float4* y, const float4* x, int64_t n4) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  float4 a = y[i];
  const float4 b = x[i];
  a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
  y[i] = a;
}

__global__ void k_add(float* y, const float* x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

}  // namespace

void add(Context& ctx, float* y, const float* x, int64_t n) {
  if (n <= 0) return;
  Context::Impl& c = ctx.impl();
  c.activate();
  const bool aligned = (reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(x)) % 16 == 0;
  if (aligned && n % 4 == 0)
    k_add4<<<grid_for(n / 4, 256), 256, 0, c.stream>>>(reinterpret_cast<float4*>(y),
                                                       reinterpret_cast<const float4*>(x), n / 4);
  else
    k_add<<<grid_for(n, 256), 256, 0, c.stream>>>(y, x, n);
  check_launch("add");
}

}  // namespace kvrun::cuda
