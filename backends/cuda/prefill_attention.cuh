// prefill_attention.cuh — paged attention tiled over query rows, for prefill
// (KVRUN_CUDA_ATTN_PREFILL=tiled; paged_attention dispatches here). CUDA sources only.
//
// k_attn (paged_attention.cu) gives every query row its own blocks, so a prefill of n rows
// reads and decodes each K/V row of the context up to n times. Here one CUDA block takes a tile
// of consecutive query rows (64 query vectors: 64 / group rows) of one KV head, walks the
// positions its rows see in chunks of 32, decodes each chunk's K and V rows of the head once
// into shared memory as f32, and every warp updates the online-softmax state (FlashAttention;
// Dao et al. 2022) of its 8 query vectors from there. SIMT f32 throughout (Q, scores,
// accumulation, e^x by expf, as k_attn): no tensor cores, no f16 / TF32 rounding. A tile that
// straddles sequences (the rows of a batch are grouped per sequence, consecutively) takes its
// runs of rows of one sequence one after another. Same features as k_attn: GQA up to
// kAttnMaxGroup, head sizes up to kAttnMaxHeadDim, causal mask, sliding window, soft-capping,
// --kv-rotate (Q rotated by the caller), both KV tiers (KvRows), every KV type.
#pragma once

#include "cuda/attn_batch.h"
#include "cuda/attn_common.cuh"
#include "cuda/cuda_context_impl.cuh"

namespace kvrun::cuda {

/// True when prefill_attention should run `batch` for the call described by `a` (the AttnArgs
/// paged_attention filled: group, window, head sizes, n_head_kv in a.kf): some sequence has at
/// least 8 rows in the step (rows that share K/V reads); no tile walks (the positions its runs
/// of rows see, summed; a block walks them one after another) more than 1024 positions past
/// twice the longest walk of such a sequence (a tile across two prefills passes; a 32K-context
/// decode row beside a short prefill, or a tile of decode rows of many sequences, stays with
/// k_attn, which splits contexts into segments); there are at least as many blocks (tiles × KV
/// heads) as multiprocessors, or the longest row sees at most 1024 positions (the tiled kernel
/// does not split a context); and the device has the shared memory a block needs. Host-side
/// only (reads AttnBatch's host copies; O(n_rows)); throws CudaError if the device attribute
/// cannot be read.
bool prefill_tiles_wanted(const Context::Impl& c, const AttnArgs& a, const AttnBatch& batch);

/// out row r (device [n_rows][n_head][head_dim_v] f32, normalized) = attention of Q row r
/// (a.q: device [n_rows][n_head · head_dim] f32, already rotated for --kv-rotate) over its
/// sequence's positions, by tiles of query rows; a as paged_attention filled it (a.partials
/// and a.out unused). Enqueued on c.stream. Throws CudaError when the launch fails.
void prefill_attention(Context::Impl& c, const AttnArgs& a, const AttnBatch& batch, float* out);

}  // namespace kvrun::cuda
