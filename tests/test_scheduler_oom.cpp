// test_scheduler_oom.cpp — a device that runs out of memory in the middle of a step
// (DeviceOutOfMemory, backend.h): the scheduler halves the prefill chunk that did not fit, and
// when a decode step no longer fits it stops the request holding the most context while the
// others go on (serve answers that one 503). The "GPU" is tests/counting_device.h's CPU stand-in
// holding the last layers of the stories260K fixture, so every result is compared with the
// same model run where nothing runs out.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "counting_device.h"
#include "engine/model.h"
#include "engine/scheduler.h"
#include "kv/kv_cache.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace kvrun {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  RequestResult result;
  bool done = false;
};

/// Runs `prompts` (greedy, n_predict each) at once through a Scheduler over `m` with n_batch
/// `n_batch`, and returns each request's final result.
std::vector<Outcome> run_all(const Model& m, const Tokenizer& tok,
                             const std::vector<std::vector<int32_t>>& prompts,
                             const std::vector<int64_t>& n_predict, int64_t n_batch,
                             SchedulerStats* stats = nullptr) {
  KvCacheParams kp;
  kp.mem_bytes = int64_t(4) << 20;
  kp.block_size = 16;
  KvCache cache(m.hparams(), kp, m.placement().kv);
  SchedulerParams sp;
  sp.n_ctx = 256;
  sp.n_batch = n_batch;
  sp.n_threads = 2;
  sp.n_parallel = int(prompts.size());
  Scheduler sched(m, tok, cache, sp);
  std::vector<std::shared_ptr<Request>> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestParams rp;
    rp.prompt = prompts[i];
    rp.n_predict = n_predict[i];
    rp.ignore_eos = true;
    rp.sampling.temp = 0;
    reqs.push_back(sched.submit(rp));
  }
  std::vector<Outcome> out(prompts.size());
  for (size_t i = 0; i < reqs.size(); ++i)
    for (int t = 0; t < 3000 && !out[i].done; ++t)
      if (auto ev = reqs[i]->next(std::chrono::milliseconds(100)); ev && ev->done) {
        out[i].result = ev->result;
        out[i].done = true;
      }
  if (stats) *stats = sched.stats();
  return out;
}

class SchedulerOom : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = test::fixture("models/stories260K-F32.gguf");
    if (!fs::exists(path_)) GTEST_SKIP() << "fixture missing: " << path_;
    host_ = std::make_unique<Model>(Model::load(path_.string()));
    tok_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(host_->file()));
    ModelParams mp;
    mp.n_gpu_layers = 2;  // the last 2 of 5 layers (KV and attention too) on the stand-in
    mp.gpu = &gpu_;
    split_ = std::make_unique<Model>(Model::load(path_.string(), mp));
  }
  /// A prompt of `n` tokens (BOS first).
  std::vector<int32_t> prompt(int n, int salt) const {
    std::vector<int32_t> p{1};
    for (int i = 1; i < n; ++i) p.push_back(int32_t(3 + (i * 37 + salt * 11) % 500));
    return p;
  }
  fs::path path_;
  CountingDevice gpu_{"CPU1"};
  std::unique_ptr<Model> host_, split_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(SchedulerOom, PrefillChunkThatDoesNotFitIsHalvedUntilItDoes) {
  const std::vector<std::vector<int32_t>> prompts{prompt(100, 1)};
  const std::vector<Outcome> ref = run_all(*host_, *tok_, prompts, {16}, 64);
  ASSERT_TRUE(ref[0].done);
  ASSERT_EQ(ref[0].result.finish, FinishReason::kLength) << ref[0].result.error;
  gpu_.oom_above_rows = 20;  // a 64-row chunk does not fit, 32 does not, 16 does
  SchedulerStats st;
  const std::vector<Outcome> got = run_all(*split_, *tok_, prompts, {16}, 64, &st);
  ASSERT_TRUE(got[0].done);
  EXPECT_EQ(got[0].result.finish, FinishReason::kLength) << got[0].result.error;
  EXPECT_EQ(got[0].result.tokens, ref[0].result.tokens);
  EXPECT_EQ(gpu_.oom_thrown, 2) << "64 and 32 rows refused once each; 16 kept from then on";
  EXPECT_EQ(st.n_device_oom, 2);
  EXPECT_EQ(st.n_errors, 0);
}

TEST_F(SchedulerOom, DecodeThatNoLongerFitsStopsTheLongestRequestOnly) {
  // Request 0 grows past 60 positions (40 + 30); request 1 stays below (8 + 40) and is still
  // generating when request 0 no longer fits.
  const std::vector<std::vector<int32_t>> prompts{prompt(40, 2), prompt(8, 3)};
  const std::vector<int64_t> n_predict{30, 40};
  const std::vector<Outcome> ref = run_all(*host_, *tok_, prompts, n_predict, 64);
  ASSERT_TRUE(ref[0].done && ref[1].done);
  ASSERT_EQ(ref[0].result.tokens.size(), 30u);
  gpu_.oom_above_context = 60;
  SchedulerStats st;
  const std::vector<Outcome> got = run_all(*split_, *tok_, prompts, n_predict, 64, &st);
  ASSERT_TRUE(got[0].done && got[1].done);
  // The long one ends with the device's error when its 61st position would be attended…
  EXPECT_EQ(got[0].result.finish, FinishReason::kError);
  EXPECT_NE(got[0].result.error.find("out of device memory"), std::string::npos)
      << got[0].result.error;
  EXPECT_NE(got[0].result.error.find("the others go on"), std::string::npos);
  // … after the tokens it had, the reference's first 21: its k-th token is evaluated at
  // position 39 + k, so the step evaluating the 21st at position 60 (61 positions seen) is the
  // first that does not fit.
  ASSERT_EQ(got[0].result.tokens.size(), 21u);
  EXPECT_TRUE(std::equal(got[0].result.tokens.begin(), got[0].result.tokens.end(),
                         ref[0].result.tokens.begin()));
  // The short one is untouched.
  EXPECT_EQ(got[1].result.finish, FinishReason::kLength) << got[1].result.error;
  EXPECT_EQ(got[1].result.tokens, ref[1].result.tokens);
  EXPECT_EQ(st.n_device_oom, 1);
  EXPECT_EQ(st.n_errors, 1);
}

TEST_F(SchedulerOom, ARequestAloneThatNeverFitsEndsWithTheError) {
  gpu_.oom_above_context = 4;  // the prompt's positions past 3 never fit
  SchedulerStats st;
  const std::vector<Outcome> got = run_all(*split_, *tok_, {prompt(10, 4)}, {5}, 64, &st);
  ASSERT_TRUE(got[0].done);
  EXPECT_EQ(got[0].result.finish, FinishReason::kError);
  EXPECT_NE(got[0].result.error.find("out of device memory"), std::string::npos);
  EXPECT_TRUE(got[0].result.tokens.empty());
  // Chunks of 10 rows (positions 0 … 9: 10 seen) and 5 do not fit; 2 rows fit twice (0 … 3);
  // 2 rows at 4 … 5 do not, nor does 1 row at position 4: then the request ends.
  EXPECT_EQ(st.n_device_oom, 4);
  EXPECT_EQ(gpu_.oom_thrown, 4);
}

// KV blocks the device cannot back (its KV buffers committed as blocks come into use, as CUDA's
// are, and its memory runs out): the request that asks for a block past what the device holds
// ends with the device's error (after the tokens it had, the reference's) while the other goes
// on to the reference's end, its new blocks taken from the cached ones of the ended request
// (their rows are backed).
TEST_F(SchedulerOom, KvBlocksTheDeviceCannotBackEndOnlyTheRequestThatNeedsThem) {
  // 100 and 68 positions (7 and 5 blocks of 16) together; the stand-in backs fewer.
  const std::vector<std::vector<int32_t>> prompts{prompt(40, 5), prompt(8, 6)};
  const std::vector<int64_t> n_predict{60, 60};
  const std::vector<Outcome> ref = run_all(*host_, *tok_, prompts, n_predict, 64);
  ASSERT_TRUE(ref[0].done && ref[1].done);
  gpu_.lazy_kv = true;
  // 2 layers × K and V regions of 1 KiB blocks: 2 pages each hold 7 or 8 blocks
  gpu_.kv_commit_limit = 2 * 2 * 2 * int64_t(sysconf(_SC_PAGESIZE));
  SchedulerStats st;
  const std::vector<Outcome> got = run_all(*split_, *tok_, prompts, n_predict, 64, &st);
  ASSERT_TRUE(got[0].done && got[1].done);
  const size_t failed = got[0].result.finish == FinishReason::kError ? 0 : 1, ok = 1 - failed;
  EXPECT_EQ(got[failed].result.finish, FinishReason::kError);
  EXPECT_NE(got[failed].result.error.find("no memory for more blocks"), std::string::npos)
      << got[failed].result.error;
  ASSERT_LT(got[failed].result.tokens.size(), ref[failed].result.tokens.size());
  EXPECT_TRUE(std::equal(got[failed].result.tokens.begin(), got[failed].result.tokens.end(),
                         ref[failed].result.tokens.begin()));
  EXPECT_EQ(got[ok].result.finish, FinishReason::kLength) << got[ok].result.error;
  EXPECT_EQ(got[ok].result.tokens, ref[ok].result.tokens);
  EXPECT_LE(gpu_.kv_committed, gpu_.kv_commit_limit);
  EXPECT_EQ(st.n_errors, 1);
}

}  // namespace
}  // namespace kvrun
