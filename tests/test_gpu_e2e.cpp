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
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "engine/context.h"
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

/// Prompt of 19 tokens (three prefill chunks of 8), then kDecodeSteps greedy steps.
Trace run(const std::string& path, const ModelParams& mp, DType type_k, DType type_v) {
  const Model m = Model::load(path, mp);
  ContextParams cp;
  cp.n_ctx = 64;
  cp.n_batch = 8;
  cp.n_threads = 2;
  cp.kv.block_size = 4;
  cp.kv.type_k = type_k;
  cp.kv.type_v = type_v;
  Context ctx(m, cp);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 19; ++i) prompt.push_back(int32_t((i * 7 + 3) % m.hparams().n_vocab));
  Trace t;
  const std::span<const float> last = ctx.eval(prompt);
  t.prompt_logits.assign(last.begin(), last.end());
  int32_t next = argmax(t.prompt_logits);
  for (int step = 0; step < kDecodeSteps; ++step) {
    t.tokens.push_back(next);
    const std::span<const float> lg = ctx.eval(std::span<const int32_t>(&next, 1));
    t.step_logits.emplace_back(lg.begin(), lg.end());
    next = argmax(t.step_logits.back());
  }
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
// how people run MoE models on one GPU; the GPU backends have no MoE ops yet): attention and KV
// on the GPU, each layer's MoE FFN on the host, and the CPU's tokens.
TEST(GpuEndToEnd, MoeExpertsKeptOnTheCpuByOverrideTensorFollowTheCpu) {
  const std::vector<Device*> gpus = gpu_devices();
  if (gpus.empty()) GTEST_SKIP() << "no GPU device (gpu_devices() is empty)";
  test::TempDir dir;
  const std::string path = test::synth_model(dir, "tiny-qwen3moe");
  const Trace ref = run(path, {}, DType::F16, DType::F16);
  for (Device* gpu : gpus) {
    ModelParams mp;
    mp.n_gpu_layers = 1000;  // every layer and the output
    mp.gpu = gpu;
    mp.overrides = {{"ffn_.*_exps", &cpu_device()}};
    const Model m = Model::load(path, mp);
    for (int64_t il = 0; il < m.hparams().n_layer; ++il) {
      EXPECT_EQ(m.placement().layers[size_t(il)], gpu);
      EXPECT_EQ(m.placement().ffn[size_t(il)], &cpu_device());
    }
    const std::string what = "tiny-qwen3moe on " + gpu->name() + " -ngl all -ot ffn_.*_exps=CPU";
    expect_follows(run(path, mp, DType::F16, DType::F16), ref, Tolerance{1e-3, 0.02f}, what);
  }
}

/// Prompt, decode, truncate and continue over a context longer than a small GPU KV budget: a
/// 100-token prompt (prefill in chunks of 32), 40 greedy steps, then a truncate to 40 positions
/// and the prompt's tokens 40 … 59 again with 10 greedy steps. `host_tier`: the GPU's
/// fast tier (--kv-mem) holds 4 blocks of 16 and the rest is in its host tier; `stats` gets the
/// tiers' counters at the end. The second part's context is the prompt's, whatever the first
/// part generated, so both parts compare with the CPU's.
std::pair<Trace, Trace> run_past_budget(const std::string& path, const ModelParams& mp,
                                        bool host_tier, KvTierStats* stats = nullptr) {
  const Model m = Model::load(path, mp);
  ContextParams cp;
  cp.n_ctx = 160;
  cp.n_batch = 32;
  cp.n_threads = 2;
  cp.kv.block_size = 16;
  if (host_tier) {
    const Hparams::KvRows r = m.hparams().kv_rows();
    cp.kv.host_tier = true;
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

/// --kv-host-tier: KV rows on the GPU with a fast tier (--kv-mem) of 4 blocks, the rest in
/// pinned host memory that the kernels read and write in place; blocks move out during decode
/// and back in after a truncate. The logits equal those of the same GPU run with every block in
/// VRAM bit for bit, and the tokens follow the CPU's.
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
    for (const auto& [t, v] :
         {std::pair(&tiered.first, &vram.first), std::pair(&tiered.second, &vram.second)}) {
      EXPECT_TRUE(same_bits(t->prompt_logits, v->prompt_logits));
      ASSERT_EQ(t->tokens, v->tokens);
      for (size_t s = 0; s < t->step_logits.size(); ++s)
        EXPECT_TRUE(same_bits(t->step_logits[s], v->step_logits[s])) << "step " << s;
    }
    const std::string what = "stories260K on " + gpu->name() + " --kv-host-tier";
    expect_follows(tiered.first, cpu.first, Tolerance{1e-3, 0.02f}, what);
    expect_follows(tiered.second, cpu.second, Tolerance{1e-3, 0.02f}, what + " after truncate");
  }
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
