// rope.cu — one block per (token, group of heads): thread i builds θ_i by the CPU's i sequential
// f32 products (every thread its own chain, so no thread waits on another's), then the block
// rotates the pairs of its heads (see rope.h).
#include <cmath>
#include <stdexcept>

#include "cuda/cuda_check.cuh"
#include "cuda/cuda_context_impl.cuh"
#include "cuda/rope.h"

namespace kvrun::cuda {
namespace {

constexpr int kThreads = 256;

/// Heads one block rotates: as many as its threads cover pair for pair (at least one).
int heads_per_block(int half) { return half >= kThreads ? 1 : kThreads / half; }

__global__ void k_rope(float* x, int n_heads, int64_t head_dim, const int32_t* pos, int half,
                       int hpb, float theta_scale, float freq_scale, float mscale, const float* ff,
                       bool neox) {
  extern __shared__ float sh[];  // [half] cos, [half] sin
  float* cs = sh;
  float* sn = sh + half;
  const int64_t t = blockIdx.x;
  const float p = float(pos[t]);
  for (int i = threadIdx.x; i < half; i += kThreads) {
    // θ_i = pos · s^i as the CPU forms it: i rounded products in order (bit-equal angles).
    float theta = p;
    for (int j = 0; j < i; ++j) theta = __fmul_rn(theta, theta_scale);
    const float th =
        ff ? __fmul_rn(freq_scale, __fdiv_rn(theta, ff[i])) : __fmul_rn(freq_scale, theta);
    float s, c;
    sincosf(th, &s, &c);
    cs[i] = mscale != 1.0f ? c * mscale : c;
    sn[i] = mscale != 1.0f ? s * mscale : s;
  }
  __syncthreads();
  const int h0 = int(blockIdx.y) * hpb, nh = min(hpb, n_heads - h0);
  float* xt = x + (t * n_heads + h0) * head_dim;
  for (int w = threadIdx.x; w < nh * half; w += kThreads) {
    const int h = w / half, i = w % half;
    float* v = xt + h * head_dim;
    const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
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
  const int hpb = heads_per_block(half);
  const dim3 grid(unsigned(n_tokens), unsigned((n_heads + hpb - 1) / hpb));
  k_rope<<<grid, kThreads, size_t(2 * half) * sizeof(float), c.stream>>>(
      x, int(n_heads), head_dim, pos, half, hpb, theta_scale, p.freq_scale, p.mscale,
      p.freq_factors, p.neox);
  check_launch("rope");
}

}  // namespace kvrun::cuda
