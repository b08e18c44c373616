// eltwise.cu — scale, softcap, add_row, copy_cols and GeGLU (see eltwise.h).
#include <cuda_fp16.h>

#include "cuda/cuda_check.cuh"
#include "cuda/cuda_context_impl.cuh"
#include "cuda/eltwise.h"

namespace kvrun::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void k_scale(float* x, int64_t n, float s) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

__global__ void k_softcap(float* x, int64_t n, float inv, float cap) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = tanhf(x[i] * inv) * cap;
}

__global__ void k_add_row(float* y, const float* row, int64_t n, int64_t cols) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += row[i % cols];
}

__global__ void k_copy_cols(const float* src, int64_t cols, int64_t c0, int64_t w, int64_t n,
                            float* dst) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[(i / w) * cols + c0 + i % w];
}

__device__ float gelu_f16(float x) {
  constexpr float kCoefA = 0.044715f, kSqrt2OverPi = 0.79788456080286535587989211986876f;
  const float h = __half2float(__float2half_rn(x));
  const float g = 0.5f * h * (1.0f + tanhf(kSqrt2OverPi * h * (1.0f + kCoefA * h * h)));
  return __half2float(__float2half_rn(g));
}

__global__ void k_geglu(const float* gate, const float* up, float* out, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = gate[i];
  const float g = x <= -10.0f ? 0.0f : x >= 10.0f ? x : gelu_f16(x);
  out[i] = g * up[i];
}

cudaStream_t stream(Context& ctx) {
  Context::Impl& c = ctx.impl();
  c.activate();
  return c.stream;
}

}  // namespace

void scale(Context& ctx, float* x, int64_t n, float s) {
  if (n <= 0) return;
  k_scale<<<grid_for(n, kThreads), kThreads, 0, stream(ctx)>>>(x, n, s);
  check_launch("scale");
}

void softcap(Context& ctx, float* x, int64_t n, float cap) {
  if (n <= 0) return;
  k_softcap<<<grid_for(n, kThreads), kThreads, 0, stream(ctx)>>>(x, n, 1.0f / cap, cap);
  check_launch("softcap");
}

void add_row(Context& ctx, float* y, const float* row, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t n = rows * cols;
  k_add_row<<<grid_for(n, kThreads), kThreads, 0, stream(ctx)>>>(y, row, n, cols);
  check_launch("add_row");
}

void copy_cols(Context& ctx, const float* src, int64_t rows, int64_t cols, int64_t c0, int64_t n,
               float* dst) {
  if (rows <= 0 || n <= 0) return;
  const int64_t total = rows * n;
  k_copy_cols<<<grid_for(total, kThreads), kThreads, 0, stream(ctx)>>>(src, cols, c0, n, total,
                                                                       dst);
  check_launch("copy_cols");
}

void geglu(Context& ctx, const float* gate, const float* up, float* out, int64_t n) {
  if (n <= 0) return;
  k_geglu<<<grid_for(n, kThreads), kThreads, 0, stream(ctx)>>>(gate, up, out, n);
  check_launch("geglu");
}

}  // namespace kvrun::cuda
