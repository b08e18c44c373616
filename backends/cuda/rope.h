// rope.h — rotary position embedding on the GPU, the same variants and parameters as the CPU
// op (backends/cpu/ops.h rope / RopeConfig). Plain C++ header.
#pragma once

#include <cstdint>

#include "cuda/cuda_context.h"

namespace kvrun::cuda {

/// RoPE settings (RoFormer, Su et al. 2021); fields as cpu::RopeConfig, with freq_factors in
/// device memory.
struct RopeParams {
  int64_t n_rot = 0;        ///< rotated dimensions per head (even, ≤ head_dim); the rest pass
  float freq_base = 10000;  ///< θ_i = pos · freq_scale · base^(−2i/n_rot) / freq_factors[i]
  float freq_scale = 1;     ///< linear position scaling (1 / rope.scaling.factor)
  const float* freq_factors = nullptr;  ///< device [n_rot/2] divisors (llama3 rope_freqs) or null
  bool neox = false;  ///< false: pairs (x[2i], x[2i+1]) (llama); true: (x[i], x[i + n_rot/2])
  float mscale = 1;   ///< cos and sin are multiplied by it (ggml's attn_factor; 1 = none)
};

/// Rotates every head of x in place. θ_i is built by repeated multiplication with
/// base^(−2/n_rot) in f32 (computed on the host with std::pow, as the CPU op), so the angles
/// equal the CPU's bit for bit; cos/sin are CUDA's sincosf (within 2 ulp of libm) and the
/// rotation x0·cos − x1·sin, x0·sin + x1·cos is fused as the CPU's.
/// x: device [n_tokens, n_heads · head_dim] f32; pos: device [n_tokens] positions.
/// Throws std::invalid_argument for an odd n_rot or n_rot > head_dim, CudaError on failure.
void rope(Context& ctx, float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          const int32_t* pos, const RopeParams& p);

}  // namespace kvrun::cuda
