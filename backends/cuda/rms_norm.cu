// rms_norm.cu — one block of 256 threads per row (see rms_norm.h).
#include "cuda/cuda_check.cuh"
#include "cuda/cuda_context_impl.cuh"
#include "cuda/rms_norm.h"

namespace kvrun::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void k_rms_norm(const float* x, const float* w, float* y, int64_t cols, float eps) {
  const float* xr = x + int64_t(blockIdx.x) * cols;
  float* yr = y + int64_t(blockIdx.x) * cols;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) sum += double(xr[i] * xr[i]);
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  __shared__ double warp_sums[kThreads / 32];
  __shared__ float s_scale;
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0.0;
    for (int i = 0; i < kThreads / 32; ++i) t += warp_sums[i];
    const float mean = float(t / double(cols));
    s_scale = 1.0f / sqrtf(mean + eps);
  }
  __syncthreads();
  const float scale = s_scale;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads)
    yr[i] = w ? (xr[i] * scale) * w[i] : xr[i] * scale;
}

}  // namespace

void rms_norm(Context& ctx, const float* x, const float* w, float* y, int64_t rows, int64_t cols,
              float eps) {
  if (rows <= 0 || cols <= 0) return;
  Context::Impl& c = ctx.impl();
  c.activate();
  k_rms_norm<<<unsigned(rows), kThreads, 0, c.stream>>>(x, w, y, cols, eps);
  check_launch("rms_norm");
}

}  // namespace kvrun::cuda
