// hadamard.cu — one thread per (row, head): the sequential fast Walsh–Hadamard transform of
// cpu::hadamard_rotate on a local copy of the head (see hadamard.h).
#include <cmath>
#include <stdexcept>

#include "cuda/cuda_check.cuh"
#include "cuda/cuda_context_impl.cuh"
#include "cuda/hadamard.h"

namespace kvrun::cuda {
namespace {

constexpr int kMaxHead = 256;

__global__ void k_hadamard(const float* x, float* y, int64_t n_vec, int n, float scale) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_vec) return;
  float v[kMaxHead];
  for (int j = 0; j < n; ++j) v[j] = x[i * n + j];
  for (int len = 1; len < n; len <<= 1)
    for (int b = 0; b < n; b += 2 * len)
      for (int j = b; j < b + len; ++j) {
        const float a = v[j], c = v[j + len];
        v[j] = __fadd_rn(a, c);
        v[j + len] = __fsub_rn(a, c);
      }
  for (int j = 0; j < n; ++j) y[i * n + j] = __fmul_rn(v[j], scale);
}

}  // namespace

void hadamard_rotate(Context& ctx, const float* x, float* y, int64_t rows, int64_t n_heads,
                     int64_t head_dim) {
  if (head_dim <= 0 || head_dim > kMaxHead || (head_dim & (head_dim - 1)) != 0)
    throw std::invalid_argument("cuda hadamard_rotate: head_dim must be a power of two <= 256");
  const int64_t n_vec = rows * n_heads;
  if (n_vec <= 0) return;
  Context::Impl& c = ctx.impl();
  c.activate();
  const float scale = float(1.0 / std::sqrt(double(head_dim)));
  k_hadamard<<<grid_for(n_vec, 64), 64, 0, c.stream>>>(x, y, n_vec, int(head_dim), scale);
  check_launch("hadamard_rotate");
}

}  // namespace kvrun::cuda
