// test_paged_attention_tiers.cpp — attention split by KV tier (--kv-host-attn cpu):
// cpu::paged_attention_states over one tier of a layer's blocks, merged by log-sum-exp
// (cpu::attn_merge_partials, cpu::attn_merge_states), against the one-pass paged_attention.
// Checked: the states of every block merged alone give paged_attention's output bit for bit
// (decode segments, prefill tiles, sinks, windows); a layer whose blocks are split between a
// fast and a slow buffer gives, merged, the one-pass output up to the kernels' rounding and
// the float64 reference within the kernel's bound, with each tier's call unable to touch the
// other tier (null pointers); rows that see no block of a tier (m = −inf) are skipped; the
// exact scheme is refused. Random N(0, 1) data, fixed seeds; the set-up is
// paged_attention_test_util.h's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "paged_attention_test_util.h"

namespace kvrun::cpu {
namespace {

using namespace paged_test;

int64_t n_rows(const Paged& pg) {
  int64_t rows = 0;
  for (const PagedSeq& s : pg.seqs) rows += s.n_q;
  return rows;
}

/// paged_attention_states of `kv` (pg's call otherwise) for one tier.
std::vector<float> states(const Paged& pg, const PagedKvLayer& kv, KvTier tier, int threads = 2) {
  ThreadPool pool(threads);
  const AttnParams& a = pg.p.attn;
  std::vector<float> st(size_t(n_rows(pg) * a.n_head * attn_state_floats(a.head_dim_v)), NAN);
  paged_attention_states(pool, kv, pg.params(), tier, pg.seqs.data(), int64_t(pg.seqs.size()),
                         pg.q.data(), st.data());
  return st;
}

/// The merged output of state arrays (each [rows][n_head][2 + head_dim_v]), with pg's sinks.
std::vector<float> merge(const Paged& pg, const std::vector<const std::vector<float>*>& parts) {
  const AttnParams& a = pg.p.attn;
  const int64_t hdv = a.head_dim_v, sf = attn_state_floats(hdv), n = n_rows(pg) * a.n_head;
  std::vector<float> out(size_t(n * hdv), NAN), m(parts.size()), l(parts.size());
  std::vector<const float*> acc(parts.size());
  const PagedAttnParams p = pg.params();
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < parts.size(); ++k) {
      const float* st = parts[k]->data() + i * sf;
      m[k] = st[0];
      l[k] = st[1];
      acc[k] = st + 2;
    }
    attn_merge_partials(int64_t(parts.size()), m.data(), l.data(), acc.data(), hdv,
                        out.data() + i * hdv, p.sinks ? p.sinks + i % a.n_head : nullptr);
  }
  return out;
}

Case mixed_case(DType kt, DType vt, uint32_t seed) {
  Case c;
  c.kt = kt;
  c.vt = vt;
  c.n_head = 8;
  c.n_head_kv = 2;
  c.head_dim = c.head_dim_v = 64;
  // decode (one with a context long enough for segments), prefill tiles, a one-block sequence
  c.seqs = {{100, 1}, {70, 40}, {9, 9}, {1, 1}, {1500, 1}};
  c.seed = seed;
  return c;
}

const DType kTypes[] = {DType::F32,  DType::F16,      DType::BF16,
                        DType::Q8_0, DType::FP8_E4M3, DType::NVFP4};

TEST(PagedAttentionTiers, StatesOfEveryBlockMergedEqualPagedAttentionBitForBit) {
  for (DType t : kTypes)
    for (int variant = 0; variant < 3; ++variant) {
      Case c = mixed_case(t, t == DType::Q8_0 ? DType::Q4_0 : t, 11 + uint32_t(variant));
      if (variant == 1) c.sinks = {-4.0f, 0.0f, 1.5f, 9.0f, -1.0f, 2.0f, 0.5f, -9.0f};
      if (variant == 2) c.window = 48, c.softcap = 1.5f;
      const Paged pg = build(c);
      const std::vector<float> one = run(pg);
      const std::vector<float> st = states(pg, pg.kv, KvTier::kAll);
      const std::vector<float> merged = merge(pg, {&st});
      ASSERT_EQ(merged.size(), one.size());
      EXPECT_EQ(0, std::memcmp(merged.data(), one.data(), one.size() * 4))
          << kv_type_name(t) << " variant " << variant;
    }
}

/// pg's layer with every third block (by id) moved to a slow tier: slots 0 … n_fast−1 in
/// `fast_k` / `fast_v`, the others in `slow_k` / `slow_v`, the same bytes.
struct Tiered {
  std::vector<int32_t> slot_of;
  std::vector<uint8_t> fast_k, fast_v, slow_k, slow_v;
  PagedKvLayer kv;

  explicit Tiered(const Paged& pg) : kv(pg.kv) {
    const int64_t n_blocks = int64_t(pg.kbuf.size()) / (pg.kv.block_size * pg.kv.k_row_bytes);
    const int64_t kb = pg.kv.block_size * pg.kv.k_row_bytes;
    const int64_t vb = pg.kv.block_size * pg.kv.v_row_bytes;
    slot_of.assign(size_t(n_blocks), -1);
    int64_t n_fast = 0;
    for (int64_t id = 0; id < n_blocks; ++id)
      if (id % 3 != 1) slot_of[size_t(id)] = int32_t(n_fast++);
    int64_t next = n_fast;
    for (int64_t id = 0; id < n_blocks; ++id)
      if (id % 3 == 1) slot_of[size_t(id)] = int32_t(next++);
    fast_k.resize(size_t(n_fast * kb));
    fast_v.resize(size_t(n_fast * vb));
    slow_k.resize(size_t((n_blocks - n_fast) * kb));
    slow_v.resize(size_t((n_blocks - n_fast) * vb));
    for (int64_t id = 0; id < n_blocks; ++id) {
      const int64_t s = slot_of[size_t(id)];
      uint8_t* k = s < n_fast ? fast_k.data() + s * kb : slow_k.data() + (s - n_fast) * kb;
      uint8_t* v = s < n_fast ? fast_v.data() + s * vb : slow_v.data() + (s - n_fast) * vb;
      std::memcpy(k, pg.kbuf.data() + id * kb, size_t(kb));
      std::memcpy(v, pg.vbuf.data() + id * vb, size_t(vb));
    }
    kv.slot_of = slot_of.data();
    kv.n_fast = n_fast;
    kv.k = fast_k.data();
    kv.v = fast_v.data();
    kv.k_slow = slow_k.data();
    kv.v_slow = slow_v.data();
  }
  /// The layer as one tier's call may see it: the other tier's pointers null (never read).
  PagedKvLayer only(KvTier tier) const {
    PagedKvLayer l = kv;
    if (tier == KvTier::kFast) l.k_slow = l.v_slow = nullptr;
    if (tier == KvTier::kSlow) l.k = l.v = nullptr;
    return l;
  }
};

TEST(PagedAttentionTiers, FastAndSlowTiersMergedEqualOnePass) {
  for (DType t : kTypes)
    for (int variant = 0; variant < 3; ++variant) {
      Case c = mixed_case(t, t == DType::Q8_0 ? DType::Q4_0 : t, 21 + uint32_t(variant));
      if (variant == 1) c.sinks = {-4.0f, 0.0f, 1.5f, 9.0f, -1.0f, 2.0f, 0.5f, -9.0f};
      if (variant == 2) c.window = 48, c.softcap = 1.5f;
      const Paged pg = build(c);
      const Tiered tiers(pg);
      ASSERT_GT(tiers.kv.n_fast, 0);
      ASSERT_LT(tiers.kv.n_fast, int64_t(tiers.slot_of.size()));
      const std::vector<float> fast = states(pg, tiers.only(KvTier::kFast), KvTier::kFast);
      const std::vector<float> slow = states(pg, tiers.only(KvTier::kSlow), KvTier::kSlow);
      const std::vector<float> merged = merge(pg, {&fast, &slow});
      const std::vector<float> one = run(pg);
      const std::string what = std::string(kv_type_name(t)) + " variant " + std::to_string(variant);
      EXPECT_LE(max_err(merged, reference(pg, true)), kernel_bound(c)) << what;
      EXPECT_LE(max_err(merged, std::vector<double>(one.begin(), one.end())), kernel_bound(c))
          << what;
      // Some rows see no block of a tier (the one-block sequence: its block is fast): m = −inf,
      // l = 0 there, and the merge skipped it (no NaN above).
      const int64_t sf = attn_state_floats(c.head_dim_v);
      bool empty_slow = false;
      for (size_t i = 0; i < slow.size(); i += size_t(sf))
        empty_slow = empty_slow || (slow[i] == -INFINITY && slow[i + 1] == 0.0f);
      EXPECT_TRUE(empty_slow) << what;
      // Each tier alone is not the whole: its states differ from the merged ones.
      const std::vector<float> fast_only = merge(pg, {&fast});
      EXPECT_GT(max_err(fast_only, std::vector<double>(one.begin(), one.end())), 1e-2) << what;
    }
}

TEST(PagedAttentionTiers, ThreadsDoNotChangeStates) {
  const Paged pg = build(mixed_case(DType::F16, DType::F16, 5));
  const Tiered tiers(pg);
  const std::vector<float> a = states(pg, tiers.only(KvTier::kSlow), KvTier::kSlow, 1);
  const std::vector<float> b = states(pg, tiers.only(KvTier::kSlow), KvTier::kSlow, 4);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
}

TEST(PagedAttentionTiers, MergeStatesIsTheUndividedMerge) {
  // Two parts of one head, head_dim_v 3, and a part that saw nothing.
  const float m[3] = {1.0f, -INFINITY, 2.5f}, l[3] = {2.0f, 0.0f, 1.5f};
  const float a0[3] = {1.0f, -2.0f, 0.5f}, a1[3] = {9.0f, 9.0f, 9.0f}, a2[3] = {0.25f, 4.0f, -1};
  const float* acc[3] = {a0, a1, a2};
  float st[5], out[3];
  attn_merge_states(3, m, l, acc, 3, st);
  attn_merge_partials(3, m, l, acc, 3, out);
  EXPECT_EQ(st[0], 2.5f);
  const float w0 = std::exp(1.0f - 2.5f);
  EXPECT_FLOAT_EQ(st[1], w0 * 2.0f + 1.5f);
  for (int d = 0; d < 3; ++d) {
    EXPECT_FLOAT_EQ(st[2 + d], w0 * a0[d] + a2[d]) << d;
    EXPECT_FLOAT_EQ(out[d], st[2 + d] / st[1]) << d;
  }
  const float none_m[1] = {-INFINITY}, none_l[1] = {0.0f};
  const float* none_acc[1] = {a1};
  attn_merge_states(1, none_m, none_l, none_acc, 3, st);
  EXPECT_EQ(st[0], -INFINITY);
  EXPECT_EQ(st[1], 0.0f);
  for (int d = 0; d < 3; ++d) EXPECT_EQ(st[2 + d], 0.0f);
}

TEST(PagedAttentionTiers, ExactSchemeIsRefused) {
  Case c = mixed_case(DType::F16, DType::F16, 3);
  c.flash = false;
  const Paged pg = build(c);
  EXPECT_THROW(states(pg, pg.kv, KvTier::kAll), std::invalid_argument);
}

}  // namespace
}  // namespace kvrun::cpu
