// test_kv_fill.cpp — Context::fill_synthetic (src/engine/context.h) and the KV cache's synthetic
// rows (KvCache::write_synthetic_rows, KvSequence::commit_synthetic) on the stories260K fixture:
// the same blocks and bytes as a prefill of as many tokens, rows that decode to finite values in
// every KV cache type, a following eval at the right position (its layer-0 K row equals the one
// a prefilled context writes there), overflow / full-pool / bad-count errors that change nothing,
// the slow tier (--kv-offload-dir), a sliding window's blocks given back as a prefill gives them
// (tiny-phi3, no fixture needed), and a prefix cache that never offers synthetic blocks.
// Rows on a device the host cannot address: tests/test_backend_split.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/context.h"
#include "engine/model.h"
#include "kv_layout.h"
#include "test_util.h"
#include "tools/synth/synth.h"

namespace kvrun {
namespace {

constexpr const char* kModel = "models/stories260K-F32.gguf";

/// `n` token ids (deterministic, inside the fixture's vocabulary).
std::vector<int32_t> some_tokens(const Model& m, int64_t n, int32_t salt = 0) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(int32_t((i * 7 + 3 + salt) % m.hparams().n_vocab));
  return t;
}

ContextParams small_params(int64_t n_ctx, DType type = DType::F16) {
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_batch = 16;
  cp.n_threads = 1;
  cp.kv.type_k = cp.kv.type_v = type;
  cp.kv.block_size = 16;
  return cp;
}

/// The bytes of layer il's K (or V) row at position p of `ctx`'s sequence.
std::vector<uint8_t> row_bytes(const Context& ctx, int64_t il, int64_t p, bool v) {
  const KvLayer L = ctx.cache().layer(il);
  const int32_t b = ctx.sequence().block_table().at(size_t(p / L.block_size));
  const int64_t rb = v ? L.v_row_bytes : L.k_row_bytes;
  const uint8_t* row = (v ? L.v_block(b) : L.k_block(b)) + (p % L.block_size) * rb;
  return std::vector<uint8_t>(row, row + rb);
}

/// Layer il's K (or V) row at position p, decoded.
std::vector<float> decoded_row(const Context& ctx, int64_t il, int64_t p, bool v) {
  const Hparams& hp = ctx.model().hparams();
  const KvLayer L = ctx.cache().layer(il);
  const int64_t hd = v ? hp.head_dim_v : hp.head_dim;
  std::vector<float> x(size_t(hp.n_head_kv * hd));
  kv_decode_row(v ? L.v_type : L.k_type, hp.n_head_kv, hd, row_bytes(ctx, il, p, v).data(),
                x.data());
  return x;
}

/// Every value of every layer's K and V rows at positions [p0, p1) is finite, and their spread
/// is that of the normal(0, 1) values written (not zeros, not one repeated row).
void expect_random_finite_rows(const Context& ctx, int64_t p0, int64_t p1,
                               const std::string& what) {
  double sum = 0, sq = 0;
  int64_t n = 0, n_bad = 0;
  for (int64_t il = 0; il < ctx.cache().n_layer(); ++il)
    for (int64_t p = p0; p < p1; ++p)
      for (bool v : {false, true})
        for (float x : decoded_row(ctx, il, p, v)) {
          n_bad += !std::isfinite(x);
          sum += x;
          sq += double(x) * x;
          ++n;
        }
  ASSERT_EQ(n_bad, 0) << what;
  const double mean = sum / double(n), sd = std::sqrt(sq / double(n) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.2) << what;
  EXPECT_GT(sd, 0.6) << what;  // q4_0 and fp8 round, but keep the spread
  EXPECT_LT(sd, 1.5) << what;
  // Neighbouring positions hold different rows.
  if (p1 - p0 >= 2) {
    EXPECT_NE(row_bytes(ctx, 0, p0, false), row_bytes(ctx, 0, p0 + 1, false)) << what;
  }
}

TEST(KvFill, HoldsTheBlocksAndBytesOfAPrefill) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const Model m = Model::load(test::fixture(kModel).string());
  for (int64_t before : {0, 5, 16}) {
    for (int64_t n : {1, 11, 16, 37}) {
      const std::string what = std::to_string(before) + " + " + std::to_string(n);
      Context filled(m, small_params(128)), evaluated(m, small_params(128));
      if (before > 0) {
        filled.eval(some_tokens(m, before));
        evaluated.eval(some_tokens(m, before));
      }
      filled.fill_synthetic(n, 7);
      evaluated.eval(some_tokens(m, n, 1));
      EXPECT_EQ(filled.n_past(), before + n) << what;
      EXPECT_EQ(filled.sequence().bytes_held(), evaluated.sequence().bytes_held()) << what;
      EXPECT_EQ(filled.sequence().block_table().size(), evaluated.sequence().block_table().size())
          << what;
      EXPECT_EQ(filled.cache().pool().stats().n_free, evaluated.cache().pool().stats().n_free)
          << what;
      EXPECT_EQ(filled.cache().n_tokens_computed(), before) << what;  // not computed
    }
  }
}

TEST(KvFill, RowsDecodeToFiniteValuesInEveryKvTypeAndEvalContinuesAtTheDepth) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const Model m = Model::load(test::fixture(kModel).string());
  const int64_t before = 3, n = 40;  // the fill starts inside a block and ends inside another
  const std::vector<int32_t> next = {42};
  for (DType type : kKvCacheTypes) {
    const std::string what = kv_type_name(type);
    Context ctx(m, small_params(64, type));
    ctx.eval(some_tokens(m, before));
    std::vector<std::vector<uint8_t>> kept;  // the prefilled rows must stay as they are
    for (int64_t p = 0; p < before; ++p) kept.push_back(row_bytes(ctx, 1, p, true));
    ctx.fill_synthetic(n, 123);
    ASSERT_EQ(ctx.n_past(), before + n) << what;
    for (int64_t p = 0; p < before; ++p) EXPECT_EQ(row_bytes(ctx, 1, p, true), kept[size_t(p)]);
    expect_random_finite_rows(ctx, before, before + n, what);

    // The next eval runs at position before + n: its layer-0 K row (which depends only on the
    // token and its RoPE position) equals that of a context prefilled to the same depth.
    const std::span<const float> lg = ctx.eval(next);
    for (float x : lg) ASSERT_TRUE(std::isfinite(x)) << what;
    EXPECT_EQ(ctx.n_past(), before + n + 1) << what;
    Context ref(m, small_params(64, type));
    ref.eval(some_tokens(m, before + n, 5));
    ref.eval(next);
    EXPECT_EQ(row_bytes(ctx, 0, before + n, false), row_bytes(ref, 0, before + n, false)) << what;
    EXPECT_NE(row_bytes(ctx, 0, before + n, false), row_bytes(ctx, 0, before + n - 1, false));
  }
}

TEST(KvFill, OverflowFullPoolAndBadCountsChangeNothing) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const Model m = Model::load(test::fixture(kModel).string());
  Context ctx(m, small_params(32));
  ctx.fill_synthetic(20, 1);
  const int64_t held = ctx.sequence().bytes_held();
  try {
    ctx.fill_synthetic(13, 1);
    ADD_FAILURE() << "a fill past n_ctx was accepted";
  } catch (const ContextError& e) {
    EXPECT_NE(std::string(e.what()).find("context overflow"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ctx.n_past(), 20);
  EXPECT_EQ(ctx.sequence().bytes_held(), held);
  EXPECT_THROW(ctx.fill_synthetic(0, 1), ContextError);
  EXPECT_THROW(ctx.fill_synthetic(-4, 1), ContextError);
  EXPECT_THROW(ctx.fill_synthetic(INT64_MAX, 1), ContextError);  // no overflow in the check
  EXPECT_EQ(ctx.n_past(), 20);
  ctx.fill_synthetic(12, 1);  // exactly up to n_ctx
  EXPECT_EQ(ctx.n_past(), 32);

  // A shared pool of 2 blocks: a 40-token fill needs 3.
  KvCacheParams kp = small_params(64).kv;
  kp.mem_bytes =
      2 * kp.block_size *
      kv_bytes_per_token(kp.type_k, kp.type_v, m.hparams().n_layer, m.hparams().n_head_kv,
                         m.hparams().head_dim, m.hparams().head_dim_v);
  KvCache cache(m.hparams(), kp);
  Context small(m, cache, small_params(64));
  EXPECT_THROW(small.fill_synthetic(40, 1), KvCacheFull);
  EXPECT_EQ(small.n_past(), 0);
  EXPECT_EQ(cache.pool().stats().n_free, 2);
  small.fill_synthetic(32, 1);
  EXPECT_EQ(small.n_past(), 32);
}

TEST(KvFill, SlowTierRowsAreWrittenWhereTheBlocksLie) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const Model m = Model::load(test::fixture(kModel).string());
  test::TempDir dir;
  ContextParams cp = small_params(256, DType::Q8_0);
  const int64_t per_block =
      cp.kv.block_size * kv_bytes_per_token(DType::Q8_0, DType::Q8_0, m.hparams().n_layer,
                                            m.hparams().n_head_kv, m.hparams().head_dim,
                                            m.hparams().head_dim_v);
  cp.kv.mem_bytes = 4 * per_block;  // 4 fast blocks, the rest in the file
  cp.kv.offload_dir = dir.path().string();
  Context filled(m, cp), evaluated(m, cp);
  filled.fill_synthetic(150, 3);
  evaluated.eval(some_tokens(m, 150));
  EXPECT_EQ(filled.sequence().bytes_held(), evaluated.sequence().bytes_held());
  EXPECT_EQ(filled.sequence().n_fast_blocks(), evaluated.sequence().n_fast_blocks());
  ASSERT_LT(filled.sequence().n_fast_blocks(), int64_t(filled.sequence().block_table().size()));
  expect_random_finite_rows(filled, 0, 150, "q8_0 over two tiers");
  const std::vector<int32_t> next = {9};
  for (float x : filled.eval(next)) ASSERT_TRUE(std::isfinite(x));
}

TEST(KvFill, PrefixCacheNeverOffersSyntheticBlocks) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const Model m = Model::load(test::fixture(kModel).string());
  KvCacheParams kp = small_params(256).kv;
  kp.mem_bytes = int64_t(8) << 20;
  KvCache cache(m.hparams(), kp);
  const std::vector<int32_t> real = some_tokens(m, 32);  // two full blocks
  Context a(m, cache, small_params(256));
  a.eval(real);
  a.fill_synthetic(40, 1);
  a.eval(some_tokens(m, 30, 2));
  // Another session whose tokens equal a's: only the two blocks before the fill are shared.
  std::vector<int32_t> same = a.sequence().tokens();
  same.push_back(1);
  Context b(m, cache, small_params(256));
  EXPECT_EQ(b.reuse_prefix(same), 32);
  // Truncated back to its real tokens, a hashes its new blocks again.
  a.truncate(32);
  a.eval(some_tokens(m, 20, 3));
  std::vector<int32_t> again = a.sequence().tokens();
  again.push_back(1);
  Context c(m, cache, small_params(256));
  EXPECT_EQ(c.reuse_prefix(again), 48);
}

TEST(KvFill, AllWindowedModelGivesBackTheBlocksAPrefillGivesBack) {
  test::TempDir dir;
  SynthParams sp;
  sp.shape = find_synth_shape("tiny-phi3");  // a 48-token window on every layer
  sp.type = SynthFileType::F32;
  sp.n_threads = 1;
  sp.out_path = (dir / "tiny-phi3.gguf").string();
  write_synth_model(sp);
  const Model m = Model::load(sp.out_path);
  ASSERT_GT(m.hparams().all_swa_window(), 0);
  Context filled(m, small_params(256)), evaluated(m, small_params(256));
  ASSERT_GT(filled.release_window(), 0);
  filled.fill_synthetic(200, 4);
  evaluated.eval(some_tokens(m, 200));
  EXPECT_EQ(filled.n_past(), 200);
  EXPECT_GT(filled.sequence().n_released(), 0);
  EXPECT_EQ(filled.sequence().n_released(), evaluated.sequence().n_released());
  EXPECT_EQ(filled.sequence().bytes_held(), evaluated.sequence().bytes_held());
  const std::vector<int32_t> next = {5};
  for (float x : filled.eval(next)) ASSERT_TRUE(std::isfinite(x));
  evaluated.eval(next);
  EXPECT_EQ(filled.sequence().bytes_held(), evaluated.sequence().bytes_held());
  EXPECT_EQ(filled.sequence().n_released(), evaluated.sequence().n_released());
}

}  // namespace
}  // namespace kvrun
