// add.h — element-wise residual add on the GPU (backends/cpu/ops.h add). Plain C++ header.
#pragma once

#include <cstdint>

#include "cuda/cuda_context.h"

namespace kvrun::cuda {

/// y[i] += x[i] for i < n (exact f32 adds, equal to the CPU op). y, x: device, n f32 each.
/// Throws CudaError on failure.
void add(Context& ctx, float* y, const float* x, int64_t n);

}  // namespace kvrun::cuda
