// test_scheduler.cpp — the continuous-batching engine without HTTP (src/engine/scheduler.h) and the
// stop-string matcher: several greedy requests batched together against llama.cpp's
// references, cancellation, a full KV pool, a full queue, bad prompts, and that every block
// returns to the pool.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kv_layout.h"
#include "engine/scheduler.h"
#include "engine/stop_strings.h"
#include "test_util.h"

namespace kvrun {
namespace {

using namespace std::chrono_literals;

constexpr const char* kModel = "models/stories260K-F32.gguf";

/// Reads every event of `r` until the end; returns the result and the token events.
RequestResult drain(Request& r, std::vector<TokenEvent>* tokens = nullptr) {
  for (;;) {
    auto ev = r.next(60s);
    if (!ev) {
      ADD_FAILURE() << "no event within 60 s";
      return {};
    }
    if (ev->done) return ev->result;
    if (tokens) tokens->push_back(ev->token);
  }
}

TEST(StopMatcher, HoldsBackPartialMatchesAndCutsAtTheFirstStop) {
  StopMatcher m({"</s>", "END", ""});
  EXPECT_EQ(m.push("Hello <"), "Hello ");  // "<" may start "</s>"
  EXPECT_EQ(m.push("/"), "");
  EXPECT_EQ(m.push("x"), "</x");  // no longer a prefix: released
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push(" and EN"), " and ");
  EXPECT_EQ(m.push("D more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.word(), "END");
  EXPECT_EQ(m.push("later"), "");
  StopMatcher none({});
  EXPECT_EQ(none.push("a</s>"), "a</s>");
  StopMatcher tail({"xyz"});
  EXPECT_EQ(tail.push("abcx"), "abc");
  EXPECT_EQ(tail.flush(), "x");
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(test::fixture(kModel)))
      GTEST_SKIP() << "fixture " << test::fixture(kModel) << " not found";
    model_ = std::make_unique<Model>(Model::load(test::fixture(kModel).string()));
    tok_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(model_->file()));
  }
  std::unique_ptr<KvCache> cache(int64_t n_tokens) {
    ContextParams cp;
    cp.n_ctx = n_tokens;
    return make_context_cache(*model_, cp);
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(SchedulerTest, BatchedGreedyRequestsMatchLlamaCppAndReturnEveryBlock) {
  KVRUN_REQUIRE_FIXTURE("refs/kv_f16");
  std::vector<nlohmann::json> refs;
  for (const auto& e : std::filesystem::directory_iterator(test::fixture("refs/kv_f16")))
    if (e.path().filename().string().rfind("stories260K-F32__", 0) == 0)
      refs.push_back(nlohmann::json::parse(std::ifstream(e.path())));
  ASSERT_EQ(refs.size(), 6u);
  auto kv = cache(6 * 128);
  SchedulerParams sp;
  sp.n_ctx = 128;
  sp.n_parallel = 6;
  sp.n_batch = 8;  // prompts are prefilled in chunks next to running decodes
  sp.n_threads = 2;
  sp.flash_attn = FlashAttn::kOff;  // the scheme llama.cpp made the references with
  {
    Scheduler sched(*model_, *tok_, *kv, sp);
    std::vector<std::shared_ptr<Request>> reqs;
    for (const auto& ref : refs) {
      RequestParams p;
      p.prompt = ref["prompt_tokens"].get<std::vector<int32_t>>();
      p.n_predict = 64;
      p.sampling.temp = 0;
      p.n_probs = 2;
      reqs.push_back(sched.submit(p));
    }
    int checked = 0;
    for (size_t i = 0; i < refs.size(); ++i) {
      std::vector<TokenEvent> evs;
      const RequestResult r = drain(*reqs[i], &evs);
      EXPECT_EQ(r.finish, FinishReason::kLength);
      const auto want = refs[i]["greedy_tokens"].get<std::vector<int32_t>>();
      ASSERT_EQ(r.tokens.size(), want.size());
      ASSERT_EQ(evs.size(), want.size());
      std::string text;
      for (const auto& e : evs) text += e.text;
      EXPECT_EQ(text + r.tail, r.text);  // the stream carries the whole text
      for (size_t k = 0; k < want.size(); ++k) {
        if (evs[k].top[0].logprob - evs[k].top[1].logprob < 0.05f) break;  // near-tie
        ASSERT_EQ(r.tokens[k], want[k]) << refs[i]["prompt"] << " token " << k;
        ++checked;
      }
      if (r.tokens == want) {
        EXPECT_EQ(r.text, refs[i]["greedy_text"].get<std::string>()) << refs[i]["prompt"];
      }
    }
    EXPECT_GT(checked, 64 * 3);
  }  // the scheduler joins its worker
  EXPECT_EQ(kv->pool().stats().n_used, 0);
}

TEST_F(SchedulerTest, CancelEndsARequestAndFreesItsBlocks) {
  auto kv = cache(2048);
  SchedulerParams sp;
  sp.n_ctx = 2048;
  sp.n_threads = 2;
  Scheduler sched(*model_, *tok_, *kv, sp);
  RequestParams p;
  p.prompt = tok_->tokenize("Once upon a time", true, true);
  p.n_predict = 2000;
  p.ignore_eos = true;
  auto r = sched.submit(p);
  ASSERT_TRUE(r->next(60s));
  r->cancel();
  const RequestResult res = drain(*r);
  EXPECT_EQ(res.finish, FinishReason::kCancelled);
  EXPECT_LT(res.tokens.size(), 2000u);
  for (int i = 0; i < 100 && sched.stats().blocks.n_used != 0; ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(sched.stats().blocks.n_used, 0);
  EXPECT_EQ(sched.stats().n_cancelled, 1);
}

TEST_F(SchedulerTest, FullPoolFailsTheRequestClearly) {
  auto kv = cache(32);  // two blocks of 16
  SchedulerParams sp;
  sp.n_ctx = 128;
  sp.n_threads = 2;
  Scheduler sched(*model_, *tok_, *kv, sp);
  RequestParams p;
  p.prompt = tok_->tokenize(
      "Once upon a time, there was a little girl named Lily. She loved to "
      "play outside in the park with her big red ball.",
      true, true);
  ASSERT_GT(p.prompt.size(), 32u);
  p.n_predict = 4;
  const RequestResult res = drain(*sched.submit(p));
  EXPECT_EQ(res.finish, FinishReason::kError);
  EXPECT_NE(res.error.find("KV cache is full"), std::string::npos) << res.error;
  // A request that fits still works afterwards.
  p.prompt = tok_->tokenize("The little dog", true, true);
  EXPECT_EQ(drain(*sched.submit(p)).finish, FinishReason::kLength);
}

TEST_F(SchedulerTest, RefusesBadPromptsAndAFullQueue) {
  auto kv = cache(4096);
  SchedulerParams sp;
  sp.n_ctx = 4096;
  sp.n_parallel = 1;
  sp.max_queue = 1;
  sp.n_threads = 2;
  Scheduler sched(*model_, *tok_, *kv, sp);
  RequestParams p;
  EXPECT_THROW(sched.submit(p), ContextError);  // empty
  p.prompt = {1, 9999};
  EXPECT_THROW(sched.submit(p), ContextError);  // id outside the vocabulary
  p.prompt.assign(4097, 300);
  EXPECT_THROW(sched.submit(p), ContextError);  // longer than n_ctx
  p.prompt = tok_->tokenize("Once upon a time", true, true);
  p.n_predict = 4000;
  p.ignore_eos = true;
  auto a = sched.submit(p);
  auto b = sched.submit(p);                  // waits in the queue
  EXPECT_THROW(sched.submit(p), QueueFull);  // one running, one queued: full
  a->cancel();
  b->cancel();
  EXPECT_EQ(drain(*a).finish, FinishReason::kCancelled);
  EXPECT_EQ(drain(*b).finish, FinishReason::kCancelled);
  EXPECT_EQ(sched.stats().n_rejected, 1);
}

}  // namespace
}  // namespace kvrun
