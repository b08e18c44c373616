// paged_attention_exact.cpp — the exact scheme, llama.cpp's non-flash softmax (exact_item; see
// paged_attention.h and paged_attention_impl.h).
//
// Exact scheme (flash = false), llama.cpp's default path. Work item = (sequence, query token, KV
// head): per block the K rows of the KV head are decoded (when the type cannot be read in place)
// into a block_size × head_dim tile; Q is dotted in "K's dot type" as llama.cpp's CPU backend
// pairs them (ggml-cpu type_traits_cpu[k].vec_dot_type):
//   f32 K: Q in f32, vec_dot_f32;  f16 K: Q rounded to f16, vec_dot_f16;
//   q8_0 / q4_0 K with head_dim % 32 == 0: Q quantized to q8_0 per head, the q8_0 block dot on
//   the stored blocks;  any other case (bf16, fp8, nvfp4, q8_0 / q4_0 with head_dim % 32 ≠ 0):
//   the head decoded to f32, Q in f32, vec_dot_f32.
// Numerics as attention.cpp (llama.cpp without -fa): the gemm accumulation order for batches
// (vec_dot.h); scores over the n_kv cells llama.cpp's KV cache exposes (a multiple of 32, at
// least 32; cells past the causal limit weigh 0), masked softmax with softmax_exp, weights
// rounded to f16 for an f16 V, then the weighted sum of V in the lane order of vec_dot_f16 /
// vec_dot_f32 (one token) or gemm_dot_* (batches), reproduced here block by block with per-lane
// accumulators (see LaneOrder). Attention sinks (PagedAttnParams::sinks) enter the softmax's
// max and sum as llama.cpp's soft_max with sinks does (ops.h masked_softmax).
#include <algorithm>
#include <cmath>

#include "cpu/kv_row_ops.h"
#include "cpu/ops.h"
#include "cpu/paged_attention_impl.h"
#include "fp16.h"
#include "kv_layout.h"

namespace kvrun::cpu::paged_attn {

namespace {

/// One block's rows of one KV head: stored rows (in place) or decoded tiles.
struct BlockView {
  const uint8_t* k = nullptr;  ///< first stored K row of the block
  const uint8_t* v = nullptr;  ///< first stored V row of the block
  int64_t k_off = 0;           ///< byte offset of the head inside a K row (direct dot)
};

/// Converts the query heads of KV head `hk` (rows of `q_row`: [n_head · head_dim]).
void prepare_q(const Call& c, const float* q_row, int64_t hk, Scratch& sc) {
  const int64_t hd = c.p.attn.head_dim;
  sc.qf.resize(size_t(c.group * hd));
  sc.qx.resize(size_t(c.group * hd * 4));
  for (int64_t g = 0; g < c.group; ++g) {
    float* qf = sc.qf.data() + g * hd;
    std::copy_n(q_row + (hk * c.group + g) * hd, hd, qf);
    if (c.p.rotate) hadamard_rotate(qf, hd);
    c.kd.q_convert(qf, sc.qx.data() + g * hd * 4, hd);
  }
}

/// Points `bv` at physical block `phys` and decodes the first `n` K rows of head `hk` into the
/// K tile when K is not read in place.
void load_k(const Call& c, int64_t phys, int64_t n, int64_t hk, Scratch& sc, BlockView& bv) {
  const PagedKvLayer& kv = c.kv;
  const int64_t hd = c.p.attn.head_dim;
  bv.k = kv.k_block(phys);
  if (c.kd.direct) {
    bv.k_off = kv_head_offset(kv.k_type, hd, hk);
    return;
  }
  sc.ktile.resize(size_t(kv.block_size * hd));
  for (int64_t j = 0; j < n; ++j)
    kv_decode_head(kv.k_type, c.p.attn.n_head_kv, hd, bv.k + j * kv.k_row_bytes, hk,
                   sc.ktile.data() + j * hd);
}

/// As load_k for V.
void load_v(const Call& c, int64_t phys, int64_t n, int64_t hk, Scratch& sc, BlockView& bv) {
  const PagedKvLayer& kv = c.kv;
  const int64_t hdv = c.p.attn.head_dim_v;
  bv.v = kv.v_block(phys);
  if (c.v_direct) return;
  sc.vtile.resize(size_t(kv.block_size * hdv));
  for (int64_t j = 0; j < n; ++j)
    kv_decode_head(kv.v_type, c.p.attn.n_head_kv, hdv, bv.v + j * kv.v_row_bytes, hk,
                   sc.vtile.data() + j * hdv);
}

/// Unscaled dot of query head g of the group with row j of the block.
inline float k_dot(const Call& c, const BlockView& bv, int64_t j, int64_t g, const Scratch& sc) {
  const int64_t hd = c.p.attn.head_dim;
  const void* qx = sc.qx.data() + g * hd * 4;
  if (c.kd.direct) return c.kd.dot(hd, bv.k + j * c.kv.k_row_bytes + bv.k_off, qx);
  return c.kd.dot(hd, sc.ktile.data() + j * hd, qx);
}

/// Row j of the block's V for KV head hk as f32 (non-f16 V: stored f32 or the decoded tile).
inline const float* v_f32(const Call& c, const BlockView& bv, int64_t j, int64_t hk,
                          const Scratch& sc) {
  const int64_t hdv = c.p.attn.head_dim_v;
  if (c.v_direct) return reinterpret_cast<const float*>(bv.v + j * c.kv.v_row_bytes) + hk * hdv;
  return sc.vtile.data() + j * hdv;
}

/// Row j of the block's f16 V for KV head hk.
inline const uint16_t* v_f16(const Call& c, const BlockView& bv, int64_t j, int64_t hk) {
  return reinterpret_cast<const uint16_t*>(bv.v + j * c.kv.v_row_bytes) + hk * c.p.attn.head_dim_v;
}

/// The 16-lane horizontal sum of a 512-bit register as _mm512_reduce_add_ps (halves, quarters,
/// pairs), the fold vec_dot_float.cpp uses.
inline float fold16(const float* v) {
  float s[8], t[4];
  for (int i = 0; i < 8; ++i) s[i] = v[i + 8] + v[i];
  for (int i = 0; i < 4; ++i) t[i] = s[i + 4] + s[i];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

/// The accumulation order of the weighted sum of V over n_kv cells, as vec_dot_f16/f32 (vec:
/// 4 × 16 lanes over the first n_kv & ~63 cells, folded, then the tail one by one) or
/// gemm_dot_f16/f32 (one 16-lane accumulator) compute out[d] = Σ_p V[p][d] · w[p]. Lanes are
/// kept per output element: lanes[slot][d]; the tail sum in tail[d].
struct LaneOrder {
  bool gemm = false;        ///< tinyBLAS order (batches) instead of ggml_vec_dot order
  bool f16 = false;         ///< f16 V and weights: products exact, tail in double
  int64_t np = 0;           ///< vec order: cells in the 4 × 16-lane body
  int64_t unfused_end = 0;  ///< vec order, f32: tail cells before this add an unfused product
  int64_t hdv = 0;          ///< head_dim_v

  LaneOrder(bool gemm_order, bool f16_values, int64_t n_kv, int64_t head_dim_v)
      : gemm(gemm_order), f16(f16_values), np(n_kv & ~int64_t(63)), hdv(head_dim_v) {
    const int64_t rest = n_kv - np;
    unfused_end = np + rest / 16 * 16 + (rest % 16 >= 8 ? 8 : 0);
  }

  /// out[d] of the vec-order body: the four 16-lane accumulators folded (acc0+acc2, acc1+acc3,
  /// their sum, then fold16).
  float fold_body(const float* lanes, int64_t d) const {
    float a[16];
    for (int l = 0; l < 16; ++l) {
      const float x0 = lanes[l * hdv + d] + lanes[(32 + l) * hdv + d];
      const float x1 = lanes[(16 + l) * hdv + d] + lanes[(48 + l) * hdv + d];
      a[l] = x0 + x1;
    }
    return fold16(a);
  }

  /// Adds cell p (cells come in order 0, 1, …, n_kv − 1) with values v[hdv] and weight w.
  void add(float* lanes, double* tail, int64_t p, const float* v, float w) const {
    if (gemm || p < np) {
      float* acc = lanes + (gemm ? p % 16 : p % 64) * hdv;
      for (int64_t d = 0; d < hdv; ++d)
        acc[d] = f16 ? acc[d] + v[d] * w : std::fma(v[d], w, acc[d]);
      return;
    }
    if (p == np)
      for (int64_t d = 0; d < hdv; ++d) tail[d] = fold_body(lanes, d);
    for (int64_t d = 0; d < hdv; ++d) {
      if (f16) {
        tail[d] += double(v[d] * w);
      } else {
        const float t = float(tail[d]);
        tail[d] = p < unfused_end ? t + v[d] * w : std::fma(v[d], w, t);
      }
    }
  }

  /// The sums after all n_kv cells (n_kv as given to the constructor).
  void finish(const float* lanes, const double* tail, int64_t n_kv, float* out) const {
    for (int64_t d = 0; d < hdv; ++d) {
      if (gemm) {
        float a[16];
        for (int l = 0; l < 16; ++l) a[l] = lanes[l * hdv + d];
        out[d] = fold16(a);
      } else {
        out[d] = n_kv > np ? float(tail[d]) : fold_body(lanes, d);
      }
    }
  }
};

/// First position a query at n_pos − 1 sees: 0, or the start of its sliding window.
inline int64_t window_start(const Call& c, int64_t n_pos) {
  return c.p.window > 0 ? std::max<int64_t>(0, n_pos - c.p.window) : 0;
}

/// Scores of the group's query heads over positions 0 … n_pos − 1 into sc.w, then weights.
void exact_weights(const Call& c, const PagedSeq& seq, int64_t n_pos, int64_t n_kv, int64_t hk,
                   Scratch& sc) {
  const int64_t bs = c.kv.block_size, G = c.group;
  const int64_t lo = window_start(c, n_pos);
  sc.w.resize(size_t(G * n_kv));
  BlockView bv;
  for (int64_t b = lo / bs; b * bs < n_pos; ++b) {
    const int64_t n = std::min(bs, n_pos - b * bs);
    load_k(c, seq.block_table[b], n, hk, sc, bv);
    for (int64_t g = 0; g < G; ++g)
      for (int64_t j = 0; j < n; ++j) sc.w[size_t(g * n_kv + b * bs + j)] = k_dot(c, bv, j, g, sc);
  }
  for (int64_t g = 0; g < G; ++g) {
    float* w = sc.w.data() + g * n_kv;
    float scale = c.p.attn.scale;
    if (c.p.softcap > 0) {  // as llama.cpp: scale by 1/cap, tanh, scale by cap, then the softmax
      for (int64_t j = lo; j < n_pos; ++j)
        w[j] = std::tanh(w[j] * scale * (1.0f / c.p.softcap)) * c.p.softcap;
      scale = 1.0f;  // applied above (models with soft-capping pre-scale Q: scale is 1 there)
    }
    std::fill_n(w, lo, -INFINITY);  // before the sliding window (masked, weight 0)
    masked_softmax(w, n_pos, n_kv, scale, c.p.sinks ? c.p.sinks + hk * G + g : nullptr);
    if (c.v_f16)
      for (int64_t j = 0; j < n_kv; ++j) w[j] = fp16_lut(f32_to_fp16(w[j]));
  }
}

}  // namespace

// exact_item: paged_attention_impl.h.
void exact_item(const Call& c, const PagedSeq& seq, int64_t n_pos, int64_t n_kv, int64_t hk,
                const float* q_row, float* out_row, Scratch& sc) {
  const int64_t hdv = c.p.attn.head_dim_v, bs = c.kv.block_size, G = c.group;
  prepare_q(c, q_row, hk, sc);
  exact_weights(c, seq, n_pos, n_kv, hk, sc);
  const LaneOrder order(c.batched, c.v_f16, n_kv, hdv);
  sc.acc.assign(size_t(G * 64 * hdv), 0.0f);
  sc.tail.assign(size_t(G * hdv), 0.0);
  sc.zeros.assign(size_t(hdv), 0.0f);
  sc.vrow.resize(size_t(hdv));
  BlockView bv;
  const int64_t b_first = window_start(c, n_pos) / bs;
  for (int64_t p = 0; p < b_first * bs; ++p)  // blocks before the window: weight 0, not read
    for (int64_t g = 0; g < G; ++g)
      order.add(sc.acc.data() + g * 64 * hdv, sc.tail.data() + g * hdv, p, sc.zeros.data(), 0.0f);
  for (int64_t b = b_first; b * bs < n_pos; ++b) {
    const int64_t n = std::min(bs, n_pos - b * bs);
    load_v(c, seq.block_table[b], n, hk, sc, bv);
    for (int64_t j = 0; j < n; ++j) {
      const float* v = nullptr;
      if (c.v_f16) {
        const uint16_t* h = v_f16(c, bv, j, hk);
        for (int64_t d = 0; d < hdv; ++d) sc.vrow[size_t(d)] = fp16_lut(h[d]);
        v = sc.vrow.data();
      } else {
        v = v_f32(c, bv, j, hk, sc);
      }
      for (int64_t g = 0; g < G; ++g)
        order.add(sc.acc.data() + g * 64 * hdv, sc.tail.data() + g * hdv, b * bs + j, v,
                  sc.w[size_t(g * n_kv + b * bs + j)]);
    }
  }
  for (int64_t p = n_pos; p < n_kv; ++p)
    for (int64_t g = 0; g < G; ++g)
      order.add(sc.acc.data() + g * 64 * hdv, sc.tail.data() + g * hdv, p, sc.zeros.data(), 0.0f);
  for (int64_t g = 0; g < G; ++g)
    order.finish(sc.acc.data() + g * 64 * hdv, sc.tail.data() + g * hdv, n_kv,
                 out_row + (hk * G + g) * hdv);
}

}  // namespace kvrun::cpu::paged_attn
