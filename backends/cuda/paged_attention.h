// paged_attention.h — causal attention over the paged KV cache on the GPU, reading K and V
// blocks in place in any KV cache type (f32, f16, bf16, q8_0, q4_0, fp8_e4m3, fp8_e5m2, nvfp4;
// every K/V pair), the CUDA counterpart of cpu::paged_attention's flash scheme. Plain C++.
//
// Scheme: online softmax (FlashAttention; Dao et al. 2022) per (query row, KV head, context
// segment), one CUDA block of 4 warps each: the warps take every 4th position of the segment,
// decode the K row of the head in place (kv_format.cuh), score it against all query heads of the
// GQA group, and keep a running max, sum and V accumulator; the warps' states are combined in
// shared memory. Long contexts are split into segments (16 blocks per multiprocessor)
// whose partial states are merged by log-sum-exp (Flash-Decoding; the formula of
// cpu::attn_merge_partials). Q, scores and accumulation are f32 and e^x is expf, so results
// differ from the CPU's (f16-rounded / q8_0-quantized Q, polynomial exp) by rounding only.
// --kv-rotate (AttnShape::rotate): Q is Hadamard-rotated like the stored K first. A sliding
// window (AttnShape::window) skips the positions before it (their blocks may be −1) and
// soft-capping (AttnShape::softcap) maps each scaled score s to cap · tanh(s / cap).
// Prefill: each row re-reads its context (L2 absorbs part of it); KVRUN_CUDA_ATTN_PREFILL=tiled
// runs prefill batches tiled over query rows instead (prefill_attention.cuh; not yet run on a
// GPU). Not here yet: llama.cpp's exact non-flash softmax (-fa off).
#pragma once

#include "cuda/attn_batch.h"
#include "cuda/cuda_context.h"

namespace kvrun::cuda {

/// Largest query heads per KV head, and head size, the kernel supports.
constexpr int64_t kAttnMaxGroup = 8;
constexpr int64_t kAttnMaxHeadDim = 256;

/// True when paged_attention supports the K/V types and shape (types: kv_type_supported;
/// n_head / n_head_kv ≤ kAttnMaxGroup; head_dim, head_dim_v ≤ kAttnMaxHeadDim; with rotate a
/// power-of-two head_dim). A model whose
/// cache the backend cannot read must be refused at load with this, never run on a slow path.
bool paged_attention_supported(DType k_type, DType v_type, const AttnShape& shape);

/// The context length paged_attention splits into segments for a step whose longest row sees
/// `max_ctx` positions: max_ctx rounded up to a multiple of 256, so that the kernels' launch
/// parameters (segment count and length) stay the same for up to 256 decode steps and a
/// recorded step graph can be replayed unchanged (cuda_backend.cu). Segments past a row's
/// context are empty and skipped by the merge.
int64_t attn_segment_ctx(int64_t max_ctx);

/// out row r = attention of q row r over its sequence's positions 0 … positions()[r] (the rows'
/// K/V must be stored, kv_store, before). q: device [n_rows, n_head · head_dim] f32;
/// out: device [n_rows, n_head · head_dim_v] f32. Enqueued on the context's stream. Throws
/// std::invalid_argument for an unsupported type or shape or row bytes that do not match,
/// CudaError on failure.
void paged_attention(Context& ctx, const PagedKvLayer& kv, const AttnShape& shape,
                     const AttnBatch& batch, const float* q, float* out);

/// paged_attention over the cells of one KV tier only (the seam's Backend::paged_attention_part:
/// kFast, cells below kv.n_fast · block_size; kSlow, the host tier's), as online-softmax states:
/// part: device [n_rows, n_head, 2 + head_dim_v] f32, per row and query head m (−inf: no
/// position of the tier), l = Σ e^(s − m) and acc = Σ e^(s − m) · v (cpu::paged_attention_states).
/// Cells of the other tier are never read. Enqueued on the context's stream; errors as
/// paged_attention.
void paged_attention_part(Context& ctx, const PagedKvLayer& kv, const AttnShape& shape,
                          const AttnBatch& batch, KvTier tier, const float* q, float* part);

/// out [n_rows, n_head · head_dim_v] = the log-sum-exp merge of n_parts (1 … 4) state arrays of
/// paged_attention_part's layout (device pointers; cpu::attn_merge_partials' formula per row and
/// head; every row must have seen a position in some part). No sinks. Enqueued on the context's
/// stream. Throws std::invalid_argument for another part count, CudaError on failure.
void attn_merge(Context& ctx, const float* const* parts, int n_parts, int64_t n_rows,
                int64_t n_head, int64_t head_dim_v, float* out);

}  // namespace kvrun::cuda
