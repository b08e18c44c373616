// test_prefix_sharing.cpp — prefix sharing end to end on a real model: two contexts over one
// shared KV cache; the second request, which starts with the first one's 1,000 tokens, takes
// their cached blocks and computes only its new tokens (counted by the cache, not timed), and
// its greedy continuation equals a run without any cache sharing.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/context.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace kvrun {
namespace {

constexpr const char* kModel = "models/stories260K-F32.gguf";
constexpr const char* kText = "text/tinystories_style_kvrun.txt";

/// `n` greedy tokens after `prompt` has been fed (prompt[ctx.n_past() …] is evaluated).
std::vector<int32_t> greedy(Context& ctx, const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> out;
  std::span<const int32_t> input(prompt.data() + ctx.n_past(),
                                 prompt.size() - size_t(ctx.n_past()));
  std::span<const float> logits = ctx.eval(input);
  for (int i = 0; i < n; ++i) {
    const int32_t id = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(id);
    logits = ctx.eval(std::span<const int32_t>(&out.back(), 1));
  }
  return out;
}

std::vector<int32_t> text_tokens(const Tokenizer& tok, size_t n) {
  std::ifstream f(test::fixture(kText));
  const std::string text{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  std::vector<int32_t> t = tok.tokenize(text, true, false);
  t.resize(n);
  return t;
}

TEST(PrefixSharing, SecondRequestComputesOnlyItsNewTokens) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  KVRUN_REQUIRE_FIXTURE(kText);
  const Model model = Model::load(test::fixture(kModel).string());
  const Tokenizer tok = Tokenizer::from_gguf(model.file());
  const std::vector<int32_t> all = text_tokens(tok, 1024 + 32);
  const std::vector<int32_t> prefix(all.begin(), all.begin() + 1000);
  const std::vector<int32_t> second(all.begin(), all.begin() + 1024);  // 1000 shared + 24 new

  ContextParams cp;
  cp.n_ctx = 2048;
  cp.n_threads = 2;
  KvCacheParams kp;
  kp.mem_bytes = int64_t(64) << 20;
  KvCache cache(model.hparams(), kp);

  Context first(model, cache, cp);
  first.eval(prefix);
  EXPECT_EQ(cache.n_tokens_computed(), 1000);

  Context with_cache(model, cache, cp);
  const int64_t reused = with_cache.reuse_prefix(second);
  EXPECT_EQ(reused, 992);  // 62 full blocks of 16; the partial 63rd block is computed
  const std::vector<int32_t> got = greedy(with_cache, second, 16);
  EXPECT_EQ(cache.n_tokens_reused(), 992);
  EXPECT_EQ(cache.n_tokens_computed(), 1000 + (1024 - 992) + 16);  // only its new tokens
  // The shared blocks are the first context's physical blocks.
  for (size_t b = 0; b < 62; ++b)
    EXPECT_EQ(with_cache.sequence().block_table()[b], first.sequence().block_table()[b]);

  Context alone(model, cp);  // its own cache: nothing to share
  EXPECT_EQ(alone.reuse_prefix(second), 0);
  const std::vector<int32_t> want = greedy(alone, second, 16);
  EXPECT_EQ(got, want);

  // A request that differs inside block 10 reuses only the 10 blocks before it.
  std::vector<int32_t> other = second;
  other[165] = other[165] == 300 ? 301 : 300;
  Context third(model, cache, cp);
  EXPECT_EQ(third.reuse_prefix(other), 160);
}

TEST(PrefixSharing, OffMeansNothingIsShared) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  KVRUN_REQUIRE_FIXTURE(kText);
  const Model model = Model::load(test::fixture(kModel).string());
  const Tokenizer tok = Tokenizer::from_gguf(model.file());
  const std::vector<int32_t> t = text_tokens(tok, 200);
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_threads = 2;
  KvCacheParams kp;
  kp.mem_bytes = int64_t(16) << 20;
  kp.prefix_cache = false;
  KvCache cache(model.hparams(), kp);
  Context a(model, cache, cp);
  a.eval(t);
  Context b(model, cache, cp);
  EXPECT_EQ(b.reuse_prefix(t), 0);
  EXPECT_EQ(cache.n_tokens_reused(), 0);
}

}  // namespace
}  // namespace kvrun
