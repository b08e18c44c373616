// test_embed.cpp — embeddings (src/engine/embed.h) and `kvrun embed`.
//
// The reference for the hidden states is the model's own head: an embedding row h of token i is
// what output.weight multiplies, so output.weight · h computed here in double must give the
// logits of the ordinary forward (which tests/test_llama_refs.cpp holds against llama.cpp's).
// Pooling and normalization are checked against their definitions on those rows.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/context.h"
#include "engine/embed.h"
#include "engine/model.h"
#include "gguf.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace kvrun {
namespace {

const char* kModel = "models/stories260K-F32.gguf";

struct Fixture {
  Model model;
  Tokenizer tok;
};

Fixture load() {
  Model m = Model::load(test::fixture(kModel).string());
  Tokenizer t = Tokenizer::from_gguf(m.file());
  return {std::move(m), std::move(t)};
}

ContextParams params(bool embeddings, int64_t n_batch = 512) {
  ContextParams cp;
  cp.n_ctx = 128;
  cp.n_batch = n_batch;
  cp.n_threads = 1;
  cp.embeddings = embeddings;
  return cp;
}

TEST(Embed, HiddenRowsTimesTheHeadGiveTheLogits) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  Fixture f = load();
  const Hparams& hp = f.model.hparams();
  const std::vector<int32_t> ids = f.tok.tokenize("Once upon a time, there was a cat", true, false);
  Context lc(f.model, params(false)), ec(f.model, params(true));
  const std::span<const float> lspan = lc.eval(ids, true);
  const std::vector<float> logits(lspan.begin(), lspan.end());
  const std::span<const float> rows = ec.eval(ids, true);
  ASSERT_EQ(rows.size(), ids.size() * size_t(hp.n_embd));
  ASSERT_EQ(logits.size(), ids.size() * size_t(hp.n_vocab));
  const gguf::TensorInfo* head = f.model.file().find_tensor("output.weight");
  if (!head) head = f.model.file().find_tensor("token_embd.weight");  // tied embeddings
  ASSERT_NE(head, nullptr);
  ASSERT_EQ(head->type, DType::F32);
  const auto* w = static_cast<const float*>(head->data);
  double max_err = 0.0, max_abs = 0.0;
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t v = 0; v < hp.n_vocab; ++v) {
      double dot = 0.0;
      for (int64_t j = 0; j < hp.n_embd; ++j)
        dot += double(w[v * hp.n_embd + j]) * rows[i * size_t(hp.n_embd) + size_t(j)];
      const double want = logits[i * size_t(hp.n_vocab) + size_t(v)];
      max_err = std::max(max_err, std::fabs(dot - want));
      max_abs = std::max(max_abs, std::fabs(want));
    }
  EXPECT_GT(max_abs, 1.0);
  EXPECT_LT(max_err, 1e-4 * max_abs) << "max |W·h − logits| " << max_err;
}

TEST(Embed, PoolingAndNormalizationFollowTheirDefinitions) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  Fixture f = load();
  const size_t d = size_t(f.model.hparams().n_embd);
  const std::vector<int32_t> ids = f.tok.tokenize("The little dog ran home.", true, false);
  const size_t n = ids.size();
  Context ctx(f.model, params(true));
  const std::vector<float> raw = embed_tokens(ctx, ids, Pooling::kNone, -1);
  ASSERT_EQ(raw.size(), n * d);
  std::vector<float> mean(d, 0.0f);
  for (size_t j = 0; j < d; ++j) {
    double s = 0.0;
    for (size_t i = 0; i < n; ++i) s += raw[i * d + j];
    mean[j] = float(s / double(n));
  }
  const std::vector<float> m = embed_tokens(ctx, ids, Pooling::kMean, -1);
  const std::vector<float> cls = embed_tokens(ctx, ids, Pooling::kCls, -1);
  const std::vector<float> last = embed_tokens(ctx, ids, Pooling::kLast, -1);
  for (size_t j = 0; j < d; ++j) {
    EXPECT_FLOAT_EQ(m[j], mean[j]);
    EXPECT_EQ(cls[j], raw[j]);
    EXPECT_EQ(last[j], raw[(n - 1) * d + j]);
  }
  // Euclidean (default): unit length, the direction of the mean.
  const std::vector<float> unit = embed_tokens(ctx, ids, Pooling::kMean);
  double norm2 = 0.0, mnorm = 0.0;
  for (size_t j = 0; j < d; ++j) norm2 += double(unit[j]) * unit[j], mnorm += double(m[j]) * m[j];
  EXPECT_NEAR(norm2, 1.0, 1e-5);
  for (size_t j = 0; j < d; ++j) EXPECT_NEAR(unit[j], m[j] / std::sqrt(mnorm), 1e-6);
  // Chunked prefill (3 tokens a step) gives the same rows.
  Context small(f.model, params(true, 3));
  const std::vector<float> chunked = embed_tokens(small, ids, Pooling::kNone, -1);
  for (size_t k = 0; k < raw.size(); ++k) ASSERT_NEAR(chunked[k], raw[k], 1e-5) << k;
  // A context that outputs logits is refused rather than pooled.
  Context logits_ctx(f.model, params(false));
  EXPECT_THROW(embed_tokens(logits_ctx, ids, Pooling::kMean), ContextError);
  EXPECT_THROW(embed_tokens(ctx, std::span<const int32_t>(), Pooling::kMean), ContextError);
}

TEST(Embed, NormalizationRules) {
  std::vector<float> v = {3.0f, -4.0f};
  normalize_embedding(v, 2);
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(v[1], -0.8f);
  v = {3.0f, -1.0f};
  normalize_embedding(v, 1);
  EXPECT_FLOAT_EQ(v[0], 0.75f);
  EXPECT_FLOAT_EQ(v[1], -0.25f);
  v = {2.0f, -4.0f};
  normalize_embedding(v, 0);
  EXPECT_FLOAT_EQ(v[1], -32760.0f);
  v = {1.0f, 1.0f};
  normalize_embedding(v, 3);
  EXPECT_NEAR(std::pow(v[0], 3) + std::pow(v[1], 3), 1.0, 1e-6);
  v = {2.0f, 5.0f};
  normalize_embedding(v, -1);
  EXPECT_EQ(v, (std::vector<float>{2.0f, 5.0f}));
  v = {0.0f, 0.0f};
  normalize_embedding(v, 2);
  EXPECT_EQ(v, (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EQ(parse_pooling("last"), Pooling::kLast);
  EXPECT_EQ(parse_pooling("max"), std::nullopt);
}

TEST(Embed, CliMatchesTheLibrary) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  std::ofstream(dir / "texts.txt") << "Once upon a time\n\nThe dog barked.\n";
  const auto r =
      test::run_command(test::kvrun_binary() + " embed -m '" + test::fixture(kModel).string() +
                        "' -f '" + (dir / "texts.txt").string() + "' --json -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["data"].size(), 2u);  // the empty line is skipped
  EXPECT_EQ(j["pooling"], "mean");  // the fixture has no pooling_type
  Fixture f = load();
  Context ctx(f.model, params(true));
  const std::vector<float> want =
      embed_tokens(ctx, f.tok.tokenize("The dog barked.", true, false), Pooling::kMean);
  const auto got = j["data"][1]["embedding"].get<std::vector<float>>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-6) << k;
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 4);
  const auto bad = test::run_command(test::kvrun_binary() + " embed -m '" +
                                     test::fixture(kModel).string() + "' -p hi --pooling max");
  EXPECT_NE(bad.exit_code, 0);
}

}  // namespace
}  // namespace kvrun
