// rms_norm.h — RMSNorm on the GPU (the definition of backends/cpu/ops.h rms_norm). Plain C++.
#pragma once

#include <cstdint>

#include "cuda/cuda_context.h"

namespace kvrun::cuda {

/// RMSNorm (Zhang & Sennrich 2019) per row: y = x / sqrt(mean(x²) + eps) · w, the f32 squares
/// summed in double as the CPU op does. x, y: device [rows, cols] f32 (y may equal x);
/// w: device [cols] f32, or null for no scale. Enqueued on the context's stream; throws
/// CudaError when the launch fails.
void rms_norm(Context& ctx, const float* x, const float* w, float* y, int64_t rows, int64_t cols,
              float eps);

}  // namespace kvrun::cuda
