// test_moe_model.cpp — the qwen3moe forward pass end to end against a plain double-precision
// reference written from the architecture's definition (Qwen3 technical report; the MoE block as
// models/moe.cpp documents it), on kvrun synth's tiny-qwen3moe F32 file: per token, RMSNorm,
// Q/K/V, per-head Q/K RMSNorm, NeoX RoPE, causal GQA softmax attention, output projection,
// residual; RMSNorm, router softmax, top-k experts with renormalized weights, SwiGLU experts,
// residual; output norm and head. Files F32 and Q8_0 (the reference decodes the weights and
// rounds each matmul input to q8_0 as llama.cpp's CPU mul_mat does). kvrun runs with an f32 KV
// cache and the exact attention scheme, so the only differences are f32 rounding: logprobs of every
// prompt position and of the greedy steps agree within 1e-4 and the greedy tokens are equal.
// Prefill runs in chunks of 5 tokens (several rows per expert per step), decode one token per step.
// Bad expert keys are ModelErrors naming the key, and deepseek2's router keys pick its gating.
// The same reference in its gpt-oss mode (OpenAI's gpt-oss model card; models/gptoss.cpp) checks
// tiny-gpt-oss's F32 and MXFP4 files (MXFP4 experts and Q8_0 elsewhere, both paired with q8_0
// activations): Q/K/V and output biases, NeoX RoPE with YaRN (ggml's rope_yarn: the ramp between
// corr_dims of beta_fast and beta_slow, mscale 1 + 0.1 ln(factor)), the window on even layers, a
// sink logit per head in the softmax denominator, router bias, the top-k logits then a softmax
// over them, expert biases and the clamped SwiGLU — over a 40-token prompt that runs past the
// window of 32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "cpu/cpu_traits.h"
#include "engine/context.h"
#include "engine/model.h"
#include "gguf.h"
#include "model_ref_check.h"
#include "models/arch.h"
#include "synth_util.h"
#include "test_util.h"

namespace kvrun {
namespace {

using Vec = std::vector<double>;

/// A double-precision qwen3moe over the F32 tensors of a GGUF file, with its own KV cache.
/// A double-precision qwen3moe or gpt-oss over the tensors of a GGUF file (decoded; matmul inputs
/// rounded to the activation type a quantized weight pairs with), with its own KV cache.
class RefQwen3Moe {
 public:
  explicit RefQwen3Moe(const gguf::File& f) : f_(f) {
    const std::string a = std::string(*f.get_string("general.architecture")) + ".";
    oss_ = a == "gpt-oss.";
    auto key = [&](const std::string& k) { return *f.get_int(a + k); };
    nl_ = key("block_count"), d_ = key("embedding_length"), nh_ = key("attention.head_count");
    nhk_ = key("attention.head_count_kv"), hd_ = key("attention.key_length");
    ne_ = key("expert_count"), nu_ = key("expert_used_count");
    eps_ = *f.get_float(a + "attention.layer_norm_rms_epsilon");
    base_ = *f.get_float(a + "rope.freq_base");
    if (oss_) {
      window_ = key("attention.sliding_window");
      yarn_factor_ = *f.get_float(a + "rope.scaling.factor");
      yarn_orig_ = key("rope.scaling.original_context_length");
    }
    k_.resize(size_t(nl_)), v_.resize(size_t(nl_));
  }

  /// Logits after token `tok` at the next position.
  Vec step(int32_t tok) {
    std::vector<float> e(static_cast<size_t>(d_));
    f_.view(*f_.find_tensor("token_embd.weight")).row_to_float(e.data(), tok);
    Vec x(e.begin(), e.end());
    for (int64_t l = 0; l < nl_; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      test::add_to(x, attention(l, p, rms(x, w(p + "attn_norm.weight"))));
      test::add_to(
          x, moe(p, rms(x, w(p + (oss_ ? "post_attention_norm.weight" : "ffn_norm.weight")))));
    }
    ++pos_;
    return mv("output.weight", rms(x, w("output_norm.weight")));
  }

 private:
  const float* w(const std::string& name) const {
    return static_cast<const float*>(f_.find_tensor(name)->data);
  }
  /// Row-major matrix `name` (expert e of a 3-D one) times x.
  /// Row-major matrix `name` (expert e of a 3-D one) times x. A q8_0 matrix is decoded with its
  /// reference codec and multiplies x rounded to q8_0 by the activation quantizer llama.cpp's
  /// CPU mul_mat uses (cpu_traits' act_from_float: quantize_row_q8_0, scale from 127 / amax; the
  /// reference codec's amax / 127 rounds a few values the other way, and the router turns
  /// that into ~1e-2 of logprob).
  Vec mv(const std::string& name, const Vec& x, int64_t e = 0) const {
    const gguf::TensorInfo& info = *f_.find_tensor(name);
    const Tensor t = f_.view(info);
    const int64_t k = t.ne[0];
    std::vector<float> xf(x.begin(), x.end()), row(static_cast<size_t>(k));
    if (t.type != DType::F32) {  // q8_0 and mxfp4 weights: x rounded to q8_0
      const cpu::CpuTypeTraits* ct = cpu::cpu_traits(t.type);
      std::vector<uint8_t> q(size_t(*row_bytes(ct->act_type, k)));
      ct->act_from_float(xf.data(), q.data(), k);
      traits(ct->act_type).to_float(q.data(), xf.data(), k);
    }
    Vec y(size_t(t.ne[1]), 0.0);
    for (int64_t j = 0; j < t.ne[1]; ++j) {
      t.row_to_float(row.data(), j, e);
      for (int64_t c = 0; c < k; ++c)
        y[size_t(j)] += double(row[size_t(c)]) * double(xf[size_t(c)]);
    }
    // gpt-oss: the bias of `name` (row e of an expert bias), when the file has one.
    const std::string bias = name.substr(0, name.size() - 6) + "bias";
    if (oss_ && f_.find_tensor(bias)) {
      const float* b = w(bias) + e * t.ne[1];
      for (int64_t j = 0; j < t.ne[1]; ++j) y[size_t(j)] += double(b[j]);
    }
    return y;
  }
  /// RoPE angle of pair i at the current position, and the cos/sin factor: plain, or gpt-oss's
  /// YaRN as ggml's rope_yarn (ext_factor 1, beta_fast 32, beta_slow 1).
  std::pair<double, double> angle(int64_t i) const {
    const double th = double(pos_) * std::pow(double(base_), -2.0 * double(i) / double(hd_));
    if (!oss_) return {th, 1.0};
    auto corr = [&](double beta) {
      return double(hd_) * std::log(double(yarn_orig_) / (beta * 2 * M_PI)) /
             (2 * std::log(double(base_)));
    };
    const double lo = std::max(0.0, std::floor(corr(32.0)));
    const double hi = std::min(double(hd_ - 1), std::ceil(corr(1.0)));
    const double y = (double(i) - lo) / std::max(0.001, hi - lo);
    const double mix = 1 - std::min(1.0, std::max(0.0, y));  // 1: extrapolated (unscaled)
    const double th_i = th / yarn_factor_;
    return {th_i * (1 - mix) + th * mix, 1 + 0.1 * std::log(yarn_factor_)};
  }
  Vec rms(const Vec& x, const float* g) const { return test::rms_norm(x, g, eps_); }
  /// Head h of `v` (heads of hd_), RMSNormed with `g` (qwen3moe), NeoX-rotated at the current
  /// position.
  Vec head(const Vec& v, int64_t h, const float* g) const {
    Vec x(v.begin() + h * hd_, v.begin() + (h + 1) * hd_);
    if (g) x = rms(x, g);
    Vec y = x;
    for (int64_t i = 0; i < hd_ / 2; ++i) {
      const auto [th, ms] = angle(i);
      const double c = std::cos(th) * ms, sn = std::sin(th) * ms;
      y[size_t(i)] = x[size_t(i)] * c - x[size_t(i + hd_ / 2)] * sn;
      y[size_t(i + hd_ / 2)] = x[size_t(i)] * sn + x[size_t(i + hd_ / 2)] * c;
    }
    return y;
  }
  const float* qk_norm(const std::string& name) const { return oss_ ? nullptr : w(name); }
  Vec attention(int64_t l, const std::string& p, const Vec& h) {
    const Vec q = mv(p + "attn_q.weight", h), k = mv(p + "attn_k.weight", h);
    const Vec v = mv(p + "attn_v.weight", h);
    for (int64_t g = 0; g < nhk_; ++g) {
      k_[size_t(l)].push_back(head(k, g, qk_norm(p + "attn_k_norm.weight")));
      v_[size_t(l)].push_back(Vec(v.begin() + g * hd_, v.begin() + (g + 1) * hd_));
    }
    Vec att;
    for (int64_t i = 0; i < nh_; ++i) {
      const Vec qh = head(q, i, qk_norm(p + "attn_q_norm.weight"));
      const int64_t g = i / (nh_ / nhk_), n = pos_ + 1;
      // gpt-oss: even layers see the last window_ positions; a sink logit joins the softmax.
      const int64_t lo = oss_ && l % 2 == 0 ? std::max<int64_t>(0, n - window_) : 0;
      Vec s(static_cast<size_t>(n), -INFINITY);
      for (int64_t j = lo; j < n; ++j) {
        const Vec& kj = k_[size_t(l)][size_t(j * nhk_ + g)];
        s[size_t(j)] =
            std::inner_product(qh.begin(), qh.end(), kj.begin(), 0.0) / std::sqrt(double(hd_));
      }
      const double sink = oss_ ? double(w(p + "attn_sinks.weight")[i]) : -INFINITY;
      const double mx = std::max(sink, *std::max_element(s.begin(), s.end()));
      double z = std::exp(sink - mx);
      for (double& e : s) z += e = std::exp(e - mx);
      for (int64_t c = 0; c < hd_; ++c) {
        double o = 0;
        for (int64_t j = 0; j < n; ++j)
          o += s[size_t(j)] / z * v_[size_t(l)][size_t(j * nhk_ + g)][size_t(c)];
        att.push_back(o);
      }
    }
    return mv(p + "attn_output.weight", att);
  }
  /// The MoE FFN: qwen3moe softmax → top-k → renormalized; gpt-oss top-k logits → softmax over
  /// them, experts with the clamped SwiGLU (min(g, 7) · sigmoid(1.702 g) · (clamp(u, ±7) + 1)).
  Vec moe(const std::string& p, const Vec& h) const {
    Vec pr = mv(p + "ffn_gate_inp.weight", h);  // (+ the router bias, gpt-oss)
    if (!oss_) {
      const double mx = *std::max_element(pr.begin(), pr.end());
      for (double& e : pr) e = std::exp(e - mx);
    }
    std::vector<int64_t> idx(static_cast<size_t>(ne_));
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int64_t a, int64_t b) { return pr[size_t(a)] > pr[size_t(b)]; });
    if (oss_) {  // softmax over the k chosen logits
      const double mx = pr[size_t(idx[0])];
      for (int64_t j = 0; j < nu_; ++j)
        pr[size_t(idx[size_t(j)])] = std::exp(pr[size_t(idx[size_t(j)])] - mx);
    }
    double sw = 0;
    for (int64_t j = 0; j < nu_; ++j) sw += pr[size_t(idx[size_t(j)])];
    Vec y(size_t(d_), 0.0);
    for (int64_t j = 0; j < nu_; ++j) {
      const int64_t e = idx[size_t(j)];
      Vec g = mv(p + "ffn_gate_exps.weight", h, e);
      const Vec u = mv(p + "ffn_up_exps.weight", h, e);
      for (size_t i = 0; i < g.size(); ++i) {
        if (oss_) {
          const double x = std::min(g[i], 7.0), v = std::clamp(u[i], -7.0, 7.0);
          g[i] = x / (1 + std::exp(-1.702 * x)) * (v + 1);
        } else {
          g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
        }
      }
      const Vec dn = mv(p + "ffn_down_exps.weight", g, e);
      for (int64_t i = 0; i < d_; ++i) y[size_t(i)] += pr[size_t(e)] / sw * dn[size_t(i)];
    }
    return y;
  }

  const gguf::File& f_;
  bool oss_ = false;  ///< gpt-oss (else qwen3moe)
  int64_t nl_, d_, nh_, nhk_, hd_, ne_, nu_, pos_ = 0, window_ = 0, yarn_orig_ = 0;
  double eps_, base_, yarn_factor_ = 1;
  std::vector<std::vector<Vec>> k_, v_;  ///< per layer: [position · n_head_kv + head]
};

/// kvrun's forward of synth `shape` in `type` (f32 KV, exact attention, prefill in chunks of 5)
/// against the reference: logprobs of every prompt position (n_prompt tokens) and of 6 greedy
/// decode steps within 1e-4, the same greedy tokens.
void check_against_reference(const std::string& shape, SynthFileType type, int n_prompt) {
  test::TempDir dir;
  const std::string path = test::synth_model(dir, shape, type);
  const gguf::File file = gguf::File::open(path);
  RefQwen3Moe ref(file);
  test::expect_forward_matches(path, ref, n_prompt, shape + " " + synth_file_type_name(type));
}

class Qwen3MoeTypes : public ::testing::TestWithParam<SynthFileType> {};

TEST_P(Qwen3MoeTypes, ForwardMatchesDoublePrecisionReference) {
  check_against_reference("tiny-qwen3moe", GetParam(), 13);
}

INSTANTIATE_TEST_SUITE_P(Types, Qwen3MoeTypes,
                         ::testing::Values(SynthFileType::F32, SynthFileType::Q8_0),
                         [](const ::testing::TestParamInfo<SynthFileType>& i) {
                           return std::string(synth_file_type_name(i.param));
                         });

class GptOssTypes : public ::testing::TestWithParam<SynthFileType> {};

TEST_P(GptOssTypes, ForwardMatchesDoublePrecisionReference) {
  check_against_reference("tiny-gpt-oss", GetParam(), 40);
}

INSTANTIATE_TEST_SUITE_P(Types, GptOssTypes,
                         ::testing::Values(SynthFileType::F32, SynthFileType::MXFP4),
                         [](const ::testing::TestParamInfo<SynthFileType>& i) {
                           return std::string(synth_file_type_name(i.param));
                         });

// qwen3moe's expert keys are checked when the file is read: a missing or out-of-range key is a
// ModelError naming it.
TEST(Qwen3Moe, BadExpertKeysAreClearErrors) {
  test::TempDir dir;
  struct Case {
    int64_t count, used, ff;
    const char* key;
  };
  for (const Case& c :
       {Case{0, 2, 64, "qwen3moe.expert_count"}, Case{8, 9, 64, "qwen3moe.expert_used_count"},
        Case{8, 0, 64, "qwen3moe.expert_used_count"},
        Case{8, 2, -1, "qwen3moe.expert_feed_forward_length"}}) {
    gguf::Writer w;
    w.set_string("general.architecture", "qwen3moe");
    w.set_u32("qwen3moe.block_count", 1);
    w.set_u32("qwen3moe.embedding_length", 64);
    w.set_u32("qwen3moe.attention.head_count", 1);
    if (c.count > 0) w.set_u32("qwen3moe.expert_count", uint32_t(c.count));
    w.set_u32("qwen3moe.expert_used_count", uint32_t(c.used));
    if (c.ff > 0) w.set_u32("qwen3moe.expert_feed_forward_length", uint32_t(c.ff));
    const std::string path = (dir / "bad.gguf").string();
    w.write(path);
    const gguf::File f = gguf::File::open_metadata_only(path);
    Hparams hp = load_hparams(f);
    try {
      configure_arch(f, hp);
      ADD_FAILURE() << c.key << " was accepted";
    } catch (const ModelError& e) {
      EXPECT_NE(std::string(e.what()).find(c.key), std::string::npos) << e.what();
    }
  }
}

// deepseek2's router keys (models/deepseek2.cpp): expert_gating_func 1 softmax, 2 sigmoid
// (DeepSeek-V3), absent softmax except 47 / 48 layers (GLM-4.7-Flash, as ik_llama.cpp decides);
// expert_group_count / expert_group_used_count restrict the choice to the best groups (group
// score: the best expert's with softmax, DeepSeek-V2; the two best's sum with sigmoid,
// DeepSeek-V3); another gating value, groups that do not divide the experts, hold fewer than
// a group score needs, or cannot give the k experts are a ModelError naming the key.
TEST(DeepSeek2, RouterKeysSelectTheGatingOrAreClearErrors) {
  test::TempDir dir;
  struct Case {
    int64_t layers, gating, groups, groups_used;  // -1: key absent
    const char* error;                            // null: accepted
    MoeGating want;
    int64_t want_groups = 1, want_used = 1, want_top = 1;
  };
  const MoeGating sm = MoeGating::kSoftmax, sg = MoeGating::kSigmoid;
  for (const Case& c :
       {Case{4, 1, -1, -1, nullptr, sm}, Case{4, 2, -1, -1, nullptr, sg},
        Case{4, -1, -1, -1, nullptr, sm}, Case{47, -1, -1, -1, nullptr, sg},
        Case{4, 2, 1, 1, nullptr, sg}, Case{4, 2, 8, 8, nullptr, sg},
        Case{4, 2, 4, 2, nullptr, sg, 4, 2, 2}, Case{4, 1, 4, 1, nullptr, sm, 4, 1, 1},
        Case{4, 3, -1, -1, "deepseek2.expert_gating_func", sm},
        Case{4, 2, 8, 4, "deepseek2.expert_group_count", sm},  // groups of 1
        Case{4, 2, 3, 1, "deepseek2.expert_group_count", sm},
        Case{4, 1, 8, 1, "deepseek2.expert_group_count", sm},  // 1 < k = 2
        Case{4, 2, 8, -1, "deepseek2.expert_group_count", sm}}) {
    SCOPED_TRACE("layers " + std::to_string(c.layers) + " gating " + std::to_string(c.gating) +
                 " groups " + std::to_string(c.groups) + "/" + std::to_string(c.groups_used));
    gguf::Writer w;
    const std::string a = "deepseek2.";
    w.set_string("general.architecture", "deepseek2");
    for (const auto& [k, v] : std::initializer_list<std::pair<const char*, int64_t>>{
             {"block_count", c.layers},
             {"embedding_length", 64},
             {"attention.head_count", 4},
             {"attention.key_length", 64},
             {"attention.value_length", 32},
             {"rope.dimension_count", 32},
             {"feed_forward_length", 128},
             {"expert_count", 8},
             {"expert_used_count", 2},
             {"expert_feed_forward_length", 32},
             {"attention.kv_lora_rank", 64},
             {"leading_dense_block_count", 1},
             {"expert_shared_count", 1},
             {"expert_gating_func", c.gating},
             {"expert_group_count", c.groups},
             {"expert_group_used_count", c.groups_used}})
      if (v >= 0) w.set_u32(a + k, uint32_t(v));
    w.set_f32(a + "expert_weights_scale", 2.5f);
    const std::string path = (dir / "router.gguf").string();
    w.write(path);
    const gguf::File f = gguf::File::open_metadata_only(path);
    Hparams hp = load_hparams(f);
    if (!c.error) {
      const ArchSpec spec = configure_arch(f, hp);
      EXPECT_EQ(spec.moe_gating, c.want);
      EXPECT_EQ(spec.moe_n_group, c.want_groups);
      EXPECT_EQ(spec.moe_n_group_used, c.want_used);
      EXPECT_EQ(spec.moe_group_top, c.want_top);
      continue;
    }
    try {
      configure_arch(f, hp);
      ADD_FAILURE() << c.error << " was accepted";
    } catch (const ModelError& e) {
      EXPECT_NE(std::string(e.what()).find(c.error), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kvrun
