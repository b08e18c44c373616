// test_backend_split.cpp — the backend seam (backends/backend.h) with a model split across two
// CPU device instances placed per layer, the second standing in for a GPU with its own uploaded
// weights, activations and KV storage: logits must be bit-identical to the one-device run. This
// exercises placement (-ngl's last-N-layers rule, the output head on the second device when N
// exceeds the layer count), the residual stream's boundary copy, -nkvo (KV and attention of the
// "GPU" layers back on the host) and per-layer KV storage, before any GPU exists.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend.h"
#include "counting_device.h"
#include "engine/context.h"
#include "engine/scheduler.h"
#include "kv_layout.h"
#include "synth_util.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "tools/synth/synth.h"

namespace kvrun {
namespace {

namespace fs = std::filesystem;

/// Logits of every prompt token, then of 4 greedy decode steps, with `mp`'s placement.
std::vector<float> run(const std::string& path, const ModelParams& mp, int64_t* n_layer = nullptr) {
  const Model m = Model::load(path, mp);
  if (n_layer) *n_layer = m.hparams().n_layer;
  ContextParams cp;
  cp.n_ctx = 64;
  cp.n_batch = 8;  // several prefill chunks
  cp.n_threads = 2;
  cp.kv.block_size = 4;
  Context ctx(m, cp);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 19; ++i) prompt.push_back(int32_t((i * 7 + 3) % m.hparams().n_vocab));
  const std::span<const float> all = ctx.eval(prompt, true);
  std::vector<float> out(all.begin(), all.end());
  int32_t next = 0;
  for (int step = 0; step < 4; ++step) {
    const std::span<const float> lg = ctx.eval(std::span<const int32_t>(&next, 1));
    out.insert(out.end(), lg.begin(), lg.end());
    next = int32_t(std::max_element(lg.begin(), lg.end()) - lg.begin());
  }
  return out;
}

void expect_bit_identical(const std::vector<float>& a, const std::vector<float>& b,
                          const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

/// Every placement of `path` on host + a counting second device gives the host-only logits.
void check_splits(const std::string& path) {
  int64_t n_layer = 0;
  const std::vector<float> ref = run(path, {}, &n_layer);
  ASSERT_GE(n_layer, 2);
  for (int64_t n_gpu : {int64_t(1), n_layer - 1, n_layer, n_layer + 1}) {
    for (bool kv_offload : {true, false}) {
      CountingDevice gpu("CPU1");
      ModelParams mp;
      mp.n_gpu_layers = n_gpu;
      mp.gpu = &gpu;
      mp.kv_offload = kv_offload;
      const std::string what =
          path + " -ngl " + std::to_string(n_gpu) + (kv_offload ? "" : " -nkvo");
      expect_bit_identical(run(path, mp), ref, what);
      EXPECT_GT(gpu.uploads, 0) << what;
      // KV rows of the layers on the second device live in its memory (one buffer per layer),
      // or all on the host with -nkvo.
      EXPECT_EQ(gpu.kv_allocs, kv_offload ? std::min(n_gpu, n_layer) : 0) << what;
      // The residual stream crosses into the second device once per step when layers are split
      // (n_gpu ≤ n_layer); with -nkvo, Q, K and V cross at every GPU layer besides.
      EXPECT_GT(gpu.copies_in, 0) << what;
    }
  }
}

TEST(BackendSplit, StoriesFixtureBitIdenticalAcrossTwoCpuDevices) {
  const fs::path model = test::fixture("models/stories260K-F32.gguf");
  if (!fs::exists(model)) GTEST_SKIP() << "fixture missing: " << model;
  check_splits(model.string());
}

TEST(BackendSplit, SyntheticArchitecturesBitIdenticalAcrossTwoCpuDevices) {
  test::TempDir dir;
  // Q/K/V biases (qwen2), fused QKV and gate/up (phi3), post-norms, GeGLU and soft-caps (gemma2),
  // the mixture-of-experts FFN (qwen3moe: moe_route and matmul_id on the second device), attention
  // sinks, output and expert biases and the clamped SwiGLU (gpt-oss), MLA's latent rows and
  // shared experts (deepseek2; with -nkvo its query and row cross to the host), sigmoid gating
  // with its selection bias (tiny-deepseek3).
  for (const char* shape : {"tiny", "tiny-qwen2", "tiny-phi3", "tiny-gemma2", "tiny-qwen3moe",
                            "tiny-gpt-oss", "tiny-deepseek2", "tiny-deepseek3"}) {
    SCOPED_TRACE(shape);
    check_splits(test::synth_model(dir, shape));
  }
}

TEST(BackendSplit, PlacementFollowsNglAsLlamaCpp) {
  Device& host = cpu_device();
  const std::unique_ptr<Device> gpu = make_cpu_device("CPU1");
  const Placement p = Placement::split(host, *gpu, 4, 2, true);
  EXPECT_EQ(p.layers[0], &host);
  EXPECT_EQ(p.layers[1], &host);
  EXPECT_EQ(p.layers[2], gpu.get());
  EXPECT_EQ(p.layers[3], gpu.get());
  EXPECT_EQ(p.kv[3], gpu.get());
  EXPECT_EQ(p.output, &host);  // the output goes to the GPU only past n_layer
  EXPECT_EQ(p.input, &host);
  const Placement all = Placement::split(host, *gpu, 4, 5, false);
  EXPECT_EQ(all.output, gpu.get());
  EXPECT_EQ(all.kv[0], &host);  // -nkvo
  EXPECT_EQ(all.devices().size(), 2u);
}

TEST(BackendSplit, KvTypeTheDeviceLacksIsRefusedBeforeAnythingRuns) {
  const fs::path path = test::fixture("models/stories260K-F32.gguf");
  if (!fs::exists(path)) GTEST_SKIP() << "fixture missing: " << path;
  CountingDevice gpu("CPU1");
  gpu.refuse_q4_0_kv = true;
  ModelParams mp;
  mp.n_gpu_layers = 1;
  mp.gpu = &gpu;
  const Model m = Model::load(path.string(), mp);
  ContextParams cp;
  cp.n_ctx = 32;
  cp.kv.type_k = DType::Q4_0;
  try {
    Context ctx(m, cp);
    ADD_FAILURE() << "a q4_0 K cache on a device without it was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("CPU1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("q4_0"), std::string::npos) << e.what();
  }
  cp.kv.type_k = DType::Q8_0;  // what it has runs
  Context ok(m, cp);
  const int32_t tok[2] = {1, 2};
  EXPECT_EQ(ok.eval(tok).size(), size_t(m.hparams().n_vocab));
}

// The MoE FFN of a layer placed on a device without moe_route / matmul_id (Vulkan and CUDA today)
// runs on the host (llama.cpp's --cpu-moe) while the layer's attention and KV stay on the device,
// bit-identical to the host alone; -ot sending the experts to that device explicitly is refused
// at load, naming the device and the op.
TEST(BackendSplit, MoeFfnOnADeviceWithoutTheMoeOpsRunsOnTheHost) {
  test::TempDir dir;
  const std::string path = test::synth_model(dir, "tiny-qwen3moe");
  int64_t n_layer = 0;
  const std::vector<float> ref = run(path, {}, &n_layer);
  CountingDevice gpu("CPU1");
  gpu.refuse_moe = true;
  ModelParams mp;
  mp.n_gpu_layers = 1;
  mp.gpu = &gpu;
  {
    const Model m = Model::load(path, mp);
    const Placement& p = m.placement();
    EXPECT_EQ(p.layers[size_t(n_layer - 1)], &gpu);
    EXPECT_EQ(p.kv[size_t(n_layer - 1)], &gpu);
    EXPECT_EQ(p.ffn[size_t(n_layer - 1)], &cpu_device());
    const LlamaLayer& L = m.weights().layers[size_t(n_layer - 1)];
    EXPECT_EQ(L.wq.device, &gpu);
    EXPECT_NE(L.ffn_up_exps.device, &gpu);
    EXPECT_NE(L.ffn_gate_inp.device, &gpu);
  }
  expect_bit_identical(run(path, mp), ref, "-ngl 1, the MoE FFN on the host");
  EXPECT_GT(gpu.kv_allocs, 0);
  ModelParams explicit_rule;
  explicit_rule.overrides = {{"blk\\.1\\.ffn_", &gpu}};
  try {
    const Model m = Model::load(path, explicit_rule);
    ADD_FAILURE() << "-ot sent a MoE FFN to a device without the MoE ops";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("CPU1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("moe_route"), std::string::npos) << e.what();
  }
}

// -ot: `-ngl all -ot "ffn_.*_exps=CPU"` on a device without the MoE ops (as CUDA and Vulkan
// today) runs every layer's attention and KV there and its MoE FFN on the host, bit-identical
// to the host alone; the experts' weights never reach the device, and the residual stream
// crosses at every layer (there and back). The other way round, -ot moves one layer's dense FFN
// onto the second device with -ngl 0.
TEST(BackendSplit, OverrideTensorRunsALayersFfnOnTheRulesDevice) {
  test::TempDir dir;
  const std::string moe = test::synth_model(dir, "tiny-qwen3moe");
  int64_t n_layer = 0;
  const std::vector<float> ref = run(moe, {}, &n_layer);
  CountingDevice gpu("CPU1");
  gpu.refuse_moe = true;
  ModelParams mp;
  mp.n_gpu_layers = n_layer + 1;
  mp.gpu = &gpu;
  const Placement automatic = Model::load(moe, mp).placement();  // without -ot: the same
  mp.overrides = {{"ffn_.*_exps", &cpu_device()}};
  {
    const Model m = Model::load(moe, mp);
    for (const LlamaLayer& L : m.weights().layers) {
      EXPECT_NE(L.ffn_up_exps.device, &gpu);
      EXPECT_NE(L.ffn_gate_inp.device, &gpu);  // the router goes with its experts
      EXPECT_EQ(L.wq.device, &gpu);
    }
    EXPECT_EQ(m.placement().layers, automatic.layers);
    EXPECT_EQ(m.placement().ffn, automatic.ffn);
    EXPECT_EQ(m.placement().output, automatic.output);
  }
  gpu.copies_in = 0;
  expect_bit_identical(run(moe, mp), ref, "-ngl all -ot ffn_.*_exps=CPU");
  // 3 prefill chunks + 4 decode steps, each crossing back into the device after every layer's FFN
  EXPECT_GE(gpu.copies_in, 7 * n_layer);

  const std::string dense = test::synth_model(dir, "tiny");
  const std::vector<float> dense_ref = run(dense, {});
  CountingDevice second("CPU2");
  ModelParams one;
  one.overrides = {{"blk\\.1\\.ffn_", &second}};
  expect_bit_identical(run(dense, one), dense_ref, "-ot blk\\.1\\.ffn_=CPU2");
  EXPECT_GT(second.uploads, 0);
  EXPECT_GT(second.copies_in, 0);
  EXPECT_EQ(second.kv_allocs, 0);
}

// The -ot rules kvrun cannot honour are load errors naming the rule: a match outside a layer's
// FFN tensors, a rule that matches nothing, one layer's FFN sent to two devices, a bad regex.
TEST(BackendSplit, OverrideTensorRulesItCannotHonourAreRefused) {
  test::TempDir dir;
  const std::string path = test::synth_model(dir, "tiny");
  CountingDevice gpu("CPU1");
  auto refused = [&](std::vector<TensorOverride> rules, const std::string& want) {
    ModelParams mp;
    mp.overrides = std::move(rules);
    try {
      const Model m = Model::load(path, mp);
      ADD_FAILURE() << "accepted; wanted an error with: " << want;
    } catch (const ModelError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("-ot "), std::string::npos) << e.what();
    }
  };
  refused({{"attn_q", &gpu}}, "blk.0.attn_q.weight");
  refused({{"^output", &cpu_device()}}, "-ngl whole layers");
  refused({{"ffn_nothing_like_this", &gpu}}, "matches no tensor");
  refused({{"blk\\.0\\.ffn_up", &gpu}, {"blk\\.0\\.ffn_down", &cpu_device()}}, "two devices");
  refused({{"ffn_(", &gpu}}, "not a regular expression");
}

/// Synthetic `shape` with its last layer on a second device that `refuse` makes lack an op the
/// layer needs, its KV rows there or on the host (-nkvo): that layer runs wholly on the host (KV
/// rows too), bit-identical to the host alone, and nothing is uploaded to the device.
void expect_layer_on_host(const char* shape, void (*refuse)(CountingDevice&)) {
  test::TempDir dir;
  const std::string path = test::synth_model(dir, shape);
  int64_t n_layer = 0;
  const std::vector<float> ref = run(path, {}, &n_layer);
  for (bool kv_offload : {true, false}) {
    CountingDevice gpu("CPU1");
    refuse(gpu);
    ModelParams mp;
    mp.n_gpu_layers = 1;
    mp.gpu = &gpu;
    mp.kv_offload = kv_offload;
    const std::string what = std::string(shape) + (kv_offload ? "" : " -nkvo");
    {
      const Model m = Model::load(path, mp);
      const Placement& p = m.placement();
      const size_t last = size_t(n_layer - 1);
      EXPECT_EQ(p.layers[last], &cpu_device()) << what;
      EXPECT_EQ(p.kv[last], &cpu_device()) << what;
      EXPECT_EQ(p.ffn[last], &cpu_device()) << what;
    }
    expect_bit_identical(run(path, mp), ref, what);
    EXPECT_EQ(gpu.uploads, 0) << what;
    EXPECT_EQ(gpu.kv_allocs, 0) << what;
  }
}

// A layer with attention sinks (gpt-oss) or MLA (deepseek2) placed on a device without them
// (CUDA and Vulkan today) runs on the host, with its KV rows there or on the host (-nkvo).
TEST(BackendSplit, AttentionSinksLayerOnADeviceWithoutThemRunsOnTheHost) {
  expect_layer_on_host("tiny-gpt-oss", [](CountingDevice& d) {
    d.refuse_sinks = true;
    d.refuse_moe = true;  // (gpt-oss is a MoE model too)
  });
}

TEST(BackendSplit, MlaLayerOnADeviceWithoutMlaRunsOnTheHost) {
  expect_layer_on_host("tiny-deepseek2", [](CountingDevice& d) {
    d.refuse_mla = true;
    d.refuse_moe = true;
  });
}

// What the placement moved, as the lines the loader prints: the device, what it lacks and the
// layers, as ranges; nothing for a device that has everything; the output head of a type its
// device lacks.
TEST(BackendSplit, FitPlacementToDevicesNamesWhatMoved) {
  test::TempDir dir;
  const std::string path = test::synth_model(dir, "tiny-qwen3moe");
  const gguf::File f = gguf::File::open(path);
  Hparams hp = load_hparams(f);
  const ArchSpec spec = configure_arch(f, hp);
  CountingDevice gpu("CPU1");
  Placement p = Placement::split(cpu_device(), gpu, hp.n_layer, hp.n_layer + 1, true);
  EXPECT_TRUE(fit_placement_to_devices(p, cpu_device(), f, hp, spec).empty());
  EXPECT_EQ(p.output, &gpu);
  gpu.refuse_moe = true;
  const std::vector<std::string> lines = fit_placement_to_devices(p, cpu_device(), f, hp, spec);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            "CPU1 lacks the mixture-of-experts ops (moe_route, matmul_id): the FFNs of "
            "layers 0-" +
                std::to_string(hp.n_layer - 1) + " run on CPU");
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    EXPECT_EQ(p.layers[size_t(il)], &gpu);
    EXPECT_EQ(p.ffn[size_t(il)], &cpu_device());
  }
  // A head whose type the device lacks: the head alone moves (tiny Q4_0: a q6_K head).
  const std::string q4 = test::synth_model(dir, "tiny", SynthFileType::Q4_0);
  const gguf::File g = gguf::File::open(q4);
  Hparams hq = load_hparams(g);
  const ArchSpec sq = configure_arch(g, hq);
  const gguf::TensorInfo* head = g.find_tensor("output.weight");
  ASSERT_NE(head, nullptr);
  CountingDevice dev("CPU2");
  dev.refuse_weights = {head->type};
  Placement ph = Placement::split(cpu_device(), dev, hq.n_layer, hq.n_layer + 1, true);
  const std::vector<std::string> head_lines = fit_placement_to_devices(ph, cpu_device(), g, hq, sq);
  ASSERT_FALSE(head_lines.empty());
  EXPECT_NE(head_lines.back().find("the output head runs on CPU"), std::string::npos)
      << head_lines.back();
  EXPECT_EQ(ph.output, &cpu_device());
}

/// Logits of a prompt of n tokens then 4 greedy steps on the stories260K fixture, with KV blocks
/// of 64 positions (a layer's K or V rows of a block: one 4 KiB page) and a pool of 64 blocks
/// (4096 positions).
std::vector<float> run_long(const std::string& path, const ModelParams& mp, int n) {
  const Model m = Model::load(path, mp);
  ContextParams cp;
  cp.n_ctx = 4096;
  cp.n_batch = 32;
  cp.n_threads = 2;
  cp.kv.block_size = 64;
  const Hparams::KvRows r = m.hparams().kv_rows();
  cp.kv.mem_bytes = 64 * 64 *
                    kv_bytes_per_token(cp.kv.type_k, cp.kv.type_v, m.hparams().n_layer, r.n_head_kv,
                                       r.head_dim, r.head_dim_v);
  Context ctx(m, cp);
  std::vector<int32_t> prompt;
  for (int i = 0; i < n; ++i) prompt.push_back(int32_t((i * 7 + 3) % m.hparams().n_vocab));
  const std::span<const float> last = ctx.eval(prompt);
  std::vector<float> out(last.begin(), last.end());
  int32_t next = int32_t(std::max_element(out.begin(), out.end()) - out.begin());
  for (int step = 0; step < 4; ++step) {
    const std::span<const float> lg = ctx.eval(std::span<const int32_t>(&next, 1));
    out.insert(out.end(), lg.begin(), lg.end());
    next = int32_t(std::max_element(lg.begin(), lg.end()) - lg.begin());
  }
  return out;
}

// A device that reserves its KV buffers' addresses and backs them as blocks come into use
// (CUDA's virtual memory management; here pages made accessible by DeviceBuffer::commit, any
// access elsewhere faulting): a 4096-position pool commits only the pages of the blocks its
// tokens use, the logits are bit-identical to the host's, and a device that runs out of memory
// for more blocks ends the prompt with KvCacheFull, naming the flags to change.
TEST(BackendSplit, KvBlocksAreCommittedAsTokensArrive) {
  const fs::path path = test::fixture("models/stories260K-F32.gguf");
  if (!fs::exists(path)) GTEST_SKIP() << "fixture missing: " << path;
  const std::vector<float> ref = run_long(path.string(), {}, 100);
  CountingDevice gpu("CPU1");
  gpu.host = false;
  gpu.lazy_kv = true;
  ModelParams mp;
  mp.n_gpu_layers = 1000;
  mp.gpu = &gpu;
  expect_bit_identical(run_long(path.string(), mp, 100), ref, "KV committed as blocks arrive");
  // 104 positions: 2 blocks of 64; a layer's K or V rows of a block are one page.
  const Model m = Model::load(path.string(), {});
  const Hparams::KvRows r = m.hparams().kv_rows();
  const int64_t n_layer = m.hparams().n_layer, page = int64_t(sysconf(_SC_PAGESIZE));
  const int64_t per_block = 64 * kv_bytes_per_token(DType::F16, DType::F16, n_layer, r.n_head_kv,
                                                    r.head_dim, r.head_dim_v);
  ASSERT_EQ(per_block, 2 * n_layer * page);  // (64-byte f16 K and V rows, 4 KiB pages)
  EXPECT_EQ(gpu.kv_committed, 2 * per_block);
  // Memory for 2 blocks only: a prompt of 168 positions cannot get its third block.
  CountingDevice small("CPU2");
  small.host = false;
  small.lazy_kv = true;
  small.kv_commit_limit = 2 * per_block;
  ModelParams ms = mp;
  ms.gpu = &small;
  try {
    run_long(path.string(), ms, 2 * 64 + 40);
    ADD_FAILURE() << "a prompt past the device's memory was accepted";
  } catch (const KvCacheFull& e) {
    EXPECT_NE(std::string(e.what()).find("no memory for more blocks"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(small.kv_committed, 2 * per_block);
}

/// read_block_rows / write_block_rows (persist_block, restore_block, saved context state) take
/// any block id, also one take_block never handed out, whose slot is not yet committed: they
/// commit it first (on a CUDA device the uncommitted range is unmapped; touching it failed the
/// first GPU run of test_gpu_e2e's PrefixStoreBlocksKeepTheirBytesAcrossDevices). A device with
/// no memory for it gives KvCacheFull, not a fault.
TEST(BackendSplit, BlockRowsOfAnyBlockAreCommittedBeforeTheyAreTouched) {
  const fs::path path = test::fixture("models/stories260K-F32.gguf");
  if (!fs::exists(path)) GTEST_SKIP() << "fixture missing: " << path;
  const Model m = Model::load(path.string(), {});
  const Hparams& hp = m.hparams();
  const int64_t page = int64_t(sysconf(_SC_PAGESIZE));
  KvCacheParams kp;
  kp.block_size = 64;
  kp.mem_bytes = 2 * 8 * hp.n_layer * page;  // 8 blocks of 2·n_layer pages
  CountingDevice gpu("CPU1");
  gpu.host = false;
  gpu.lazy_kv = true;
  const std::vector<Device*> devs(size_t(hp.n_layer), &gpu);
  KvCache cache(hp, kp, devs);
  ASSERT_GE(cache.n_blocks(), 6);
  EXPECT_EQ(gpu.kv_committed, 0);
  const size_t kb = size_t(kp.block_size * cache.layer(0).k_row_bytes);
  std::vector<uint8_t> in(kb), out(kb, 0);
  for (size_t i = 0; i < kb; ++i) in[i] = uint8_t(i * 13 + 5);
  cache.write_block_rows(0, 5, false, 0, in.data(), kb);  // slots 0 … 5 committed
  cache.read_block_rows(0, 5, false, 0, out.data(), kb);
  EXPECT_EQ(out, in);
  EXPECT_EQ(gpu.kv_committed, 6 * 2 * hp.n_layer * page);
  std::vector<uint8_t> any(kb);
  cache.read_block_rows(1, 3, true, 0, any.data(), kb);  // committed already: no fault
  CountingDevice small("CPU2");
  small.host = false;
  small.lazy_kv = true;
  small.kv_commit_limit = 2 * 2 * hp.n_layer * page;
  const std::vector<Device*> sdevs(size_t(hp.n_layer), &small);
  KvCache tight(hp, kp, sdevs);
  tight.write_block_rows(0, 1, false, 0, in.data(), kb);  // slots 0, 1: the device's all
  EXPECT_EQ(small.kv_committed, 2 * 2 * hp.n_layer * page);
  try {
    tight.write_block_rows(0, 4, false, 0, in.data(), kb);
    ADD_FAILURE() << "rows of a block the device cannot back were written";
  } catch (const KvCacheFull& e) {
    EXPECT_NE(std::string(e.what()).find("no memory for block 4"), std::string::npos) << e.what();
  }
  tight.read_block_rows(0, 1, false, 0, out.data(), kb);
  EXPECT_EQ(out, in);
}

/// Logits of a 100-token prompt and 8 greedy steps with every layer on `mp.gpu`, whose KV
/// cache holds 4 blocks of 16 (--kv-mem) and the rest in its host tier (--kv-host-tier), the
/// host tier's blocks attended to by the device in place or, with `host_attn_cpu`, by the host.
/// K and V rows of type `kv_type`; `flash` false: -fa off.
std::vector<float> run_host_tier(const std::string& path, const ModelParams& mp, bool host_attn_cpu,
                                 DType kv_type, bool flash = true) {
  const Model m = Model::load(path, mp);
  ContextParams cp;
  cp.n_ctx = 160;
  cp.n_batch = 32;
  cp.n_threads = 2;
  cp.kv.block_size = 16;
  const Hparams::KvRows r = m.hparams().kv_rows();
  cp.kv.host_tier = true;
  cp.kv.host_attn_cpu = host_attn_cpu;
  cp.kv.type_k = cp.kv.type_v = kv_type;
  cp.flash_attn = flash ? FlashAttn::kOn : FlashAttn::kOff;
  cp.kv.mem_bytes = 4 * 16 *
                    kv_bytes_per_token(cp.kv.type_k, cp.kv.type_v, m.hparams().n_layer, r.n_head_kv,
                                       r.head_dim, r.head_dim_v);
  Context ctx(m, cp);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 100; ++i) prompt.push_back(int32_t((i * 7 + 3) % m.hparams().n_vocab));
  const std::span<const float> last = ctx.eval(prompt);
  std::vector<float> out(last.begin(), last.end());
  int32_t next = int32_t(std::max_element(out.begin(), out.end()) - out.begin());
  for (int step = 0; step < 8; ++step) {
    const std::span<const float> lg = ctx.eval(std::span<const int32_t>(&next, 1));
    out.insert(out.end(), lg.begin(), lg.end());
    next = int32_t(std::max_element(lg.begin(), lg.end()) - lg.begin());
  }
  EXPECT_GT(ctx.cache().tier_stats().placed_slow, 0);
  return out;
}

// --kv-host-attn cpu: a stand-in GPU (its memory not the host's) with a host tier; attention
// over the host tier's blocks runs on the host backend (paged_attention_part, kSlow) while the
// device attends to its own blocks (kFast), merged on the device (attn_merge). The logits follow
// the run where the device reads the host blocks itself, up to the merge's rounding, with the
// same greedy tokens; a device without the ops is refused naming the flag.
TEST(BackendSplit, HostTierAttentionOnTheHostFollowsTheDevicesOwn) {
  const fs::path path = test::fixture("models/stories260K-F32.gguf");
  if (!fs::exists(path)) GTEST_SKIP() << "fixture missing: " << path;
  CountingDevice gpu("CPU1");
  gpu.host = false;
  ModelParams mp;
  mp.n_gpu_layers = 1000;
  mp.gpu = &gpu;
  // f32 rows: the two runs differ by the merge's f32 rounding only; f16 rows: the CPU kernel
  // accumulates an f16 V in f16 (test_paged_attention.cpp), which a split changes more.
  for (const auto& [type, tol] : {std::pair{DType::F32, 1e-4}, std::pair{DType::F16, 1e-2}}) {
    gpu.attn_parts = 0;
    const std::vector<float> in_place = run_host_tier(path.string(), mp, false, type);
    EXPECT_EQ(gpu.attn_parts, 0);
    const std::vector<float> split = run_host_tier(path.string(), mp, true, type);
    EXPECT_GT(gpu.attn_parts, 0);
    ASSERT_EQ(split.size(), in_place.size());
    const int64_t n_vocab = Model::load(path.string(), {}).hparams().n_vocab;
    double err = 0;
    for (size_t i = 0; i < split.size(); ++i)
      err = std::max(err, double(std::fabs(split[i] - in_place[i])));
    EXPECT_LE(err, tol) << kv_type_name(type);
    EXPECT_GT(err, 0.0) << kv_type_name(type);  // (two parts merged round unlike one pass)
    for (size_t row = 0; row < split.size() / size_t(n_vocab); ++row) {
      const auto a = split.begin() + int64_t(row) * n_vocab;
      const auto b = in_place.begin() + int64_t(row) * n_vocab;
      EXPECT_EQ(std::max_element(a, a + n_vocab) - a, std::max_element(b, b + n_vocab) - b)
          << kv_type_name(type) << " row " << row;
    }
  }
  // -fa off: the split steps run the flash scheme on both sides (as a GPU does with -fa off);
  // the greedy tokens stay those of the -fa off run reading the host tier in place.
  const std::vector<float> off_in_place =
      run_host_tier(path.string(), mp, false, DType::F32, false);
  const std::vector<float> off_split = run_host_tier(path.string(), mp, true, DType::F32, false);
  ASSERT_EQ(off_split.size(), off_in_place.size());
  const int64_t nv = Model::load(path.string(), {}).hparams().n_vocab;
  for (size_t row = 0; row < off_split.size() / size_t(nv); ++row) {
    const auto a = off_split.begin() + int64_t(row) * nv,
               b = off_in_place.begin() + int64_t(row) * nv;
    EXPECT_EQ(std::max_element(a, a + nv) - a, std::max_element(b, b + nv) - b)
        << "-fa off " << row;
  }
  // Without the ops, --kv-host-attn cpu is refused before anything runs.
  CountingDevice lacking("CPU2");
  lacking.host = false;
  lacking.refuse_attn_parts = true;
  ModelParams ml = mp;
  ml.gpu = &lacking;
  try {
    run_host_tier(path.string(), ml, true, DType::F16);
    ADD_FAILURE() << "--kv-host-attn cpu on a device without kAttnParts was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-host-attn"), std::string::npos) << e.what();
  }
}

TEST(BackendSplit, SchedulerStepMatchesContextOnASplitModel) {
  const fs::path path = test::fixture("models/stories260K-F32.gguf");
  if (!fs::exists(path)) GTEST_SKIP() << "fixture missing: " << path;
  CountingDevice gpu("CPU1");
  ModelParams mp;
  mp.n_gpu_layers = 2;
  mp.gpu = &gpu;
  const Model split = Model::load(path.string(), mp);
  const Model host = Model::load(path.string());
  const Tokenizer tok = Tokenizer::from_gguf(host.file());
  auto greedy = [&](const Model& m) {
    KvCacheParams kp;
    kp.mem_bytes = int64_t(4) << 20;
    KvCache cache(m.hparams(), kp, m.placement().kv);
    SchedulerParams sp;
    sp.n_ctx = 128;
    sp.n_threads = 2;
    Scheduler sched(m, tok, cache, sp);
    RequestParams rp;
    rp.prompt = tok.tokenize("Once upon a time", true, false);
    rp.n_predict = 12;
    rp.sampling.temp = 0;
    const std::shared_ptr<Request> req = sched.submit(rp);
    for (int i = 0; i < 1000; ++i)
      if (auto ev = req->next(std::chrono::milliseconds(100)); ev && ev->done)
        return ev->result.tokens;
    ADD_FAILURE() << "no final event";
    return std::vector<int32_t>{};
  };
  const std::vector<int32_t> a = greedy(host), b = greedy(split);
  EXPECT_EQ(a.size(), 12u);
  EXPECT_EQ(a, b);
}

TEST(BackendSplit, SyntheticFillWritesDeviceKvRowsThroughTheDevicesUploads) {
  const fs::path path = test::fixture("models/stories260K-F32.gguf");
  if (!fs::exists(path)) GTEST_SKIP() << "fixture missing: " << path;
  for (bool host : {false, true}) {
    SCOPED_TRACE(host ? "host memory" : "device memory");
    CountingDevice gpu("CPU1");
    gpu.host = host;
    ModelParams mp;
    mp.n_gpu_layers = 2;  // the last 2 of 5 layers, their KV rows on the second device
    mp.gpu = &gpu;
    const Model m = Model::load(path.string(), mp);
    ContextParams cp;
    cp.n_ctx = 64;
    cp.n_threads = 1;
    cp.kv.block_size = 16;
    cp.kv.type_k = cp.kv.type_v = DType::Q8_0;
    Context ctx(m, cp);
    const int32_t first[3] = {1, 2, 3};
    ctx.eval(first);
    const int64_t before = gpu.upload_bytes;
    ctx.fill_synthetic(40, 9);
    // Rows the host cannot address go up through the device's backend, those it can are written
    // in place (no upload).
    const KvLayer l = ctx.cache().layer(m.hparams().n_layer - 1);
    EXPECT_EQ(gpu.upload_bytes - before, host ? 0 : 2 * 40 * (l.k_row_bytes + l.v_row_bytes));
    // (The stand-in's memory is host memory after all: read the rows back to check them.)
    for (int64_t il = 0; il < m.hparams().n_layer; ++il) {
      const KvLayer L = ctx.cache().layer(il);
      for (int64_t p = 3; p < 43; ++p) {
        const int32_t b = ctx.sequence().block_table()[size_t(p / 16)];
        std::vector<float> x(size_t(m.hparams().n_head_kv * m.hparams().head_dim));
        kv_decode_row(L.k_type, m.hparams().n_head_kv, m.hparams().head_dim,
                      L.k_block(b) + (p % 16) * L.k_row_bytes, x.data());
        double sq = 0;
        for (float v : x) sq += double(v) * v;
        ASSERT_TRUE(std::isfinite(sq)) << "layer " << il << " position " << p;
        EXPECT_GT(sq, 0.0) << "layer " << il << " position " << p;  // written, not zeros
      }
    }
    const int32_t next = 7;
    for (float x : ctx.eval(std::span<const int32_t>(&next, 1))) ASSERT_TRUE(std::isfinite(x));
    EXPECT_EQ(ctx.n_past(), 44);
  }
}

/// Whether p lies inside the data of one of `f`'s tensors (the file mapping).
bool in_mapping(const gguf::File& f, const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (const gguf::TensorInfo& t : f.tensors()) {
    const auto* lo = static_cast<const uint8_t*>(t.data);
    if (b >= lo && b < lo + t.n_bytes) return true;
  }
  return false;
}

/// The file bytes of tensor `name` equal the n bytes at p.
bool same_bytes(const gguf::File& f, const char* name, const void* p) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  return t && std::memcmp(t->data, p, size_t(t->n_bytes)) == 0;
}

}  // namespace

// Loaded from a file, the weights a decode step reads but no packed layout covers (the untied
// token embedding, norms, the MoE router) are copies in host memory, not views of the mapping:
// a lookup or a norm never waits on the page cache or the disk. The copies hold the file's
// bytes, and the model computes what the same file loaded from memory (views, nothing given
// back) computes.
TEST(WeightResidency, MappedSmallAndEmbeddingWeightsAreCopiedOutOfTheMapping) {
  test::TempDir dir;
  const std::string path = test::synth_model(dir, "tiny-qwen3moe");
  const Model m = Model::load(path, {});
  const gguf::File& f = m.file();
  const LlamaWeights& w = m.weights();
  ASSERT_NE(f.find_tensor("output.weight"), nullptr) << "tiny-qwen3moe is untied";
  EXPECT_FALSE(in_mapping(f, w.tok_embd.data)) << "token_embd";
  EXPECT_TRUE(same_bytes(f, "token_embd.weight", w.tok_embd.data));
  EXPECT_FALSE(in_mapping(f, w.output_norm.data)) << "output_norm";
  EXPECT_TRUE(same_bytes(f, "output_norm.weight", w.output_norm.data));
  ASSERT_FALSE(w.layers.empty());
  const LlamaLayer& L = w.layers[0];
  EXPECT_FALSE(in_mapping(f, L.attn_norm.data)) << "blk.0.attn_norm";
  ASSERT_NE(L.ffn_gate_inp.data, nullptr);
  EXPECT_FALSE(in_mapping(f, L.ffn_gate_inp.data)) << "blk.0.ffn_gate_inp (router)";
  EXPECT_TRUE(same_bytes(f, "blk.0.ffn_gate_inp.weight", L.ffn_gate_inp.data));

  // The same file as an in-memory image: every weight stays a view of it, same logits.
  std::vector<uint8_t> image(size_t(f.file_size()));
  {
    std::FILE* fp = std::fopen(path.c_str(), "rb");
    ASSERT_NE(fp, nullptr);
    ASSERT_EQ(std::fread(image.data(), 1, image.size(), fp), image.size());
    std::fclose(fp);
  }
  const Model mem = Model::from_file(gguf::File::from_memory(image.data(), image.size()), {});
  EXPECT_TRUE(in_mapping(mem.file(), mem.weights().tok_embd.data));
  EXPECT_TRUE(in_mapping(mem.file(), mem.weights().layers[0].ffn_gate_inp.data));
  ContextParams cp;
  cp.n_ctx = 32;
  cp.n_threads = 2;
  Context a(m, cp), b(mem, cp);
  const int32_t tok[3] = {1, 5, 9};
  const std::span<const float> la = a.eval(std::span<const int32_t>(tok, 3));
  const std::vector<float> va(la.begin(), la.end());
  const std::span<const float> lb = b.eval(std::span<const int32_t>(tok, 3));
  EXPECT_EQ(va, std::vector<float>(lb.begin(), lb.end()));
}

// A tied embedding stays a view of the mapping: its bytes are already in the output head's copy
// (packed, or at a level without packed kernels, such as scalar, the small head's plain copy),
// and a second copy would cost as much memory again.
TEST(WeightResidency, TiedEmbeddingStaysAView) {
  test::TempDir dir;
  const Model m = Model::load(test::synth_model(dir, "tiny-qwen3"), {});
  ASSERT_EQ(m.file().find_tensor("output.weight"), nullptr) << "tiny-qwen3 is tied";
  EXPECT_TRUE(in_mapping(m.file(), m.weights().tok_embd.data));
  EXPECT_FALSE(in_mapping(m.file(), m.weights().output_norm.data));
}

}  // namespace kvrun
