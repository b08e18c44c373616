// test_gpu_e2e.cpp — every GPU device of this build and machine (gpu_devices(): CUDA, then
// Vulkan) against the CPU, end to end through the seam: the same model loaded with -ngl 0, a
// partial split, all layers (the output head too) and all with -nkvo, for the KV cache type
// pairs the device supports, must give the CPU's prompt logits (to the rounding the GPU kernels
// document: f32 activations instead of q8_0 / f16-rounded ones, expf instead of a polynomial) and
// the CPU's greedy tokens, where a divergence is allowed only at a near-tie of the CPU's logits.
//
// --kv-host-tier (blocks past a small --kv-mem in host memory the GPU reads in place) must give
// the all-VRAM run's logits bit for bit and the CPU's tokens.
//
// Skips ("no GPU device") on a machine without one. CI runs it on Mesa's lavapipe through the
// Vulkan backend (tests/CMakeLists.txt sets VK_ICD_FILENAMES and KVRUN_VULKAN_SOFTWARE=1); the
// CUDA devices run it on a machine with an NVIDIA GPU (scripts/gpu-check.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "engine/context.h"
#include "engine/context_state.h"
#include "kv/kv_cache.h"
#include "kv/prefix_store.h"
#include "kv_layout.h"
#include "serve_process.h"
#include "synth_util.h"

namespace kvrun {
namespace {

namespace fs = std::filesystem;

constexpr int kDecodeSteps = 12;

/// What one run gives: the prompt's last-row logits, then each greedy step's logits and token.
struct Trace {
  std::vector<float> prompt_logits;
  std::vector<std::vector<float>> step_logits;
  std::vector<int32_t> tokens;
};

int32_t argmax(const std::vector<float>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

/// The persistent prefix cache of a run (--kv-cache-dir): its directory, and what the run did.
struct PrefixRun {
  std::string dir;
  int64_t reused = 0;        ///< prompt tokens whose KV rows came from the directory
  PrefixStoreStats stats{};  ///< the store's counters at the end of the run
};

/// The context of every run below: 64 positions, prefill chunks of 8, blocks of 4.
ContextParams run_params(DType type_k, DType type_v) {
  ContextParams cp;
  cp.n_ctx = 64;
  cp.n_batch = 8;
  cp.n_threads = 2;
  cp.kv.block_size = 4;
  cp.kv.type_k = type_k;
  cp.kv.type_v = type_v;
  return cp;
}

/// The prompt of every run: 19 tokens (three prefill chunks of 8).
std::vector<int32_t> test_prompt(const Model& m) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 19; ++i) prompt.push_back(int32_t((i * 7 + 3) % m.hparams().n_vocab));
  return prompt;
}

/// kDecodeSteps greedy steps from t.prompt_logits, appended to t.
void decode_steps(Context& ctx, Trace& t) {
  int32_t next = argmax(t.prompt_logits);
  for (int step = 0; step < kDecodeSteps; ++step) {
    t.tokens.push_back(next);
    const std::span<const float> lg = ctx.eval(std::span<const int32_t>(&next, 1));
    t.step_logits.emplace_back(lg.begin(), lg.end());
    next = argmax(t.step_logits.back());
  }
}

/// The prompt, then kDecodeSteps greedy steps. With `prefix`, the KV cache persists its full
/// blocks (of 4 tokens) to prefix->dir, and the prompt starts from the blocks found there.
Trace run(const std::string& path, const ModelParams& mp, DType type_k, DType type_v,
          PrefixRun* prefix = nullptr) {
  const Model m = Model::load(path, mp);
  ContextParams cp = run_params(type_k, type_v);
  if (prefix) {
    cp.kv.cache_dir = prefix->dir;
    cp.kv.model_id = model_file_id(path);
  }
  Context ctx(m, cp);
  const std::vector<int32_t> prompt = test_prompt(m);
  Trace t;
  const int64_t reused = prefix ? ctx.reuse_prefix(prompt) : 0;
  const std::span<const float> last = ctx.eval(std::span(prompt).subspan(size_t(reused)));
  t.prompt_logits.assign(last.begin(), last.end());
  decode_steps(ctx, t);
  if (prefix) {
    prefix->reused = reused;
    prefix->stats = ctx.cache().prefix_store()->stats();
  }
  return t;
}

/// The prompt evaluated with the model placed as `from`, its KV state saved (the REPL's /save:
/// write_context_state) and read into a fresh context of the model placed as `to` (/load), which
/// then takes the greedy steps.
Trace run_via_state(const std::string& path, const ModelParams& from, const ModelParams& to,
                    DType type_k, DType type_v) {
  std::stringstream state;
  Trace t;
  std::vector<int32_t> prompt;
  {
    const Model m = Model::load(path, from);
    Context ctx(m, run_params(type_k, type_v));
    prompt = test_prompt(m);
    const std::span<const float> last = ctx.eval(prompt);
    t.prompt_logits.assign(last.begin(), last.end());
    write_context_state(state, ctx);
  }
  const Model m = Model::load(path, to);
  Context ctx(m, run_params(type_k, type_v));
  read_context_state(state, ctx, prompt);
  EXPECT_EQ(ctx.n_past(), int64_t(prompt.size()));
  decode_steps(ctx, t);
  return t;
}

/// Σ(a−b)² / Σb² (normalized mean squared error of a against the reference b).
double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? num / den : num;
}

/// How close a GPU run must be: the NMSE of its logits, and the near-tie (a fraction of the CPU
/// logits' range) within which its greedy choice may differ from the CPU's.
struct Tolerance {
  double max_nmse;
  float near_tie;
};

/// The GPU trace must follow the CPU's: prompt logits within tol.max_nmse, the same greedy
/// tokens up to a step where the CPU's logits of both choices are a near-tie (then the
/// sequences may part, and what follows is not compared).
void expect_follows(const Trace& gpu, const Trace& cpu, Tolerance tol, const std::string& what) {
  const double max_nmse = tol.max_nmse;
  ASSERT_EQ(gpu.prompt_logits.size(), cpu.prompt_logits.size()) << what;
  for (float x : gpu.prompt_logits) ASSERT_TRUE(std::isfinite(x)) << what;
  EXPECT_LT(nmse(gpu.prompt_logits, cpu.prompt_logits), max_nmse) << what;
  for (size_t s = 0; s < cpu.tokens.size(); ++s) {
    if (gpu.tokens[s] == cpu.tokens[s]) {
      if (s + 1 < cpu.tokens.size()) continue;
      EXPECT_LT(nmse(gpu.step_logits[s], cpu.step_logits[s]), max_nmse * 10) << what;
      return;
    }
    // Both runs saw the same tokens so far: the CPU's logits at the step before must rank the
    // two choices within a near-tie.
    const std::vector<float>& ref = s == 0 ? cpu.prompt_logits : cpu.step_logits[s - 1];
    const float top = ref[size_t(cpu.tokens[s])], other = ref[size_t(gpu.tokens[s])];
    const float spread =
        *std::max_element(ref.begin(), ref.end()) - *std::min_element(ref.begin(), ref.end());
    EXPECT_LT(top - other, tol.near_tie * spread)
        << what << ": step " << s << " took token " << gpu.tokens[s] << " (CPU logit " << other
        << ") instead of " << cpu.tokens[s] << " (" << top << ")";
    std::printf("  %s: parted at step %zu at a near-tie (%.4g vs %.4g)\n", what.c_str(), s, top,
                other);
    return;
  }
}

struct KvPair {
  DType k, v;
};

std::string kv_name(KvPair p) { return std::string(traits(p.k).name) + "/" + traits(p.v).name; }

bool four_bit(DType t) { return t == DType::Q4_0 || t == DType::Q4_K || t == DType::NVFP4; }

/// Every placement of `path` on `gpu` against the CPU run, for each KV pair the device has.
/// The CPU quantizes activations (q8_0 / q8_K) and Q (f16 / q8_0) where the GPUs keep f32 (CUDA
/// quantizes them as the CPU does for q4_0 / q8_0 weights, and to q8_0 blocks for q6_K where
/// the CPU uses q8_K), so
/// the random tiny models drift further from it with 4-bit weights or a 4-bit KV cache: those
/// runs get a looser tolerance: a value one rounding apart on either side of a 4-bit level
/// lands a whole step away, and 26 random layers (tiny-gemma2) amplify that to an NMSE of
/// 3e-2 on the CPU-vs-GPU logits (lavapipe, -ngl all, q8_0/q4_0 KV). A real fault gives an NMSE
/// near 1. Returns the runs compared (0 when the device lacks a weight type of the file).
int check_model(Device& gpu, const std::string& path, const std::vector<KvPair>& pairs) {
  int compared = 0;
  const Model host = Model::load(path);
  const int64_t n_layer = host.hparams().n_layer;
  bool weights_4bit = false;
  for (const auto& t : host.file().tensors()) {
    weights_4bit = weights_4bit || four_bit(t.type);
    if (t.ne[1] > 1 && !gpu.supports(Op::kMatmul, t.type, DType::F32, t.ne[0])) {
      std::printf("  %s: %s has no %s matmul (%s): skipped\n", path.c_str(), gpu.name().c_str(),
                  traits(t.type).name, std::string(t.name).c_str());
      return 0;
    }
  }
  for (const KvPair kv : pairs) {
    const bool loose = weights_4bit || four_bit(kv.k) || four_bit(kv.v);
    const Tolerance tol = loose ? Tolerance{6e-2, 0.06f} : Tolerance{1e-3, 0.02f};
    const std::string kvs = kv_name(kv);
    if (!gpu.supports(Op::kKvStore, kv.k, kv.v) || !gpu.supports(Op::kPagedAttention, kv.k, kv.v)) {
      std::printf("  %s: %s has no %s KV cache: skipped\n", path.c_str(), gpu.name().c_str(),
                  kvs.c_str());
      continue;
    }
    const Trace ref = run(path, {}, kv.k, kv.v);
    struct Placing {
      int64_t n_gpu;
      bool kv_offload;
    };
    for (const Placing pl :
         {Placing{n_layer / 2, true}, Placing{n_layer + 1, true}, Placing{n_layer + 1, false}}) {
      ModelParams mp;
      mp.n_gpu_layers = pl.n_gpu;
      mp.gpu = &gpu;
      mp.kv_offload = pl.kv_offload;
      const std::string what = fs::path(path).filename().string() + " on " + gpu.name() + " -ngl " +
                               std::to_string(pl.n_gpu) + (pl.kv_offload ? "" : " -nkvo") + " KV " +
                               kvs;
      SCOPED_TRACE(what);
      expect_follows(run(path, mp, kv.k, kv.v), ref, tol, what);
      ++compared;
    }
  }
  return compared;
}

const std::vector<KvPair> kAllPairs = {
    {DType::F16, DType::F16},   {DType::BF16, DType::BF16},         {DType::Q8_0, DType::Q8_0},
    {DType::Q4_0, DType::Q4_0}, {DType::FP8_E4M3, DType::FP8_E5M2}, {DType::NVFP4, DType::NVFP4},
    {DType::Q8_0, DType::Q4_0},
};

TEST(GpuEndToEnd, StoriesFixtureFollowsTheCpuForEveryKvType) {
  const std::vector<Device*> gpus = gpu_devices();
  if (gpus.empty()) GTEST_SKIP() << "no GPU device (gpu_devices() is empty)";
  const fs::path model = test::fixture("models/stories260K-F32.gguf");
  if (!fs::exists(model)) GTEST_SKIP() << "fixture missing: " << model;
  // The f32 fixture must run on every GPU backend: a refused weight type here is a failure,
  // not a skip.
  for (Device* gpu : gpus)
    EXPECT_GT(check_model(*gpu, model.string(), kAllPairs), 0) << gpu->name();
}

TEST(GpuEndToEnd, SyntheticArchitecturesFollowTheCpu) {
  const std::vector<Device*> gpus = gpu_devices();
  if (gpus.empty()) GTEST_SKIP() << "no GPU device (gpu_devices() is empty)";
  test::TempDir dir;
  // Biases (qwen2), fused QKV / gate-up (phi3), GeGLU, soft-caps and a sliding window (gemma2),
  // per-head Q/K norms (qwen3); q8_0, q4_0 and K-quant weights.
  const std::vector<KvPair> pairs = {{DType::F16, DType::F16}, {DType::Q8_0, DType::Q4_0}};
  for (const char* shape : {"tiny", "tiny-qwen2", "tiny-phi3", "tiny-gemma2", "tiny-qwen3"})
    for (Device* gpu : gpus) check_model(*gpu, test::synth_model(dir, shape), pairs);
  for (SynthFileType t : {SynthFileType::Q4_0, SynthFileType::Q4_K, SynthFileType::Q6_K})
    for (Device* gpu : gpus) check_model(*gpu, test::synth_model(dir, "tiny", t), pairs);
}

// A mixture-of-experts model with its experts kept on the CPU (`-ngl all -ot "ffn_.*_exps=CPU"`,
// how people run MoE models on one GPU; the GPU backends have no MoE ops yet, so plain `-ngl
// all` places the MoE FFNs on the CPU by itself, as llama.cpp's --cpu-moe): attention and KV on
// the GPU, each layer's MoE FFN on the host, and the CPU's tokens.
TEST(GpuEndToEnd, MoeExpertsKeptOnTheCpuFollowTheCpu) {
  const std::vector<Device*> gpus = gpu_devices();
  if (gpus.empty()) GTEST_SKIP() << "no GPU device (gpu_devices() is empty)";
  test::TempDir dir;
  const std::string path = test::synth_model(dir, "tiny-qwen3moe");
  const Trace ref = run(path, {}, DType::F16, DType::F16);
  for (Device* gpu : gpus) {
    for (const bool rule : {true, false}) {
      ModelParams mp;
      mp.n_gpu_layers = 1000;  // every layer and the output
      mp.gpu = gpu;
      if (rule) mp.overrides = {{"ffn_.*_exps", &cpu_device()}};
      const bool moe_ops = gpu->supports(Op::kMoeRoute) && gpu->supports(Op::kMatmulId);
      if (!rule && moe_ops) continue;  // (the device runs the experts itself)
      const Model m = Model::load(path, mp);
      for (int64_t il = 0; il < m.hparams().n_layer; ++il) {
        EXPECT_EQ(m.placement().layers[size_t(il)], gpu);
        EXPECT_EQ(m.placement().ffn[size_t(il)], &cpu_device());
      }
      const std::string what = "tiny-qwen3moe on " + gpu->name() + " -ngl all" +
                               (rule ? " -ot ffn_.*_exps=CPU" : " (experts on the CPU by itself)");
      expect_follows(run(path, mp, DType::F16, DType::F16), ref, Tolerance{1e-3, 0.02f}, what);
    }
  }
}

// The tools plan as the loader places: on a GPU without the MoE ops, `kvrun info -ngl all`
// lists the MoE FFNs that run on the CPU and leaves them out of the GPU's weights (the bytes of
// -ot "ffn_.*_exps=CPU"), and `-ngl auto` puts every layer and the output on the GPU (it planned
// none before) and generates.
TEST(GpuEndToEnd, ToolsPlanTheMoeFfnsTheGpuLacksOnTheCpu) {
  const std::vector<Device*> gpus = gpu_devices();
  if (gpus.empty()) GTEST_SKIP() << "no GPU device (gpu_devices() is empty)";
  test::TempDir dir;
  const std::string path = test::synth_model(dir, "tiny-qwen3moe");
  const int64_t n_layer = Model::load(path).hparams().n_layer;
  for (Device* gpu : gpus) {
    if (gpu->supports(Op::kMoeRoute)) continue;
    SCOPED_TRACE(gpu->name());
    const std::string base =
        test::kvrun_binary() + " info -m '" + path + "' -ngl all -dev " + gpu->name() + " --json";
    const auto plain = test::run_command(base),
               rule = test::run_command(base + " -ot 'ffn_.*_exps=CPU'");
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    ASSERT_EQ(rule.exit_code, 0) << rule.err;
    const nlohmann::json a = nlohmann::json::parse(plain.out)["gpu_plan"],
                         b = nlohmann::json::parse(rule.out)["gpu_plan"];
    ASSERT_EQ(a["on_host"].size(), 1u) << a.dump();
    EXPECT_NE(a["on_host"][0].get<std::string>().find("mixture-of-experts"), std::string::npos);
    EXPECT_EQ(a["by_kv_type"]["f16"]["weight_bytes"], b["by_kv_type"]["f16"]["weight_bytes"]);
    const auto gen = test::run_command(test::kvrun_binary() + " -m '" + path + "' -ngl auto -dev " +
                                       gpu->name() + " -p hello -n 3 --temp 0 -t 2");
    ASSERT_EQ(gen.exit_code, 0) << gen.err;
    EXPECT_NE(gen.err.find("-ngl auto: " + std::to_string(n_layer) + " of " +
                           std::to_string(n_layer) + " layers and the output"),
              std::string::npos)
        << gen.err;
    EXPECT_NE(gen.err.find("the FFNs of layers 0-" + std::to_string(n_layer - 1) + " run on CPU"),
              std::string::npos)
        << gen.err;
  }
}

/// Prompt, decode, truncate and continue over a context longer than a small GPU KV budget: a
/// 100-token prompt (prefill in chunks of 32), 40 greedy steps, then a truncate to 40 positions
/// and the prompt's tokens 40 … 59 again with 10 greedy steps. `host_tier`: the GPU's
/// fast tier (--kv-mem) holds 4 blocks of 16 and the rest is in its host tier; `stats` gets the
/// tiers' counters at the end. The second part's context is the prompt's, whatever the first
/// part generated, so both parts compare with the CPU's.
std::pair<Trace, Trace> run_past_budget(const std::string& path, const ModelParams& mp,
                                        bool host_tier, KvTierStats* stats = nullptr,
                                        bool host_attn_cpu = false) {
  const Model m = Model::load(path, mp);
  ContextParams cp;
  cp.n_ctx = 160;
  cp.n_batch = 32;
  cp.n_threads = 2;
  cp.kv.block_size = 16;
  if (host_tier) {
    const Hparams::KvRows r = m.hparams().kv_rows();
    cp.kv.host_tier = true;
    cp.kv.host_attn_cpu = host_attn_cpu;
    cp.kv.mem_bytes = 4 * 16 *
                      kv_bytes_per_token(cp.kv.type_k, cp.kv.type_v, m.hparams().n_layer,
                                         r.n_head_kv, r.head_dim, r.head_dim_v);
  }
  Context ctx(m, cp);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 100; ++i) prompt.push_back(int32_t((i * 7 + 3) % m.hparams().n_vocab));
  auto generate = [&](std::span<const int32_t> input, int steps) {
    Trace t;
    const std::span<const float> last = ctx.eval(input);
    t.prompt_logits.assign(last.begin(), last.end());
    int32_t next = argmax(t.prompt_logits);
    for (int step = 0; step < steps; ++step) {
      t.tokens.push_back(next);
      const std::span<const float> lg = ctx.eval(std::span<const int32_t>(&next, 1));
      t.step_logits.emplace_back(lg.begin(), lg.end());
      next = argmax(t.step_logits.back());
    }
    return t;
  };
  std::pair<Trace, Trace> out;
  out.first = generate(prompt, 40);
  ctx.truncate(40);
  out.second = generate(std::span<const int32_t>(prompt).subspan(40, 20), 10);
  if (stats) *stats = ctx.cache().tier_stats();
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Run a's logits equal b's bit for bit, the prompt's and every step's, and so do its tokens.
void expect_same_trace(const Trace& a, const Trace& b) {
  EXPECT_TRUE(same_bits(a.prompt_logits, b.prompt_logits));
  ASSERT_EQ(a.tokens, b.tokens);
  for (size_t s = 0; s < a.step_logits.size(); ++s)
    EXPECT_TRUE(same_bits(a.step_logits[s], b.step_logits[s])) << "step " << s;
}

/// --kv-host-tier: KV rows on the GPU with a fast tier (--kv-mem) of 4 blocks, the rest in
/// pinned host memory that the kernels read and write in place; blocks move out during decode
/// and back in after a truncate. The logits equal those of the same GPU run with every block in
/// VRAM bit for bit, and the tokens follow the CPU's; with --kv-host-attn cpu (the CPU attends
/// to the host tier's blocks, merged with the device's part) too, and its logits follow the
/// in-place run's up to rounding.
TEST(GpuEndToEnd, HostTierGivesTheVramRunsLogitsAndTheCpusTokens) {
  const std::vector<Device*> gpus = gpu_devices();
  if (gpus.empty()) GTEST_SKIP() << "no GPU device (gpu_devices() is empty)";
  const fs::path model = test::fixture("models/stories260K-F32.gguf");
  if (!fs::exists(model)) GTEST_SKIP() << "fixture missing: " << model;
  const auto cpu = run_past_budget(model.string(), {}, false);
  for (Device* gpu : gpus) {
    SCOPED_TRACE(gpu->name());
    ModelParams mp;
    mp.n_gpu_layers = 1000;  // every layer and the output
    mp.gpu = gpu;
    const auto vram = run_past_budget(model.string(), mp, false);
    KvTierStats ts;
    const auto tiered = run_past_budget(model.string(), mp, true, &ts);
    EXPECT_EQ(ts.n_fast, 4);
    EXPECT_GT(ts.n_slow, 0);
    EXPECT_GT(ts.placed_slow, 0);  // the prompt's blocks past the 4th: written in the host tier
    EXPECT_GT(ts.moves_out, 0);
    EXPECT_GT(ts.moves_in, 0);
    std::printf(
        "  %s --kv-host-tier: %lld blocks placed in the host tier, %lld moved out, %lld in\n",
        gpu->name().c_str(), (long long)ts.placed_slow, (long long)ts.moves_out,
        (long long)ts.moves_in);
    expect_same_trace(tiered.first, vram.first);
    expect_same_trace(tiered.second, vram.second);
    const std::string what = "stories260K on " + gpu->name() + " --kv-host-tier";
    expect_follows(tiered.first, cpu.first, Tolerance{1e-3, 0.02f}, what);
    expect_follows(tiered.second, cpu.second, Tolerance{1e-3, 0.02f}, what + " after truncate");
    // --kv-host-attn cpu: the CPU attends to the host tier's blocks, merged with the device's.
    if (!gpu->supports(Op::kAttnParts)) {
      std::printf("  %s has no attention by KV tier: --kv-host-attn cpu skipped\n",
                  gpu->name().c_str());
      continue;
    }
    const auto split = run_past_budget(model.string(), mp, true, nullptr, true);
    // Against the device's own in-place run: the merge's rounding and the CPU's conversions.
    const double e = nmse(split.first.prompt_logits, vram.first.prompt_logits);
    std::printf("  %s --kv-host-attn cpu: prompt logits NMSE %.2e against in-place reads\n",
                gpu->name().c_str(), e);
    EXPECT_LT(e, 1e-7) << what;  // (6.1e-9 on lavapipe; a part read twice: 2e-4)
    expect_follows(split.first, cpu.first, Tolerance{1e-3, 0.02f}, what + " --kv-host-attn cpu");
    expect_follows(split.second, cpu.second, Tolerance{1e-3, 0.02f},
                   what + " --kv-host-attn cpu after truncate");
  }
}

/// The KV pairs the persistence tests below run the stories260K fixture with (a 16-bit and a
/// quantized one): f(kv, tolerance against the CPU, the CPU's trace, gpu) for every GPU device
/// that stores the pair.
template <typename F>
void for_saved_pairs(const std::string& path, F&& f) {
  for (const KvPair kv : {KvPair{DType::F16, DType::F16}, KvPair{DType::Q8_0, DType::Q4_0}}) {
    const Tolerance tol = four_bit(kv.v) ? Tolerance{6e-2, 0.06f} : Tolerance{1e-3, 0.02f};
    const Trace cpu = run(path, {}, kv.k, kv.v);
    for (Device* gpu : gpu_devices()) {
      if (!gpu->supports(Op::kKvStore, kv.k, kv.v)) {
        std::printf("  %s has no %s KV cache: skipped\n", gpu->name().c_str(), kv_name(kv).c_str());
        continue;
      }
      f(kv, tol, cpu, gpu);
    }
  }
}

/// The KV state (the REPL's /save and /load) of a context whose rows are on the GPU: saved from
/// the GPU and read into a GPU context, the steps that follow give the uninterrupted GPU run's
/// logits bit for bit; a state saved by the CPU continues on the GPU, and one saved from the
/// GPU continues on the CPU, each following the CPU's tokens (the rows are the same format).
TEST(GpuEndToEnd, ContextStateMovesBetweenCpuAndGpu) {
  if (gpu_devices().empty()) GTEST_SKIP() << "no GPU device (gpu_devices() is empty)";
  const fs::path model = test::fixture("models/stories260K-F32.gguf");
  if (!fs::exists(model)) GTEST_SKIP() << "fixture missing: " << model;
  const std::string path = model.string();
  for_saved_pairs(path, [&](KvPair kv, Tolerance tol, const Trace& cpu, Device* gpu) {
    const std::string what = "stories260K on " + gpu->name() + " KV state " + kv_name(kv);
    SCOPED_TRACE(what);
    ModelParams mp;
    mp.n_gpu_layers = 1000;  // every layer and the output
    mp.gpu = gpu;
    const Trace direct = run(path, mp, kv.k, kv.v);
    const Trace saved = run_via_state(path, mp, mp, kv.k, kv.v);
    expect_same_trace(saved, direct);
    expect_follows(run_via_state(path, {}, mp, kv.k, kv.v), cpu, tol, what + ", CPU → GPU");
    expect_follows(run_via_state(path, mp, {}, kv.k, kv.v), cpu, tol, what + ", GPU → CPU");
  });
}

/// The prefix store's block files at the KvCache level, on every GPU device: blocks a CPU cache
/// persisted are restored into a GPU cache's VRAM and (where the device has one) its host tier
/// byte for byte, and blocks persisted from each GPU tier are restored by a CPU cache byte for
/// byte. The rows are patterns, not encoded values: the store moves bytes.
TEST(GpuKvCache, PrefixStoreBlocksKeepTheirBytesAcrossDevices) {
  const std::vector<Device*> gpus = gpu_devices();
  if (gpus.empty()) GTEST_SKIP() << "no GPU device (gpu_devices() is empty)";
  Hparams hp;  // 2 layers, 2 KV heads of 32
  hp.arch = "llama";
  hp.n_layer = 2;
  hp.n_embd = 64;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = hp.head_dim_v = 32;
  test::TempDir dir;
  KvCacheParams p;
  p.type_k = DType::F16;
  p.type_v = DType::Q8_0;
  p.block_size = 16;
  p.cache_dir = dir.path().string();
  p.model_id = 0x5eed;
  const int64_t per_block =
      p.block_size *
      kv_bytes_per_token(p.type_k, p.type_v, hp.n_layer, hp.n_head_kv, hp.head_dim, hp.head_dim_v);
  p.mem_bytes = 6 * per_block;
  const KvCache probe(hp, p);
  const size_t kb = size_t(p.block_size * probe.layer(0).k_row_bytes),
               vb = size_t(p.block_size * probe.layer(0).v_row_bytes);
  auto pattern = [](size_t n, int seed) {
    std::vector<uint8_t> b(n);
    for (size_t i = 0; i < n; ++i) b[i] = uint8_t((i * 7 + size_t(seed) * 31) ^ (i >> 8));
    return b;
  };
  auto tokens = [](int seed) { return std::vector<int32_t>(16, seed); };
  // Block `id` of every layer of a cache gets (put) or must hold (check) pattern `seed`. put
  // writes through the cache (write_block_rows commits the block's VRAM first: these blocks never
  // came from take_block); check reads VRAM blocks with a backend of its own.
  auto put = [&](KvCache& c, int32_t id, int seed) {
    for (int64_t il = 0; il < 2; ++il) {
      c.write_block_rows(il, id, false, 0, pattern(kb, seed + int(il)).data(), kb);
      c.write_block_rows(il, id, true, 0, pattern(vb, seed + 9 + int(il)).data(), vb);
    }
  };
  auto check = [&](const KvCache& c, Backend* be, int32_t id, int seed, const std::string& what) {
    for (int64_t il = 0; il < 2; ++il) {
      const KvLayer L = c.layer(il);
      std::vector<uint8_t> k(kb), v(vb);
      if (be) {
        be->download(k.data(), L.k_block(id), kb);
        be->download(v.data(), L.v_block(id), vb);
      } else {
        std::memcpy(k.data(), L.k_block(id), kb);
        std::memcpy(v.data(), L.v_block(id), vb);
      }
      EXPECT_EQ(k, pattern(kb, seed + int(il))) << what << ", layer " << il << " K";
      EXPECT_EQ(v, pattern(vb, seed + 9 + int(il))) << what << ", layer " << il << " V";
    }
  };
  {
    KvCache cpu(hp, p);
    put(cpu, 1, 1);
    cpu.persist_block(1, 1001, tokens(1));
    put(cpu, 2, 2);
    cpu.persist_block(2, 1002, tokens(2));
  }
  for (size_t g = 0; g < gpus.size(); ++g) {
    Device* gpu = gpus[g];
    SCOPED_TRACE(gpu->name());
    KvCacheParams pg = p;
    const bool tier = gpu->supports(Op::kKvHostTier);
    if (tier) {  // blocks 0 and 1 in VRAM, 2 … 5 in the host tier
      pg.host_tier = true;
      pg.mem_bytes = 2 * per_block;
      pg.offload_max = 4 * per_block;
    }
    const std::vector<Device*> devs(2, gpu);
    const std::unique_ptr<Backend> be = gpu->make_backend(1);
    const int32_t slow = tier ? 3 : 2;
    const int h = 2000 + 10 * int(g);
    {
      KvCache c(hp, pg, devs);
      ASSERT_FALSE(c.rows_on_host());
      ASSERT_TRUE(c.in_fast_tier(0));
      ASSERT_EQ(c.in_fast_tier(slow), !tier);
      ASSERT_TRUE(c.restore_block(0, 1001, tokens(1)));
      ASSERT_TRUE(c.restore_block(slow, 1002, tokens(2)));
      EXPECT_FALSE(c.restore_block(4, 1001, tokens(9)));  // other tokens: not that block
      check(c, be.get(), 0, 1, "the CPU's block restored into VRAM");
      check(c, be.get(), slow, 2, "the CPU's block restored into the host tier");
      put(c, 1, h);
      c.persist_block(1, uint64_t(h), tokens(h));
      put(c, 5, h + 1);
      c.persist_block(5, uint64_t(h + 1), tokens(h + 1));
    }
    KvCache cpu(hp, p);
    ASSERT_TRUE(cpu.restore_block(4, uint64_t(h), tokens(h)));
    ASSERT_TRUE(cpu.restore_block(0, uint64_t(h + 1), tokens(h + 1)));
    check(cpu, nullptr, 4, h, "a VRAM block restored by the CPU");
    check(cpu, nullptr, 0, h + 1, tier ? "a host-tier block restored by the CPU" : "block 5");
  }
}

/// The persistent prefix cache (--kv-cache-dir) with the KV rows on the GPU, for a 16-bit and a
/// quantized KV pair: a GPU run writes its full blocks; a second GPU run reads the prompt's 4
/// blocks back and gives the first run's logits bit for bit (the rows went through the file
/// unchanged); a CPU run reads the GPU's files and a GPU run the CPU's (the block bytes are
/// every backend's), each reusing the 4 blocks and following the CPU's tokens.
TEST(GpuEndToEnd, PrefixCacheFilesMoveBetweenCpuAndGpuRuns) {
  if (gpu_devices().empty()) GTEST_SKIP() << "no GPU device (gpu_devices() is empty)";
  const fs::path model = test::fixture("models/stories260K-F32.gguf");
  if (!fs::exists(model)) GTEST_SKIP() << "fixture missing: " << model;
  const std::string path = model.string();
  for_saved_pairs(path, [&](KvPair kv, Tolerance tol, const Trace& cpu, Device* gpu) {
    const std::string what = "stories260K on " + gpu->name() + " --kv-cache-dir KV " + kv_name(kv);
    SCOPED_TRACE(what);
    test::TempDir cpu_dir, gpu_dir;
    PrefixRun cpu_write{cpu_dir.path().string()};
    run(path, {}, kv.k, kv.v, &cpu_write);
    ASSERT_EQ(cpu_write.reused, 0);
    ASSERT_GE(cpu_write.stats.n_saved, 4);
    ModelParams mp;
    mp.n_gpu_layers = 1000;  // every layer and the output
    mp.gpu = gpu;
    PrefixRun first{gpu_dir.path().string()}, again{first.dir}, cpu_reads{first.dir},
        gpu_reads{cpu_write.dir};
    const Trace written = run(path, mp, kv.k, kv.v, &first);
    EXPECT_EQ(first.reused, 0);
    EXPECT_EQ(first.stats.n_saved, cpu_write.stats.n_saved);  // the same full blocks
    const Trace restored = run(path, mp, kv.k, kv.v, &again);
    EXPECT_EQ(again.reused, 16);  // (19 − 1) / 4 full blocks: the last token is computed
    EXPECT_EQ(again.stats.n_loaded, 4);
    EXPECT_EQ(again.stats.n_rejected, 0);
    expect_same_trace(restored, written);
    expect_follows(written, cpu, tol, what);
    expect_follows(run(path, {}, kv.k, kv.v, &cpu_reads), cpu, tol, what + ", read by the CPU");
    EXPECT_EQ(cpu_reads.reused, 16);
    expect_follows(run(path, mp, kv.k, kv.v, &gpu_reads), cpu, tol, what + ", the CPU's files");
    EXPECT_EQ(gpu_reads.reused, 16);
    EXPECT_EQ(gpu_reads.stats.n_rejected, 0);
  });
}

/// `kvrun serve` with the model on the GPU (-ngl all, KV rows there too) answers a greedy
/// completion with the CPU server's text; so does one with --kv-mem of 2 blocks and the host
/// tier, whose 60-token completion moves blocks out of VRAM (the scheduler's path: blocks
/// reserved per step).
TEST(GpuEndToEnd, ServeOnTheGpuGivesTheCpusGreedyText) {
  const std::vector<Device*> gpus = gpu_devices();
  if (gpus.empty()) GTEST_SKIP() << "no GPU device (gpu_devices() is empty)";
  if (!fs::exists(test::fixture(serve_test::kModel)))
    GTEST_SKIP() << "fixture missing: " << serve_test::kModel;
  auto request = [](int n) {
    return nlohmann::json{
        {"prompt", "Once upon a time"}, {"n_predict", n}, {"temperature", 0}, {"top_k", 1}};
  };
  auto complete = [&](const serve_test::ServerProcess& s, int n) {
    const auto r = s.client()->Post("/completion", request(n).dump(), "application/json");
    if (!r || r->status != 200) return std::string("<no answer>");
    return nlohmann::json::parse(r->body)["content"].get<std::string>();
  };
  const serve_test::ServerProcess cpu({});
  ASSERT_TRUE(cpu.ok()) << cpu.log();
  const std::string want = complete(cpu, 24), want_long = complete(cpu, 60);
  ASSERT_GT(want.size(), 10u);
  for (Device* gpu : gpus) {
    SCOPED_TRACE(gpu->name());
    const serve_test::ServerProcess s({"-ngl", "all", "-dev", gpu->name()});
    ASSERT_TRUE(s.ok()) << s.log();
    EXPECT_EQ(complete(s, 24), want);
    // stories260K: 640 bytes of f16 KV per position, 10240 per block of 16
    const serve_test::ServerProcess t(
        {"-ngl", "all", "-dev", gpu->name(), "--kv-mem", "20480", "--kv-host-tier"});
    ASSERT_TRUE(t.ok()) << t.log();
    EXPECT_EQ(complete(t, 60), want_long);
    const auto st = t.client()->Get("/stats");
    ASSERT_TRUE(st && st->status == 200);
    const nlohmann::json kv = nlohmann::json::parse(st->body).at("kv");
    EXPECT_GT(kv.at("moves_out").get<int64_t>(), 0) << kv.dump();
    EXPECT_EQ(kv.at("tiers").at("ram").at("blocks").get<int64_t>(), 2) << kv.dump();
  }
}

}  // namespace
}  // namespace kvrun
