// paged_attention.h — attention over the paged KV cache: K/V rows live in fixed-size blocks of
// a pool, reached through each sequence's block table, stored in any KV cache type
// (ggml-like/kv_layout.h: f32, f16, bf16, q8_0, q4_0, fp8_e4m3, fp8_e5m2, nvfp4) and read in
// place — no full-context f32 copy of K or V is ever made. Layout and invariants:
// docs/kv-cache.md.
//
// Two softmax schemes, as llama.cpp's CPU backend has (PagedAttnParams::flash):
//  * flash (online softmax, FlashAttention: Dao et al. 2022/2023): one pass over the blocks
//    with a running max, running sum and rescaled V accumulator per query head, a block of
//    positions at a time; each K/V block is decoded once per KV head for a tile of up to 32
//    query tokens and every query head sharing it (GQA). Its summation order is kvrun's own
//    (not llama.cpp's position-by-position one), accurate to ~1e-7 relative against float64.
//  * exact (flash = false): per query head the scores over all visible positions are computed
//    block by block into a score buffer (n_kv floats, not K or V), then softmax as llama.cpp's
//    non-flash path does (its polynomial exp, f16-rounded weights for an f16 V), then V block by
//    block. This reproduces llama.cpp's default (no -fa) output for f16/f32 caches.
#pragma once

#include <cstdint>

#include "cpu/attention.h"
#include "cpu/cpu_level.h"
#include "cpu/thread_pool.h"
#include "dtype.h"

namespace kvrun::cpu {

/// One layer's K and V storage in the pool: the seam's KvLayer (backend.h).
using PagedKvLayer = kvrun::KvLayer;

/// Shapes and options of one paged attention call: the seam's (backend.h).
using PagedAttnParams = kvrun::PagedAttnParams;

/// One sequence's part of a batch: the seam's PagedSeq (backend.h).
using PagedSeq = kvrun::PagedSeq;

/// Encodes and writes the K and V rows of positions pos0 … pos0+n_q−1 of each sequence into its
/// blocks (the caller has reserved them). With `rotate`, K is Hadamard-rotated per head first.
/// k: [rows, n_head_kv · head_dim], v: [rows, n_head_kv · head_dim_v] (rows indexed by q0 + i).
void paged_kv_store(const PagedKvLayer& kv, const PagedAttnParams& p, const PagedSeq* seqs,
                    int64_t n_seqs, const float* k, const float* v);

/// Causal attention: out row q0+i of each sequence = attention of q row q0+i over that
/// sequence's positions 0 … pos0+i. q: [rows, n_head · head_dim], out: [rows, n_head ·
/// head_dim_v]. Work is split over (sequence, query, KV head) across the pool's threads.
void paged_attention(ThreadPool& pool, const PagedKvLayer& kv, const PagedAttnParams& p,
                     const PagedSeq* seqs, int64_t n_seqs, const float* q, float* out);

/// As paged_attention, with the flash decode kernel (flash_decode.h: query tiles of at most 4
/// tokens, head_dim and head_dim_v multiples of 16) of kernel level `level` instead of the
/// process's cpu_level(), so tests can compare the levels in one process. `level` must be
/// supported (cpu_level_supported). The exact scheme and the large-tile flash kernel do not
/// depend on it.
void paged_attention_at_level(ThreadPool& pool, CpuLevel level, const PagedKvLayer& kv,
                              const PagedAttnParams& p, const PagedSeq* seqs, int64_t n_seqs,
                              const float* q, float* out);

/// paged_attention over the blocks of one KV tier only (Backend::paged_attention_part: kFast,
/// the blocks whose slot is below kv.n_fast; kSlow, the others; kAll, every block), as
/// unnormalized online-softmax states: states [rows, n_head, 2 + head_dim_v] holds per query row
/// and head m (the largest scaled, soft-capped score seen; −inf when none), l = Σ e^(s − m) and
/// acc = Σ e^(s − m) · v. Blocks of the other tier are never touched (their K/V pointers may be
/// null). Sinks are not applied (attn_merge_partials applies them). The flash scheme only:
/// throws std::invalid_argument when !p.flash, and as paged_attention for a bad shape.
void paged_attention_states(ThreadPool& pool, const PagedKvLayer& kv, const PagedAttnParams& p,
                            KvTier tier, const PagedSeq* seqs, int64_t n_seqs, const float* q,
                            float* states);

/// attn_merge_partials without the division: the merged state of n_parts states of one query
/// head, state[0] = M = max m[k], state[1] = Σ_k e^(m[k] − M) l[k], state[2 + d] = Σ_k e^(m[k] −
/// M) acc[k][d] (parts with m = −inf skipped; all of them: M = −inf, l and acc 0).
void attn_merge_states(int64_t n_parts, const float* m, const float* l, const float* const* acc,
                       int64_t head_dim_v, float* state);

/// Merges partial attention results of one query head over disjoint parts of its context
/// (segments of a long context, or tiers of the KV cache) exactly: part k holds its running max
/// m[k] of the scaled scores, its sum l[k] = Σ e^(s − m[k]) and its unnormalized
/// acc[k][head_dim_v] = Σ e^(s − m[k]) · v. out = Σ_k e^(m[k] − M) acc[k] / Σ_k e^(m[k] − M) l[k]
/// with M = max m[k] (the log-sum-exp combination of Milakov & Gimelshein 2018, "Online
/// normalizer calculation for softmax", as Flash-Decoding uses it). Parts with m = −inf (no
/// positions) are skipped; at least one part must have seen a position.
/// With `sink` (an attention sink's logit, PagedAttnParams::sinks) it joins the denominator:
/// out = Σ_k e^(m[k] − M) acc[k] · attn_sink_inv(*sink, M, Σ_k e^(m[k] − M) l[k]).
void attn_merge_partials(int64_t n_parts, const float* m, const float* l, const float* const* acc,
                         int64_t head_dim_v, float* out, const float* sink = nullptr);

/// The factor that finishes an online-softmax row with running max m and sum l = Σ e^(s − m)
/// when a sink logit joins the softmax (no value: out = acc · factor, acc = Σ e^(s − m) · v):
/// 1 / (l + e^(sink − m)) when sink ≤ m, else e^(m − sink) / (l · e^(m − sink) + 1), as ggml's
/// flash attention adds its sinks after the last position (libm expf).
float attn_sink_inv(float sink, float m, float l);

/// In-place fast Walsh–Hadamard transform of `n` values (n a power of two), scaled by 1/√n so
/// it is orthonormal (its own inverse). Used by --kv-rotate (QuaRot, Ashkboos et al. 2024).
void hadamard_rotate(float* x, int64_t n);

}  // namespace kvrun::cpu
