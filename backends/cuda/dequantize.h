// dequantize.h — decode rows of a block format to f32 on the GPU (the first CUDA op; the
// backend's matmul and attention kernels reuse its per-block decoders). Plain C++ header.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "cuda/cuda_error.h"
#include "dtype.h"

namespace kvrun::cuda {

/// True when dequantize_to_f32 supports `type` (f32, f16, bf16, q4_0, q8_0, fp8_e4m3, fp8_e5m2).
bool dequantize_supported(DType type);

/// Decodes `n` values (a multiple of the block size) of `type` from host memory `src` into host
/// memory `dst` on device 0, through device buffers. Same results as the traits' scalar
/// `to_float` (bit-exact: every decode is exact in f32). Throws CudaError (no GPU, CUDA failure)
/// or std::invalid_argument (unsupported type, bad n).
void dequantize_to_f32(DType type, const void* src, float* dst, int64_t n);

}  // namespace kvrun::cuda
