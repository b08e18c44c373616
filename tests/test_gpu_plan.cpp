// test_gpu_plan.cpp — what `-ngl N` puts in a GPU's memory (eval/model_info.h plan_gpu), the
// `-ngl auto` fit against a free-memory figure (fit_gpu_layers) and `kvrun info -ngl`, on
// synthetic models: the plan's parts must add up to the file's own tensor sizes and the KV
// layout's row sizes, grow with N, and the fit must be the exact boundary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/model_info.h"
#include "gguf.h"
#include "kv_layout.h"
#include "synth_util.h"

namespace kvrun {
namespace {

int64_t tensor_bytes(const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  return t ? int64_t(t->n_bytes) : 0;
}

void check_plan(const std::string& path) {
  const gguf::File f = gguf::File::open(path);
  const ModelInfo mi = describe_model(f, 256);
  const Hparams& hp = mi.hp;
  ASSERT_GE(hp.n_layer, 2);
  const bool tied = f.find_tensor("output.weight") == nullptr;
  const int64_t head = tensor_bytes(f, "output_norm.weight") +
                       tensor_bytes(f, tied ? "token_embd.weight" : "output.weight");
  // Every layer and the head: all tensors but the token embedding, which a tied head uploads.
  const GpuPlan all = plan_gpu(mi, f, hp.n_layer + 1, DType::F16, DType::F16, true);
  EXPECT_EQ(all.layers, hp.n_layer);
  EXPECT_TRUE(all.output);
  // The blk.* tensors are all but these; rope_freqs (llama3 scaling) goes up once with them.
  const int64_t outside_layers =
      tensor_bytes(f, "token_embd.weight") + tensor_bytes(f, "output.weight") +
      tensor_bytes(f, "output_norm.weight") + tensor_bytes(f, "rope_freqs.weight");
  EXPECT_EQ(all.weight_bytes,
            mi.weight_bytes - outside_layers + head + tensor_bytes(f, "rope_freqs.weight"));
  const GpuPlan layers_only = plan_gpu(mi, f, hp.n_layer, DType::F16, DType::F16, true);
  EXPECT_FALSE(layers_only.output);
  EXPECT_EQ(all.weight_bytes - layers_only.weight_bytes, head);
  // KV: the layout's row sizes for the placed layers, for every position of the context.
  for (DType t : kKvCacheTypes) {
    const GpuPlan p = plan_gpu(mi, f, hp.n_layer, t, t, true);
    EXPECT_EQ(p.kv_bytes,
              kv_bytes_per_token(t, t, hp.n_layer, hp.n_head_kv, hp.head_dim, hp.head_dim_v) *
                  mi.kv_tokens)
        << traits(t).name;
    EXPECT_EQ(plan_gpu(mi, f, 1, t, t, true).kv_bytes * hp.n_layer, p.kv_bytes);
    EXPECT_EQ(plan_gpu(mi, f, hp.n_layer, t, t, false).kv_bytes, 0);  // -nkvo
  }
  EXPECT_EQ(plan_gpu(mi, f, 0, DType::F16, DType::F16, true).total(), 0);
  // Grows with N; the fit is the exact boundary.
  for (int64_t n = 1; n <= hp.n_layer + 1; ++n) {
    const GpuPlan p = plan_gpu(mi, f, n, DType::Q8_0, DType::Q4_0, true);
    const GpuPlan prev = plan_gpu(mi, f, n - 1, DType::Q8_0, DType::Q4_0, true);
    EXPECT_GT(p.total(), prev.total()) << n;
    EXPECT_EQ(fit_gpu_layers(mi, f, DType::Q8_0, DType::Q4_0, true, p.total()), n) << n;
    EXPECT_EQ(fit_gpu_layers(mi, f, DType::Q8_0, DType::Q4_0, true, p.total() - 1), n - 1) << n;
  }
  EXPECT_EQ(fit_gpu_layers(mi, f, DType::F16, DType::F16, true, int64_t(1) << 50), hp.n_layer + 1);
  EXPECT_EQ(fit_gpu_layers(mi, f, DType::F16, DType::F16, true, 0), 0);
}

TEST(GpuPlan, PartsAddUpAndTheFitIsTheBoundary) {
  test::TempDir dir;
  for (const char* shape : {"tiny", "tiny-qwen3" /* tied head */, "tiny-gemma2"}) {
    SCOPED_TRACE(shape);
    check_plan(test::synth_model(dir, shape));
  }
}

TEST(GpuPlan, InfoAnswersDoesItFit) {
  test::TempDir dir;
  const std::string path = test::synth_model(dir, "tiny");
  const gguf::File f = gguf::File::open(path);
  const ModelInfo mi = describe_model(f, 512);
  const auto r =
      test::run_command(test::kvrun_binary() + " info --json -c 512 -ngl all -m '" + path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("gpu_plan")) << r.out;
  const auto& e = j["gpu_plan"]["by_kv_type"]["q8_0"];
  const GpuPlan p = plan_gpu(mi, f, mi.hp.n_layer + 1, DType::Q8_0, DType::Q8_0, true);
  EXPECT_EQ(e["layers"].get<int64_t>(), mi.hp.n_layer);
  EXPECT_TRUE(e["output"].get<bool>());
  EXPECT_EQ(e["weight_bytes"].get<int64_t>(), p.weight_bytes);
  EXPECT_EQ(e["kv_bytes"].get<int64_t>(), p.kv_bytes);
  EXPECT_EQ(e["total_bytes"].get<int64_t>(), p.total());
  // With a GPU that reports its free memory the answer compares with it; without one (or a
  // device that does not say, as Vulkan's) there is no "fits".
  const int64_t free = j["gpu_plan"]["free_bytes"].get<int64_t>();
  if (j["gpu_plan"]["device"].is_null()) {
    EXPECT_EQ(free, -1);
  }
  if (free < 0) {
    EXPECT_FALSE(e.contains("fits"));
  } else {
    ASSERT_TRUE(e.contains("fits")) << e;
    EXPECT_EQ(e["fits"].get<bool>(), p.total() <= free);
  }

  const auto text =
      test::run_command(test::kvrun_binary() + " info -c 512 -ngl 1 -m '" + path + "'");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("GPU plan for -ngl 1: the last 1 of"), std::string::npos) << text.out;
  const auto bad = test::run_command(test::kvrun_binary() + " info -ngl x -m '" + path + "'");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.err.find("-ngl x"), std::string::npos) << bad.err;
}

// `kvrun info -ngl all --kv-mem X --kv-host-tier` plans the GPU's KV rows for the positions X
// holds (one more than fit whole, as the run's check), not for -c: the weights are unchanged, the
// KV bytes are the plan's at that many positions, and the text says so. Without --kv-mem, or with
// -nkvo, the tier is an exit-2 error naming the flag.
TEST(GpuPlan, InfoWithTheHostTierPlansTheKvAtKvMem) {
  test::TempDir dir;
  const std::string path = test::synth_model(dir, "tiny");
  const gguf::File f = gguf::File::open(path);
  const ModelInfo mi = describe_model(f, 4096);
  const Hparams::KvRows rows = mi.hp.kv_rows();
  const int64_t per_token = kv_bytes_per_token(DType::Q8_0, DType::Q8_0, mi.hp.n_layer,
                                               rows.n_head_kv, rows.head_dim, rows.head_dim_v);
  const int64_t kv_mem = 100 * per_token + per_token / 2;  // 100 whole positions and a half
  auto info = [&](const std::string& flags) {
    return test::run_command(test::kvrun_binary() + " info -c 4096 -ngl all " + flags + " -m '" +
                             path + "'");
  };
  const auto r = info("--json --kv-mem " + std::to_string(kv_mem) + " --kv-host-tier");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out)["gpu_plan"];
  EXPECT_TRUE(j["kv_host_tier"].get<bool>());
  const auto& e = j["by_kv_type"]["q8_0"];
  EXPECT_EQ(e["kv_positions"].get<int64_t>(), 101);
  ModelInfo capped = mi;
  capped.kv_tokens = 101;
  const GpuPlan want = plan_gpu(capped, f, mi.hp.n_layer + 1, DType::Q8_0, DType::Q8_0, true);
  const GpuPlan whole = plan_gpu(mi, f, mi.hp.n_layer + 1, DType::Q8_0, DType::Q8_0, true);
  EXPECT_EQ(e["kv_bytes"].get<int64_t>(), want.kv_bytes);
  EXPECT_LT(want.kv_bytes, whole.kv_bytes);
  EXPECT_EQ(e["weight_bytes"].get<int64_t>(), whole.weight_bytes);
  const auto plain = info("--json --kv-mem " + std::to_string(kv_mem));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto pj = nlohmann::json::parse(plain.out)["gpu_plan"];
  EXPECT_FALSE(pj["kv_host_tier"].get<bool>());
  EXPECT_EQ(pj["by_kv_type"]["q8_0"]["kv_bytes"].get<int64_t>(), whole.kv_bytes);
  EXPECT_EQ(pj["by_kv_type"]["q8_0"]["kv_positions"].get<int64_t>(), 4096);

  const auto text = info("--kv-mem " + std::to_string(kv_mem) + " --kv-host-tier");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("--kv-host-tier: KV on the GPU for at most"), std::string::npos)
      << text.out;
  const auto no_mem = info("--kv-host-tier");
  EXPECT_EQ(no_mem.exit_code, 2) << no_mem.out;
  EXPECT_NE(no_mem.err.find("--kv-host-tier needs --kv-mem"), std::string::npos) << no_mem.err;
  const auto nkvo = info("--kv-mem 1M --kv-host-tier -nkvo");
  EXPECT_EQ(nkvo.exit_code, 2) << nkvo.out;
  EXPECT_NE(nkvo.err.find("--kv-host-tier: -nkvo"), std::string::npos) << nkvo.err;
}

// -ot rules that keep layers' FFN on the host (`-ot "ffn_.*_exps=CPU"` for a MoE model) leave
// those layers' ffn_* tensors out of the GPU plan: `kvrun info` reports the weights without them,
// equal to the plan's own sum over the tensors it keeps; a rule the model cannot honour is exit 2.
TEST(GpuPlan, OverrideTensorRulesLeaveTheHostsFfnTensorsOut) {
  test::TempDir dir;
  const std::string path = test::synth_model(dir, "tiny-qwen3moe");
  const gguf::File f = gguf::File::open(path);
  const ModelInfo mi = describe_model(f, 512);
  int64_t ffn_bytes = 0, experts = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (t.name.find(".ffn_") != std::string_view::npos) ffn_bytes += int64_t(t.n_bytes);
    if (t.name.find("_exps") != std::string_view::npos) ++experts;
  }
  ASSERT_GT(experts, 0);
  auto weights = [&](const std::string& flags) {
    // -dev none: the sizes alone, whatever GPU the machine has (a GPU without the MoE ops keeps
    // those FFNs on the host by itself: GpuEndToEnd.ToolsPlanTheMoeFfnsTheGpuLacksOnTheCpu)
    const auto r =
        test::run_command(test::kvrun_binary() + " info --json -c 512 -ngl all -dev none " + flags +
                          " -m '" + path + "'");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["gpu_plan"]["by_kv_type"]["f16"]["weight_bytes"]
        .get<int64_t>();
  };
  const int64_t all = weights(""), kept = weights("-ot 'ffn_.*_exps=CPU'");
  EXPECT_EQ(all, plan_gpu(mi, f, mi.hp.n_layer + 1, DType::F16, DType::F16, true).weight_bytes);
  // the whole FFN of every layer (experts, router, norm) stays on the host
  EXPECT_EQ(all - kept, ffn_bytes);
  const std::vector<bool> on_host(size_t(mi.hp.n_layer), true);
  EXPECT_EQ(
      kept,
      plan_gpu(mi, f, mi.hp.n_layer + 1, DType::F16, DType::F16, true, 512, &on_host).weight_bytes);
  const auto bad =
      test::run_command(test::kvrun_binary() + " info -ngl all -ot attn_q=CPU -m '" + path + "'");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("matches blk.0.attn_q.weight"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace kvrun
