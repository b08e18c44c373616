// matmul.h — y[n, m] = x[n, k] · w[m, k]ᵀ on the GPU with w in its stored type (the CUDA
// counterpart of backends/cpu/matmul.h). Plain C++ header.
//
// Weight types: f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K. Two paths:
//  * decode (n ≤ kMatvecMaxRows): a memory-bound matrix-vector kernel, one warp per weight row,
//    each lane decoding chunks of the row in registers (weight_decode.cuh: 16-byte loads for
//    f32/f16/bf16/q4_K/q5_K) and dotting them with the f32 activations; f32 accumulation.
//  * prefill (n > kMatvecMaxRows): tensor cores through cuBLAS — f32 weights by SGEMM; f16 /
//    bf16 weights by GemmEx against x rounded to the same type; quantized weights dequantized to
//    f16 in row tiles of at most 64 MiB and multiplied by x rounded to f16 (f32 accumulation).
// Activations stay f32 on the decode path (the CPU backend quantizes them to q8_0 / q8_K for
// quantized weights, as llama.cpp does), so results agree with the CPU to that rounding, not bit
// for bit (tests/test_cuda_ops.cpp bounds the difference).
#pragma once

#include <cstdint>
#include <vector>

#include "backend.h"
#include "cuda/cuda_context.h"
#include "tensor.h"

namespace kvrun::cuda {

/// Activation rows up to which matmul uses the matrix-vector kernel.
constexpr int64_t kMatvecMaxRows = 8;

/// True when matmul supports weights of type `t` with rows of `k` elements: k a multiple of
/// the kernels' chunk of the type (4 values for f32, 8 for f16 / bf16, a 32-value block or
/// sub-block for the quants) and of 4 (x is read as float4).
bool matmul_supported(DType t, int64_t k);

/// True for the weight types matmul and get_rows also read in the split layout (q4_0, q8_0,
/// q6_K, q4_K, q5_K): for q4_0 / q8_0 every block's quants first, 16-byte aligned, then every
/// block's f16 scale; for q6_K per 32 values 16 bytes of low nibbles, 8 of high bits, two scales,
/// and the super-blocks' f16 scales after them; for q4_K / q5_K per 32 values 16 bytes of
/// nibbles (and 4 of fifth bits), then the super-blocks' packed scales and d, dmin
/// (split_rows.cuh SplitRows, SplitRowsK), for 16-byte loads of rows whose 18- / 34- / 210- /
/// 144- / 176-byte blocks are not aligned, and the integer decode matmul.
bool split_layout_supported(DType t);
/// The bytes of a q4_0 / q8_0 / q6_K / q4_K / q5_K matrix (host, rows packed) rearranged into the
/// split layout (the same size). Upload them and mark the device tensor with packed = data
/// (upload_tensor_split); matmul and get_rows then read that layout. Throws std::invalid_argument
/// for another type.
std::vector<uint8_t> split_weight(const Tensor& host);

/// y[n, m] = x[n, k] · w[m, k]ᵀ.
///   w: a device weight (upload_tensor), ne[0] = k, ne[1] = m, rows nb[1] bytes apart, 16-byte
///      aligned (cudaMalloc'ed buffers are);
///   x: device, n rows of k f32, row-major, 16-byte aligned;
///   y: device, n rows of m f32 (written, not accumulated).
/// Enqueued on the context's stream. Throws std::invalid_argument for an unsupported type or
/// shape (matmul_supported), CudaError when CUDA or cuBLAS fails.
void matmul(Context& ctx, const Tensor& w, const float* x, int64_t n, float* y);

/// outs[i].y = x · outs[i].wᵀ for every i, as matmul each (the same shapes, contracts and
/// errors), with the weights reading the same x [n, k]. Decode rows (n ≤ kMatvecMaxRows) of
/// weights that all take the integer matvec (split layout, one k) quantize x once
/// for all of them (a llama layer's q, k, v and gate, up: 3 of its 6 quantizations); otherwise
/// each output is a plain matmul.
void matmul_many(Context& ctx, const MatmulOut* outs, int n_outs, const float* x, int64_t n);

}  // namespace kvrun::cuda
