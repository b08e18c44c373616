// get_rows.h — embedding lookup on the GPU (backends/cpu/ops.h get_rows). Plain C++ header.
#pragma once

#include <cstdint>

#include "cuda/cuda_context.h"
#include "tensor.h"

namespace kvrun::cuda {

/// True when get_rows supports tables of type `t` with rows of `cols` values (the matmul weight
/// types: f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K; cols a multiple of the type's chunk).
bool get_rows_supported(DType t, int64_t cols);

/// out[i] = row ids[i] of `table` decoded to f32, equal to the scalar decoders (the K-quants'
/// d·q − m may be fused: within 1 ulp). table: device tensor [n_rows, cols = ne[0]];
/// ids: device [n_ids] int32; out: device [n_ids, cols] f32. The caller checks the ids on the
/// host (they come from the tokenizer); an id outside [0, n_rows) gives a row of NaN instead of
/// reading out of bounds. Throws std::invalid_argument for an unsupported type, CudaError on
/// failure.
void get_rows(Context& ctx, const Tensor& table, const int32_t* ids, int64_t n_ids, float* out);

}  // namespace kvrun::cuda
