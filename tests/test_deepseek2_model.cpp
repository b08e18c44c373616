// test_deepseek2_model.cpp — the deepseek2 forward pass end to end against a plain
// double-precision reference written from the architecture's definition (DeepSeek-AI 2024,
// "DeepSeek-V2" §2.1 MLA with the absorbed W_UK / W_UV of §2.1.2 and §2.2 DeepSeekMoE;
// "DeepSeek-V3 Technical Report" §2.1.2 for the sigmoid router with its balancing bias; the
// GGUF layout as models/deepseek2.cpp documents it), on kvrun synth's tiny-deepseek3 (sigmoid
// gating, exp_probs_b, renormalized and scaled weights, 2 shared experts, no YaRN) and
// tiny-deepseek2 (softmax gating, YaRN ×40 with its log-scaled score factor) files. Per token:
// RMSNorm; Q through its LoRA (attn_q_a, RMSNorm, attn_q_b); the compressed KV (attn_kv_a_mqa: the
// latent c, RMSNormed, and the shared k_pe); plain (adjacent-pair) RoPE of q_pe and k_pe; per
// head the absorbed query W_UK,hᵀ·q_nope, scores (q_pe·k_pe + q_abs·c) · mscale² / √head_dim,
// softmax, the weighted latent through W_UV,h, attn_output; RMSNorm; the first FFN dense SwiGLU,
// the others router → top-k → SwiGLU experts weighted (× expert_weights_scale) plus the shared
// experts' SwiGLU; output norm and head. F32 files. (The reference can also round each matmul
// input to a quantized weight's activation type, cpu_traits' act_from_float as llama.cpp's CPU
// mul_mat, and derive W_UK as models/deepseek2.cpp does: the transpose of attn_kv_b's K rows, in
// q8_0 when attn_kv_b is quantized. On the Q8_0 files kvrun agrees with it within 3e-7 until one
// position, then differs by 0.06 to 0.08; but these tiny models are that sensitive to a single
// activation rounding the other way: scaling the reference's matmul inputs by 1 ± 1e-6 before
// their q8_0 rounding moves its own jump to other positions. The f32-versus-double difference
// decides such roundings, so a Q8_0 case cannot be held to 1e-4 here and is left out.) kvrun runs
// with an f32 KV cache, the exact attention scheme, prefill in chunks of 5 and 6 greedy decode
// steps: logprobs within 1e-4, the same greedy tokens.
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
#include "synth_util.h"
#include "test_util.h"

namespace kvrun {
namespace {

using Vec = std::vector<double>;

/// x rounded to the activation type weights of type `t` are dotted against (none for f32).
std::vector<float> round_act(std::vector<float> x, DType t) {
  if (t == DType::F32) return x;
  const cpu::CpuTypeTraits* ct = cpu::cpu_traits(t);
  std::vector<uint8_t> q(size_t(*row_bytes(ct->act_type, int64_t(x.size()))));
  ct->act_from_float(x.data(), q.data(), int64_t(x.size()));
  traits(ct->act_type).to_float(q.data(), x.data(), int64_t(x.size()));
  return x;
}

/// A double-precision deepseek2 over the tensors of a GGUF file, with its own cache of
/// [RoPE(k_pe) | c] rows per layer.
class RefDeepSeek2 {
 public:
  explicit RefDeepSeek2(const gguf::File& f) : f_(f) {
    const std::string a = "deepseek2.";
    auto key = [&](const std::string& k) { return *f.get_int(a + k); };
    nl_ = key("block_count"), d_ = key("embedding_length"), nh_ = key("attention.head_count");
    hd_ = key("attention.key_length"), hv_ = key("attention.value_length");
    rot_ = key("rope.dimension_count"), r_ = key("attention.kv_lora_rank");
    ne_ = key("expert_count"), nu_ = key("expert_used_count");
    dense_ = key("leading_dense_block_count");
    sigmoid_ = key("expert_gating_func") == 2;
    if (auto g = f.get_int(a + "expert_group_count"))
      ng_ = *g, ngu_ = key("expert_group_used_count");
    norm_ = f.get_bool(a + "expert_weights_norm").value_or(false);
    wscale_ = *f.get_float(a + "expert_weights_scale");
    eps_ = *f.get_float(a + "attention.layer_norm_rms_epsilon");
    base_ = *f.get_float(a + "rope.freq_base");
    if (f.get_string(a + "rope.scaling.type")) {  // YaRN (tiny-deepseek2)
      yarn_factor_ = *f.get_float(a + "rope.scaling.factor");
      yarn_orig_ = key("rope.scaling.original_context_length");
      const double m =
          1 + *f.get_float(a + "rope.scaling.yarn_log_multiplier") * std::log(yarn_factor_);
      kq_scale_ = m * m;
    }
    kq_scale_ /= std::sqrt(double(hd_));
    cache_.resize(size_t(nl_));
    for (int64_t l = 0; l < nl_; ++l) derive_wk_b(l);
  }

  /// Logits after token `tok` at the next position.
  Vec step(int32_t tok) {
    std::vector<float> e(static_cast<size_t>(d_));
    f_.view(*f_.find_tensor("token_embd.weight")).row_to_float(e.data(), tok);
    Vec x(e.begin(), e.end());
    for (int64_t l = 0; l < nl_; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      test::add_to(x, attention(l, p, rms(x, w(p + "attn_norm.weight"))));
      const Vec h = rms(x, w(p + "ffn_norm.weight"));
      test::add_to(
          x, l < dense_ ? swiglu(p + "ffn_gate", p + "ffn_up", p + "ffn_down", h, 0) : moe(p, h));
    }
    ++pos_;
    return mv("output.weight", rms(x, w("output_norm.weight")));
  }

 private:
  const float* w(const std::string& name) const {
    return static_cast<const float*>(f_.find_tensor(name)->data);
  }
  Tensor view(const std::string& name) const { return f_.view(*f_.find_tensor(name)); }
  /// Rows [row0, row0 + m) of matrix `name` (expert e of a 3-D one) times x rounded as the
  /// weight's activations.
  Vec mv(const std::string& name, const Vec& x, int64_t e = 0, int64_t row0 = 0,
         int64_t m = -1) const {
    const Tensor t = view(name);
    const int64_t k = t.ne[0];
    const std::vector<float> xf = round_act(std::vector<float>(x.begin(), x.end()), t.type);
    std::vector<float> row(static_cast<size_t>(k));
    Vec y(size_t(m < 0 ? t.ne[1] : m), 0.0);
    for (size_t j = 0; j < y.size(); ++j) {
      t.row_to_float(row.data(), row0 + int64_t(j), e);
      for (int64_t c = 0; c < k; ++c) y[j] += double(row[size_t(c)]) * double(xf[size_t(c)]);
    }
    return y;
  }
  /// W_UK of layer l as models/deepseek2.cpp derives it: per head the transpose of attn_kv_b's
  /// nope K rows, through q8_0 when attn_kv_b is quantized (else its own type).
  void derive_wk_b(int64_t l) {
    const Tensor kvb = view("blk." + std::to_string(l) + ".attn_kv_b.weight");
    const int64_t nope = hd_ - rot_;
    wk_type_ = traits(kvb.type).quantized ? DType::Q8_0 : kvb.type;
    std::vector<float> rows(size_t(nope * r_)), col(static_cast<size_t>(nope));
    std::vector<uint8_t> enc(size_t(*row_bytes(wk_type_, nope)));
    std::vector<Vec>& wk = wk_b_.emplace_back();  // [head · r + j] → nope values
    for (int64_t h = 0; h < nh_; ++h) {
      for (int64_t i = 0; i < nope; ++i)
        kvb.row_to_float(rows.data() + i * r_, h * (nope + hv_) + i);
      for (int64_t j = 0; j < r_; ++j) {
        for (int64_t i = 0; i < nope; ++i) col[size_t(i)] = rows[size_t(i * r_ + j)];
        traits(wk_type_).from_float(col.data(), enc.data(), nope);
        traits(wk_type_).to_float(enc.data(), col.data(), nope);
        wk.emplace_back(col.begin(), col.end());
      }
    }
  }
  Vec rms(const Vec& x, const float* g) const { return test::rms_norm(x, g, eps_); }
  /// Plain RoPE (pairs 2i, 2i + 1) of x's rot_ values at the current position; with YaRN the
  /// angle ramps between extrapolated and interpolated as ggml's rope_yarn (ext_factor 1,
  /// beta_fast 32, beta_slow 1; its cos/sin factor cancels deepseek2's attn_factor to 1).
  Vec rope(const double* x) const {
    Vec y(x, x + rot_);
    for (int64_t i = 0; i < rot_ / 2; ++i) {
      double th = double(pos_) * std::pow(base_, -2.0 * double(i) / double(rot_));
      if (yarn_factor_ > 1) {
        auto corr = [&](double beta) {
          return double(rot_) * std::log(double(yarn_orig_) / (beta * 2 * M_PI)) /
                 (2 * std::log(base_));
        };
        const double lo = std::max(0.0, std::floor(corr(32.0)));
        const double hi = std::min(double(rot_ - 1), std::ceil(corr(1.0)));
        const double ramp = (double(i) - lo) / std::max(0.001, hi - lo);
        const double mix = 1 - std::min(1.0, std::max(0.0, ramp));
        th = th / yarn_factor_ * (1 - mix) + th * mix;
      }
      const double c = std::cos(th), s = std::sin(th);
      y[size_t(2 * i)] = x[2 * i] * c - x[2 * i + 1] * s;
      y[size_t(2 * i + 1)] = x[2 * i] * s + x[2 * i + 1] * c;
    }
    return y;
  }
  Vec attention(int64_t l, const std::string& p, const Vec& h) {
    const Vec q =
        mv(p + "attn_q_b.weight", rms(mv(p + "attn_q_a.weight", h), w(p + "attn_q_a_norm.weight")));
    const Vec kva = mv(p + "attn_kv_a_mqa.weight", h);
    const Vec c = rms(Vec(kva.begin(), kva.begin() + r_), w(p + "attn_kv_a_norm.weight"));
    Vec row = rope(kva.data() + r_);  // the cached [RoPE(k_pe) | c]
    row.insert(row.end(), c.begin(), c.end());
    cache_[size_t(l)].push_back(row);
    const int64_t nope = hd_ - rot_, n = pos_ + 1;
    Vec att;
    for (int64_t hh = 0; hh < nh_; ++hh) {
      const double* qh = q.data() + hh * hd_;
      const std::vector<float> qn = round_act(std::vector<float>(qh, qh + nope), wk_type_);
      Vec qm = rope(qh + nope);  // [q_pe | W_UK,hᵀ · q_nope]
      for (int64_t j = 0; j < r_; ++j) {
        const Vec& wk = wk_b_[size_t(l)][size_t(hh * r_ + j)];
        double s = 0;
        for (int64_t i = 0; i < nope; ++i) s += wk[size_t(i)] * double(qn[size_t(i)]);
        qm.push_back(s);
      }
      Vec sc(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) {
        const Vec& kr = cache_[size_t(l)][size_t(t)];
        sc[size_t(t)] = std::inner_product(qm.begin(), qm.end(), kr.begin(), 0.0) * kq_scale_;
      }
      const double mx = *std::max_element(sc.begin(), sc.end());
      double z = 0;
      for (double& e : sc) z += e = std::exp(e - mx);
      Vec lat(size_t(r_), 0.0);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < r_; ++j)
          lat[size_t(j)] += sc[size_t(t)] / z * cache_[size_t(l)][size_t(t)][size_t(rot_ + j)];
      const Vec o = mv(p + "attn_kv_b.weight", lat, 0, hh * (nope + hv_) + nope, hv_);  // W_UV,h
      att.insert(att.end(), o.begin(), o.end());
    }
    return mv(p + "attn_output.weight", att);
  }
  /// down(silu(gate · h) ⊙ up · h) of matrices `gate`, `up`, `down` (+ ".weight"), expert e.
  Vec swiglu(const std::string& gate, const std::string& up, const std::string& down, const Vec& h,
             int64_t e) const {
    Vec g = mv(gate + ".weight", h, e);
    const Vec u = mv(up + ".weight", h, e);
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
    return mv(down + ".weight", g, e);
  }
  /// The router: softmax or sigmoid scores, the top k of score + exp_probs_b (when the file has
  /// it), weights the unbiased scores (renormalized with expert_weights_norm) ×
  /// expert_weights_scale; the experts' SwiGLU, plus the shared experts'.
  Vec moe(const std::string& p, const Vec& h) const {
    Vec sc = mv(p + "ffn_gate_inp.weight", h);
    if (sigmoid_) {
      for (double& v : sc) v = 1 / (1 + std::exp(-v));
    } else {
      const double mx = *std::max_element(sc.begin(), sc.end());
      double z = 0;
      for (double& v : sc) z += v = std::exp(v - mx);
      for (double& v : sc) v /= z;
    }
    Vec sel = sc;
    if (f_.find_tensor(p + "exp_probs_b.bias"))
      for (int64_t e = 0; e < ne_; ++e) sel[size_t(e)] += double(w(p + "exp_probs_b.bias")[e]);
    std::vector<int64_t> idx = top(sel);
    if (ng_ > 1) {  // node-limited: only the experts of the ngu_ best groups compete
      const Vec gsel = group_limited(sel);
      std::vector<int64_t> g = top(gsel);
      if (!std::equal(g.begin(), g.begin() + nu_, idx.begin())) ++n_regrouped;
      idx = g;
    }
    double sum = 0;
    for (int64_t j = 0; j < nu_; ++j) sum += sc[size_t(idx[size_t(j)])];
    Vec y = swiglu(p + "ffn_gate_shexp", p + "ffn_up_shexp", p + "ffn_down_shexp", h, 0);
    for (int64_t j = 0; j < nu_; ++j) {
      const int64_t e = idx[size_t(j)];
      const double wt = sc[size_t(e)] / (norm_ ? sum : 1.0) * wscale_;
      const Vec o = swiglu(p + "ffn_gate_exps", p + "ffn_up_exps", p + "ffn_down_exps", h, e);
      for (int64_t i = 0; i < d_; ++i) y[size_t(i)] += wt * o[size_t(i)];
    }
    return y;
  }

  /// Expert ids by descending `sel` (the lower id first on a tie).
  std::vector<int64_t> top(const Vec& sel) const {
    std::vector<int64_t> idx(static_cast<size_t>(ne_));
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int64_t a, int64_t b) { return sel[size_t(a)] > sel[size_t(b)]; });
    return idx;
  }
  /// DeepSeek-V3's node-limited routing (Technical Report §2.1.2; Hugging Face
  /// modeling_deepseek_v3 noaux_tc): a group's score is the sum of its two best selection
  /// scores; the experts outside the ngu_ best groups get −∞.
  Vec group_limited(const Vec& sel) const {
    const int64_t size = ne_ / ng_;
    std::vector<std::pair<double, int64_t>> gs;
    for (int64_t g = 0; g < ng_; ++g) {
      Vec part(sel.begin() + g * size, sel.begin() + (g + 1) * size);
      std::sort(part.rbegin(), part.rend());
      gs.push_back({-(part[0] + part[1]), g});
    }
    std::sort(gs.begin(), gs.end());
    Vec out(sel.size(), -INFINITY);
    for (int64_t j = 0; j < ngu_; ++j)
      for (int64_t e = gs[size_t(j)].second * size; e < (gs[size_t(j)].second + 1) * size; ++e)
        out[size_t(e)] = sel[size_t(e)];
    return out;
  }

 public:
  /// Router calls whose experts the group limit changed (against plain top-k).
  mutable int64_t n_regrouped = 0;

 private:
  const gguf::File& f_;
  int64_t ng_ = 1, ngu_ = 1;
  int64_t nl_, d_, nh_, hd_, hv_, rot_, r_, ne_, nu_, dense_, pos_ = 0, yarn_orig_ = 0;
  bool sigmoid_, norm_;
  double wscale_, eps_, base_, yarn_factor_ = 1, kq_scale_ = 1;
  DType wk_type_ = DType::F32;
  std::vector<std::vector<Vec>> wk_b_;   ///< per layer: [head · r + j] → W_UK column j
  std::vector<std::vector<Vec>> cache_;  ///< per layer: [position] → [RoPE(k_pe) | c]
};

struct Case {
  const char* shape;
  SynthFileType type;
};

class DeepSeek2Model : public ::testing::TestWithParam<Case> {};

// kvrun's forward (f32 KV, exact attention, prefill in chunks of 5) against the reference:
// logprobs of every prompt position (13 tokens) and of 6 greedy decode steps within 1e-4, the
// same greedy tokens.
TEST_P(DeepSeek2Model, ForwardMatchesDoublePrecisionReference) {
  const Case c = GetParam();
  test::TempDir dir;
  const std::string path = test::synth_model(dir, c.shape, c.type);
  const gguf::File file = gguf::File::open(path);
  RefDeepSeek2 ref(file);
  test::expect_forward_matches(path, ref, 13,
                               std::string(c.shape) + " " + synth_file_type_name(c.type));
  // The grouped shape must exercise the limit: some tokens' experts differ from plain top-k.
  if (file.get_int("deepseek2.expert_group_count")) {
    EXPECT_GT(ref.n_regrouped, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DeepSeek2Model,
                         ::testing::Values(Case{"tiny-deepseek3", SynthFileType::F32},
                                           Case{"tiny-deepseek3-grouped", SynthFileType::F32},
                                           Case{"tiny-deepseek2", SynthFileType::F32}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string s = std::string(i.param.shape) + "_" +
                                           synth_file_type_name(i.param.type);
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace kvrun
