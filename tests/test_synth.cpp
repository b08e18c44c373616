// test_synth.cpp — synthetic models (tools/synth/synth.h, `kvrun synth`): the shapes' parameter
// counts, the tensor plan and llama.cpp's type rules, files of the tiny shapes in every type
// (metadata, tensor shapes/types, real quantization, weight statistics), determinism, the forward
// pass, the vocabulary (minimal and copied). Errors and the CLI: test_synth_errors.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cpu/cpu_level.h"
#include "cpu/cpu_traits.h"
#include "engine/context.h"
#include "engine/model.h"
#include "gguf.h"
#include "models/hparams.h"
#include "models/llama.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "tools/synth/synth.h"
#include "tools/synth/synth_random.h"
#include "tools/synth/synth_vocab.h"

namespace kvrun {
namespace {

namespace fs = std::filesystem;

constexpr SynthFileType kAllTypes[] = {
    SynthFileType::F32,     SynthFileType::F16,    SynthFileType::Q8_0,  SynthFileType::Q4_0,
    SynthFileType::Q4_K,    SynthFileType::Q5_K,   SynthFileType::Q6_K,  SynthFileType::IQ4_XS,
    SynthFileType::MXFP4,   SynthFileType::IQ3_S,  SynthFileType::IQ2_S, SynthFileType::IQ3_XXS,
    SynthFileType::IQ2_XXS, SynthFileType::IQ2_XS, SynthFileType::IQ1_S, SynthFileType::IQ1_M};

const SynthShape& shape(const std::string& name) {
  const SynthShape* s = find_synth_shape(name);
  if (!s) throw std::runtime_error("no shape " + name);
  return *s;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Writes shape `name` in `type` to dir/file and returns the path.
fs::path make(const test::TempDir& dir, const std::string& name, SynthFileType type,
              uint64_t seed = 42, int threads = 2, const std::string& vocab = "") {
  SynthParams p;
  p.shape = &shape(name);
  p.type = type;
  p.seed = seed;
  p.n_threads = threads;
  p.vocab_from = vocab;
  p.out_path = (dir / (name + "-" + synth_file_type_name(type) + "-s" + std::to_string(seed) +
                       "-t" + std::to_string(threads) + ".gguf"))
                   .string();
  write_synth_model(p);
  return p.out_path;
}

/// The stored type of tensor `name` in `plan` (a test failure when absent).
DType plan_type(const std::vector<SynthTensor>& plan, const std::string& name) {
  for (const SynthTensor& t : plan)
    if (t.name == name) return t.type;
  ADD_FAILURE() << "no tensor " << name;
  return DType::F32;
}

int64_t n_elements(const std::vector<int64_t>& ne) {
  return std::accumulate(ne.begin(), ne.end(), int64_t(1), std::multiplies<>());
}

/// The tensor `name` of `f` decoded to float.
std::vector<float> decode(const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  int64_t n = 1;
  for (int d = 0; d < t->n_dims; ++d) n *= t->ne[d];
  std::vector<float> out(static_cast<size_t>(n));
  traits(t->type).to_float(t->data, out.data(), n);
  return out;
}

struct Stats {
  double mean = 0, sd = 0;
};
Stats stats(const std::vector<float>& v) {
  double s = 0, s2 = 0;
  for (float x : v) s += x, s2 += double(x) * x;
  Stats st;
  st.mean = s / double(v.size());
  st.sd = std::sqrt(std::max(0.0, s2 / double(v.size()) - st.mean * st.mean));
  return st;
}

/// Logits of the last token of `tokens` through kvrun's forward pass.
std::vector<float> last_logits(const Model& m, const std::vector<int32_t>& tokens) {
  ContextParams cp;
  cp.n_ctx = 64;
  cp.n_threads = 2;
  Context ctx(m, cp);
  const auto l = ctx.eval(tokens);
  return std::vector<float>(l.begin(), l.end());
}

double correlation(const std::vector<float>& a, const std::vector<float>& b) {
  const Stats sa = stats(a), sb = stats(b);
  double c = 0;
  for (size_t i = 0; i < a.size(); ++i) c += (a[i] - sa.mean) * (b[i] - sb.mean);
  return c / double(a.size()) / (sa.sd * sb.sd);
}

// ---- shapes and the plan ---------------------------------------------------------------------

// Parameter counts published for the real models (the 1.24B / 8.03B / 0.49B / 30.5B / 20.9B of
// the model cards; exact values as transformers counts them; DeepSeek-V2-Lite's 15.7B;
// Moonlight's 15.96B, whose paper's "15.29B total" leaves out the embedding and output matrices:
// 15960110208 − 2 · 163840 · 2048 = 15289021568), from the shapes table alone.
TEST(SynthPlan, ParameterCountsMatchTheRealModels) {
  const std::map<std::string, int64_t> want = {
      {"llama3.2-1b", 1235814400},       {"llama3.1-8b", 8030261248},
      {"qwen2.5-0.5b", 494032768},       {"qwen3-30b-a3b", 30532122624},
      {"gpt-oss-20b", 20914757184},      {"deepseek-v2-lite", 15706484224},
      {"moonlight-16b-a3b", 15960110208}};
  for (const auto& [name, n] : want) {
    int64_t total = 0;
    for (const SynthTensor& t : synth_tensor_plan(shape(name), SynthFileType::F16))
      if (t.name != "rope_freqs.weight") total += n_elements(t.ne);
    EXPECT_EQ(total, n) << name;
  }
}

TEST(SynthPlan, RealShapesHaveTheirPublishedHyperparameters) {
  const SynthShape& l1 = shape("llama3.2-1b");
  EXPECT_EQ(l1.n_layer, 16);
  EXPECT_EQ(l1.n_embd, 2048);
  EXPECT_EQ(l1.n_head, 32);
  EXPECT_EQ(l1.n_head_kv, 8);
  EXPECT_EQ(l1.n_ff, 8192);
  EXPECT_EQ(l1.n_vocab, 128256);
  EXPECT_TRUE(l1.tied);
  const SynthShape& q = shape("qwen2.5-0.5b");
  EXPECT_EQ(q.arch, "qwen2");
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_TRUE(q.tied);
  EXPECT_EQ(q.n_head * q.head_dim, q.n_embd);
  EXPECT_FALSE(shape("llama3.1-8b").tied);
  const SynthShape& m = shape("qwen3-30b-a3b");  // Qwen/Qwen3-30B-A3B config.json
  EXPECT_EQ(m.arch, "qwen3moe");
  EXPECT_EQ(m.n_layer, 48);
  EXPECT_EQ(m.n_embd, 2048);
  EXPECT_EQ(m.n_head * m.head_dim, 4096);
  EXPECT_EQ(m.n_head_kv, 4);
  EXPECT_EQ(m.n_expert, 128);
  EXPECT_EQ(m.n_expert_used, 8);
  EXPECT_EQ(m.n_ff_exp, 768);
  const SynthShape& g = shape("gpt-oss-20b");  // openai/gpt-oss-20b config.json
  EXPECT_EQ(g.arch, "gpt-oss");
  EXPECT_EQ(g.n_layer, 24);
  EXPECT_EQ(g.n_embd, 2880);
  EXPECT_EQ(g.n_head * g.head_dim, 4096);
  EXPECT_EQ(g.n_head_kv, 8);
  EXPECT_EQ(g.n_expert, 32);
  EXPECT_EQ(g.n_expert_used, 4);
  EXPECT_EQ(g.n_ff_exp, 2880);
  EXPECT_EQ(g.sliding_window, 128);
  EXPECT_EQ(g.yarn_factor, 32);
  EXPECT_EQ(g.yarn_n_ctx_orig, 4096);
  const SynthShape& ds = shape("deepseek-v2-lite");  // deepseek-ai/DeepSeek-V2-Lite config.json
  EXPECT_EQ(ds.arch, "deepseek2");
  EXPECT_EQ(ds.n_layer, 27);
  EXPECT_EQ(ds.n_embd, 2048);
  EXPECT_EQ(ds.n_head, 16);
  EXPECT_EQ(ds.kv_lora_rank, 512);
  EXPECT_EQ(ds.q_lora_rank, 0);
  EXPECT_EQ(ds.head_dim - ds.qk_rope, 128);  // qk_nope_head_dim
  EXPECT_EQ(ds.qk_rope, 64);
  EXPECT_EQ(ds.head_dim_v, 128);
  EXPECT_EQ(ds.n_expert, 64);
  EXPECT_EQ(ds.n_expert_used, 6);
  EXPECT_EQ(ds.n_expert_shared, 2);
  EXPECT_EQ(ds.n_ff_exp, 1408);
  EXPECT_EQ(ds.n_dense_lead, 1);
  EXPECT_EQ(ds.yarn_factor, 40);
  EXPECT_FALSE(ds.sigmoid_gating);
  const SynthShape& ml = shape("moonlight-16b-a3b");  // moonshotai/Moonlight-16B-A3B config.json
  EXPECT_EQ(ml.arch, "deepseek2");
  EXPECT_EQ(ml.n_layer, 27);
  EXPECT_EQ(ml.n_ff, 11264);
  EXPECT_EQ(ml.n_vocab, 163840);
  EXPECT_EQ(ml.q_lora_rank, 0);
  EXPECT_EQ(ml.yarn_factor, 0);
  EXPECT_EQ(ml.rope_theta, 50000);
  EXPECT_EQ(ml.n_expert, 64);
  EXPECT_EQ(ml.n_expert_used, 6);
  EXPECT_EQ(ml.n_expert_shared, 2);
  EXPECT_DOUBLE_EQ(ml.expert_weights_scale, 2.446);
  EXPECT_TRUE(ml.sigmoid_gating);
  EXPECT_TRUE(ml.expert_weights_norm);
  EXPECT_EQ(find_synth_shape("llama-9000"), nullptr);
}

// deepseek2's tensors (llama.cpp's names): Q without LoRA for V2-Lite, MLA's compressed KV,
// a dense first FFN, then experts with shared experts; tiny-deepseek2 has Q's LoRA.
TEST(SynthPlan, DeepSeek2HasMlaAndSharedExpertTensors) {
  std::map<std::string, std::vector<int64_t>> ne;
  for (const SynthTensor& t : synth_tensor_plan(shape("deepseek-v2-lite"), SynthFileType::F16))
    ne[t.name] = t.ne;
  EXPECT_EQ(ne["blk.0.attn_q.weight"], (std::vector<int64_t>{2048, 16 * 192}));
  EXPECT_EQ(ne.count("blk.0.attn_q_a.weight"), 0u);
  EXPECT_EQ(ne["blk.0.attn_kv_a_mqa.weight"], (std::vector<int64_t>{2048, 512 + 64}));
  EXPECT_EQ(ne["blk.0.attn_kv_a_norm.weight"], (std::vector<int64_t>{512}));
  EXPECT_EQ(ne["blk.0.attn_kv_b.weight"], (std::vector<int64_t>{512, 16 * (128 + 128)}));
  EXPECT_EQ(ne["blk.0.attn_output.weight"], (std::vector<int64_t>{16 * 128, 2048}));
  EXPECT_EQ(ne["blk.0.ffn_up.weight"], (std::vector<int64_t>{2048, 10944}));
  EXPECT_EQ(ne.count("blk.0.ffn_gate_inp.weight"), 0u);
  EXPECT_EQ(ne["blk.1.ffn_gate_exps.weight"], (std::vector<int64_t>{2048, 1408, 64}));
  EXPECT_EQ(ne["blk.1.ffn_up_shexp.weight"], (std::vector<int64_t>{2048, 2 * 1408}));
  EXPECT_EQ(ne["blk.26.ffn_down_shexp.weight"], (std::vector<int64_t>{2 * 1408, 2048}));
  std::map<std::string, std::vector<int64_t>> tiny;
  for (const SynthTensor& t : synth_tensor_plan(shape("tiny-deepseek2"), SynthFileType::Q8_0))
    tiny[t.name] = t.ne;
  EXPECT_EQ(tiny["blk.0.attn_q_a.weight"], (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(tiny["blk.0.attn_q_b.weight"], (std::vector<int64_t>{64, 4 * 64}));
  EXPECT_EQ(tiny.count("blk.0.attn_q.weight"), 0u);
  EXPECT_EQ(tiny.count("blk.1.exp_probs_b.bias"), 0u);  // softmax gating: no selection bias
  // DeepSeek-V3's router (tiny-deepseek3, Moonlight): an f32 exp_probs_b.bias per MoE layer.
  for (const char* name : {"tiny-deepseek3", "moonlight-16b-a3b"}) {
    SCOPED_TRACE(name);
    const SynthShape& s = shape(name);
    const auto p = synth_tensor_plan(s, SynthFileType::Q8_0);
    int64_t n_bias = 0;
    for (const SynthTensor& t : p) {
      if (!t.name.ends_with(".exp_probs_b.bias")) continue;
      ++n_bias;
      EXPECT_FALSE(t.name.starts_with("blk.0.")) << "the dense layer has no router";
      EXPECT_EQ(t.ne, (std::vector<int64_t>{s.n_expert}));
      EXPECT_EQ(t.type, DType::F32);
    }
    EXPECT_EQ(n_bias, s.n_layer - s.n_dense_lead);
  }
}

// gpt-oss in an MXFP4 file, as released: MXFP4 experts, Q8_0 for every other matrix (the output
// head too), f32 routers, sinks and biases (the per-expert bias rows are 2-D f32).
TEST(SynthPlan, GptOssMxfp4FileHasTheReleasedTypes) {
  for (const char* name : {"gpt-oss-20b", "tiny-gpt-oss"}) {
    SCOPED_TRACE(name);
    const auto p = synth_tensor_plan(shape(name), SynthFileType::MXFP4);
    EXPECT_EQ(plan_type(p, "blk.0.ffn_gate_exps.weight"), DType::MXFP4);
    EXPECT_EQ(plan_type(p, "blk.3.ffn_down_exps.weight"), DType::MXFP4);
    EXPECT_EQ(plan_type(p, "blk.0.attn_q.weight"), DType::Q8_0);
    EXPECT_EQ(plan_type(p, "blk.1.attn_output.weight"), DType::Q8_0);
    EXPECT_EQ(plan_type(p, "output.weight"), DType::Q8_0);
    EXPECT_EQ(plan_type(p, "token_embd.weight"), DType::Q8_0);
    EXPECT_EQ(plan_type(p, "blk.0.ffn_gate_inp.weight"), DType::F32);
    EXPECT_EQ(plan_type(p, "blk.0.attn_sinks.weight"), DType::F32);
    EXPECT_EQ(plan_type(p, "blk.0.ffn_down_exps.bias"), DType::F32);
    EXPECT_EQ(plan_type(p, "blk.0.post_attention_norm.weight"), DType::F32);
  }
  // Other shapes keep MXFP4 for every matrix.
  EXPECT_EQ(plan_type(synth_tensor_plan(shape("tiny-qwen3moe"), SynthFileType::MXFP4),
                      "blk.0.attn_q.weight"),
            DType::MXFP4);
}

TEST(SynthPlan, Llama3RopeFactorsFollowTheConverterRule) {
  const std::vector<float> f = synth_rope_freq_factors(shape("llama3.2-1b"));
  ASSERT_EQ(f.size(), 32u);          // head_dim / 2
  EXPECT_FLOAT_EQ(f.front(), 1.0f);  // highest frequency: unscaled
  EXPECT_FLOAT_EQ(f.back(), 32.0f);  // lowest frequency: the full factor
  EXPECT_TRUE(std::is_sorted(f.begin(), f.end()));
  // Something in between is interpolated (wavelengths between 2048 and 8192 positions).
  EXPECT_TRUE(std::any_of(f.begin(), f.end(), [](float x) { return x > 1.0f && x < 32.0f; }));
  // A pair whose wavelength 2π·θ^(2i/d) lies in (2048, 8192) gets 1/((1−s)/32 + s) with
  // s = (8192/λ − 1)/3.
  for (size_t i = 0; i < f.size(); ++i) {
    const double lambda = 2 * M_PI * std::pow(500000.0, double(2 * i) / 64.0);
    if (lambda > 2048 && lambda < 8192) {
      const double s = (8192 / lambda - 1) / 3;
      EXPECT_NEAR(f[i], 1 / ((1 - s) / 32 + s), 1e-4) << i;
    }
  }
  EXPECT_TRUE(synth_rope_freq_factors(shape("qwen2.5-0.5b")).empty());
}

TEST(SynthPlan, TypesFollowLlamaCppRules) {
  auto type_of = [](const std::vector<SynthTensor>& plan, const std::string& name) {
    for (const SynthTensor& t : plan)
      if (t.name == name) return t.type;
    ADD_FAILURE() << "no tensor " << name;
    return DType::F32;
  };
  // llama3.2-1b (tied): the embedding is the output head.
  auto p = synth_tensor_plan(shape("llama3.2-1b"), SynthFileType::Q4_0);
  EXPECT_EQ(type_of(p, "token_embd.weight"), DType::Q6_K);
  EXPECT_EQ(type_of(p, "blk.0.attn_q.weight"), DType::Q4_0);
  EXPECT_EQ(type_of(p, "blk.15.ffn_down.weight"), DType::Q4_0);
  EXPECT_EQ(type_of(p, "blk.0.attn_norm.weight"), DType::F32);
  EXPECT_EQ(type_of(p, "rope_freqs.weight"), DType::F32);
  p = synth_tensor_plan(shape("llama3.2-1b"), SynthFileType::Q8_0);
  EXPECT_EQ(type_of(p, "token_embd.weight"), DType::Q8_0);
  // Q4_K = llama.cpp's Q4_K_S: attn_v of layers 0-3 and ffn_down of layers < 16/8 in Q5_K.
  p = synth_tensor_plan(shape("llama3.2-1b"), SynthFileType::Q4_K);
  EXPECT_EQ(type_of(p, "token_embd.weight"), DType::Q6_K);
  EXPECT_EQ(type_of(p, "blk.3.attn_v.weight"), DType::Q5_K);
  EXPECT_EQ(type_of(p, "blk.4.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(type_of(p, "blk.1.ffn_down.weight"), DType::Q5_K);
  EXPECT_EQ(type_of(p, "blk.2.ffn_down.weight"), DType::Q4_K);
  EXPECT_EQ(type_of(p, "blk.2.ffn_up.weight"), DType::Q4_K);
  for (const SynthTensor& t : p) EXPECT_EQ(t.type, t.wanted) << t.name;  // no fallback needed
  // llama3.1-8b (untied): token_embd keeps the file type, output is Q6_K.
  p = synth_tensor_plan(shape("llama3.1-8b"), SynthFileType::Q4_0);
  EXPECT_EQ(type_of(p, "token_embd.weight"), DType::Q4_0);
  EXPECT_EQ(type_of(p, "output.weight"), DType::Q6_K);
  // qwen2.5-0.5b: rows of 896 cannot hold 256-blocks → llama.cpp's fallbacks.
  p = synth_tensor_plan(shape("qwen2.5-0.5b"), SynthFileType::Q4_K);
  EXPECT_EQ(type_of(p, "blk.5.attn_q.weight"), DType::Q5_0);    // Q4_K → Q5_0
  EXPECT_EQ(type_of(p, "blk.0.attn_v.weight"), DType::Q5_1);    // Q5_K → Q5_1
  EXPECT_EQ(type_of(p, "token_embd.weight"), DType::Q8_0);      // Q6_K → Q8_0
  EXPECT_EQ(type_of(p, "blk.5.ffn_down.weight"), DType::Q4_K);  // rows of 4864 = 19·256
  EXPECT_EQ(type_of(p, "blk.5.attn_q.bias"), DType::F32);
  p = synth_tensor_plan(shape("qwen2.5-0.5b"), SynthFileType::Q6_K);
  EXPECT_EQ(type_of(p, "blk.5.attn_q.weight"), DType::Q8_0);
  EXPECT_EQ(type_of(p, "blk.5.ffn_down.weight"), DType::Q6_K);
  // IQ4_XS: rows of 128 (tiny's n_embd) cannot hold 256-blocks → IQ4_NL, llama.cpp's fallback.
  p = synth_tensor_plan(shape("tiny"), SynthFileType::IQ4_XS);
  EXPECT_EQ(type_of(p, "blk.0.attn_q.weight"), DType::IQ4_NL);
  EXPECT_EQ(type_of(p, "blk.1.ffn_down.weight"), DType::IQ4_XS);  // rows of n_ff = 256
  EXPECT_EQ(type_of(p, "output.weight"), DType::Q8_0);
  p = synth_tensor_plan(shape("tiny"), SynthFileType::Q5_K);  // rows of 128: Q5_K → Q5_1
  EXPECT_EQ(type_of(p, "blk.1.ffn_down.weight"), DType::Q5_K);
  EXPECT_EQ(type_of(p, "blk.0.attn_q.weight"), DType::Q5_1);
  p = synth_tensor_plan(shape("llama3.2-1b"), SynthFileType::Q5_K);
  EXPECT_EQ(type_of(p, "blk.3.attn_v.weight"), DType::Q5_K);
  EXPECT_EQ(type_of(p, "token_embd.weight"), DType::Q6_K);  // tied: the output head
  p = synth_tensor_plan(shape("tiny"), SynthFileType::MXFP4);
  EXPECT_EQ(type_of(p, "blk.0.attn_q.weight"), DType::MXFP4);
  EXPECT_EQ(type_of(p, "blk.1.ffn_down.weight"), DType::MXFP4);
  p = synth_tensor_plan(shape("qwen2.5-0.5b"), SynthFileType::F16);
  for (const SynthTensor& t : p) EXPECT_EQ(t.type, t.ne.size() == 1 ? DType::F32 : DType::F16);
}

TEST(SynthPlan, FileTypeNames) {
  for (SynthFileType t : kAllTypes) {
    const std::string n = synth_file_type_name(t);
    EXPECT_EQ(synth_file_type_from_name(n), t);
    std::string lower = n;
    for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_EQ(synth_file_type_from_name(lower), t);
  }
  EXPECT_FALSE(synth_file_type_from_name("Q4_K_M"));
  EXPECT_FALSE(synth_file_type_from_name("q5_0"));
  EXPECT_EQ(synth_llama_ftype(SynthFileType::Q4_0), 2u);
  EXPECT_EQ(synth_llama_ftype(SynthFileType::Q4_K), 14u);     // MOSTLY_Q4_K_S
  EXPECT_EQ(synth_llama_ftype(SynthFileType::Q5_K), 16u);     // MOSTLY_Q5_K_S
  EXPECT_EQ(synth_llama_ftype(SynthFileType::IQ4_XS), 30u);   // MOSTLY_IQ4_XS
  EXPECT_EQ(synth_llama_ftype(SynthFileType::MXFP4), 38u);    // MOSTLY_MXFP4
  EXPECT_EQ(synth_llama_ftype(SynthFileType::IQ3_S), 26u);    // MOSTLY_IQ3_S
  EXPECT_EQ(synth_llama_ftype(SynthFileType::IQ2_S), 28u);    // MOSTLY_IQ2_S
  EXPECT_EQ(synth_llama_ftype(SynthFileType::IQ3_XXS), 23u);  // MOSTLY_IQ3_XXS
  EXPECT_EQ(synth_llama_ftype(SynthFileType::IQ2_XXS), 19u);  // MOSTLY_IQ2_XXS
  EXPECT_EQ(synth_llama_ftype(SynthFileType::IQ2_XS), 20u);   // MOSTLY_IQ2_XS
  EXPECT_EQ(synth_llama_ftype(SynthFileType::IQ1_S), 24u);    // MOSTLY_IQ1_S
  EXPECT_EQ(synth_llama_ftype(SynthFileType::IQ1_M), 31u);    // MOSTLY_IQ1_M
}

TEST(SynthRandom, IsCounterBasedAndRoughlyStandardNormal) {
  const uint64_t k = synth_random::tensor_key(7, "blk.0.attn_q.weight");
  EXPECT_NE(k, synth_random::tensor_key(8, "blk.0.attn_q.weight"));
  EXPECT_NE(k, synth_random::tensor_key(7, "blk.1.attn_q.weight"));
  std::vector<float> v(200000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = synth_random::normal(k, i);
  const Stats s = stats(v);
  EXPECT_NEAR(s.mean, 0.0, 0.01);
  EXPECT_NEAR(s.sd, 1.0, 0.01);
  EXPECT_EQ(synth_random::normal(k, 12345), v[12345]);  // any index, any order
  const auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  EXPECT_LT(*mn, -3.0f);
  EXPECT_GT(*mx, 3.0f);
  EXPECT_GE(*mn, -3.47f);
  EXPECT_LE(*mx, 3.47f);
}

// ---- files of the tiny shapes ----------------------------------------------------------------

class SynthTinyTypes : public ::testing::TestWithParam<SynthFileType> {};

TEST_P(SynthTinyTypes, WritesLoadsAndRuns) {
  const SynthFileType type = GetParam();
  test::TempDir dir;
  const fs::path path = make(dir, "tiny", type);
  const SynthShape& s = shape("tiny");

  const gguf::File f = gguf::File::open(path.string());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("general.file_type"), int64_t(synth_llama_ftype(type)));
  EXPECT_EQ(f.get_int("llama.block_count"), s.n_layer);
  EXPECT_EQ(f.get_int("llama.embedding_length"), s.n_embd);
  EXPECT_EQ(f.get_int("llama.feed_forward_length"), s.n_ff);
  EXPECT_EQ(f.get_int("llama.attention.head_count"), s.n_head);
  EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), s.n_head_kv);
  EXPECT_EQ(f.get_int("llama.context_length"), s.n_ctx_train);
  EXPECT_FLOAT_EQ(float(*f.get_float("llama.rope.freq_base")), float(s.rope_theta));
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens")->size(), size_t(s.n_vocab));
  EXPECT_EQ(f.get_int("kvrun.synth.seed"), 42);

  const std::vector<SynthTensor> plan = synth_tensor_plan(s, type);
  ASSERT_EQ(f.tensors().size(), plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    const gguf::TensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, plan[i].name);
    EXPECT_EQ(t.type, plan[i].type) << t.name;
    ASSERT_EQ(size_t(t.n_dims), plan[i].ne.size()) << t.name;
    for (int d = 0; d < t.n_dims; ++d) EXPECT_EQ(t.ne[d], plan[i].ne[size_t(d)]) << t.name;
    if (t.n_dims == 1) {
      EXPECT_EQ(t.type, DType::F32) << t.name;
    }
  }
  const uint64_t size = fs::file_size(path);
  EXPECT_EQ(f.file_size(), size);

  // kvrun's loader accepts it, and the forward pass gives finite, spread-out logits.
  const Model m = Model::load(path.string());
  EXPECT_EQ(m.hparams().n_vocab, s.n_vocab);
  EXPECT_TRUE(m.hparams().rope.has_freq_factors);
  const Tokenizer tok = Tokenizer::from_gguf(m.file());
  const std::vector<int32_t> prompt = tok.tokenize("Hello, synthetic world!", true, false);
  ASSERT_GT(prompt.size(), 5u);
  const std::vector<float> logits = last_logits(m, prompt);
  ASSERT_EQ(logits.size(), size_t(s.n_vocab));
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  const Stats st = stats(logits);
  EXPECT_GT(st.sd, 0.3) << "logits nearly constant";
  EXPECT_LT(st.sd, 10.0) << "logits exploding";
  // Different inputs give different distributions (the model is not input-independent).
  const std::vector<float> other = last_logits(m, tok.tokenize("0123 xyz", true, false));
  EXPECT_LT(correlation(logits, other), 0.99);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, SynthTinyTypes, ::testing::ValuesIn(kAllTypes),
                         [](const auto& info) { return synth_file_type_name(info.param); });

TEST(SynthFile, WeightsHaveTheDocumentedScale) {
  test::TempDir dir;
  const gguf::File f = gguf::File::open(make(dir, "tiny", SynthFileType::F32).string());
  const Stats q = stats(decode(f, "blk.0.attn_q.weight"));  // rows of n_embd = 128
  EXPECT_NEAR(q.mean, 0.0, 0.005);
  EXPECT_NEAR(q.sd, 1.0 / std::sqrt(128.0), 0.03 / std::sqrt(128.0));
  const Stats down = stats(decode(f, "blk.1.ffn_down.weight"));  // rows of n_ff = 256
  EXPECT_NEAR(down.sd, 1.0 / 16.0, 0.003);
  const Stats norm = stats(decode(f, "blk.0.ffn_norm.weight"));
  EXPECT_NEAR(norm.mean, 1.0, 0.05);
  EXPECT_NEAR(norm.sd, 0.1, 0.03);
  const std::vector<float> rf = decode(f, "rope_freqs.weight");
  const std::vector<float> want = synth_rope_freq_factors(shape("tiny"));
  EXPECT_EQ(rf, want);
}

// The grid i-quant files (no kvrun quantizer) hold random valid blocks whose RMS is about the
// tensor's sd (synth.h); rows of 128 (tiny's n_embd) fall back to IQ4_NL, llama.cpp's rule.
TEST(SynthFile, GridIquantsAreRandomBlocksOfTheTensorsScale) {
  test::TempDir dir;
  const std::pair<SynthFileType, DType> kGrid[] = {
      {SynthFileType::IQ3_S, DType::IQ3_S},     {SynthFileType::IQ2_S, DType::IQ2_S},
      {SynthFileType::IQ3_XXS, DType::IQ3_XXS}, {SynthFileType::IQ2_XXS, DType::IQ2_XXS},
      {SynthFileType::IQ2_XS, DType::IQ2_XS},   {SynthFileType::IQ1_S, DType::IQ1_S},
      {SynthFileType::IQ1_M, DType::IQ1_M}};
  for (const auto& [type, dtype] : kGrid) {
    const gguf::File f = gguf::File::open(make(dir, "tiny", type).string());
    const gguf::TensorInfo* down = nullptr;
    for (const gguf::TensorInfo& t : f.tensors())
      if (t.name == "blk.1.ffn_down.weight") down = &t;
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->type, dtype);
    const Stats st = stats(decode(f, "blk.1.ffn_down.weight"));  // sd 1/16 wanted
    EXPECT_NEAR(st.mean, 0.0, 0.005) << synth_file_type_name(type);
    EXPECT_NEAR(st.sd, 1.0 / 16.0, 0.15 / 16.0) << synth_file_type_name(type);
  }
}

// The quantized files hold real quantizations of the same random values as the F32 file.
TEST(SynthFile, QuantizedWeightsAreQuantizationsOfTheSameValues) {
  test::TempDir dir;
  const gguf::File ref = gguf::File::open(make(dir, "tiny", SynthFileType::F32).string());
  const std::map<SynthFileType, double> max_rel_rms = {
      {SynthFileType::F16, 0.001}, {SynthFileType::Q8_0, 0.01},   {SynthFileType::Q6_K, 0.05},
      {SynthFileType::Q4_K, 0.15}, {SynthFileType::IQ4_XS, 0.15}, {SynthFileType::MXFP4, 0.2},
      {SynthFileType::Q4_0, 0.15}, {SynthFileType::Q5_K, 0.1}};
  for (const auto& [type, tol] : max_rel_rms) {
    const gguf::File f = gguf::File::open(make(dir, "tiny", type).string());
    for (const std::string name : {"blk.1.ffn_down.weight", "blk.0.attn_k.weight"}) {
      const std::vector<float> a = decode(ref, name), b = decode(f, name);
      ASSERT_EQ(a.size(), b.size());
      double err = 0, sig = 0;
      for (size_t i = 0; i < a.size(); ++i)
        err += (a[i] - b[i]) * (a[i] - b[i]), sig += a[i] * a[i];
      const double rel = std::sqrt(err / sig);
      EXPECT_LT(rel, tol) << synth_file_type_name(type) << " " << name;
      if (type != SynthFileType::F16) {
        EXPECT_GT(rel, 1e-4) << "not quantized?";
      }
    }
  }
}

TEST(SynthFile, QuantizedLogitsTrackTheF32Model) {
  test::TempDir dir;
  const Model ref = Model::load(make(dir, "tiny", SynthFileType::F32).string());
  const Tokenizer tok = Tokenizer::from_gguf(ref.file());
  const std::vector<int32_t> prompt = tok.tokenize("The quick brown fox", true, false);
  const std::vector<float> lref = last_logits(ref, prompt);
  for (SynthFileType type : {SynthFileType::Q8_0, SynthFileType::Q4_0}) {
    const Model m = Model::load(make(dir, "tiny", type).string());
    const double c = correlation(lref, last_logits(m, prompt));
    EXPECT_GT(c, type == SynthFileType::Q8_0 ? 0.99 : 0.8) << synth_file_type_name(type);
  }
}

// The 4-bit non-linear types: the logits' error against the F32 model, as a normalized MSE
// (Σ (l − l_ref)² / Σ (l_ref − mean)²), against Q4_0's (measured: Q4_0 0.12, IQ4_XS 0.11,
// MXFP4 0.35). IQ4_XS has iq4_nl's levels at 4.25 bits (weight rel. RMSE 0.075 vs Q4_0's 0.088):
// at most 1.5× Q4_0. MXFP4's power-of-two scales are coarser (weight rel. RMSE 0.11, and
// token_embd is MXFP4 too, so the error enters at the input as well): at most 4× Q4_0. Both
// under 0.5 outright.
TEST(SynthFile, IqLogitsTrackTheF32Model) {
  test::TempDir dir;
  const Model ref = Model::load(make(dir, "tiny", SynthFileType::F32).string());
  const Tokenizer tok = Tokenizer::from_gguf(ref.file());
  const std::vector<int32_t> prompt = tok.tokenize("The quick brown fox", true, false);
  const std::vector<float> lref = last_logits(ref, prompt);
  const Stats st = stats(lref);
  auto nmse = [&](SynthFileType type) {
    const std::vector<float> l = last_logits(Model::load(make(dir, "tiny", type).string()), prompt);
    double e = 0;
    for (size_t i = 0; i < l.size(); ++i) e += (double(l[i]) - lref[i]) * (double(l[i]) - lref[i]);
    return e / (double(lref.size()) * st.sd * st.sd);
  };
  const double q4_0 = nmse(SynthFileType::Q4_0);
  for (SynthFileType type : {SynthFileType::IQ4_XS, SynthFileType::MXFP4}) {
    const double v = nmse(type);
    std::cout << "[ metric ] logits NMSE vs F32: " << synth_file_type_name(type) << " " << v
              << " (Q4_0 " << q4_0 << ")\n";
    EXPECT_GT(v, 0.0) << "not quantized?";
    EXPECT_LT(v, 0.5) << synth_file_type_name(type);
    EXPECT_LT(v, (type == SynthFileType::IQ4_XS ? 1.5 : 4.0) * q4_0) << synth_file_type_name(type);
  }
}

TEST(SynthFile, SameSeedSameBytesAnyThreadCountOtherSeedDiffers) {
  test::TempDir dir;
  const std::string a = read_bytes(make(dir, "tiny", SynthFileType::Q4_K, 42, 1));
  const std::string b = read_bytes(make(dir, "tiny", SynthFileType::Q4_K, 42, 2));
  const std::string c = read_bytes(make(dir, "tiny", SynthFileType::Q4_K, 43, 2));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "same seed, different thread count → different bytes";
  ASSERT_EQ(a.size(), c.size());
  EXPECT_FALSE(a == c);
  // Not only the seed key differs: most of the weight bytes do.
  size_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += a[i] != c[i];
  EXPECT_GT(diff, a.size() / 2);
}

TEST(SynthFile, Qwen2TinyHasBiasesTiedEmbeddingsAndLoadsAsLlamaFamilyWeights) {
  test::TempDir dir;
  const gguf::File f = gguf::File::open(make(dir, "tiny-qwen2", SynthFileType::Q8_0).string());
  EXPECT_EQ(f.get_string("general.architecture"), "qwen2");
  EXPECT_EQ(f.get_int("qwen2.block_count"), 2);
  EXPECT_NEAR(*f.get_float("qwen2.attention.layer_norm_rms_epsilon"), 1e-6, 1e-9);
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("rope_freqs.weight"), nullptr);
  ASSERT_NE(f.find_tensor("blk.1.attn_k.bias"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.1.attn_k.bias")->type, DType::F32);
  // kvrun's weight loader accepts every tensor, with the qwen2 spec (NeoX RoPE).
  Hparams hp = load_hparams(f);
  EXPECT_EQ(hp.arch, "qwen2");
  EXPECT_NEAR(hp.rms_eps, 1e-6, 1e-9);
  const ArchSpec spec = configure_arch(f, hp);
  EXPECT_TRUE(spec.rope_neox);
  const LlamaWeights w = load_llama_weights(f, hp, spec);
  EXPECT_NE(w.layers[1].bq.data, nullptr);
  EXPECT_EQ(w.output.data, w.tok_embd.data);  // tied
}

/// The greedy tokens and logprobs of the kvrun binary on `path` at KVRUN_CPU=`level` equal
/// those at KVRUN_CPU=scalar, exactly (every level is bit-identical; scalar packs nothing).
void expect_binary_level_equals_scalar(const fs::path& path, const std::string& level) {
  const std::string cmd = test::shell_quote(test::kvrun_binary()) + " -m " +
                          test::shell_quote(path.string()) +
                          " -p 'Hello there' -n 12 --temp 0 --ignore-eos --n-probs 3 --json -t 2";
  const auto simd = test::run_command(level.empty() ? cmd : "KVRUN_CPU=" + level + " " + cmd);
  const auto scalar = test::run_command("KVRUN_CPU=scalar " + cmd);
  ASSERT_EQ(simd.exit_code, 0) << simd.err;
  ASSERT_EQ(scalar.exit_code, 0) << scalar.err;
  nlohmann::json a_out = nlohmann::json::parse(simd.out), b_out = nlohmann::json::parse(scalar.out);
  ASSERT_EQ(a_out["tokens"].size(), 12u);
  EXPECT_EQ(a_out["tokens"], b_out["tokens"]);
  EXPECT_EQ(a_out["probs"], b_out["probs"]);  // the logprobs' doubles, exactly
}

/// The files PackedWeights* test: Q4_0, Q8_0 and Q5_K (tiny's ffn_down, rows of 256, is Q5_K;
/// the 128-wide matrices fall back to Q5_1), and a tied embedding (tiny-qwen2: output is
/// token_embd, whose rows the embedding lookup reads again after its pages were given back).
constexpr std::pair<const char*, SynthFileType> kPackedFiles[] = {
    {"tiny", SynthFileType::Q4_0},
    {"tiny", SynthFileType::Q8_0},
    {"tiny", SynthFileType::Q5_K},
    {"tiny-qwen2", SynthFileType::Q8_0}};

// Packing at load (cpu/pack.h) changes no output: a model loaded from its file (packed, mapped
// pages given back) and from an in-memory image (packed, memory kept) give bit-identical logits,
// and the binary gives the same greedy tokens and logprobs at the process's level (KVRUN_CPU or
// the CPU's best) as with KVRUN_CPU=scalar. A weight is packed exactly when the process's level
// has a packed kernel for its type (cpu_traits(t)->packed_tile; pack.h lists them per level), so
// the test holds on an AVX2-only CPU, an AVX-512 one and under KVRUN_CPU=scalar alike.
TEST(SynthFile, PackedWeightsChangeNoOutput) {
  test::TempDir dir;
  const char* lv = cpu::cpu_level_name(cpu::cpu_level());
  for (const auto& [name, type] : kPackedFiles) {
    SCOPED_TRACE(std::string(name) + " " + synth_file_type_name(type) + " at " + lv);
    const fs::path path = make(dir, name, type);
    const Model m = Model::load(path.string());
    const Tensor& down = m.weights().layers[0].ffn_down;
    const cpu::CpuTypeTraits* ct = cpu::cpu_traits(down.type);
    ASSERT_NE(ct, nullptr);
    EXPECT_EQ(down.packed != nullptr, ct->packed_tile != nullptr)
        << (ct->packed_tile ? "not packed although " : "packed although no ") << "packed "
        << traits(down.type).name << " kernel at " << lv;
    std::ifstream in(path, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    const Model mem = Model::from_file(gguf::File::from_memory(bytes.data(), bytes.size()));
    const Tokenizer tok = Tokenizer::from_gguf(m.file());
    const std::vector<int32_t> prompt = tok.tokenize("Packed rows, same floats.", true, false);
    const std::vector<float> a = last_logits(m, prompt), b = last_logits(mem, prompt);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    expect_binary_level_equals_scalar(path, "");
  }
}

// The binary at each SIMD level (KVRUN_CPU=avx2, avx512: weights packed where that level has a
// packed kernel) gives the greedy tokens and logprobs of KVRUN_CPU=scalar, exactly. A level this
// CPU lacks is skipped by name.
class SynthFileLevel : public ::testing::TestWithParam<cpu::CpuLevel> {};

TEST_P(SynthFileLevel, PackedWeightsGiveScalarTokens) {
  const cpu::CpuLevel level = GetParam();
  const std::string lv = cpu::cpu_level_name(level);
  if (!cpu::cpu_level_supported(level)) GTEST_SKIP() << lv << ": this CPU or build lacks it";
  test::TempDir dir;
  for (const auto& [name, type] : kPackedFiles) {
    SCOPED_TRACE(std::string(name) + " " + synth_file_type_name(type) + " at " + lv);
    expect_binary_level_equals_scalar(make(dir, name, type), lv);
  }
}

INSTANTIATE_TEST_SUITE_P(SimdLevels, SynthFileLevel,
                         ::testing::Values(cpu::CpuLevel::avx2, cpu::CpuLevel::avx512,
                                           cpu::CpuLevel::neon),
                         [](const auto& info) { return cpu::cpu_level_name(info.param); });

// `--kernels fast` end to end (docs/architecture.md, "Summation order"): on files whose prefill
// runs the fast kernels (packed q8_0, q5_K, q6_K; tiny-gpt-oss's mxfp4 experts and q8_0
// attention; tiny-qwen3moe's q4_K), every SIMD level this CPU has gives the same tokens and
// logprobs bit for bit (each level's fast kernels equal the scalar fast_dot_*), the first token's
// top logprobs stay near the exact order's (a kernel with a wrong offset or scale moves them by
// far more), and at least one file differs from the exact order (the switch reaches the model).
TEST(SynthFile, FastOrderAgreesAcrossLevelsAndStaysNearExact) {
  test::TempDir dir;
  std::string prompt;
  for (int i = 0; i < 8; ++i) prompt += "Hello there, a longer prompt for the prefill. ";
  const auto run = [&](const fs::path& path, const std::string& env, const char* order) {
    const auto r = test::run_command(
        env + " " + test::shell_quote(test::kvrun_binary()) + " -m " +
        test::shell_quote(path.string()) + " -p " + test::shell_quote(prompt) +
        " -n 4 --temp 0 --ignore-eos --n-probs 3 --json -t 2" + " --kernels " + order);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
  };
  std::vector<std::string> levels;
  for (cpu::CpuLevel l : {cpu::CpuLevel::avx2, cpu::CpuLevel::avx512})
    if (cpu::cpu_level_supported(l)) levels.push_back(cpu::cpu_level_name(l));
  if (levels.empty()) GTEST_SKIP() << "no SIMD level with fast kernels on this CPU or build";
  const std::pair<const char*, SynthFileType> files[] = {{"tiny", SynthFileType::Q8_0},
                                                         {"tiny", SynthFileType::Q5_K},
                                                         {"tiny", SynthFileType::Q6_K},
                                                         {"tiny-gpt-oss", SynthFileType::MXFP4},
                                                         {"tiny-qwen3moe", SynthFileType::Q4_K}};
  int differ = 0;
  for (const auto& [name, type] : files) {
    SCOPED_TRACE(std::string(name) + " " + synth_file_type_name(type));
    const fs::path path = make(dir, name, type);
    const nlohmann::json exact = run(path, "KVRUN_CPU=" + levels[0], "exact");
    const nlohmann::json fast = run(path, "KVRUN_CPU=" + levels[0], "fast");
    ASSERT_FALSE(exact.is_null() || fast.is_null());
    for (size_t i = 1; i < levels.size(); ++i) {
      const nlohmann::json other = run(path, "KVRUN_CPU=" + levels[i], "fast");
      EXPECT_EQ(other["tokens"], fast["tokens"]) << levels[i] << " vs " << levels[0];
      EXPECT_EQ(other["probs"], fast["probs"]) << levels[i] << " vs " << levels[0];
    }
    const nlohmann::json& e0 = exact["probs"][0];
    const nlohmann::json& f0 = fast["probs"][0];
    ASSERT_EQ(e0.size(), 3u);
    ASSERT_EQ(f0.size(), 3u);
    EXPECT_NEAR(f0[0]["logprob"].get<double>(), e0[0]["logprob"].get<double>(), 0.05);
    differ += fast["probs"] != exact["probs"];
  }
  EXPECT_GT(differ, 0) << "--kernels fast changed no output";
}

// ---- vocabulary -----------------------------------------------------------------------------

TEST(SynthVocab, MinimalVocabTokenizesAnyTextAndRoundTrips) {
  test::TempDir dir;
  const gguf::File f = gguf::File::open(make(dir, "tiny", SynthFileType::F32).string());
  const Tokenizer tok = Tokenizer::from_gguf(f);
  EXPECT_EQ(tok.n_vocab(), 512);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eos(), 2);
  const std::string text = "Hello world, caf\xC3\xA9 {42}!";
  const std::vector<int32_t> ids = tok.tokenize(text, false, false);
  EXPECT_EQ(tok.detokenize(ids, false), text);
  // ASCII characters are single tokens; é falls back to its two bytes.
  EXPECT_EQ(ids.size(), text.size() + 1 /* the SPM space prefix */);
}

TEST(SynthVocab, VocabFromCopiesTheTokenizer) {
  const std::string rel = "models/stories260K-F32.gguf";  // 512 tokens, like the tiny shape
  KVRUN_REQUIRE_FIXTURE(rel);
  test::TempDir dir;
  const fs::path path = make(dir, "tiny", SynthFileType::Q8_0, 42, 2, test::fixture(rel).string());
  const gguf::File src = gguf::File::open(test::fixture(rel).string());
  const gguf::File f = gguf::File::open(path.string());
  size_t n_keys = 0;
  for (const gguf::KeyValue& kv : src.metadata()) {
    if (!kv.key.starts_with("tokenizer.")) continue;
    ++n_keys;
    EXPECT_NE(f.find(kv.key), nullptr) << kv.key;
  }
  EXPECT_GE(n_keys, 5u);
  EXPECT_EQ(*f.get_string_array("tokenizer.ggml.tokens"),
            *src.get_string_array("tokenizer.ggml.tokens"));
  EXPECT_EQ(*f.get_float_array("tokenizer.ggml.scores"),
            *src.get_float_array("tokenizer.ggml.scores"));
  const Tokenizer a = Tokenizer::from_gguf(src), b = Tokenizer::from_gguf(f);
  for (const char* text : {"Once upon a time, there was a little dog.", "Tom and Lily!"})
    EXPECT_EQ(a.tokenize(text, true, false), b.tokenize(text, true, false)) << text;
  // The result still loads and runs.
  const Model m = Model::load(path.string());
  for (float x : last_logits(m, b.tokenize("Once upon a time", true, false)))
    ASSERT_TRUE(std::isfinite(x));
}

}  // namespace
}  // namespace kvrun
