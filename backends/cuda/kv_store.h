// kv_store.h — the KV write on the GPU: each step row's K and V encoded into its cache cell in
// the layer's cache types (the CUDA counterpart of cpu::paged_kv_store). Plain C++ header.
#pragma once

#include "cuda/attn_batch.h"
#include "cuda/cuda_context.h"

namespace kvrun::cuda {

/// True when kv_store and paged_attention support `t` as a K or V cache type: every KV cache
/// type of ggml-like/kv_layout.h (f32, f16, bf16, q8_0, q4_0, fp8_e4m3, fp8_e5m2, nvfp4).
bool kv_type_supported(DType t);

/// Encodes row r of k (and of v) into cell batch.cells()[r] of the layer, for every row of the
/// batch; with shape.rotate, each K head is Hadamard-rotated first (hadamard.h). The bytes equal
/// kv_encode_row's (the device encoders are operation-for-operation ports of the scalar reference;
/// tests/test_cuda_ops.cpp compares them with memcmp). k: device [n_rows, n_head_kv · head_dim]
/// f32; v: device [n_rows, n_head_kv · head_dim_v]. Throws std::invalid_argument for an unsupported
/// type or row bytes that do not match the shape, CudaError on failure.
void kv_store(Context& ctx, const PagedKvLayer& kv, const AttnShape& shape, const AttnBatch& batch,
              const float* k, const float* v);

}  // namespace kvrun::cuda
