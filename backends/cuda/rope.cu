// rope.cu — one block per token: thread 0 builds the θ chain in shared memory (the CPU's
// sequential f32 products), then all threads rotate the pairs of every head (see rope.h).
#include <cmath>
#include <stdexcept>

#include "cuda/cuda_check.cuh"
#include "cuda/cuda_context_impl.cuh"
#include "cuda/rope.h"

namespace kvrun::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void k_rope(float* x, int64_t n_heads, int64_t head_dim, const int32_t* pos, int half,
                       float theta_scale, float freq_scale, float mscale, const float* ff,
                       bool neox) {
  extern __shared__ float sh[];  // [half] cos, [half] sin
  float* cs = sh;
  float* sn = sh + half;
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {
    float theta = float(pos[t]);
    for (int i = 0; i < half; ++i) {
      const float f = ff ? ff[i] : 1.0f;
      cs[i] = __fmul_rn(freq_scale, __fdiv_rn(theta, f));  // th, turned into cos/sin below
      theta = __fmul_rn(theta, theta_scale);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < half; i += kThreads) {
    sincosf(cs[i], &sn[i], &cs[i]);
    if (mscale != 1.0f) {
      cs[i] *= mscale;
      sn[i] *= mscale;
    }
  }
  __syncthreads();
  float* xt = x + t * n_heads * head_dim;
  for (int64_t w = threadIdx.x; w < n_heads * half; w += kThreads) {
    const int64_t h = w / half;
    const int i = int(w % half);
    float* v = xt + h * head_dim;
    const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    const float x0 = v[i0], x1 = v[i1];
    v[i0] = fmaf(x0, cs[i], -__fmul_rn(x1, sn[i]));
    v[i1] = fmaf(x0, sn[i], __fmul_rn(x1, cs[i]));
  }
}

}  // namespace

void rope(Context& ctx, float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          const int32_t* pos, const RopeParams& p) {
  if (p.n_rot <= 0 || p.n_rot % 2 != 0 || p.n_rot > head_dim)
    throw std::invalid_argument("cuda rope: n_rot must be even, positive and <= head_dim");
  if (n_tokens <= 0 || n_heads <= 0) return;
  Context::Impl& c = ctx.impl();
  c.activate();
  const int half = int(p.n_rot / 2);
  const float theta_scale = std::pow(p.freq_base, -2.0f / float(p.n_rot));
  k_rope<<<unsigned(n_tokens), kThreads, size_t(2 * half) * sizeof(float), c.stream>>>(
      x, n_heads, head_dim, pos, half, theta_scale, p.freq_scale, p.mscale, p.freq_factors, p.neox);
  check_launch("rope");
}

}  // namespace kvrun::cuda
