// ops.h — element-wise and row ops of the CPU backend, on row-major f32 activations.
//
// Every activation argument is a plain float array with its shape in the comment: [rows, cols]
// means rows·cols floats, row r at offset r·cols. Ops do not allocate and do not throw, except
// get_rows, which checks its ids and weight type.
#pragma once

#include <cstdint>

#include "backend.h"
#include "tensor.h"

namespace kvrun::cpu {

/// RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x²) + eps) · w, per row, in f32 with the
/// f32 squares summed in double (as llama.cpp's ggml_rms_norm). `w` [cols] may be null (no scale).
/// x, y: [rows, cols]; y may equal x.
void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps);

/// RoPE settings: the seam's (backend.h).
using RopeConfig = kvrun::RopeConfig;

/// Rotates every head of x in place. θ_i is built by repeated multiplication with
/// base^(−2/n_rot) in f32, as llama.cpp's rope cache does, so angles match it bit for bit. The
/// rotation is x0·cos − x1·sin and x0·sin + x1·cos with the x0 product fused into the add
/// (std::fma), as GCC compiles ggml's rope loop (C, -ffp-contract=fast) on x86 with FMA.
/// x: [n_tokens, n_heads · head_dim]; pos: [n_tokens] positions.
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
          const RopeConfig& cfg);

/// SwiGLU (Shazeer 2020): out = silu(gate) · up with silu(g) = g / (1 + e^−g), per row of
/// `cols`, as llama.cpp's SILU then MUL ops: in each row the first cols − cols % 16 elements
/// use the polynomial e^x of its AVX-512 vector body (fast_exp.h, ggml_vec_silu_f32), the rest
/// libm expf. gate, up, out: [rows, cols]; out may equal gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t rows, int64_t cols);

/// swiglu over a single row of n.
inline void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  swiglu(gate, up, out, 1, n);
}

/// gpt-oss's clamped SwiGLU (GluKind::kSwiGluOai, backend.h): g = min(gate, limit), u =
/// clamp(up, −limit, limit), out = g / (1 + e^(alpha · (−g))) · (u + 1) in f32 with libm expf,
/// as ggml's swiglu_oai op (alpha = kSwiGluOaiAlpha, limit = kSwiGluOaiLimit). gate, up, out:
/// [rows, cols]; out may equal gate or up.
void swiglu_oai(const float* gate, const float* up, float* out, int64_t rows, int64_t cols);

/// GeGLU (Shazeer 2020, "GLU Variants Improve Transformer"): out = gelu(gate) · up with the
/// tanh approximation gelu(x) = 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²))) (Hendrycks &
/// Gimpel 2016), computed as llama.cpp's CPU GELU op then MUL: x ≤ −10 → 0, x ≥ 10 → x, else x
/// rounded to f16 and looked up in a table of f16-rounded gelu values (ggml's GGML_GELU_FP16).
/// gate, up, out: [rows, cols]; out may equal gate or up.
void geglu(const float* gate, const float* up, float* out, int64_t rows, int64_t cols);

/// LayerNorm (Ba et al. 2016) per row, as ggml's norm op then mul and add: the row's sum in
/// double gives mean (f32); v = x − mean (f32), Σv² in double gives var (f32); y = v ·
/// (1/sqrtf(var + eps)), then y·w, then y + b, each rounded to f32. w, b: [cols] or null.
/// x, y: [rows, cols]; y may equal x.
void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t rows,
                int64_t cols, float eps);

/// GELU, tanh approximation (Hendrycks & Gimpel 2016): y = 0.5·x·(1 + tanh(√(2/π)·x·(1 +
/// 0.044715·x²))) in f32 with libm tanh; x ≥ 10 → x and x ≤ −10 → 0 (as ggml). This is the f32
/// value ggml's AVX2/AVX-512 gelu computes (its exp form), not the f16 table of geglu above.
/// y may equal x.
void gelu(const float* x, float* y, int64_t n);

/// x[i] = x[i] · s for i < n (ggml_scale).
void scale(float* x, int64_t n, float s);

/// Soft-capping (Gemma 2 report, §2): x[i] = tanh(x[i] · (1/cap)) · cap for i < n, as llama.cpp's
/// scale, tanh, scale ops. cap > 0.
void softcap(float* x, int64_t n, float cap);

/// y[i] += x[i] for i < n.
void add(float* y, const float* x, int64_t n);

/// y[i] = e^(x[i] − max) for i < n and their sum, as llama.cpp's ggml_vec_soft_max_f32 on
/// AVX-512: each full block of 16 uses the polynomial e^x (fast_exp.h) and is summed in f32 in
/// the order of GCC's _mm512_reduce_add_ps (halves, quarters, pairs), the block sums and then
/// the tail's libm expf values are accumulated in double. x[i] = −inf gives 0. y may equal x.
double softmax_exp(const float* x, float* y, int64_t n, float max);

/// Softmax of x[0..n_pos) scaled by `scale`, inside a row of n_kv cells whose rest is masked
/// (set to −inf here), as llama.cpp's soft_max op with a scale and an f32 causal mask: scale,
/// max, softmax_exp over all n_kv cells, every cell times float(1 / sum). In place, x[n_kv].
/// With `sink` (an attention sink's logit, not scaled; PagedAttnParams::sinks) as llama.cpp's
/// soft_max with sinks: the max also covers *sink and the sum (double) adds expf(*sink − max),
/// so the weights sum to less than 1. Without it nothing changes.
void masked_softmax(float* x, int64_t n_pos, int64_t n_kv, float scale,
                    const float* sink = nullptr);

/// In-place softmax of x[n] as llama.cpp's soft_max op (no scale or mask): softmax_exp with the
/// row's max, then every element times float(1 / sum).
void softmax(float* x, int64_t n);

/// Embedding lookup: out[i] = row ids[i] of `table` decoded to f32 (any type with to_float).
/// table: [n_rows, cols = ne[0]]; out: [n_ids, cols]. Throws std::out_of_range for an id
/// outside [0, n_rows).
void get_rows(const Tensor& table, const int32_t* ids, int64_t n_ids, float* out);

}  // namespace kvrun::cpu
