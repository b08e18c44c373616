// paged_attention.cpp — attention over the paged KV cache (see paged_attention.h and
// docs/kv-cache.md): the checks, the choice of scheme and the spreading of its work items over
// the threads. The items are computed in three files (paged_attention_impl.h):
//   flash scheme, large query tiles (prefill)    paged_attention_flash.cpp   flash_tile
//   flash scheme, small tiles (decode) and every
//   tile whose K the decode kernel reads in place paged_attention_decode.cpp  flash_tile_decode
//   exact scheme (llama.cpp's default path)      paged_attention_exact.cpp   exact_item
// Flash tiles are visited alternately from both ends of the sequence and the threads take items
// one at a time; decode contexts are split into segments merged by their log-sum-exp. Items are
// independent, so the result does not depend on the number of threads.
#include "cpu/paged_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cpu/cpu_level.h"
#include "cpu/kv_row_ops.h"
#include "cpu/paged_attention_impl.h"
#include "kv_layout.h"

namespace kvrun::cpu {

namespace {

using paged_attn::Call;
using paged_attn::exact_item;
using paged_attn::flash_tile;
using paged_attn::flash_tile_decode;
using paged_attn::KDot;
using paged_attn::Scratch;

/// How Q is dotted with a K head of type kt (head_dim hd) in the given scheme: llama.cpp's
/// pairing of K with its vec_dot_type (see paged_attention_exact.cpp).
KDot make_kdot(DType kt, int64_t hd, bool flash, bool batched) {
  // The dots come from the CPU traits table at the process's kernel level (SIMD where the
  // machine has it, bit-identical to the scalar reference); the pairing is llama.cpp's.
  const bool gemm = !flash && batched && hd % 16 == 0;
  auto pick = [gemm](const CpuTypeTraits* t) {
    return gemm && t->gemm_dot ? t->gemm_dot : t->vec_dot;
  };
  const CpuTypeTraits* f32 = cpu_traits(DType::F32);
  if (kt == DType::F16 && flash) return {false, f32->act_from_float, f32->vec_dot};  // tile path
  if (kt == DType::F16) {
    const CpuTypeTraits* t = cpu_traits(DType::F16);
    return {true, t->act_from_float, pick(t)};
  }
  if ((kt == DType::Q8_0 || kt == DType::Q4_0) && hd % 32 == 0) {
    const CpuTypeTraits* t = cpu_traits(kt);
    return {true, t->act_from_float, t->vec_dot};
  }
  return {kt == DType::F32, f32->act_from_float, pick(f32)};
}

// ---- flash dispatch: tiles, segments of long contexts, and their merge ----

/// Query rows per flash work item: each K/V block is decoded once for this many queries.
constexpr int64_t kFlashTile = 32;
/// Sequences with at most this many query rows in a call (decode) split their context into
/// segments of kFlashSegment positions, computed as separate work items and merged by their
/// log-sum-exp (Flash-Decoding), so one long decode spreads over every thread. The split depends
/// only on the context length, never on the thread count.
constexpr int64_t kFlashSplitMaxQueries = 4;
constexpr int64_t kFlashSegment = 512;

/// One flash work item: query rows [i0, i1) of sequence s, KV heads [hk0, hk1) (several only
/// for flash_tile_decode), blocks [b0, b1); results go to `out` (part < 0) or, for head hk0 + h,
/// to the partial state at parts + part + h · part_stride (floats).
struct FlashItem {
  int64_t s, i0, i1, hk0, hk1, b0, b1, part, part_stride;
};

/// The flash scheme's items over the threads. Writes out, or with `states` every row's and
/// query head's online-softmax state ([rows][n_head][2 + head_dim_v]; paged_attention_states).
void flash_call(ThreadPool& pool, const Call& c, const PagedSeq* seqs, int64_t n_seqs,
                const float* q, float* out, float* states) {
  const AttnParams& a = c.p.attn;
  const int64_t bs = c.kv.block_size, hdv = a.head_dim_v, hkv = a.n_head_kv;
  const int64_t seg_blocks = std::max<int64_t>(1, kFlashSegment / bs);
  // Items: (sequence, query tile, KV heads[, segment]), taken by the threads one at a time in
  // this order. Decode tiles take several KV heads per item (every head when there are enough
  // segments to keep the threads busy, fewer otherwise): the block loop then reads each block's
  // rows of those heads as one run of memory. The grouping changes no result (each head is
  // computed as alone), so it may depend on the thread count; the segments may not.
  std::vector<FlashItem> items;
  struct Group {  // a decode row set split into segments: its partial states and where they go
    int64_t s, i0, i1, hk, first, n_parts, slot;  // floats: first state, and between states
  };
  std::vector<Group> groups;
  int64_t n_part_floats = 0;
  const int64_t want_items = 2 * int64_t(pool.size());
  for (int64_t s = 0; s < n_seqs; ++s) {
    const PagedSeq& seq = seqs[s];
    const int64_t nt = (seq.n_q + kFlashTile - 1) / kFlashTile;
    const int64_t n_blocks = (seq.pos0 + seq.n_q + bs - 1) / bs;
    const bool small = seq.n_q <= kFlashSplitMaxQueries;
    const int64_t n_seg = small ? (n_blocks + seg_blocks - 1) / seg_blocks : 1;
    int64_t hg = small && c.decode ? hkv : 1;  // KV heads per item
    while (hg > 1 && n_seg * ((hkv + hg - 1) / hg) < want_items) hg = (hg + 1) / 2;
    for (int64_t k = 0; k < nt; ++k) {
      const int64_t tile = k % 2 == 0 ? k / 2 : nt - 1 - k / 2;
      const int64_t i0 = tile * kFlashTile, i1 = std::min(seq.n_q, i0 + kFlashTile);
      const int64_t slot = (i1 - i0) * c.group * (hdv + 2), base = n_part_floats;
      const bool grouped = n_seg > 1 || states;  // states: every tile through the merge
      if (grouped) {
        for (int64_t hk = 0; hk < hkv; ++hk)
          groups.push_back({s, i0, i1, hk, base + hk * n_seg * slot, n_seg, slot});
        n_part_floats += hkv * n_seg * slot;
      }
      for (int64_t g = 0; g < n_seg; ++g)
        for (int64_t hk0 = 0; hk0 < hkv; hk0 += hg)
          items.push_back({s, i0, i1, hk0, std::min(hkv, hk0 + hg), g * seg_blocks,
                           n_seg > 1 ? std::min(n_blocks, (g + 1) * seg_blocks) : n_blocks,
                           grouped ? base + (hk0 * n_seg + g) * slot : -1, n_seg * slot});
    }
  }
  // Every partial state is written by its item before the merge reads it: no zeroing.
  std::unique_ptr<float[]> parts(n_part_floats > 0 ? new float[size_t(n_part_floats)] : nullptr);
  const int64_t n_items = int64_t(items.size());
  std::atomic<int64_t> next{0};
  pool.run(std::min<int64_t>(n_items, pool.size()), [&](int64_t, int64_t) {
    thread_local Scratch sc;
    for (int64_t it; (it = next.fetch_add(1, std::memory_order_relaxed)) < n_items;) {
      const FlashItem& f = items[size_t(it)];
      float* part = f.part < 0 ? nullptr : parts.get() + f.part;
      if (c.decode && (f.i1 - f.i0 <= kFlashSplitMaxQueries || c.decode_tiles))
        flash_tile_decode(c, seqs[f.s], f.i0, f.i1, f.hk0, f.hk1, f.b0, f.b1, q, out, part,
                          f.part_stride, sc);
      else
        flash_tile(c, seqs[f.s], f.i0, f.i1, f.hk0, f.b0, f.b1, q, out, part, sc);
    }
  });
  if (groups.empty()) return;
  pool.run(int64_t(groups.size()), [&](int64_t begin, int64_t end) {
    std::vector<float> m, l;
    for (int64_t gi = begin; gi < end; ++gi) {
      const Group& g = groups[size_t(gi)];
      const int64_t rows = (g.i1 - g.i0) * c.group;
      m.resize(size_t(g.n_parts));
      l.resize(size_t(g.n_parts));
      std::vector<const float*> accs(size_t(g.n_parts));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < g.n_parts; ++k) {
          const float* p = parts.get() + g.first + k * g.slot + r * (hdv + 2);
          m[size_t(k)] = p[0];
          l[size_t(k)] = p[1];
          accs[size_t(k)] = p + 2;
        }
        const int64_t i = g.i0 + r / c.group, h = g.hk * c.group + r % c.group;
        if (states) {
          attn_merge_states(g.n_parts, m.data(), l.data(), accs.data(), hdv,
                            states + ((seqs[g.s].q0 + i) * a.n_head + h) * (hdv + 2));
          continue;
        }
        attn_merge_partials(g.n_parts, m.data(), l.data(), accs.data(), hdv,
                            out + (seqs[g.s].q0 + i) * a.n_head * hdv + h * hdv,
                            c.p.sinks ? c.p.sinks + h : nullptr);
      }
    }
  });
}

// ---- checks and dispatch ----

void check_shapes(const PagedKvLayer& kv, const PagedAttnParams& p) {
  const AttnParams& a = p.attn;
  if (a.n_head <= 0 || a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0 || a.head_dim <= 0 ||
      a.head_dim_v <= 0 || kv.block_size <= 0)
    throw std::invalid_argument("paged attention: bad shape");
  if (kv.mla) {  // V = the last head_dim_v values of the one K head, read in place
    if (a.n_head_kv != 1 || a.head_dim_v >= a.head_dim || kv.v_type != kv.k_type ||
        kv.v_row_bytes != kv.k_row_bytes || p.rotate ||
        !kv_type_holds_mla(kv.k_type, a.head_dim - a.head_dim_v) ||
        kv.k_row_bytes != kv_row_bytes(kv.k_type, 1, a.head_dim))
      throw std::invalid_argument("paged attention: not an MLA layer shape");
    return;
  }
  if (kv.k_row_bytes != kv_row_bytes(kv.k_type, a.n_head_kv, a.head_dim) ||
      kv.v_row_bytes != kv_row_bytes(kv.v_type, a.n_head_kv, a.head_dim_v))
    throw std::invalid_argument("paged attention: row bytes do not match the KV types");
  if (p.rotate && (a.head_dim & (a.head_dim - 1)) != 0)
    throw std::invalid_argument("paged attention: rotate needs a power-of-two head_dim");
}

/// Cells llama.cpp's KV cache exposes to a batch ending at position `end`: a multiple of 32,
/// at least 32 (its n_ctx is a multiple of 32 too, so no cap applies).
int64_t padded_cells(int64_t end) { return std::max<int64_t>(32, (end + 31) / 32 * 32); }

}  // namespace

void paged_kv_store(const PagedKvLayer& kv, const PagedAttnParams& p, const PagedSeq* seqs,
                    int64_t n_seqs, const float* k, const float* v) {
  check_shapes(kv, p);
  const int64_t hkv = p.attn.n_head_kv, hd = p.attn.head_dim, hdv = p.attn.head_dim_v;
  std::vector<float> rot(size_t(hkv * hd));
  for (int64_t s = 0; s < n_seqs; ++s) {
    const PagedSeq& seq = seqs[s];
    for (int64_t i = 0; i < seq.n_q; ++i) {
      const int64_t pos = seq.pos0 + i, row = seq.q0 + i;
      const int32_t id = seq.block_table[pos / kv.block_size];
      const int64_t j = pos % kv.block_size;
      const float* krow = k + row * hkv * hd;
      if (p.rotate) {
        std::copy_n(krow, hkv * hd, rot.begin());
        for (int64_t h = 0; h < hkv; ++h) hadamard_rotate(rot.data() + h * hd, hd);
        krow = rot.data();
      }
      kv_encode_row(kv.k_type, hkv, hd, krow, kv.k_block(id) + j * kv.k_row_bytes);
      if (!kv.mla)
        kv_encode_row(kv.v_type, hkv, hdv, v + row * hkv * hdv,
                      kv.v_block(id) + j * kv.v_row_bytes);
    }
  }
}

void paged_attention(ThreadPool& pool, const PagedKvLayer& kv, const PagedAttnParams& p,
                     const PagedSeq* seqs, int64_t n_seqs, const float* q, float* out) {
  paged_attention_at_level(pool, cpu_level(), kv, p, seqs, n_seqs, q, out);
}

namespace {

/// The call's shared state at kernel level `level`; `rows`: the query rows of the call.
Call make_call(CpuLevel level, const PagedKvLayer& kv, const PagedAttnParams& p, int64_t rows,
               KvTier tier) {
  const AttnParams& a = p.attn;
  const bool batched = rows >= 2;
  return Call{kv,
              p,
              a.n_head / a.n_head_kv,
              make_kdot(kv.k_type, a.head_dim, p.flash, batched),
              kv.v_type == DType::F16,
              kv.v_type == DType::F16 || kv.v_type == DType::F32,
              batched,
              a.head_dim % 16 == 0 && a.head_dim_v % 16 == 0 ? flash_decode_kernel(level) : nullptr,
              (kv.k_type == DType::Q8_0 || kv.k_type == DType::Q4_0 || kv.k_type == DType::F16) &&
                  flash_decode_in_place(kv.k_type, a.head_dim),
              tier};
}

}  // namespace

void paged_attention_states(ThreadPool& pool, const PagedKvLayer& kv, const PagedAttnParams& p,
                            KvTier tier, const PagedSeq* seqs, int64_t n_seqs, const float* q,
                            float* states) {
  check_shapes(kv, p);
  if (!p.flash)
    throw std::invalid_argument("paged attention: states by KV tier need the flash scheme");
  int64_t rows = 0;
  for (int64_t s = 0; s < n_seqs; ++s) rows += seqs[s].n_q;
  const Call c = make_call(cpu_level(), kv, p, rows, tier);
  flash_call(pool, c, seqs, n_seqs, q, nullptr, states);
}

void paged_attention_at_level(ThreadPool& pool, CpuLevel level, const PagedKvLayer& kv,
                              const PagedAttnParams& p, const PagedSeq* seqs, int64_t n_seqs,
                              const float* q, float* out) {
  check_shapes(kv, p);
  const AttnParams& a = p.attn;
  std::vector<int64_t> first(size_t(n_seqs + 1), 0);  // first work item of each sequence
  int64_t rows = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    first[size_t(s + 1)] = first[size_t(s)] + seqs[s].n_q * a.n_head_kv;
    rows += seqs[s].n_q;
  }
  const Call c = make_call(level, kv, p, rows, KvTier::kAll);
  if (p.flash) {
    flash_call(pool, c, seqs, n_seqs, q, out, nullptr);
    return;
  }
  pool.run(first[size_t(n_seqs)], [&](int64_t begin, int64_t end) {
    thread_local Scratch sc;
    for (int64_t it = begin; it < end; ++it) {
      const int64_t s = std::upper_bound(first.begin(), first.end(), it) - first.begin() - 1;
      const PagedSeq& seq = seqs[s];
      const int64_t i = (it - first[size_t(s)]) / a.n_head_kv;
      const int64_t hk = (it - first[size_t(s)]) % a.n_head_kv;
      const float* q_row = q + (seq.q0 + i) * a.n_head * a.head_dim;
      float* out_row = out + (seq.q0 + i) * a.n_head * a.head_dim_v;
      exact_item(c, seq, seq.pos0 + i + 1, padded_cells(seq.pos0 + seq.n_q), hk, q_row, out_row,
                 sc);
    }
  });
}

float attn_sink_inv(float sink, float m, float l) {
  if (sink <= m) return 1.0f / (l + std::exp(sink - m));
  const float ms = std::exp(m - sink);
  return ms / (l * ms + 1.0f);
}

namespace {

/// out = Σ_k e^(m[k] − M) acc[k] over the parts that saw a position; returns M = max m[k] and
/// the denominator Σ_k e^(m[k] − M) l[k] (attn_merge_partials' formula, not yet divided).
std::pair<float, float> merge_sums(int64_t n_parts, const float* m, const float* l,
                                   const float* const* acc, int64_t head_dim_v, float* out) {
  float mx = -INFINITY;
  for (int64_t k = 0; k < n_parts; ++k) mx = std::max(mx, m[k]);
  float den = 0.0f;
  for (int64_t d = 0; d < head_dim_v; ++d) out[d] = 0.0f;
  for (int64_t k = 0; k < n_parts; ++k) {
    if (m[k] == -INFINITY) continue;  // a part that saw no position
    const float w = std::exp(m[k] - mx);
    den += w * l[k];
    for (int64_t d = 0; d < head_dim_v; ++d) out[d] += w * acc[k][d];
  }
  return {mx, den};
}

}  // namespace

void attn_merge_states(int64_t n_parts, const float* m, const float* l, const float* const* acc,
                       int64_t head_dim_v, float* state) {
  const auto [mx, den] = merge_sums(n_parts, m, l, acc, head_dim_v, state + 2);
  state[0] = mx;
  state[1] = den;
}

void attn_merge_partials(int64_t n_parts, const float* m, const float* l, const float* const* acc,
                         int64_t head_dim_v, float* out, const float* sink) {
  const auto [mx, den] = merge_sums(n_parts, m, l, acc, head_dim_v, out);
  const float inv = sink ? attn_sink_inv(*sink, mx, den) : 1.0f / den;
  for (int64_t d = 0; d < head_dim_v; ++d) out[d] *= inv;
}

void hadamard_rotate(float* x, int64_t n) {
  if (n <= 0 || (n & (n - 1)) != 0)
    throw std::invalid_argument("hadamard_rotate: n must be a power of two");
  for (int64_t len = 1; len < n; len <<= 1)
    for (int64_t i = 0; i < n; i += 2 * len)
      for (int64_t j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
  const float s = float(1.0 / std::sqrt(double(n)));
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace kvrun::cpu
