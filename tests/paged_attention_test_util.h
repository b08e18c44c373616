// paged_attention_test_util.h — the shared set-up of test_paged_attention.cpp and
// test_paged_attention_decode.cpp: a paged K/V pool of random N(0, 1) rows for a Case (shuffled
// block tables, several sequences), a run of cpu::paged_attention over it, and the float64
// softmax-attention reference over the rows as stored (decoded) or as written (originals).
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "cpu/paged_attention.h"
#include "cpu/thread_pool.h"
#include "kv_layout.h"
#include "quants_kv.h"
#include "test_util.h"

namespace kvrun::cpu::paged_test {

/// One sequence of a test: `len` positions in the cache, the last `n_q` of them queried.
struct SeqSpec {
  int64_t len = 1;
  int64_t n_q = 1;
};

/// One test problem: shapes, types, options and sequences.
struct Case {
  DType kt = DType::F32, vt = DType::F32;
  int64_t n_head = 4, n_head_kv = 2, head_dim = 32, head_dim_v = 32, block_size = 16;
  bool flash = true, rotate = false;
  int64_t window = 0;         ///< sliding window (0: none)
  float softcap = 0;          ///< score soft-cap (0: none)
  std::vector<float> sinks;   ///< [n_head] attention sink logits (empty: none)
  std::vector<SeqSpec> seqs;  ///< set by every test
  uint32_t seed = 1;
};

/// A pool holding every sequence of a Case, its block tables (physical ids shuffled across
/// sequences), the original K/V/Q and the call's PagedSeq array.
struct Paged {
  PagedKvLayer kv;
  PagedAttnParams p;
  std::vector<uint8_t> kbuf, vbuf;
  std::vector<std::vector<int32_t>> tables;
  std::vector<std::vector<float>> k, v;  ///< per sequence: [len][n_head_kv · head_dim(_v)]
  std::vector<float> q;                  ///< [Σ n_q][n_head · head_dim]
  std::vector<PagedSeq> seqs;            ///< the attention call's sequences
  std::vector<float> sinks;              ///< the Case's sinks (params() points p.sinks at them)

  /// The call's parameters: p with its sinks pointer set (so a copied Paged stays valid).
  PagedAttnParams params() const {
    PagedAttnParams q = p;
    q.sinks = sinks.empty() ? nullptr : sinks.data();
    return q;
  }
};

inline Paged build(const Case& c) {
  Paged pg;
  pg.p.attn = {c.n_head, c.n_head_kv, c.head_dim, c.head_dim_v,
               float(1.0 / std::sqrt(double(c.head_dim)))};
  pg.p.flash = c.flash;
  pg.p.rotate = c.rotate;
  pg.p.window = c.window;
  pg.p.softcap = c.softcap;
  pg.sinks = c.sinks;
  pg.kv = {c.kt, c.vt, kv_row_bytes(c.kt, c.n_head_kv, c.head_dim),
           kv_row_bytes(c.vt, c.n_head_kv, c.head_dim_v), c.block_size};
  int64_t n_blocks = 0;
  for (const SeqSpec& s : c.seqs) n_blocks += (s.len + c.block_size - 1) / c.block_size;
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(c.seed));
  pg.kbuf.assign(size_t(n_blocks * c.block_size * pg.kv.k_row_bytes), 0xCD);
  pg.vbuf.assign(size_t(n_blocks * c.block_size * pg.kv.v_row_bytes), 0xCD);
  pg.kv.k = pg.kbuf.data();
  pg.kv.v = pg.vbuf.data();
  int64_t next = 0, q0 = 0;
  uint32_t seed = c.seed * 1000;
  for (const SeqSpec& s : c.seqs) {
    const int64_t nb = (s.len + c.block_size - 1) / c.block_size;
    pg.tables.emplace_back(ids.begin() + next, ids.begin() + next + nb);
    next += nb;
    pg.k.push_back(test::random_floats(size_t(s.len * c.n_head_kv * c.head_dim), ++seed));
    pg.v.push_back(test::random_floats(size_t(s.len * c.n_head_kv * c.head_dim_v), ++seed));
    const PagedSeq all{pg.tables.back().data(), 0, 0, s.len};
    paged_kv_store(pg.kv, pg.p, &all, 1, pg.k.back().data(), pg.v.back().data());
    pg.seqs.push_back({nullptr, s.len - s.n_q, q0, s.n_q});
    q0 += s.n_q;
  }
  for (size_t i = 0; i < pg.seqs.size(); ++i) pg.seqs[i].block_table = pg.tables[i].data();
  pg.q = test::random_floats(size_t(q0 * c.n_head * c.head_dim), ++seed);
  return pg;
}

inline std::vector<float> run(const Paged& pg, int threads = 2) {
  ThreadPool pool(threads);
  int64_t rows = 0;
  for (const PagedSeq& s : pg.seqs) rows += s.n_q;
  std::vector<float> out(static_cast<size_t>(rows * pg.p.attn.n_head * pg.p.attn.head_dim_v), NAN);
  paged_attention(pool, pg.kv, pg.params(), pg.seqs.data(), int64_t(pg.seqs.size()), pg.q.data(),
                  out.data());
  return out;
}

/// Sequence s's K (or V) rows as doubles: decoded from the pool (`decoded`) or the originals.
inline std::vector<double> rows_of(const Paged& pg, size_t s, bool is_k, bool decoded) {
  const int64_t len = pg.seqs[s].pos0 + pg.seqs[s].n_q;
  const int64_t hd = is_k ? pg.p.attn.head_dim : pg.p.attn.head_dim_v;
  const int64_t n = pg.p.attn.n_head_kv * hd;
  const DType t = is_k ? pg.kv.k_type : pg.kv.v_type;
  const int64_t row_bytes = is_k ? pg.kv.k_row_bytes : pg.kv.v_row_bytes;
  const uint8_t* base = is_k ? pg.kv.k : pg.kv.v;
  const std::vector<float>& orig = is_k ? pg.k[s] : pg.v[s];
  std::vector<double> out(static_cast<size_t>(len * n));
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t pos = 0; pos < len; ++pos) {
    const int64_t slot = int64_t(pg.tables[s][size_t(pos / pg.kv.block_size)]) * pg.kv.block_size +
                         pos % pg.kv.block_size;
    if (decoded)
      kv_decode_row(t, pg.p.attn.n_head_kv, hd, base + slot * row_bytes, row.data());
    else
      std::copy_n(orig.data() + pos * n, n, row.begin());
    std::copy(row.begin(), row.end(), out.begin() + pos * n);
  }
  return out;
}

/// Softmax attention in double over all sequences, with the sliding window, soft-cap and
/// attention sinks of pg.p (a sink: one more e^(sink − max) in the denominator, no value;
/// rotate is not applied: with rotation the
/// decoded K is rotated, so tests compare rotated runs against unrotated ones instead).
inline std::vector<double> reference(const Paged& pg, bool decoded) {
  const AttnParams& a = pg.p.attn;
  const int64_t G = a.n_head / a.n_head_kv, nk = a.n_head_kv * a.head_dim;
  const int64_t nv = a.n_head_kv * a.head_dim_v;
  std::vector<double> out;
  for (size_t s = 0; s < pg.seqs.size(); ++s) {
    const std::vector<double> K = rows_of(pg, s, true, decoded);
    const std::vector<double> V = rows_of(pg, s, false, decoded);
    const PagedSeq& seq = pg.seqs[s];
    for (int64_t i = 0; i < seq.n_q; ++i) {
      const int64_t n_pos = seq.pos0 + i + 1;
      const int64_t lo = pg.p.window > 0 ? std::max<int64_t>(0, n_pos - pg.p.window) : 0;
      for (int64_t h = 0; h < a.n_head; ++h) {
        const float* q = pg.q.data() + ((seq.q0 + i) * a.n_head + h) * a.head_dim;
        const int64_t hk = h / G;
        std::vector<double> sc(static_cast<size_t>(n_pos));
        double mx = -INFINITY, sum = 0;
        for (int64_t p = 0; p < n_pos; ++p) {
          double d = 0;
          for (int64_t e = 0; e < a.head_dim; ++e)
            d += double(q[e]) * K[size_t(p * nk + hk * a.head_dim + e)];
          d *= double(a.scale);
          if (pg.p.softcap > 0) d = pg.p.softcap * std::tanh(d / pg.p.softcap);
          sc[size_t(p)] = p < lo ? -INFINITY : d;
          mx = std::max(mx, sc[size_t(p)]);
        }
        const double sink = pg.sinks.empty() ? -INFINITY : double(pg.sinks[size_t(h)]);
        mx = std::max(mx, sink);
        for (double& x : sc) sum += (x = std::exp(x - mx));
        sum += std::exp(sink - mx);
        for (int64_t e = 0; e < a.head_dim_v; ++e) {
          double o = 0;
          for (int64_t p = 0; p < n_pos; ++p)
            o += sc[size_t(p)] * V[size_t(p * nv + hk * a.head_dim_v + e)];
          out.push_back(o / sum);
        }
      }
    }
  }
  return out;
}

/// The host's part of --kv-host-attn cpu over a layer `kv` whose slow tier (the host tier) a
/// device addresses: cpu::paged_attention_states over KvTier::kSlow with that tier at its host
/// addresses k_host / v_host and no fast tier (null: never read). [rows, n_head, 2 + head_dim_v].
inline std::vector<float> host_tier_states(const PagedKvLayer& kv, void* k_host, void* v_host,
                                           const PagedAttnParams& p, const PagedSeq* seqs,
                                           int64_t n_seqs, const float* q) {
  PagedKvLayer host = kv;
  host.k = host.v = nullptr;
  host.k_slow = static_cast<uint8_t*>(k_host);
  host.v_slow = static_cast<uint8_t*>(v_host);
  int64_t rows = 0;
  for (int64_t s = 0; s < n_seqs; ++s) rows += seqs[s].n_q;
  std::vector<float> st(size_t(rows * p.attn.n_head * attn_state_floats(p.attn.head_dim_v)));
  ThreadPool pool(2);
  paged_attention_states(pool, host, p, KvTier::kSlow, seqs, n_seqs, q, st.data());
  return st;
}

/// Bound on max |out − ref| against the reference over the decoded K/V, for outputs of
/// N(0, 1) data (|out| ≤ ~1). The terms are the kernel's own roundings:
///  * K: f16 K rounds Q to f16 (~2⁻¹¹ relative on each score); q8_0 / q4_0 K with head_dim % 32
///    == 0 quantize Q to q8_0 (~0.4 % per element); every other K is dotted in f32.
///  * V: flash with an f16 V accumulates in f16 (each multiply-add rounded to 11 bits); exact
///    with an f16 V rounds the weights to f16; otherwise f32 sums.
inline double kernel_bound(const Case& c) {
  double b = 1e-5;
  if (c.kt == DType::F16) b += 1e-3;
  if ((c.kt == DType::Q8_0 || c.kt == DType::Q4_0) && c.head_dim % 32 == 0) b += 3e-2;
  if (c.vt == DType::F16) b += c.flash ? 5e-3 : 1.5e-3;
  return b;
}

/// max |out − ref|.
inline double max_err(const std::vector<float>& out, const std::vector<double>& ref) {
  double e = 0;
  for (size_t i = 0; i < ref.size(); ++i) e = std::max(e, std::fabs(double(out[i]) - ref[i]));
  return out.size() == ref.size() ? e : INFINITY;
}

}  // namespace kvrun::cpu::paged_test
