// hadamard.h — the Walsh–Hadamard rotation of --kv-rotate on the GPU (QuaRot, Ashkboos et al.
// 2024): the CUDA counterpart of cpu::hadamard_rotate, bit-identical to it. Plain C++ header.
#pragma once

#include <cstdint>

#include "cuda/cuda_context.h"

namespace kvrun::cuda {

/// y = every head of x rotated by the orthonormal Hadamard transform of size head_dim (a power
/// of two): the butterflies of cpu::hadamard_rotate in its order, then a multiply by
/// float(1/sqrt(head_dim)), so the floats are the CPU's. x, y: device [rows, n_heads · head_dim]
/// f32; y may equal x. Throws std::invalid_argument for a head_dim that is not a power of two
/// or above 256, CudaError on failure.
void hadamard_rotate(Context& ctx, const float* x, float* y, int64_t rows, int64_t n_heads,
                     int64_t head_dim);

}  // namespace kvrun::cuda
