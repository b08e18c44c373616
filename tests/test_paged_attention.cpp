// test_paged_attention.cpp — attention over the paged KV cache (backends/cpu/paged_attention.h).
//
// The reference is softmax attention in double over the K/V rows *as stored* (decoded with
// kv_decode_row), so the error measured against it is the kernel's own (Q conversion to K's
// dot type, f16 accumulation, f32 sums); the error against the original unquantized K/V (the
// cache type's own loss) is printed too. Checked: context lengths 1, 15, 16, 17, 4096 and
// 131072; block sizes 16, 7, 1; shuffled block tables; prefill (causal) and decode; several
// sequences in one call; GQA; every K type × every V type; both softmax schemes; 1 vs 4
// threads bit for bit; the exact scheme bit for bit against cpu::attention over a contiguous
// store (f16 and f32); rotation; sliding windows and score soft-capping (both schemes, against
// the reference with the same window and cap; blocks before the window never read); attention
// sinks (both schemes, the decode kernel and the merge of long decodes). Random
// N(0, 1) data with fixed seeds; no timing assertions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "cpu/attention.h"
#include "cpu/cpu_level.h"
#include "cpu/paged_attention.h"
#include "cpu/thread_pool.h"
#include "kv_layout.h"
#include "quants_kv.h"
#include "test_util.h"

namespace kvrun::cpu {
namespace {

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

Paged build(const Case& c) {
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

std::vector<float> run(const Paged& pg, int threads = 2) {
  ThreadPool pool(threads);
  int64_t rows = 0;
  for (const PagedSeq& s : pg.seqs) rows += s.n_q;
  std::vector<float> out(static_cast<size_t>(rows * pg.p.attn.n_head * pg.p.attn.head_dim_v), NAN);
  paged_attention(pool, pg.kv, pg.params(), pg.seqs.data(), int64_t(pg.seqs.size()), pg.q.data(),
                  out.data());
  return out;
}

/// Sequence s's K (or V) rows as doubles: decoded from the pool (`decoded`) or the originals.
std::vector<double> rows_of(const Paged& pg, size_t s, bool is_k, bool decoded) {
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
std::vector<double> reference(const Paged& pg, bool decoded) {
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

/// max |out − ref|.
double max_err(const std::vector<float>& out, const std::vector<double>& ref) {
  double e = 0;
  for (size_t i = 0; i < ref.size(); ++i) e = std::max(e, std::fabs(double(out[i]) - ref[i]));
  return out.size() == ref.size() ? e : INFINITY;
}

/// Bound on max |out − ref| against the reference over the decoded K/V, for outputs of
/// N(0, 1) data (|out| ≤ ~1). The terms are the kernel's own roundings:
///  * K: f16 K rounds Q to f16 (~2⁻¹¹ relative on each score); q8_0 / q4_0 K with head_dim % 32
///    == 0 quantize Q to q8_0 (~0.4 % per element); every other K is dotted in f32.
///  * V: flash with an f16 V accumulates in f16 (each multiply-add rounded to 11 bits); exact
///    with an f16 V rounds the weights to f16; otherwise f32 sums.
double kernel_bound(const Case& c) {
  double b = 1e-5;
  if (c.kt == DType::F16) b += 1e-3;
  if ((c.kt == DType::Q8_0 || c.kt == DType::Q4_0) && c.head_dim % 32 == 0) b += 3e-2;
  if (c.vt == DType::F16) b += c.flash ? 5e-3 : 1.5e-3;
  return b;
}

/// Runs a case and checks it against the decoded reference; returns {kernel error, error vs
/// the original K/V}.
std::pair<double, double> check_case(const Case& c, const char* what) {
  const Paged pg = build(c);
  const std::vector<float> out = run(pg);
  const double e = max_err(out, reference(pg, true));
  EXPECT_LE(e, kernel_bound(c)) << what << " K " << kv_type_name(c.kt) << " V "
                                << kv_type_name(c.vt) << (c.flash ? " flash" : " exact")
                                << " head_dim " << c.head_dim << " block " << c.block_size;
  return {e, max_err(out, reference(pg, false))};
}

TEST(PagedAttention, ContextLengthsAndBlockSizes) {
  for (DType t : {DType::F32, DType::F16, DType::Q8_0})
    for (int64_t bs : {16, 7, 1})
      for (int64_t len : {1, 15, 16, 17, 4096})
        for (bool flash : {true, false}) {
          if (len == 4096 && bs == 1 && t != DType::F32) continue;  // keep the run short
          Case c;
          c.kt = c.vt = t;
          c.block_size = bs;
          c.flash = flash;
          // Decode (one query at the end) and prefill (up to 8 causal queries).
          c.seqs = {{len, 1}, {len, std::min<int64_t>(len, 8)}};
          c.seed = uint32_t(len * 31 + bs);
          check_case(c, "lengths");
        }
}

TEST(PagedAttention, FullPrefillIsCausal) {
  for (bool flash : {true, false}) {
    Case c;
    c.n_head = 8;
    c.n_head_kv = 2;
    c.seqs = {{40, 40}};
    c.block_size = 7;
    c.flash = flash;
    check_case(c, "prefill");
    c.kt = c.vt = DType::F16;
    check_case(c, "prefill");
  }
}

// The flash kernel's tiles of 32 queries: several tiles per sequence (visited from both ends),
// a last partial tile, blocks wider than one 16-lane vector and not a multiple of it, both V
// accumulation layouts (per lane for head_dim_v 8, per row for 64 and 128), GQA groups of 4.
TEST(PagedAttention, FlashTilesAndWideBlocks) {
  for (int64_t hd : {8, 64, 128})
    for (int64_t bs : {33, 32, 16})
      for (DType t : {DType::F32, DType::FP8_E4M3}) {
        Case c;
        c.kt = c.vt = t;
        c.n_head = 8;
        c.n_head_kv = 2;
        c.head_dim = c.head_dim_v = hd;
        c.block_size = bs;
        c.seqs = {{150, 101}, {40, 1}};
        c.seed = uint32_t(hd * 7 + bs);
        check_case(c, "tiles");
      }
}

// attn_merge_partials against one softmax over the whole context, in float64, on random scores
// and values split into parts at random boundaries (including empty parts and one part).
TEST(PagedAttention, LogSumExpMergeEqualsOnePass) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t n = 1 + int64_t(rng() % 3000), hdv = 1 + int64_t(rng() % 130);
    const auto s = test::random_floats(size_t(n), uint32_t(trial), 4.0f);
    const auto v = test::random_floats(size_t(n * hdv), uint32_t(trial + 1000));
    std::vector<double> ref(size_t(hdv), 0.0);
    double mx = -INFINITY, den = 0.0;
    for (float x : s) mx = std::max(mx, double(x));
    for (int64_t p = 0; p < n; ++p) {
      const double w = std::exp(double(s[size_t(p)]) - mx);
      den += w;
      for (int64_t d = 0; d < hdv; ++d) ref[size_t(d)] += w * v[size_t(p * hdv + d)];
    }
    // Parts: random cut points; each part's state in float as the kernel keeps it.
    const int64_t n_parts = 1 + int64_t(rng() % 6);
    std::vector<int64_t> cut{0, n};
    for (int64_t k = 1; k < n_parts; ++k) cut.push_back(int64_t(rng() % uint32_t(n + 1)));
    std::sort(cut.begin(), cut.end());
    std::vector<float> m, l;
    std::vector<std::vector<float>> acc;
    for (size_t k = 0; k + 1 < cut.size(); ++k) {
      float pm = -INFINITY, pl = 0.0f;
      std::vector<float> pa(size_t(hdv), 0.0f);
      for (int64_t p = cut[k]; p < cut[k + 1]; ++p) pm = std::max(pm, s[size_t(p)]);
      for (int64_t p = cut[k]; p < cut[k + 1]; ++p) {
        const float w = std::exp(s[size_t(p)] - pm);
        pl += w;
        for (int64_t d = 0; d < hdv; ++d) pa[size_t(d)] += w * v[size_t(p * hdv + d)];
      }
      m.push_back(pm);
      l.push_back(pl);
      acc.push_back(pa);
    }
    std::vector<const float*> ptr;
    for (const auto& a : acc) ptr.push_back(a.data());
    std::vector<float> out(static_cast<size_t>(hdv));
    attn_merge_partials(int64_t(m.size()), m.data(), l.data(), ptr.data(), hdv, out.data());
    for (int64_t d = 0; d < hdv; ++d)
      ASSERT_NEAR(out[size_t(d)], ref[size_t(d)] / den, 2e-5) << "trial " << trial << " d " << d;
  }
}

TEST(PagedAttention, EveryKTypeTimesEveryVType) {
  std::printf("  kernel error (max abs vs decoded K/V) / error vs original K/V, len 37:\n");
  for (int64_t hd : {32, 8})
    for (bool flash : {true, false})
      for (DType kt : kKvCacheTypes)
        for (DType vt : kKvCacheTypes) {
          Case c;
          c.kt = kt;
          c.vt = vt;
          c.head_dim = c.head_dim_v = hd;
          c.block_size = hd == 8 ? 7 : 16;
          c.flash = flash;
          c.seqs = {{37, 5}};
          c.seed = 5;
          const auto [kernel, orig] = check_case(c, "types");
          if (kt == DType::F32 || vt == DType::F32)
            std::printf("    hd %2lld %-5s K %-8s V %-8s  %.2e / %.2e\n", (long long)hd,
                        flash ? "flash" : "exact", kv_type_name(kt), kv_type_name(vt), kernel,
                        orig);
        }
}

TEST(PagedAttention, SeveralSequencesInOneCall) {
  for (bool flash : {true, false}) {
    Case c;
    c.kt = DType::Q8_0;
    c.vt = DType::F16;
    c.flash = flash;
    c.seqs = {{17, 1}, {50, 6}, {1, 1}, {33, 33}};
    check_case(c, "sequences");
    if (!flash) continue;
    // Flash results do not depend on what else is in the call.
    const Paged all = build(c);
    const std::vector<float> out = run(all);
    const int64_t row = c.n_head * c.head_dim_v;
    for (size_t s = 0; s < all.seqs.size(); ++s) {
      Paged one = build(c);
      one.seqs = {one.seqs[s]};
      const int64_t q0 = one.seqs[0].q0;
      one.seqs[0].q0 = 0;
      one.q.erase(one.q.begin(), one.q.begin() + q0 * c.n_head * c.head_dim);
      const std::vector<float> alone = run(one);
      EXPECT_EQ(0,
                std::memcmp(alone.data(), out.data() + q0 * row, size_t(one.seqs[0].n_q * row) * 4))
          << "sequence " << s;
    }
  }
}

TEST(PagedAttention, ThreadsDoNotChangeResults) {
  for (DType t : {DType::F16, DType::Q4_0, DType::NVFP4})
    for (bool flash : {true, false}) {
      Case c;
      c.kt = c.vt = t;
      c.n_head = 8;
      c.flash = flash;
      // The 9000-position decode is split into segments merged by log-sum-exp (flash).
      c.seqs = {{100, 9}, {5, 1}, {64, 3}, {9000, 1}};
      const Paged pg = build(c);
      const std::vector<float> a = run(pg, 1), b = run(pg, 4);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << kv_type_name(t);
    }
}

/// Output of cpu::attention over a contiguous store of the same rows (sequence 0 of pg).
std::vector<float> contiguous(const Paged& pg, DType t) {
  const AttnParams& a = pg.p.attn;
  const PagedSeq& seq = pg.seqs[0];
  const int64_t len = seq.pos0 + seq.n_q, n_ctx = 4096;
  const size_t es = t == DType::F16 ? 2 : 4;
  std::vector<uint8_t> k(static_cast<size_t>(n_ctx * a.n_head_kv * a.head_dim) * es);
  std::vector<uint8_t> v(static_cast<size_t>(n_ctx * a.n_head_kv * a.head_dim_v) * es);
  const KvLayerView view{t, k.data(), v.data(), n_ctx};
  kv_store(view, a, pg.k[0].data(), pg.v[0].data(), 0, len);
  ThreadPool pool(2);
  std::vector<float> out(static_cast<size_t>(seq.n_q * a.n_head * a.head_dim_v));
  attention(pool, view, a, pg.q.data(), seq.pos0, seq.n_q, out.data());
  return out;
}

TEST(PagedAttention, ExactSchemeEqualsContiguousAttention) {
  struct Shape {
    int64_t n_head, n_head_kv, hd;
  };
  for (DType t : {DType::F16, DType::F32})
    for (const Shape& s : {Shape{8, 4, 8}, Shape{4, 2, 32}, Shape{4, 4, 64}, Shape{6, 2, 48}})
      for (const SeqSpec& q : {SeqSpec{1, 1}, SeqSpec{15, 15}, SeqSpec{16, 1}, SeqSpec{17, 17},
                               SeqSpec{100, 1}, SeqSpec{100, 7}, SeqSpec{200, 64}})
        for (int64_t bs : {16, 7}) {
          Case c;
          c.kt = c.vt = t;
          c.n_head = s.n_head;
          c.n_head_kv = s.n_head_kv;
          c.head_dim = c.head_dim_v = s.hd;
          c.block_size = bs;
          c.flash = false;
          c.seqs = {q};
          const Paged pg = build(c);
          const std::vector<float> paged = run(pg), ref = contiguous(pg, t);
          EXPECT_EQ(0, std::memcmp(paged.data(), ref.data(), ref.size() * 4))
              << kv_type_name(t) << " hd " << s.hd << " len " << q.len << " n_q " << q.n_q
              << " block " << bs;
        }
}

TEST(PagedAttention, LongContext131072) {
  for (DType t : {DType::F32, DType::FP8_E4M3, DType::F16})
    for (bool flash : {true, false}) {
      Case c;
      c.kt = c.vt = t;
      c.n_head = 2;
      c.n_head_kv = 1;
      c.head_dim = c.head_dim_v = 16;
      c.flash = flash;
      c.seqs = {{131072, 2}};
      const auto [kernel, orig] = check_case(c, "131072");
      std::printf("  131072 tokens, %-8s %s: %.2e vs decoded, %.2e vs original\n", kv_type_name(t),
                  flash ? "flash" : "exact", kernel, orig);
    }
}

TEST(PagedAttention, RotationKeepsF32Output) {
  for (bool flash : {true, false})
    for (int64_t hd : {8, 16, 64}) {
      Case c;
      c.head_dim = c.head_dim_v = hd;
      c.flash = flash;
      c.seqs = {{45, 6}, {3, 1}};
      const std::vector<float> plain = run(build(c));
      c.rotate = true;
      const Paged pg = build(c);
      const std::vector<float> rotated = run(pg);
      for (size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(rotated[i], plain[i], 1e-5) << i;
    }
  Case bad;
  bad.head_dim = bad.head_dim_v = 24;
  bad.rotate = true;
  bad.seqs = {{4, 1}};
  EXPECT_THROW(build(bad), std::invalid_argument);
}

TEST(PagedAttention, StoreWritesEncodedRowsIntoTheTable) {
  for (bool rotate : {false, true}) {
    Case c;
    c.kt = DType::NVFP4;
    c.vt = DType::Q4_0;
    c.block_size = 7;
    c.rotate = rotate;
    c.seqs = {{30, 1}, {9, 1}};
    const Paged pg = build(c);
    const int64_t nk = c.n_head_kv * c.head_dim;
    std::vector<uint8_t> row(static_cast<size_t>(pg.kv.k_row_bytes));
    std::vector<float> x(static_cast<size_t>(nk));
    for (size_t s = 0; s < pg.seqs.size(); ++s)
      for (int64_t pos = 0; pos < c.seqs[s].len; ++pos) {
        const int64_t slot = int64_t(pg.tables[s][size_t(pos / 7)]) * 7 + pos % 7;
        std::copy_n(pg.k[s].data() + pos * nk, nk, x.begin());
        if (rotate)
          for (int64_t h = 0; h < c.n_head_kv; ++h)
            hadamard_rotate(x.data() + h * c.head_dim, c.head_dim);
        kv_encode_row(c.kt, c.n_head_kv, c.head_dim, x.data(), row.data());
        EXPECT_EQ(0, std::memcmp(row.data(), pg.kv.k + slot * pg.kv.k_row_bytes, row.size()));
      }
  }
}

TEST(PagedAttention, HadamardIsOrthonormal) {
  for (int64_t n : {1, 2, 8, 128}) {
    const std::vector<float> x = test::random_floats(size_t(n), 3);
    std::vector<float> y = x;
    hadamard_rotate(y.data(), n);
    double nx = 0, ny = 0;
    for (int64_t i = 0; i < n; ++i) {
      nx += double(x[size_t(i)]) * x[size_t(i)];
      ny += double(y[size_t(i)]) * y[size_t(i)];
    }
    EXPECT_NEAR(ny, nx, 1e-5 * nx);
    hadamard_rotate(y.data(), n);  // its own inverse
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[size_t(i)], x[size_t(i)], 1e-6);
  }
  float z[12] = {};
  EXPECT_THROW(hadamard_rotate(z, 12), std::invalid_argument);
}

// Sliding window (Mistral / Gemma / Phi-3) and score soft-capping (Gemma 2): both schemes
// against the double reference with the same window and cap, prefill and decode, several
// sequences, block sizes that do and do not divide the window, windows shorter than a block.
TEST(PagedAttention, SlidingWindowAndSoftcap) {
  for (DType t : {DType::F32, DType::F16})
    for (int64_t bs : {16, 7})
      for (int64_t window : {1, 5, 16, 33})
        for (float cap : {0.0f, 2.0f})
          for (bool flash : {true, false}) {
            Case c;
            c.kt = c.vt = t;
            c.block_size = bs;
            c.window = window;
            c.softcap = cap;
            c.flash = flash;
            c.seqs = {{100, 1}, {70, 40}, {9, 9}};
            c.seed = uint32_t(window * 10 + bs);
            check_case(c, cap > 0 ? "window + softcap" : "window");
          }
}

// Soft-capping changes the result (the test above is not vacuous), and a window at least as long
// as the context changes nothing.
TEST(PagedAttention, SoftcapAndWindowTakeEffect) {
  Case c;
  c.seqs = {{40, 40}};
  for (bool flash : {true, false}) {
    c.flash = flash;
    c.window = 0;
    c.softcap = 0;
    const std::vector<float> plain = run(build(c));
    c.window = 40;
    EXPECT_EQ(run(build(c)), plain) << "a window covering the context must change nothing";
    c.window = 0;
    c.softcap = 0.5f;
    EXPECT_GT(max_err(run(build(c)), std::vector<double>(plain.begin(), plain.end())), 1e-3);
  }
}

// Blocks wholly before every query's window are never read: poisoned with NaN, the output is
// still the reference (so they may be given back to the pool).
TEST(PagedAttention, SlidingWindowNeverReadsBlocksBeforeIt) {
  for (bool flash : {true, false})
    for (int64_t n_q : {1, 3}) {
      Case c;
      c.block_size = 8;
      c.window = 20;
      c.flash = flash;
      c.seqs = {{100, n_q}};
      Paged pg = build(c);
      const int64_t first_needed = (100 - n_q + 1 - c.window) / c.block_size;  // first block read
      for (int64_t b = 0; b < first_needed; ++b) {
        const int64_t phys = pg.tables[0][size_t(b)];
        std::memset(pg.kbuf.data() + phys * c.block_size * pg.kv.k_row_bytes, 0xFF,
                    size_t(c.block_size * pg.kv.k_row_bytes));
        std::memset(pg.vbuf.data() + phys * c.block_size * pg.kv.v_row_bytes, 0xFF,
                    size_t(c.block_size * pg.kv.v_row_bytes));
      }
      const std::vector<float> out = run(pg);
      for (float x : out) ASSERT_TRUE(std::isfinite(x)) << (flash ? "flash" : "exact");
      Paged clean = build(c);
      EXPECT_LE(max_err(out, reference(clean, true)), kernel_bound(c));
    }
}

// Attention sinks (gpt-oss: a learned logit per head in the softmax denominator): both schemes
// against the double reference with the same sinks — sinks below, among and above the scores,
// prefill and decode, several sequences, with and without a sliding window, f32 and f16 KV, a
// long decode whose segments are merged by log-sum-exp. Sinks take effect, and −inf sinks give
// the sink-less output bit for bit.
TEST(PagedAttention, SinksMatchReference) {
  for (DType t : {DType::F32, DType::F16})
    for (int64_t window : {0, 16})
      for (bool flash : {true, false}) {
        Case c;
        c.kt = c.vt = t;
        c.n_head = 4;
        c.n_head_kv = 2;
        c.window = window;
        c.flash = flash;
        c.sinks = {-4.0f, 0.0f, 1.5f, 9.0f};
        c.seqs = {{100, 1}, {70, 40}, {9, 9}, {1, 1}};
        c.seed = uint32_t(window + 7);
        check_case(c, window ? "sinks + window" : "sinks");
        Case plain = c;
        plain.sinks.clear();
        const std::vector<float> without = run(build(plain));
        EXPECT_GT(max_err(run(build(c)), std::vector<double>(without.begin(), without.end())), 1e-2)
            << "sinks must change the output";
        c.sinks.assign(4, -INFINITY);
        const std::vector<float> minus_inf = run(build(c));
        EXPECT_EQ(0, std::memcmp(minus_inf.data(), without.data(), without.size() * 4))
            << (flash ? "flash" : "exact");
      }
}

// ---- the decode block kernel (flash_decode.h): query tiles of at most 4 tokens, head_dim a
// multiple of 16, K and V read in place (F32, F16, BF16, Q8_0, Q4_0) or decoded (the rest) ----

/// As run(), with the flash decode kernel of kernel level `level`.
std::vector<float> run_at(const Paged& pg, CpuLevel level, int threads = 2) {
  ThreadPool pool(threads);
  int64_t rows = 0;
  for (const PagedSeq& s : pg.seqs) rows += s.n_q;
  std::vector<float> out(static_cast<size_t>(rows * pg.p.attn.n_head * pg.p.attn.head_dim_v), NAN);
  paged_attention_at_level(pool, level, pg.kv, pg.params(), pg.seqs.data(), int64_t(pg.seqs.size()),
                           pg.q.data(), out.data());
  return out;
}

/// The kernel levels this build and CPU support.
std::vector<CpuLevel> supported_levels() {
  std::vector<CpuLevel> v;
  for (CpuLevel l : kAllCpuLevels)
    if (cpu_level_supported(l)) v.push_back(l);
  return v;
}

/// Bound on the decode kernel's error against the float64 reference over the decoded K/V. Every
/// K/V value is widened exactly and sums are f32; Q is converted to K's dot type as llama.cpp
/// does: rounded to f16 for an f16 K (~2⁻¹¹ relative per score), quantized to q8_0 for a Q8_0 /
/// Q4_0 K read in place (head_dim % 32 == 0; ~0.4 % per element), else f32.
double decode_bound(const Case& c) {
  double b = 5e-6;
  if (c.kt == DType::F16) b += 1e-3;
  if ((c.kt == DType::Q8_0 || c.kt == DType::Q4_0) && c.head_dim % 32 == 0) b += 3e-2;
  return b;
}

// Every K type × V type through the decode kernel at every level: head_dim 64, 128 and 48 (48:
// Q8_0 / Q4_0 heads straddle blocks and are decoded first), GQA groups 1 and 4, block sizes 16
// and 32, one and three query tokens, context lengths ending mid-block, against float64.
TEST(PagedAttentionDecode, EveryTypeEveryLevelMatchesReference) {
  const DType types[] = {DType::F16, DType::Q8_0,     DType::Q4_0, DType::BF16,
                         DType::F32, DType::FP8_E4M3, DType::NVFP4};
  double worst = 0;
  for (CpuLevel level : supported_levels())
    for (int64_t hd : {64, 128, 48})
      for (int64_t group : {1, 4})
        for (DType kt : types)
          for (DType vt : types) {
            Case c;
            c.kt = kt;
            c.vt = vt;
            c.head_dim = c.head_dim_v = hd;
            c.n_head_kv = 2;
            c.n_head = 2 * group;
            c.block_size = (hd + group + int64_t(kt) + int64_t(vt)) % 2 ? 16 : 32;
            c.seqs = {{203, 1}, {70, 3}};  // 203 and 70: mid-block ends
            c.seed = uint32_t(hd + group * 3 + int(kt) * 7 + int(vt) * 11);
            const Paged pg = build(c);
            const double e = max_err(run_at(pg, level), reference(pg, true));
            if (decode_bound(c) < 1e-5) worst = std::max(worst, e);
            EXPECT_LE(e, decode_bound(c))
                << cpu_level_name(level) << " K " << kv_type_name(kt) << " V " << kv_type_name(vt)
                << " hd " << hd << " group " << group << " block " << c.block_size;
          }
  std::printf("  decode kernel: worst error vs float64 with f32 Q %.2e\n", worst);
}

// Every level performs the same float operations (16-lane partial sums, the same fold, fused
// multiply-adds everywhere: std::fma on the baseline level), so the levels agree bit for bit, on
// the llama3.2-1b attention shape and on an odd GQA group; and threads change nothing.
TEST(PagedAttentionDecode, LevelsAgreeBitForBit) {
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0, DType::BF16, DType::F32, DType::FP8_E4M3})
    for (int64_t group : {4, 3}) {
      Case c;
      c.kt = c.vt = t;
      c.n_head = 8 * group;
      c.n_head_kv = 8;
      c.head_dim = c.head_dim_v = 64;
      c.seqs = {{1000, 1}, {333, 2}, {40, 4}};
      const Paged pg = build(c);
      const std::vector<float> ref = run_at(pg, CpuLevel::scalar);
      for (CpuLevel level : supported_levels()) {
        const std::vector<float> out = run_at(pg, level);
        EXPECT_EQ(0, std::memcmp(out.data(), ref.data(), out.size() * 4))
            << cpu_level_name(level) << " " << kv_type_name(t) << " group " << group;
        EXPECT_EQ(0, std::memcmp(out.data(), run_at(pg, level, 1).data(), out.size() * 4))
            << "threads change " << cpu_level_name(level);
      }
    }
}

/// Writes `fill(row)` over the stored K (is_k) or V row of position `pos` of sequence `s`.
template <typename Fill>
void rewrite_row(Paged& pg, size_t s, int64_t pos, bool is_k, Fill fill) {
  const int64_t slot = int64_t(pg.tables[s][size_t(pos / pg.kv.block_size)]) * pg.kv.block_size +
                       pos % pg.kv.block_size;
  uint8_t* base = is_k ? pg.kbuf.data() : pg.vbuf.data();
  fill(base + slot * (is_k ? pg.kv.k_row_bytes : pg.kv.v_row_bytes));
}

// FP8 K and V are read in place by the decode kernel (each code through binary16, times its
// row's E8M0 scale): the outputs equal, bit for bit, those of the same values decoded by the
// codec and stored as f32 rows, at every level. Covered: every finite code of both formats (one
// row holds them all, scale 1) and rows whose scale byte is 0 (values below 448 · 2^−127, whose
// blocks the kernel leaves to the codec; one whole sequence of them).
TEST(PagedAttentionDecode, Fp8InPlaceEqualsDecodedRows) {
  for (DType kt : {DType::FP8_E4M3, DType::FP8_E5M2})
    for (DType vt : {DType::FP8_E4M3, DType::FP8_E5M2})
      for (int64_t hd : {64, 128}) {
        Case c;
        c.kt = kt;
        c.vt = vt;
        c.head_dim = c.head_dim_v = hd;
        c.n_head = 8;
        c.n_head_kv = 2;
        c.seqs = {{203, 1}, {70, 3}};
        c.seed = uint32_t(hd + int(kt) * 3 + int(vt) * 5);
        Paged pg = build(c);
        const int64_t n = c.n_head_kv * hd;
        for (bool is_k : {true, false}) {
          const DType t = is_k ? kt : vt;
          // Tiny values (scale byte 0): two rows of sequence 0 and all of sequence 1 (its
          // output is then tiny too, so a wrong scale would show).
          std::vector<std::pair<size_t, int64_t>> tiny{{0, 5}, {0, 100}};
          for (int64_t pos = 0; pos < 70; ++pos) tiny.push_back({1, pos});
          for (auto [s, pos] : tiny)
            rewrite_row(pg, s, pos, is_k, [&](uint8_t* row) {
              std::vector<float> x = test::random_floats(size_t(n), uint32_t(pos + 100 * s));
              for (float& v : x) v *= 1e-37f;
              kv_encode_row(t, c.n_head_kv, hd, x.data(), row);
              for (int64_t h = 0; h < c.n_head_kv; ++h) ASSERT_EQ(row[n + h], 0);
            });
          rewrite_row(pg, 0, 7, is_k, [&](uint8_t* row) {  // every finite code, scale 1
            for (int64_t i = 0; i < n; ++i) {
              const uint8_t code = uint8_t(i * 37);
              row[i] = std::isfinite(t == DType::FP8_E4M3 ? fp8_e4m3_to_f32(code)
                                                          : fp8_e5m2_to_f32(code))
                           ? code
                           : 0;
            }
            for (int64_t h = 0; h < c.n_head_kv; ++h) row[n + h] = kE8M0Unit;
          });
        }
        Case cf = c;
        cf.kt = cf.vt = DType::F32;
        Paged f = build(cf);  // same tables and Q (same seed); rows replaced below
        for (size_t s = 0; s < pg.seqs.size(); ++s)
          for (bool is_k : {true, false}) {
            const std::vector<double> rows = rows_of(pg, s, is_k, true);
            const int64_t len = pg.seqs[s].pos0 + pg.seqs[s].n_q;
            for (int64_t pos = 0; pos < len; ++pos)
              rewrite_row(f, s, pos, is_k, [&](uint8_t* row) {
                for (int64_t i = 0; i < n; ++i) {
                  const float v = float(rows[size_t(pos * n + i)]);
                  std::memcpy(row + 4 * i, &v, 4);
                }
              });
          }
        for (CpuLevel level : supported_levels()) {
          const std::vector<float> out = run_at(pg, level), want = run_at(f, level);
          EXPECT_EQ(0, std::memcmp(out.data(), want.data(), out.size() * 4))
              << cpu_level_name(level) << " K " << kv_type_name(kt) << " V " << kv_type_name(vt)
              << " hd " << hd;
        }
      }
}

// Sliding windows (shorter than a block, not dividing it, longer than a block) and soft-capping
// through the decode kernel, at every level.
TEST(PagedAttentionDecode, SlidingWindowAndSoftcap) {
  for (CpuLevel level : supported_levels())
    for (DType t : {DType::F16, DType::Q8_0})
      for (int64_t window : {1, 5, 16, 33})
        for (float cap : {0.0f, 2.0f}) {
          Case c;
          c.kt = c.vt = t;
          c.n_head = 8;
          c.n_head_kv = 2;
          c.head_dim = c.head_dim_v = 64;
          c.window = window;
          c.softcap = cap;
          c.seqs = {{100, 1}, {41, 4}, {3, 3}};
          c.seed = uint32_t(window + 100);
          const Paged pg = build(c);
          EXPECT_LE(max_err(run_at(pg, level), reference(pg, true)), decode_bound(c))
              << cpu_level_name(level) << " " << kv_type_name(t) << " window " << window << " cap "
              << cap;
        }
}

// A long decode (split into segments merged by log-sum-exp) through the decode kernel, without
// and with attention sinks (added at the merge).
TEST(PagedAttentionDecode, LongDecodeSegments) {
  for (DType t : {DType::F16, DType::Q4_0})
    for (bool sinks : {false, true}) {
      Case c;
      c.kt = c.vt = t;
      c.n_head = 8;
      c.n_head_kv = 2;
      c.head_dim = c.head_dim_v = 64;
      if (sinks) c.sinks = {-3.0f, 0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 6.0f, 12.0f};
      c.seqs = {{9000, 1}, {700, 3}};
      const Paged pg = build(c);
      for (CpuLevel level : supported_levels())
        EXPECT_LE(max_err(run_at(pg, level), reference(pg, true)), decode_bound(c))
            << cpu_level_name(level) << " " << kv_type_name(t) << (sinks ? " sinks" : "");
    }
}

// Blocks in the slow tier (PagedKvLayer::k_slow / v_slow) are read where they lie: the same
// output bit for bit as one tier.
TEST(PagedAttentionDecode, BothTiersGiveTheSameResult) {
  for (DType t : {DType::F16, DType::Q8_0, DType::FP8_E4M3}) {
    Case c;
    c.kt = c.vt = t;
    c.n_head = 8;
    c.n_head_kv = 2;
    c.head_dim = c.head_dim_v = 64;
    c.seqs = {{300, 1}, {77, 2}};
    const Paged pg = build(c);
    const std::vector<float> one = run(pg);
    Paged tiered = build(c);
    const int64_t n_blocks = int64_t(tiered.kbuf.size()) / (c.block_size * tiered.kv.k_row_bytes);
    const int64_t n_fast = n_blocks / 2;
    const size_t kb = size_t(c.block_size * tiered.kv.k_row_bytes);
    const size_t vb = size_t(c.block_size * tiered.kv.v_row_bytes);
    std::vector<uint8_t> kslow(tiered.kbuf.begin() + n_fast * kb, tiered.kbuf.end());
    std::vector<uint8_t> vslow(tiered.vbuf.begin() + n_fast * vb, tiered.vbuf.end());
    std::fill(tiered.kbuf.begin() + n_fast * kb, tiered.kbuf.end(), 0xFF);  // NaN if read
    std::fill(tiered.vbuf.begin() + n_fast * vb, tiered.vbuf.end(), 0xFF);
    tiered.kv.n_fast = n_fast;
    tiered.kv.k_slow = kslow.data();
    tiered.kv.v_slow = vslow.data();
    const std::vector<float> two = run(tiered);
    EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * 4)) << kv_type_name(t);
  }
}

}  // namespace
}  // namespace kvrun::cpu
