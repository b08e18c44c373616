// test_paged_attention_decode.cpp — the decode block kernel of the paged attention
// (backends/cpu/flash_decode.h) at every kernel level this CPU has, against the float64
// reference of paged_attention_test_util.h: every K type × V type, head_dim 64/128/48, GQA
// groups, block sizes, query tiles, K/V read in place (fp8 included) vs decoded, the levels bit
// for bit, offload tiers. Levels the CPU lacks are skipped by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cpu/cpu_level.h"
#include "paged_attention_test_util.h"

namespace kvrun::cpu {
namespace {

using namespace paged_test;

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

/// The kernel levels this build and CPU support; the others are named on stdout as not run
/// (once per process).
std::vector<CpuLevel> supported_levels() {
  static bool named = false;
  std::vector<CpuLevel> v;
  for (CpuLevel l : kAllCpuLevels) {
    if (cpu_level_supported(l))
      v.push_back(l);
    else if (!named)
      std::printf("  level %s: not supported by this CPU or build, not run\n", cpu_level_name(l));
  }
  named = true;
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
