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
// N(0, 1) data with fixed seeds; no timing assertions. The set-up and reference are in
// paged_attention_test_util.h; the decode block kernel's own tests in
// test_paged_attention_decode.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "cpu/attention.h"
#include "cpu/cpu_level.h"
#include "paged_attention_test_util.h"

namespace kvrun::cpu {
namespace {

using namespace paged_test;

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

}  // namespace
}  // namespace kvrun::cpu
