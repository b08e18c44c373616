// deepseek2.cpp — DeepSeek-V2 / V2-Lite (GGUF arch "deepseek2"): multi-head latent attention
// (MLA) and a mixture of experts with shared experts. Facts from DeepSeek-AI 2024, "DeepSeek-V2:
// A Strong, Economical, and Efficient Mixture-of-Experts Language Model" (§2.1 MLA, §2.2
// DeepSeekMoE) and the reference graph and loader (ik_llama.cpp src/graphs/build_deepseek2.cpp,
// src/llama-hparams.cpp, src/llama-load-tensors.cpp; key and tensor names as llama.cpp's
// gguf-py constants):
//  * attention: Q = W_q·x, or W_qb·RMSNorm(W_qa·x) with attention.q_lora_rank; per head its first
//    nope = head_dim − n_rot values are q_nope, the last n_rot q_pe. attn_kv_a_mqa gives the
//    latent c (kv_lora_rank values, then RMSNorm by attn_kv_a_norm) and k_pe (n_rot values,
//    shared by every head); attn_kv_b maps c to each head's k_nope (nope rows) and v
//    (head_dim_v rows). Scores q_nope·k_nope + q_pe·k_pe with plain (non-NeoX) RoPE on the pe
//    parts, scaled by mscale² / sqrt(head_dim) where mscale = attn_factor · (1 +
//    rope.scaling.yarn_log_multiplier · ln(1 / freq_scale)); the RoPE itself runs with attn_factor
//    1 / (1 + 0.1 · ln(1 / freq_scale)), which YaRN's own mscale brings back to 1;
//  * FFN: the first leading_dense_block_count layers dense SwiGLU; the others a router over
//    expert_count experts: softmax scores (expert_gating_func 1, DeepSeek-V2) or sigmoid scores
//    (2: DeepSeek-V3, R1, Moonlight; DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" §2.1.2),
//    the top expert_used_count of score + exp_probs_b (the auxiliary-loss-free balancing bias,
//    used for the choice only, where the file has it), weighted by their unbiased scores,
//    renormalized only with expert_weights_norm and multiplied by expert_weights_scale, plus
//    expert_shared_count shared experts (one SwiGLU ffn_*_shexp) every token runs;
//    group-limited routing (expert_group_count > 1 with fewer groups used: the chosen experts
//    come from the expert_group_used_count groups with the best scores, read_groups);
//  * untied output head.
//
// The KV cache keeps per token and layer one row [RoPE(k_pe) | c] (Hparams::kv_rows): n_rot +
// kv_lora_rank values instead of n_head · (head_dim + head_dim_v). Attention is computed absorbed
// (the paper's §2.1.2 observation that W_UK can be absorbed into W_Q and W_UV into W_O), for
// prefill and decode alike: q_abs_h = W_UK,hᵀ · q_nope_h (wk_b), so q_abs_h · c = q_nope_h ·
// k_nope_h; the paged attention runs n_head query heads of [q_pe | q_abs] over one KV head of
// the cached rows, reading V as the c part of the same row (KvLayer::mla); each head's output
// (a latent) goes through W_UV,h (wv_b) before attn_output.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "models/arch.h"
#include "models/llama.h"
#include "models/rope_scaling.h"

namespace kvrun {

namespace {

/// `key` as an integer in [lo, hi] (absent: `fallback`, or ModelError when fallback < 0).
int64_t read_count(const gguf::File& f, const std::string& key, int64_t lo, int64_t hi,
                   int64_t fallback) {
  const auto v = f.get_int(key);
  if (!v) {
    if (fallback < 0) throw ModelError(key + " is missing");
    return fallback;
  }
  if (*v < lo || *v > hi) throw ModelError(key + " = " + std::to_string(*v) + " is out of range");
  return *v;
}

/// The router's gate function from llama.cpp's expert_gating_func (LLM_EXPERT_GATING_FUNC_TYPE:
/// 1 softmax, 2 sigmoid). Absent (DeepSeek-V2 / V2.5 files): softmax, except 47 or 48 layers
/// (GLM-4.7-Flash, with its MTP layer), sigmoid, as ik_llama.cpp's deepseek2 loader decides
/// (src/llama-hparams.cpp).
MoeGating read_gating(const gguf::File& f, const Hparams& hp) {
  const std::string p = hp.arch + ".";
  const auto v = f.get_int(p + "expert_gating_func");
  if (!v || *v == 0)
    return hp.n_layer == 47 || hp.n_layer == 48 ? MoeGating::kSigmoid : MoeGating::kSoftmax;
  if (*v == 1) return MoeGating::kSoftmax;
  if (*v == 2) return MoeGating::kSigmoid;
  throw ModelError(p + "expert_gating_func = " + std::to_string(*v) +
                   " is not a deepseek2 gate function (1 softmax, 2 sigmoid)");
}

/// Group-limited routing from expert_group_count / expert_group_used_count (Hugging Face
/// n_group / topk_group) into s. The group's score follows the model's own router
/// (DeepSeek-V2's modeling_deepseek.py MoEGate, topk_method group_limited_greedy: the best
/// softmax score of the group; DeepSeek-V3's, noaux_tc: the sum of the two best sigmoid scores
/// plus bias): group_top 1 with softmax gating, 2 with sigmoid. ik_llama.cpp's and llama.cpp's
/// deepseek2 graphs ignore the two keys (plain top-k over every expert), so on a file that
/// restricts the groups kvrun's choice of experts can differ from theirs: it is the model's.
void read_groups(const gguf::File& f, const Hparams& hp, ArchSpec& s) {
  const std::string p = hp.arch + ".";
  const int64_t groups = read_count(f, p + "expert_group_count", 0, 4096, 1);
  const int64_t used = read_count(f, p + "expert_group_used_count", 0, 4096, 0);
  if (groups <= 1 || used == groups) return;
  const std::string what = p + "expert_group_count = " + std::to_string(groups) + ", " + p +
                           "expert_group_used_count = " + std::to_string(used) + ": ";
  if (hp.n_expert % groups != 0)
    throw ModelError(what + "the groups do not divide the " + std::to_string(hp.n_expert) +
                     " experts");
  const int64_t size = hp.n_expert / groups;
  const int64_t top = s.moe_gating == MoeGating::kSigmoid ? 2 : 1;
  if (used < 1 || used > groups || used * size < hp.n_expert_used || size < top)
    throw ModelError(what + "the groups used cannot hold the " + std::to_string(hp.n_expert_used) +
                     " experts chosen per token");
  s.moe_n_group = groups;
  s.moe_n_group_used = used;
  s.moe_group_top = top;
}

}  // namespace

ArchSpec deepseek2_arch(const gguf::File& f, Hparams& hp) {
  const std::string p = hp.arch + ".";
  if (f.find(p + "attention.key_length_mla"))
    throw ModelError(p + "attention.key_length_mla is set: the file stores MLA as split " +
                     "attn_k_b / attn_v_b tensors with one KV head, which kvrun does not read " +
                     "yet (a file with attn_kv_b is needed)");
  read_moe_counts(f, hp);
  hp.kv_lora_rank = read_count(f, p + "attention.kv_lora_rank", 1, int64_t(1) << 20, -1);
  hp.q_lora_rank = read_count(f, p + "attention.q_lora_rank", 1, int64_t(1) << 20, 0);
  hp.n_layer_dense_lead = read_count(f, p + "leading_dense_block_count", 0, hp.n_layer, -1);
  hp.n_expert_shared = read_count(f, p + "expert_shared_count", 0, 4096, -1);
  const auto scale = f.get_float(p + "expert_weights_scale");
  if (!scale) throw ModelError(p + "expert_weights_scale is missing");
  if (!(*scale > 0) || !std::isfinite(*scale))
    throw ModelError(p + "expert_weights_scale must be positive");
  hp.expert_weights_scale = float(*scale);
  if (auto v = f.get_float(p + "rope.scaling.yarn_log_multiplier")) hp.yarn_log_mul = float(*v);
  if (hp.rope.n_rot % 2 != 0 || hp.rope.n_rot >= hp.head_dim)
    throw ModelError(p + "rope.dimension_count (" + std::to_string(hp.rope.n_rot) +
                     ") must be even and below attention.key_length (" +
                     std::to_string(hp.head_dim) + ")");
  if (hp.n_ff <= 0 && hp.n_layer_dense_lead > 0)
    throw ModelError(p + "feed_forward_length is missing (the leading dense layers need it)");
  ArchSpec s;
  s.rope_neox = false;
  s.moe = true;
  s.moe_norm = f.get_bool(p + "expert_weights_norm").value_or(false);
  s.moe_gating = read_gating(f, hp);
  read_groups(f, hp, s);
  s.mla = true;
  s.output_optional = false;
  return s;
}

void load_mla_attention(const gguf::File& f, const Hparams& hp, LlamaWeights& w, LlamaLayer& L,
                        int64_t il) {
  const std::string p = "blk." + std::to_string(il) + ".";
  const int64_t d = hp.n_embd, nh = hp.n_head, hd = hp.head_dim, rot = hp.rope.n_rot;
  const int64_t nope = hd - rot, r = hp.kv_lora_rank, hv = hp.head_dim_v;
  if (hp.q_lora_rank > 0) {
    L.wq_a = load_matrix(f, p + "attn_q_a.weight", d, hp.q_lora_rank);
    L.q_a_norm = load_tensor(f, p + "attn_q_a_norm.weight", hp.q_lora_rank, 0);
    L.wq_b = load_matrix(f, p + "attn_q_b.weight", hp.q_lora_rank, nh * hd);
  } else {
    L.wq = load_matrix(f, p + "attn_q.weight", d, nh * hd);
  }
  L.wkv_a = load_matrix(f, p + "attn_kv_a_mqa.weight", d, r + rot);
  L.kv_a_norm = load_tensor(f, p + "attn_kv_a_norm.weight", r, 0);
  const Tensor kvb = load_matrix(f, p + "attn_kv_b.weight", r, nh * (nope + hv));
  // wv_b: head h's V rows of attn_kv_b (rows h·(nope + hv) + nope …), copied as they are.
  const size_t vrow = size_t(*row_bytes(kvb.type, r));
  Buffer vb(size_t(nh * hv) * vrow);
  for (int64_t h = 0; h < nh; ++h)
    for (int64_t i = 0; i < hv; ++i)
      std::memcpy(static_cast<uint8_t*>(vb.data()) + size_t(h * hv + i) * vrow,
                  kvb.row(h * (nope + hv) + nope + i), vrow);
  L.wv_b = Tensor::contiguous(kvb.type, vb.data(), r, hv, nh);
  w.derived.push_back(std::move(vb));
  // wk_b: the transpose of head h's K rows, [r rows of nope]; Q8_0 when attn_kv_b is quantized
  // (as ik_llama.cpp derives it), else attn_kv_b's type; f32 when that cannot hold rows of nope.
  DType kt = traits(kvb.type).quantized ? DType::Q8_0 : kvb.type;
  if (!traits(kt).from_float || !cpu_device().supports(Op::kMatmul, kt, DType::F32, nope))
    kt = DType::F32;
  const size_t krow = size_t(*row_bytes(kt, nope));
  Buffer kb(size_t(nh * r) * krow);
  std::vector<float> rows(size_t(nope * r)), col(static_cast<size_t>(nope));
  for (int64_t h = 0; h < nh; ++h) {
    for (int64_t i = 0; i < nope; ++i) kvb.row_to_float(rows.data() + i * r, h * (nope + hv) + i);
    for (int64_t j = 0; j < r; ++j) {
      for (int64_t i = 0; i < nope; ++i) col[size_t(i)] = rows[size_t(i * r + j)];
      traits(kt).from_float(col.data(), static_cast<uint8_t*>(kb.data()) + size_t(h * r + j) * krow,
                            nope);
    }
  }
  L.wk_b = Tensor::contiguous(kt, kb.data(), nope, r, nh);
  w.derived.push_back(std::move(kb));
}

void mla_attention_block(const Hparams& hp, const LlamaWeights& w, int64_t il, Backend& be,
                         LlamaScratch& s, Backend& kv_be, LlamaScratch& kv_s, const LlamaBatch& b,
                         int64_t n) {
  using S = LlamaScratch;
  const LlamaLayer& L = w.layers[size_t(il)];
  const int64_t d = hp.n_embd, nh = hp.n_head, hd = hp.head_dim, rot = hp.rope.n_rot;
  const int64_t nope = hd - rot, r = hp.kv_lora_rank, kd = rot + r, ql = hp.q_lora_rank;
  const size_t f = sizeof(float);
  be.rms_norm(s.x, &L.attn_norm, s.xn, n, d, hp.rms_eps);
  // Q [n, nh, hd] and the compressed KV [n, r + rot] (both read xn).
  float* kva = s.grow(S::kMlaKva, n * (r + rot));
  if (L.wq_a.data) {
    float* qa = s.grow(S::kMlaQLora, n * ql);
    const MatmulOut outs[2] = {{&L.wq_a, qa}, {&L.wkv_a, kva}};
    be.matmul_many(outs, 2, s.xn, n);
    be.rms_norm(qa, &L.q_a_norm, qa, n, ql, hp.rms_eps);
    be.matmul(L.wq_b, qa, n, s.q);
  } else {
    const MatmulOut outs[2] = {{&L.wq, s.q}, {&L.wkv_a, kva}};
    be.matmul_many(outs, 2, s.xn, n);
  }
  // The cached row [RoPE(k_pe) | RMSNorm(c)], one "head" of kd values.
  float* lat = s.grow(S::kMlaLatent, n * r);
  float* krow = s.grow(S::kMlaKRow, n * kd);
  be.copy_strided(kva, r + rot, lat, r, n, r);
  be.rms_norm(lat, &L.kv_a_norm, lat, n, r, hp.rms_eps);
  be.copy_strided(kva + r, r + rot, krow, kd, n, rot);
  be.copy_strided(lat, r, krow + rot, kd, n, r);
  // RoPE with attn_factor 1 / (1 + 0.1 ln(1 / freq_scale)), times YaRN's own factor as ggml's
  // rope applies it (ext_factor ≠ 0).
  RopeConfig rc = layer_rope(hp, w, il, b.n_ctx);
  const float fs = rope_freq_scale(hp.rope);
  float ms = 1.0f / (1.0f + 0.1f * std::log(1.0f / fs));
  if (rope_ext_factor(hp.rope) != 0.0f) ms *= 1.0f + 0.1f * std::log(1.0f / fs);
  rc.mscale = ms;
  be.rope(krow, n, 1, kd, rc);
  // The absorbed query [n, nh, kd] = [q_pe | wk_b,h · q_nope,h] per head.
  float* qn = s.grow(S::kMlaQNope, n * nh * nope);
  float* qabs = s.grow(S::kMlaQAbs, n * nh * r);
  float* qm = s.grow(S::kMlaQuery, n * nh * kd);
  auto* ids = reinterpret_cast<int32_t*>(s.grow(S::kMlaIds, n * nh));
  std::vector<int32_t> head_ids(size_t(n * nh));
  for (int64_t i = 0; i < n * nh; ++i) head_ids[size_t(i)] = int32_t(i % nh);
  be.upload(ids, head_ids.data(), head_ids.size() * sizeof(int32_t));
  be.copy_strided(s.q, hd, qn, nope, n * nh, nope);
  be.matmul_id(L.wk_b, qn, true, ids, nullptr, n, nh, qabs, nullptr);
  be.copy_strided(s.q + nope, hd, qm, kd, n * nh, rot);
  be.copy_strided(qabs, r, qm + rot, kd, n * nh, r);
  be.rope(qm, n, nh, kd, rc);
  const float af = hp.rope.attn_factor * hp.rope.yarn_attn_factor;
  const float mscale = af * (1.0f + hp.yarn_log_mul * std::log(1.0f / fs));
  PagedAttnParams ap;
  ap.attn = {nh, 1, kd, r, 1.0f * mscale * mscale / std::sqrt(float(hd))};
  ap.flash = b.flash;
  const KvLayer& kv = b.kv[il];
  float* out = s.grow(S::kMlaOut, n * nh * r);  // per head the attention-weighted latent
  if (&kv_be == &be) {
    be.kv_store(kv, ap, krow, nullptr);
    be.paged_attention(kv, ap, qm, out);
  } else {  // -nkvo: the KV rows live on kv_be's device
    float* k2 = kv_s.grow(S::kMlaKvK, n * kd);
    float* q2 = kv_s.grow(S::kMlaKvQ, n * nh * kd);
    float* o2 = kv_s.grow(S::kMlaKvOut, n * nh * r);
    kv_be.copy_from(be, krow, k2, size_t(n * kd) * f);
    kv_be.copy_from(be, qm, q2, size_t(n * nh * kd) * f);
    kv_be.kv_store(kv, ap, k2, nullptr);
    kv_be.paged_attention(kv, ap, q2, o2);
    be.copy_from(kv_be, o2, out, size_t(n * nh * r) * f);
  }
  be.matmul_id(L.wv_b, out, true, ids, nullptr, n, nh, s.att, nullptr);
  be.matmul(L.wo, s.att, n, s.proj);
  be.add(s.x, s.proj, n * d);
}

}  // namespace kvrun
