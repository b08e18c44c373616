// eltwise.h — the seam's small element-wise ops on the GPU (backend.h: scale, softcap, add_row,
// copy_cols, GeGLU), the CUDA counterparts of backends/cpu/ops.h. Plain C++ header.
#pragma once

#include <cstdint>

#include "cuda/cuda_context.h"

namespace kvrun::cuda {

/// x[i] ·= s for i < n. x: device, n f32. Throws CudaError on failure.
void scale(Context& ctx, float* x, int64_t n, float s);
/// x[i] = cap · tanh(x[i] / cap) for i < n (Gemma 2 report, §2; cpu::softcap computes
/// tanh(x · (1/cap)) · cap, and so does this, with CUDA's tanhf: within 2 ulp).
void softcap(Context& ctx, float* x, int64_t n, float cap);
/// y[r, c] += row[c] for r < rows, c < cols (a bias). y: device [rows, cols]; row: device [cols].
void add_row(Context& ctx, float* y, const float* row, int64_t rows, int64_t cols);
/// dst[r, j] = src[r, c0 + j] for j < n (a fused QKV / gate-up split). src: device [rows, cols];
/// dst: device [rows, n].
void copy_cols(Context& ctx, const float* src, int64_t rows, int64_t cols, int64_t c0, int64_t n,
               float* dst);
/// GeGLU (Shazeer 2020): out[i] = gelu(gate[i]) · up[i] with the tanh approximation (Hendrycks &
/// Gimpel 2016) evaluated as cpu::geglu does: x ≤ −10 → 0, x ≥ 10 → x, else gelu of x rounded to
/// f16, rounded to f16 (ggml's GGML_GELU_FP16 table, computed here instead of looked up; tanhf
/// may differ from libm's tanh by an ulp before the f16 rounding). out may alias gate or up.
void geglu(Context& ctx, const float* gate, const float* up, float* out, int64_t n);

}  // namespace kvrun::cuda
