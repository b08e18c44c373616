// test_window_tables.cpp — per-layer window tables (docs/kv-cache.md, "Windowed layers"): for
// models mixing windowed and global layers (tiny-gemma2: 13 of 26 layers windowed, tiny-gemma3:
// 5 of 6; window 32) the windowed layers' rows live in a group of their own whose blocks go back
// once wholly before the window. The reference is the uniform layout (window_tables off: every
// layer keeps every block, the code path before window tables): the same arithmetic, so logits
// must be bit-identical, through prefill in chunks, decode, prefix sharing with copy-on-write,
// offload tiers, save/restore and scheduler sessions; the windowed group stays within
// ceil(window / block) + 1 blocks per sequence while the global layers grow; the bytes held and
// `kvrun info` follow the formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/context.h"
#include "engine/context_state.h"
#include "engine/model.h"
#include "engine/scheduler.h"
#include "eval/model_info.h"
#include "kv/kv_cache.h"
#include "kv_layout.h"
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

ContextParams params(bool tables, bool flash, int64_t block_size = 16) {
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_batch = 24;  // prefill in chunks: windowed rows go back between them
  cp.n_threads = 2;
  cp.flash_attn = flash ? FlashAttn::kOn : FlashAttn::kOff;
  cp.kv.block_size = block_size;
  cp.kv.window_tables = tables;
  return cp;
}

int32_t argmax(std::span<const float> l) {
  return int32_t(std::max_element(l.begin(), l.end()) - l.begin());
}

/// A 60-token prompt, then greedy decoding to 200 positions: every step's logits.
/// win_blocks[i] = windowed blocks held after step i.
std::vector<std::vector<float>> greedy(Context& ctx, std::vector<int64_t>* win_blocks = nullptr) {
  std::vector<int32_t> in;
  for (int32_t i = 0; i < 60; ++i) in.push_back(1 + (i * 53) % 400);
  std::vector<std::vector<float>> out;
  while (ctx.n_past() + int64_t(in.size()) <= 200) {
    const auto l = ctx.eval(in);
    out.emplace_back(l.begin(), l.end());
    if (win_blocks) win_blocks->push_back(ctx.sequence().n_window_blocks());
    in = {argmax(l)};
  }
  return out;
}

TEST(WindowTables, OnlyMixedModelsGetThem) {
  test::TempDir dir;
  const KvCacheParams kp;
  EXPECT_EQ(kv_window_table_layers(load_synth(dir, "tiny-gemma2").hparams(), kp), 13);
  EXPECT_EQ(kv_window_table_layers(load_synth(dir, "tiny-gemma3").hparams(), kp), 5);
  EXPECT_EQ(kv_window_table_layers(load_synth(dir, "tiny-phi3").hparams(), kp), 0);  // all
  EXPECT_EQ(kv_window_table_layers(load_synth(dir, "tiny").hparams(), kp), 0);       // none
  KvCacheParams off;
  off.window_tables = false;
  EXPECT_EQ(kv_window_table_layers(load_synth(dir, "tiny-gemma3").hparams(), off), 0);
}

// The same greedy tokens and logits, bit for bit, as the uniform layout, both attention schemes;
// the windowed group stays bounded past the window.
TEST(WindowTables, LogitsBitIdenticalToTheUniformLayout) {
  test::TempDir dir;
  for (const std::string shape : {"tiny-gemma2", "tiny-gemma3"}) {
    const Model m = load_synth(dir, shape);
    const int64_t w = m.hparams().n_swa;
    ASSERT_EQ(w, 32);
    for (bool flash : {false, true}) {
      SCOPED_TRACE(shape + (flash ? " flash" : " exact"));
      Context uniform(m, params(false, flash));
      Context tables(m, params(true, flash));
      ASSERT_EQ(uniform.cache().window(), 0);
      ASSERT_EQ(tables.cache().window(), w);
      std::vector<int64_t> wb;
      const auto want = greedy(uniform);
      const auto got = greedy(tables, &wb);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "step " << i;
      for (size_t i = 0; i < wb.size(); ++i) EXPECT_LE(wb[i], (w + 15) / 16 + 1) << "step " << i;
      // Global layers: every position; windowed ones: one window's blocks.
      const KvCache& c = tables.cache();
      EXPECT_EQ(tables.sequence().bytes_held(),
                (200 + 15) / 16 * c.bytes_per_block() +
                    tables.sequence().n_window_blocks() * c.window_bytes_per_block());
      EXPECT_LT(tables.sequence().bytes_held(), uniform.sequence().bytes_held() / 3 * 2);
    }
  }
}

// KvCache/KvSequence alone: over a long decode the windowed group's live blocks stay within
// ceil(window / block) + 1 while the pool's (global) blocks grow with the context; given-back
// rows are kept only while their slot is not needed (12 slots: the last 4), a truncate takes
// those back; everything comes back at the end.
TEST(WindowTables, WindowGroupStaysBoundedWhileGlobalGrows) {
  test::TempDir dir;
  const Model m = load_synth(dir, "tiny-gemma3");
  KvCacheParams kp;
  kp.block_size = 4;
  kp.mem_bytes = int64_t(4) << 20;
  kp.window_blocks = 12;
  KvCache cache(m.hparams(), kp);
  ASSERT_EQ(cache.window_blocks(), 12);
  ASSERT_EQ(cache.window(), 32);
  ASSERT_EQ(cache.n_window_layers(), 5);
  EXPECT_EQ(cache.bytes_per_block(),
            4 * kv_bytes_per_token(kp.type_k, kp.type_v, 1, m.hparams().n_head_kv,
                                   m.hparams().head_dim, m.hparams().head_dim_v));
  EXPECT_EQ(cache.window_bytes_per_block(), 5 * cache.bytes_per_block());
  EXPECT_TRUE(cache.windowed_layer(0));
  EXPECT_FALSE(cache.windowed_layer(5));
  KvSequence seq(cache);
  const int64_t bound = (32 + 3) / 4 + 1;
  for (int64_t n = 1; n <= 600; ++n) {
    seq.reserve(1);
    EXPECT_LE(cache.window_blocks_used(), bound) << "reserved position " << n - 1;
    seq.commit(std::vector<int32_t>{int32_t(7 + n % 50)});
    seq.release_window_before(seq.n_tokens() - 32 + 1);
    ASSERT_LE(seq.n_window_blocks(), bound) << "position " << n;
    ASSERT_EQ(cache.window_blocks_used(), seq.n_window_blocks());
    ASSERT_EQ(cache.pool().stats().n_used, (n + 3) / 4);  // global: every block
  }
  EXPECT_EQ(seq.n_window_released(), (600 - 31) / 4);  // 142; blocks 142 … 149 held
  EXPECT_FALSE(seq.has_window_rows(550));  // needs blocks 129 …: their slots went to others
  EXPECT_THROW(seq.truncate(550), std::logic_error);
  EXPECT_TRUE(seq.has_window_rows(590));  // needs 139 …: given back last, still kept
  seq.truncate(590);
  EXPECT_EQ(seq.n_tokens(), 590);
  EXPECT_EQ(seq.n_window_released(), 139);
  EXPECT_EQ(seq.n_window_blocks(), 148 - 139);
  EXPECT_EQ(cache.window_blocks_used(), 148 - 139);
  seq.clear();
  EXPECT_EQ(cache.window_blocks_used(), 0);
  EXPECT_EQ(cache.pool().stats().n_used, 0);
  EXPECT_EQ(seq.bytes_held(), 0);
}

// Two sequences over one cache: the second takes the first's prefix (the windowed rows of its
// window must be there), truncates into the shared last block and writes (copy-on-write of both
// groups); the logits equal the uniform layout's doing the same.
TEST(WindowTables, PrefixSharingAndCopyOnWrite) {
  test::TempDir dir;
  const Model m = load_synth(dir, "tiny-gemma3");
  auto scenario = [&](bool tables, int64_t* reused) {
    ContextParams cp = params(tables, true, 4);
    cp.n_seq = 2;
    auto cache = make_context_cache(m, cp);
    Context a(m, *cache, cp), b(m, *cache, cp);
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 75; ++i) prompt.push_back(3 + (i * 31) % 300);
    std::vector<std::vector<float>> out;
    auto l = a.eval(prompt);
    out.emplace_back(l.begin(), l.end());
    *reused = b.reuse_prefix(prompt);  // 72 positions: 18 full blocks
    b.truncate(*reused - 1);           // into the shared block 17
    l = b.eval(std::span(prompt).subspan(size_t(b.n_past())));
    out.emplace_back(l.begin(), l.end());
    for (int k = 0; k < 40; ++k) {  // both go on past the window
      l = a.eval(std::vector<int32_t>{int32_t(5 + k)});
      out.emplace_back(l.begin(), l.end());
      l = b.eval(std::vector<int32_t>{int32_t(9 + k)});
      out.emplace_back(l.begin(), l.end());
    }
    return out;
  };
  int64_t reused_u = 0, reused_t = 0;
  const auto want = scenario(false, &reused_u);
  const auto got = scenario(true, &reused_t);
  EXPECT_EQ(reused_u, 72);
  EXPECT_EQ(reused_t, 72);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "step " << i;
}

// A prefix is matched only as far as the windowed rows of its window exist: rows given back
// behind the window are kept while their slot is not needed (the most recent ones), so a prefix
// ending shortly before the first sequence's end is still found; an early one is not.
TEST(WindowTables, PrefixMatchNeedsTheWindowRows) {
  test::TempDir dir;
  const Model m = load_synth(dir, "tiny-gemma3");
  ContextParams cp = params(true, true, 4);
  cp.n_seq = 2;
  auto cache = make_context_cache(m, cp);
  ASSERT_LT(cache->window_blocks() * 4, 250);
  Context a(m, *cache, cp), b(m, *cache, cp);
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 250; ++i) prompt.push_back(3 + (i * 31) % 300);
  a.eval(prompt);
  // The whole prompt: 62 full blocks, the window of position 248 from block 54 on: a holds it.
  EXPECT_EQ(b.reuse_prefix(prompt), 248);
  b.reset();
  // 240 tokens: 59 blocks, window from block 51; a gave 51 … 53 back last: still kept.
  EXPECT_EQ(b.reuse_prefix(std::span(prompt).first(240)), 236);
  b.reset();
  // 60 tokens: their window's rows (blocks 6 … 13) were reused for later blocks long ago; every
  // shorter match needs earlier ones still: nothing is reused (the uniform layout would take 56).
  EXPECT_EQ(b.reuse_prefix(std::span(prompt).first(60)), 0);
}

// Host offload tiers move only the global layers' blocks; the windowed group stays in RAM.
TEST(WindowTables, OffloadTiersGiveTheSameLogits) {
  test::TempDir dir;
  const Model m = load_synth(dir, "tiny-gemma3");
  const fs::path off = dir / "offload";
  fs::create_directories(off);
  Context uniform(m, params(false, true));
  const auto want = greedy(uniform);
  ContextParams cp = params(true, true);
  ContextParams probe = cp;
  Context sizing(m, probe);
  // A fast tier of 3 global blocks beside the windowed group; the rest in the offload file.
  cp.kv.window_blocks = sizing.cache().window_blocks();
  cp.kv.mem_bytes = cp.kv.window_blocks * sizing.cache().window_bytes_per_block() +
                    3 * sizing.cache().bytes_per_block();
  cp.kv.offload_dir = off.string();
  cp.kv.offload_max = int64_t(1) << 20;
  Context tiered(m, cp);
  ASSERT_EQ(tiered.cache().tier_stats().n_fast, 3);
  const auto got = greedy(tiered);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "step " << i;
  EXPECT_GT(tiered.cache().tier_stats().moves_out, 0);
}

// Save past the window (the windowed rows behind it are not in the file), restore into a fresh
// context: the next logits equal the original's. A uniform context refuses such a file.
TEST(WindowTables, SaveAndRestorePastTheWindow) {
  test::TempDir dir;
  const Model m = load_synth(dir, "tiny-gemma2");
  Context a(m, params(true, true));
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 130; ++i) prompt.push_back(2 + (i * 17) % 350);
  a.eval(prompt);
  ASSERT_GT(a.sequence().n_window_released(), 0);
  std::stringstream state;
  write_context_state(state, a);
  const auto want = a.eval(std::vector<int32_t>{42});
  const std::vector<float> w(want.begin(), want.end());
  Context b(m, params(true, true));
  read_context_state(state, b, prompt);
  EXPECT_EQ(b.n_past(), 130);
  EXPECT_LE(b.sequence().n_window_blocks(), (32 + 15) / 16 + 1);
  const auto got = b.eval(std::vector<int32_t>{42});
  EXPECT_EQ(std::vector<float>(got.begin(), got.end()), w);
  Context u(m, params(false, true));
  state.clear();
  state.seekg(0);
  EXPECT_THROW(read_context_state(state, u, prompt), std::runtime_error);
}

// Context::fill_synthetic (kvrun bench --depth-fill synthetic) takes the windowed group in
// chunks too: a depth far beyond the windowed group's capacity fits.
TEST(WindowTables, SyntheticFillStaysWithinTheWindowGroup) {
  test::TempDir dir;
  const Model m = load_synth(dir, "tiny-gemma3");
  ContextParams cp = params(true, true);
  cp.n_ctx = 2048;
  Context ctx(m, cp);
  ASSERT_LT(ctx.cache().window_blocks() * 16, 2000);
  ctx.fill_synthetic(2000, 7);
  EXPECT_EQ(ctx.n_past(), 2000);
  EXPECT_LE(ctx.sequence().n_window_blocks(), (32 + 15) / 16 + 1);
  const auto l = ctx.eval(std::vector<int32_t>{5});
  for (float x : l) ASSERT_TRUE(std::isfinite(x));
}

// Scheduler sessions (kvrun serve / batch --parallel 2): the greedy tokens of the uniform layout.
TEST(WindowTables, SchedulerSessionsMatchTheUniformLayout) {
  test::TempDir dir;
  const Model m = load_synth(dir, "tiny-gemma3");
  const Tokenizer tok = Tokenizer::from_gguf(m.file());
  auto run = [&](bool tables) {
    ContextParams cp;
    cp.n_ctx = 2 * 256;
    cp.n_seq = 2;
    cp.kv.window_tables = tables;
    auto kv = make_context_cache(m, cp);
    EXPECT_EQ(kv->window() > 0, tables);
    SchedulerParams sp;
    sp.n_ctx = 256;
    sp.n_parallel = 2;
    sp.n_threads = 2;
    sp.flash_attn = FlashAttn::kOn;
    std::vector<std::vector<int32_t>> got;
    {
      Scheduler sched(m, tok, *kv, sp);
      std::vector<std::shared_ptr<Request>> reqs;
      for (const std::string text : {"The sky is", "Hello, my name"}) {
        RequestParams p;
        p.prompt = tok.tokenize(text, true, true);
        p.n_predict = 120;
        p.ignore_eos = true;
        p.sampling.temp = 0;
        reqs.push_back(sched.submit(p));
      }
      for (auto& r : reqs) {
        for (;;) {
          auto ev = r->next(std::chrono::seconds(60));
          if (!ev) {
            ADD_FAILURE() << "no event within 60 s";
            return got;
          }
          if (!ev->done) continue;
          EXPECT_EQ(ev->result.finish, FinishReason::kLength) << ev->result.error;
          got.push_back(ev->result.tokens);
          break;
        }
      }
    }
    EXPECT_EQ(kv->pool().stats().n_used, 0);
    EXPECT_EQ(kv->window_blocks_used(), 0);
    return got;
  };
  const auto want = run(false);
  ASSERT_EQ(want.size(), 2u);
  EXPECT_EQ(run(true), want);
}

// kvrun info: the windowed layers counted at their window, the global ones at n_ctx; the bytes a
// context holds at n_ctx are the formula's.
TEST(WindowTables, InfoCountsBothGroups) {
  test::TempDir dir;
  const std::string path = test::synth_model(dir, "tiny-gemma3", SynthFileType::F32);
  const ModelInfo mi = describe_model(gguf::File::open(path), 256);
  EXPECT_EQ(mi.n_layer_window, 5);
  EXPECT_EQ(mi.kv_tokens, 256);
  EXPECT_EQ(mi.kv_window_tokens, 48);  // (ceil(31 / 16) + 1) × 16
  const Hparams& hp = mi.hp;
  for (const KvSizeEntry& e : mi.kv) {
    const int64_t row =
        kv_bytes_per_token(e.type, e.type, 1, hp.n_head_kv, hp.head_dim, hp.head_dim_v);
    EXPECT_EQ(e.bytes_global, row * 256);
    EXPECT_EQ(e.bytes_window, 5 * row * 48);
    EXPECT_EQ(e.bytes_total, e.bytes_global + e.bytes_window);
    EXPECT_EQ(e.bytes_per_token, 6 * row);
  }
  // A context filled to n_ctx holds that (f16 K and V): the global layers every position, the
  // windowed ones at most kv_window_tokens over the decode.
  const Model m = Model::load(path);
  Context ctx(m, params(true, true));
  ctx.eval(std::vector<int32_t>(200, 9));
  int64_t most = 0;
  while (ctx.n_past() < 256) {
    ctx.eval(std::vector<int32_t>{11});
    most = std::max(most, ctx.sequence().n_window_blocks() * ctx.cache().window_bytes_per_block());
  }
  const KvSizeEntry& f16 = *std::find_if(mi.kv.begin(), mi.kv.end(),
                                         [](const KvSizeEntry& e) { return e.type == DType::F16; });
  EXPECT_EQ(most, f16.bytes_window);
  EXPECT_EQ(ctx.sequence().bytes_held() -
                ctx.sequence().n_window_blocks() * ctx.cache().window_bytes_per_block(),
            f16.bytes_global);
  // Through the binary, at 128K.
  const auto r =
      test::run_command(test::kvrun_binary() + " info --json -c 131072 -m '" + path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv_window"]["n_layer_window"], 5);
  EXPECT_EQ(j["kv_window"]["n_layer_global"], 1);
  EXPECT_EQ(j["kv_window"]["window_tokens"], 48);
  const auto& e = j["kv"]["f16"];
  const int64_t row = f16.bytes_per_token / 6;
  EXPECT_EQ(e["bytes_global"].get<int64_t>(), row * 131072);
  EXPECT_EQ(e["bytes_window"].get<int64_t>(), 5 * row * 48);
  EXPECT_EQ(e["bytes_total"].get<int64_t>(), row * (131072 + 5 * 48));
}

}  // namespace
}  // namespace kvrun
