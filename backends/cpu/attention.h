// attention.h — causal multi-head attention with GQA over a contiguous per-layer KV store: the
// reference implementation of llama.cpp's non-flash CPU attention. The model no longer uses it
// (it runs on the paged cache, paged_attention.h); it is kept as the oracle that the paged
// kernel's exact path must equal bit for bit (tests/test_paged_attention.cpp), and AttnParams is
// shared with the paged kernel.
//
// Layout of one layer's store (KvLayerView): K and V each [n_ctx, n_head_kv · head_dim] in
// `type` (f16 or f32), row p holding the token at position p.
//
// Numerics (llama.cpp's CPU path without flash attention, f16 cache): Q is rounded to f16 and
// dotted with f16 K in f32, scores are scaled by `scale`, softmax in f32 (sum in double), the
// weights are rounded to f16 and multiplied with f16 V accumulating in f32. With an f32 store
// nothing is rounded. Scaled dot-product attention: Vaswani et al. 2017; GQA: Ainslie et al.
// 2023 (query head h reads KV head h / (n_head / n_head_kv)).
#pragma once

#include <cstdint>

#include "backend.h"
#include "cpu/thread_pool.h"
#include "dtype.h"

namespace kvrun::cpu {

/// One layer's K and V rows; does not own memory.
struct KvLayerView {
  DType type = DType::F16;  ///< F16 or F32
  void* k = nullptr;        ///< [n_ctx, n_head_kv · head_dim]
  void* v = nullptr;        ///< [n_ctx, n_head_kv · head_dim_v]
  int64_t n_ctx = 0;        ///< rows (positions) available
};

/// Shapes and scale of one attention call: the seam's (backend.h).
using AttnParams = kvrun::AttnParams;

/// Writes n_tokens K/V rows at positions pos0 … pos0+n_tokens−1, converting to kv.type.
/// k: [n_tokens, n_head_kv · head_dim]; v: [n_tokens, n_head_kv · head_dim_v].
/// Requires pos0 + n_tokens ≤ kv.n_ctx (the caller checks; see Context).
void kv_store(const KvLayerView& kv, const AttnParams& p, const float* k, const float* v,
              int64_t pos0, int64_t n_tokens);

/// Causal attention of n_tokens queries at positions pos0 + i over the store's rows
/// 0 … pos0 + i (which must have been written). Work is split over (token, head) pairs.
/// q: [n_tokens, n_head · head_dim]; out: [n_tokens, n_head · head_dim_v].
void attention(ThreadPool& pool, const KvLayerView& kv, const AttnParams& p, const float* q,
               int64_t pos0, int64_t n_tokens, float* out);

/// Bidirectional attention of the rows of `seqs` (Backend::attention): query row r of sequence
/// s attends to K/V rows s.q0 … s.q0 + s.n_q − 1, in f32 (q·k with vec_dot_f32, scores scaled
/// by p.scale, softmax as masked_softmax with nothing masked, the weighted sum of V accumulated
/// in f32 in position order). Work is split over (row, head) pairs. q: [n, n_head · head_dim];
/// k: [n, n_head_kv · head_dim]; v: [n, n_head_kv · head_dim_v]; out: [n, n_head · head_dim_v],
/// n the rows of all sequences.
void encoder_attention(ThreadPool& pool, const AttnParams& p, const PagedSeq* seqs, int64_t n_seqs,
                       const float* q, const float* k, const float* v, float* out);

}  // namespace kvrun::cpu
