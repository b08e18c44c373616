// test_perplexity.cpp — perplexity by llama-perplexity's method (src/eval/perplexity.h) against the
// fixture table (fixtures README, "ppl/"), the KL divergence base file, and `kvrun perplexity`
// end to end.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "engine/context.h"
#include "engine/model.h"
#include "eval/perplexity.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace kvrun {
namespace {

const char* const kText = "text/tinystories_style_kvrun.txt";

std::string read_text(const std::string& rel) {
  std::ifstream f(test::fixture(rel), std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

/// A model, its tokenizer and a context for perplexity runs.
struct Runner {
  Model model;
  Tokenizer tok;
  std::unique_ptr<Context> ctx;

  static Runner make(const std::string& model_rel, int64_t n_ctx, int64_t n_batch) {
    Model m = Model::load(test::fixture(model_rel).string());
    Tokenizer t = Tokenizer::from_gguf(m.file());
    Runner r{std::move(m), std::move(t), nullptr};
    ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.flash_attn = FlashAttn::kOff;  // llama-perplexity without -fa, as the reference numbers
    r.ctx = std::make_unique<Context>(r.model, cp);
    return r;
  }
  PerplexityInput input(const std::string& text_rel, int64_t max_chunks = 0) const {
    return prepare_perplexity(tok, read_text(text_rel), ctx->n_ctx(), max_chunks);
  }
  KldHeader header(const PerplexityInput& in) const {
    return KldHeader::of(tok, in, model.hparams().n_vocab);
  }
};

// ---- the method ---------------------------------------------------------------------------

TEST(Perplexity, TokenNllIsLogSumExpMinusTarget) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(token_nll(logits, 2), lse - 3.0, 1e-6);  // exp in float, as llama.cpp
  EXPECT_NEAR(token_nll(logits, 0), lse - 1.0, 1e-6);
  const std::vector<float> uniform(512, 0.25f);
  EXPECT_NEAR(token_nll(uniform, 7), std::log(512.0), 1e-6);
}

TEST(Perplexity, ChunksAndScoredPositionsFollowLlamaPerplexity) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  KVRUN_REQUIRE_FIXTURE(kText);
  const Runner r = Runner::make("models/stories260K-F32.gguf", 128, 128);
  const PerplexityInput in = r.input(kText);
  EXPECT_EQ(in.tokens.size(), 9454u);  // fixtures README: BOS included
  EXPECT_EQ(in.tokens[0], r.tok.bos());
  EXPECT_EQ(in.n_chunks, 73);
  EXPECT_EQ(in.first, 64);
  EXPECT_EQ(in.n_scored_per_chunk(), 63);
  EXPECT_EQ(r.input(kText, 5).n_chunks, 5);
}

TEST(Perplexity, RefusesTooShortTextAndTinyContext) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  const Runner r = Runner::make("models/stories260K-F32.gguf", 128, 128);
  EXPECT_THROW(prepare_perplexity(r.tok, "Once upon a time.", 128), std::invalid_argument);
  EXPECT_THROW(prepare_perplexity(r.tok, "Once upon a time.", 2), std::invalid_argument);
}

/// The acceptance numbers: llama-perplexity -c 128 -b 128, f16 KV → 4.8809 ± 0.13056.
void expect_llama_cpp_ppl(const std::string& model_rel) {
  Runner r = Runner::make(model_rel, 128, 128);
  const PerplexityResult res = compute_perplexity(*r.ctx, r.input(kText));
  EXPECT_NEAR(res.ppl, 4.8809, 0.002) << model_rel;
  EXPECT_NEAR(res.ppl_err, 0.13056, 0.001) << model_rel;
  EXPECT_EQ(res.n_chunks, 73);
  EXPECT_EQ(res.n_tokens_scored, 73 * 63);
  ASSERT_EQ(res.chunk_ppl.size(), 73u);
  EXPECT_NEAR(res.chunk_ppl[0], 2.6147, 0.002);  // llama.cpp's log: [1]2.6147,[2]2.8658
  EXPECT_NEAR(res.chunk_ppl[1], 2.8658, 0.002);
  EXPECT_NEAR(std::exp(res.nll_mean), res.ppl, 1e-9);
}

TEST(Perplexity, F32MatchesLlamaCpp) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  KVRUN_REQUIRE_FIXTURE(kText);
  expect_llama_cpp_ppl("models/stories260K-F32.gguf");
}

TEST(Perplexity, PadF32MatchesLlamaCpp) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-F32.gguf");
  KVRUN_REQUIRE_FIXTURE(kText);
  expect_llama_cpp_ppl("models/stories260K-pad-F32.gguf");
}

TEST(Perplexity, BatchSizeDoesNotChangeTheResult) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  KVRUN_REQUIRE_FIXTURE(kText);
  Runner whole = Runner::make("models/stories260K-F32.gguf", 128, 128);
  Runner split = Runner::make("models/stories260K-F32.gguf", 128, 48);  // 48 + 48 + 32
  const PerplexityResult a = compute_perplexity(*whole.ctx, whole.input(kText, 3));
  const PerplexityResult b = compute_perplexity(*split.ctx, split.input(kText, 3));
  EXPECT_NEAR(a.ppl, b.ppl, 1e-4);
  EXPECT_EQ(a.n_tokens_scored, b.n_tokens_scored);
}

// ---- KL divergence ------------------------------------------------------------------------

/// Runs `model_rel` over the first `chunks` chunks of `text_rel`, saving a KL base to `path`.
PerplexityResult save_base(const std::string& model_rel, const std::string& text_rel, int64_t n_ctx,
                           int64_t chunks, const std::string& path) {
  Runner r = Runner::make(model_rel, n_ctx, n_ctx);
  const PerplexityInput in = r.input(text_rel, chunks);
  KldBaseWriter w(path, r.header(in));
  const PerplexityResult res =
      compute_perplexity(*r.ctx, in, [&](const ChunkLogits& c) { w.write_chunk(c); });
  w.finish();
  return res;
}

/// Runs `model_rel` like save_base and compares it against the base at `path`.
KldResult compare(const std::string& model_rel, const std::string& text_rel, int64_t n_ctx,
                  int64_t chunks, const std::string& path, PerplexityResult* res = nullptr) {
  Runner r = Runner::make(model_rel, n_ctx, n_ctx);
  const PerplexityInput in = r.input(text_rel, chunks);
  KldComparer cmp(path, r.header(in));
  const PerplexityResult p =
      compute_perplexity(*r.ctx, in, [&](const ChunkLogits& c) { cmp.compare_chunk(c); });
  if (res) *res = p;
  return cmp.result();
}

TEST(KlDivergence, RunAgainstItsOwnBaseIsZero) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-F32.gguf");
  KVRUN_REQUIRE_FIXTURE(kText);
  test::TempDir dir;
  const std::string base = (dir / "base.kld").string();
  const PerplexityResult b = save_base("models/stories260K-pad-F32.gguf", kText, 128, 4, base);
  EXPECT_EQ(std::filesystem::file_size(base), 56u + 4u * 4 * 63 * 512);
  PerplexityResult p;
  const KldResult k = compare("models/stories260K-pad-F32.gguf", kText, 128, 4, base, &p);
  EXPECT_EQ(k.count, 4 * 63);
  EXPECT_NEAR(k.kld_mean, 0.0, 1e-6);
  EXPECT_NEAR(k.kld_max, 0.0, 1e-6);
  EXPECT_EQ(k.top1, 1.0);
  EXPECT_NEAR(k.delta_ppl, 0.0, 1e-4);
  EXPECT_NEAR(k.ppl, p.ppl, 1e-4);       // log-probs in float vs NLL in double
  EXPECT_NEAR(k.ppl_base, b.ppl, 1e-4);  // the base file holds the base run's distribution
}

TEST(KlDivergence, F16AgainstF32BaseIsSmallButPositive) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-F32.gguf");
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-F16.gguf");
  KVRUN_REQUIRE_FIXTURE(kText);
  test::TempDir dir;
  const std::string base = (dir / "base.kld").string();
  save_base("models/stories260K-pad-F32.gguf", kText, 128, 4, base);
  const KldResult k = compare("models/stories260K-pad-F16.gguf", kText, 128, 4, base);
  EXPECT_GT(k.kld_mean, 0.0);
  EXPECT_LT(k.kld_mean, 1e-3);
  EXPECT_GE(k.kld_max, k.kld_median);
  EXPECT_GE(k.top1, 0.95);
  EXPECT_LT(std::fabs(k.delta_ppl), 0.05);
}

TEST(KlDivergence, RefusesABaseOfAnotherTextContextOrChunkCount) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-F32.gguf");
  KVRUN_REQUIRE_FIXTURE(kText);
  KVRUN_REQUIRE_FIXTURE("text/aesop_townsend_first20k.txt");
  test::TempDir dir;
  const std::string base = (dir / "base.kld").string();
  save_base("models/stories260K-pad-F32.gguf", kText, 64, 2, base);
  const std::string m = "models/stories260K-pad-F32.gguf";
  auto error_of = [&](const std::string& text, int64_t n_ctx, int64_t chunks) -> std::string {
    try {
      compare(m, text, n_ctx, chunks, base);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of(kText, 128, 2).find("-c 64"), std::string::npos);
  EXPECT_NE(error_of("text/aesop_townsend_first20k.txt", 64, 2).find("another text"),
            std::string::npos);
  EXPECT_NE(error_of(kText, 64, 3).find("chunks"), std::string::npos);
  EXPECT_EQ(error_of(kText, 64, 2), "");
}

TEST(KlDivergence, RefusesTruncatedAndForeignFiles) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-F32.gguf");
  KVRUN_REQUIRE_FIXTURE(kText);
  test::TempDir dir;
  const std::string base = (dir / "base.kld").string();
  save_base("models/stories260K-pad-F32.gguf", kText, 64, 2, base);
  std::filesystem::resize_file(base, std::filesystem::file_size(base) - 4);
  EXPECT_THROW(compare("models/stories260K-pad-F32.gguf", kText, 64, 2, base), std::runtime_error);
  const std::string other = (dir / "other.bin").string();
  std::ofstream(other) << "this is not a KL base file at all, but it is long enough to read";
  EXPECT_THROW(read_kld_header(other), std::runtime_error);
  EXPECT_THROW(read_kld_header((dir / "missing").string()), std::runtime_error);
}

// ---- kvrun perplexity ---------------------------------------------------------------------

std::string cli(const std::string& model_rel, const std::string& args) {
  return test::kvrun_binary() + " perplexity -m " + test::fixture(model_rel).string() + " -f " +
         test::fixture(kText).string() + " " + args;
}

TEST(PerplexityCli, JsonHasTheFields) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  KVRUN_REQUIRE_FIXTURE(kText);
  const auto r = test::run_command(cli("models/stories260K-F32.gguf", "-c 128 --chunks 2 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["ppl"].get<double>(), 2.8658, 0.002);  // llama.cpp's running value after 2
  for (const char* k : {"ppl_err", "nll_mean", "nll_sd", "seconds", "chunk_ppl"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["n_chunks"], 2);
  EXPECT_EQ(j["n_tokens_scored"], 126);
  EXPECT_EQ(j["n_ctx"], 128);
}

TEST(PerplexityCli, TextOutputLooksLikeLlamaPerplexity) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  KVRUN_REQUIRE_FIXTURE(kText);
  const auto r = test::run_command(cli("models/stories260K-F32.gguf", "-c 128 -b 64 --chunks 2"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[1]2.61"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[2]2.86"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Final estimate: PPL = 2.86"), std::string::npos) << r.out;
}

TEST(PerplexityCli, KlDivergenceRoundTrip) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-F32.gguf");
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-F16.gguf");
  KVRUN_REQUIRE_FIXTURE(kText);
  test::TempDir dir;
  const std::string base = (dir / "b.kld").string();
  auto r = test::run_command(
      cli("models/stories260K-pad-F32.gguf", "-c 64 --chunks 3 --kl-divergence-base " + base));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // -c comes from the base file when not given.
  r = test::run_command(
      cli("models/stories260K-pad-F16.gguf", "--chunks 3 --json --kl-divergence " + base));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n_ctx"], 64);
  const auto& k = j["kl_divergence"];
  EXPECT_GT(k["kld_mean"].get<double>(), 0.0);
  EXPECT_GE(k["top1"].get<double>(), 0.9);
  for (const char* f : {"kld_err", "delta_ppl", "delta_ppl_err", "ppl_base", "count"})
    EXPECT_TRUE(k.contains(f)) << f;
  r = test::run_command(
      cli("models/stories260K-pad-F16.gguf", "-c 32 --chunks 3 --kl-divergence " + base));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("kvrun: error:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("-c 64"), std::string::npos) << r.err;
}

TEST(PerplexityCli, EveryKvTypeRunsAndUnknownTypesAreRefused) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  KVRUN_REQUIRE_FIXTURE(kText);
  auto ppl = [](const std::string& kv) {
    auto r =
        test::run_command(cli("models/stories260K-F32.gguf", "-c 128 --chunks 2 --json " + kv));
    EXPECT_EQ(r.exit_code, 0) << kv << ": " << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
  };
  const nlohmann::json f16 = ppl("");
  ASSERT_TRUE(f16.contains("ppl"));
  // head_dim 8: every cache type works (llama.cpp refuses quantized types here). 8-bit and wider
  // types stay within 10% of f16 (measured: f32 +0.0%, bf16 +0.1%, q8_0 +0.6%, fp8 +0.4%,
  // fp8_e5m2 +5.2%); 4-bit K loses much more, as llama.cpp's q4_0 K does on pad-F32 (10.39 vs
  // 4.88 in the fixtures README): measured q4_0 ×3.3, nvfp4 ×1.9; bounded at ×5.
  const std::pair<const char*, double> kTypes[] = {{"f32", 0.1},  {"bf16", 0.1},     {"q8_0", 0.1},
                                                   {"fp8", 0.1},  {"fp8_e5m2", 0.1}, {"q4_0", 4.0},
                                                   {"nvfp4", 4.0}};
  for (const auto& [t, max_rel] : kTypes) {
    const nlohmann::json j = ppl(std::string("-ctk ") + t + " -ctv " + t);
    ASSERT_TRUE(j.contains("ppl")) << t;
    EXPECT_EQ(j["cache_type_k"], t) << t;
    const double ppl = j["ppl"].get<double>(), base = f16["ppl"].get<double>();
    EXPECT_TRUE(std::isfinite(ppl)) << t;
    EXPECT_LT(std::fabs(ppl - base) / base, max_rel) << t << ": " << ppl << " vs f16 " << base;
  }
  auto r = test::run_command(cli("models/stories260K-F32.gguf", "-c 128 --chunks 2 -ctk=q9"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown KV cache type 'q9'"), std::string::npos) << r.err;
}

TEST(PerplexityCli, TooShortTextIsAClearError) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  KVRUN_REQUIRE_FIXTURE(kText);
  const auto r = test::run_command(cli("models/stories260K-F32.gguf", "-c 8192"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("needs at least 16384"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvrun
