// test_sliding_window.cpp — sliding-window models in the paged KV cache: KvSequence::release_before
// (blocks go back to the pool, the table keeps its positions), Context giving back the blocks
// that leave the window of an all-windowed model (tiny-phi3: window 48 on every layer,
// tiny-mistral: 64) so the KV bytes held stay flat past the window, with logits bit-identical to
// a run that keeps every block (both attention schemes); interleaved models (gemma2) keep every
// block; a truncate into the given-back range starts over; release under --kv-offload-dir tiers;
// `kvrun --json` and `kvrun info` report it; scheduler sessions (serve, batch) give blocks back.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/context.h"
#include "engine/model.h"
#include "engine/scheduler.h"
#include "eval/model_info.h"
#include "kv/kv_cache.h"
#include "synth_util.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "tools/synth/synth.h"

namespace kvrun {
namespace {

namespace fs = std::filesystem;

Model load_synth(const test::TempDir& dir, const std::string& shape) {
  return Model::load(test::synth_model(dir, shape, SynthFileType::F32));
}

TEST(SlidingWindow, ReleaseBeforeGivesBlocksBack) {
  test::TempDir dir;
  const Model m = load_synth(dir, "tiny-phi3");
  KvCacheParams kp;
  kp.block_size = 4;
  kp.mem_bytes = 64 * kp.block_size * 2 * 2 * 64 * 2 * 2;  // ample
  KvCache cache(m.hparams(), kp);
  KvSequence seq(cache);
  std::vector<int32_t> toks(30, 7);
  seq.reserve(30);
  seq.commit(toks);
  const int64_t bpb = cache.bytes_per_block();
  EXPECT_EQ(seq.bytes_held(), 8 * bpb);  // ceil(30 / 4)
  const int64_t used = cache.pool().stats().n_used;
  EXPECT_EQ(seq.release_before(13), 3);  // blocks 0..2 (positions 0..11); block 3 holds 12
  EXPECT_EQ(seq.n_released(), 3);
  EXPECT_EQ(seq.bytes_held(), 5 * bpb);
  EXPECT_EQ(cache.pool().stats().n_used, used - 3);
  EXPECT_EQ(seq.block_table()[0], -1);
  EXPECT_EQ(seq.block_table()[2], -1);
  EXPECT_GE(seq.block_table()[3], 0);
  EXPECT_EQ(seq.n_tokens(), 30);
  EXPECT_EQ(seq.release_before(13), 0);    // idempotent
  EXPECT_EQ(seq.release_before(1000), 4);  // never the partial last block (positions 28, 29)
  EXPECT_EQ(seq.bytes_held(), bpb);
  EXPECT_THROW(seq.truncate(20), std::logic_error);  // position 19 was given back
  seq.reserve(3);                                    // continues after the released blocks
  seq.commit(std::vector<int32_t>(3, 8));
  EXPECT_EQ(seq.n_tokens(), 33);
  seq.clear();
  EXPECT_EQ(seq.bytes_held(), 0);
  EXPECT_EQ(seq.n_released(), 0);
  EXPECT_EQ(cache.pool().stats().n_used, 0);
}

/// Evaluates a 10-token prompt then `n_gen` tokens one at a time (fixed ids), returning every
/// step's logits; bytes[i] = bytes held after position i.
std::vector<std::vector<float>> run(const Model& m, bool release, bool flash, int64_t n_gen,
                                    std::vector<int64_t>* bytes = nullptr,
                                    const std::string& offload_dir = "") {
  ContextParams cp;
  if (!offload_dir.empty()) {  // a fast tier of 2 blocks, the rest in the offload file
    cp.kv.mem_bytes = 2 * 16 * 512;
    cp.kv.offload_dir = offload_dir;
    cp.kv.offload_max = int64_t(1) << 20;
  }
  cp.n_ctx = 256;
  cp.n_threads = 2;
  cp.flash_attn = flash ? FlashAttn::kOn : FlashAttn::kOff;
  cp.release_window_blocks = release;
  Context ctx(m, cp);
  std::vector<std::vector<float>> out;
  std::vector<int32_t> prompt = {1, 300, 301, 302, 303, 304, 305, 306, 307, 308};
  auto l = ctx.eval(prompt);
  out.emplace_back(l.begin(), l.end());
  for (int64_t i = 0; i < n_gen; ++i) {
    const int32_t id = int32_t(260 + (i * 37) % 200);
    l = ctx.eval(std::vector<int32_t>{id});
    out.emplace_back(l.begin(), l.end());
    if (bytes) bytes->push_back(ctx.sequence().bytes_held());
  }
  return out;
}

TEST(SlidingWindow, AllWindowedModelsHoldFlatKvBytesWithTheSameLogits) {
  test::TempDir dir;
  for (const std::string shape : {"tiny-phi3", "tiny-mistral"}) {
    SCOPED_TRACE(shape);
    const Model m = load_synth(dir, shape);
    const int64_t w = m.hparams().n_swa;
    ASSERT_EQ(m.hparams().all_swa_window(), w);
    ASSERT_GT(w, 0);
    for (bool flash : {false, true}) {
      std::vector<int64_t> bytes;
      const auto kept = run(m, false, flash, 190);
      const auto released = run(m, true, flash, 190, &bytes);
      ASSERT_EQ(kept.size(), released.size());
      for (size_t i = 0; i < kept.size(); ++i)
        ASSERT_EQ(kept[i], released[i]) << "step " << i << (flash ? " flash" : " exact");
      // Block size 16: the held blocks span at most the window plus the two partial ends.
      const int64_t bpb = bytes.front() / std::max<int64_t>(1, (10 + 1 + 15) / 16);
      const int64_t cap = ((w + 15) / 16 + 1) * bpb;
      const size_t past = size_t(w + 16);  // generation steps past the window
      for (size_t i = past; i < bytes.size(); ++i) EXPECT_LE(bytes[i], cap) << "step " << i;
      EXPECT_EQ(*std::max_element(bytes.begin() + long(past), bytes.end()),
                *std::max_element(bytes.begin() + long(past), bytes.begin() + long(2 * past)))
          << "KV bytes keep growing past the window";
      EXPECT_LT(bytes.back(), (200 / 16) * bpb);  // a full cache would hold 13 blocks
    }
  }
}

// With a small fast tier and --kv-offload-dir, blocks move between tiers while others are given
// back: the logits stay those of a run that keeps every block in one tier.
TEST(SlidingWindow, ReleaseWorksWithOffloadTiers) {
  test::TempDir dir;
  const Model m = load_synth(dir, "tiny-phi3");  // f16 KV: 512 bytes per token
  const fs::path off = dir / "offload";
  fs::create_directories(off);
  const auto kept = run(m, false, true, 150);
  EXPECT_EQ(run(m, true, true, 150, nullptr, off.string()), kept);
  EXPECT_EQ(run(m, false, true, 150, nullptr, off.string()), kept);
}

TEST(SlidingWindow, InterleavedModelsKeepEveryBlock) {
  test::TempDir dir;
  const Model m = load_synth(dir, "tiny-gemma3");
  EXPECT_GT(m.hparams().n_swa, 0);
  EXPECT_EQ(m.hparams().all_swa_window(), 0);  // a global layer reads every position
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_threads = 2;
  Context ctx(m, cp);
  EXPECT_EQ(ctx.release_window(), 0);
}

TEST(SlidingWindow, TruncateIntoTheReleasedRangeStartsOver) {
  test::TempDir dir;
  const Model m = load_synth(dir, "tiny-phi3");  // window 48
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_threads = 2;
  Context ctx(m, cp);
  ctx.eval(std::vector<int32_t>(150, 300));
  ASSERT_GT(ctx.sequence().n_released(), 0);
  // Blocks of positions 0 … 95 went back (the window of position 150 starts at 103).
  EXPECT_EQ(ctx.sequence().n_released(), 6);
  ctx.truncate(145);  // the window of position 145 starts at 98: still held
  EXPECT_EQ(ctx.n_past(), 145);
  ctx.truncate(140);  // its window starts at 93, in a block given back
  EXPECT_EQ(ctx.n_past(), 0);
  ctx.eval(std::vector<int32_t>(20, 300));
  EXPECT_EQ(ctx.n_past(), 20);
}

// Through the binary: `kvrun -n N --json` reports the KV bytes held; past the window they do not
// grow with N, and the given-back blocks are counted.
TEST(SlidingWindow, KvrunReportsFlatBytesHeld) {
  test::TempDir dir;
  const std::string path = (dir / "tiny-phi3.gguf").string();
  ASSERT_EQ(test::run_command(test::kvrun_binary() + " synth --shape tiny-phi3 --type Q8_0 -o '" +
                              path + "' -t 2")
                .exit_code,
            0);
  auto held = [&](int n, int64_t* released) {
    const auto r = test::run_command(
        test::kvrun_binary() + " -m '" + path +
        "' -p 'The sky is' --temp 0 --ignore-eos --json -c 512 -t 2 -n " + std::to_string(n));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    *released = j["kv"]["blocks_released"].get<int64_t>();
    return j["kv"]["bytes_held"].get<int64_t>();
  };
  int64_t rel_a = 0, rel_b = 0;
  const int64_t a = held(116, &rel_a);  // 128 positions: window 48 left behind long ago
  const int64_t b = held(436, &rel_b);  // 448 positions
  EXPECT_EQ(a, b);
  EXPECT_GT(rel_b, rel_a);
  EXPECT_EQ(rel_b - rel_a, (448 - 128) / 16);
}

// kvrun info counts it: an all-windowed model's KV table is one window's blocks, whatever -c.
TEST(SlidingWindow, InfoCountsTheWindowOnly) {
  test::TempDir dir;
  const std::string path = (dir / "tiny-phi3.gguf").string();
  ASSERT_EQ(test::run_command(test::kvrun_binary() + " synth --shape tiny-phi3 --type Q8_0 -o '" +
                              path + "' -t 2")
                .exit_code,
            0);
  const ModelInfo mi = describe_model(gguf::File::open(path), 4096);
  EXPECT_EQ(mi.hp.n_swa, 48);
  EXPECT_EQ(mi.kv_tokens, 64);  // ceil(47 / 16) + 1 = 4 blocks of 16
  for (const KvSizeEntry& e : mi.kv) EXPECT_EQ(e.bytes_total, e.bytes_per_token * 64);
  EXPECT_EQ(describe_model(gguf::File::open(path), 40).kv_tokens, 40);
  const auto r = test::run_command(test::kvrun_binary() + " info --json -c 4096 -m '" + path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const auto& e : j["kv"])
    EXPECT_EQ(e["bytes_total"].get<int64_t>(), e["bytes_per_token"].get<int64_t>() * 64);
}

// The scheduler (kvrun serve / batch) gives blocks back too: two sessions generating 200 tokens
// each (212 positions) finish in a pool of 12 blocks (192 positions), which could not hold even
// one of them whole, with the greedy tokens of a lone Context run; every block comes back.
TEST(SlidingWindow, SchedulerSessionsFitInAPoolSmallerThanOneSequence) {
  test::TempDir dir;
  const Model m = load_synth(dir, "tiny-phi3");
  const Tokenizer tok = Tokenizer::from_gguf(m.file());
  ContextParams small;
  small.n_ctx = 192;
  auto kv = make_context_cache(m, small);
  ASSERT_EQ(kv->n_blocks(), 12);
  SchedulerParams sp;
  sp.n_ctx = 256;
  sp.n_parallel = 2;
  sp.n_threads = 2;
  sp.flash_attn = FlashAttn::kOn;
  const std::vector<std::string> prompts = {"The sky is", "Hello, my name"};
  std::vector<std::vector<int32_t>> got;
  {
    Scheduler sched(m, tok, *kv, sp);
    std::vector<std::shared_ptr<Request>> reqs;
    for (const std::string& text : prompts) {
      RequestParams p;
      p.prompt = tok.tokenize(text, true, true);
      p.n_predict = 200;
      p.ignore_eos = true;
      p.sampling.temp = 0;
      reqs.push_back(sched.submit(p));
    }
    for (auto& r : reqs) {
      RequestResult res;
      for (;;) {
        auto ev = r->next(std::chrono::seconds(60));
        ASSERT_TRUE(ev.has_value()) << "no event within 60 s";
        if (ev->done) {
          res = ev->result;
          break;
        }
      }
      EXPECT_EQ(res.finish, FinishReason::kLength) << res.error;
      got.push_back(res.tokens);
    }
  }
  EXPECT_EQ(kv->pool().stats().n_used, 0);
  for (size_t i = 0; i < prompts.size(); ++i) {  // the same greedy tokens alone
    ContextParams cp;
    cp.n_ctx = 256;
    cp.n_threads = 2;
    cp.flash_attn = FlashAttn::kOn;
    Context ctx(m, cp);
    std::vector<int32_t> in = tok.tokenize(prompts[i], true, true), want;
    for (int k = 0; k < 200; ++k) {
      const auto l = ctx.eval(in);
      const int32_t best = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
      want.push_back(best);
      in = {best};
    }
    EXPECT_EQ(got[i], want) << prompts[i];
  }
}

}  // namespace
}  // namespace kvrun
