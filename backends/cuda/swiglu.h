// swiglu.h — SwiGLU on the GPU (the definition of backends/cpu/ops.h swiglu). Plain C++.
#pragma once

#include <cstdint>

#include "cuda/cuda_context.h"

namespace kvrun::cuda {

/// out[i] = silu(gate[i]) · up[i] with silu(g) = g / (1 + e^−g) (Shazeer 2020), e^x by CUDA's
/// expf (within 2 ulp; the CPU uses llama.cpp's polynomial, so results agree to a few ulp).
/// gate, up, out: device, n f32 each; out may equal gate or up. Throws CudaError on failure.
void swiglu(Context& ctx, const float* gate, const float* up, float* out, int64_t n);

}  // namespace kvrun::cuda
