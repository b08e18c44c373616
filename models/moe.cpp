// moe.cpp — the mixture-of-experts FFN of the llama block (see llama.h, moe_ffn).
//
// Per token (Shazeer et al. 2017; Qwen3-MoE): logits = W_router · xn; the router (softmax,
// top-k, renormalized weights w_j; DeepSeek-V3: sigmoid scores, the top-k of score +
// exp_probs_b, weights the unbiased scores) picks experts e_j; out = Σ_j w_j · W_down[e_j] ·
// (silu(W_gate[e_j] · xn) ⊙ W_up[e_j] · xn). gpt-oss adds a bias to the router logits and to
// each expert's gate, up and down outputs, routes by the top-k logits then a softmax over them,
// and uses the clamped SwiGLU (backend.h GluKind::kSwiGluOai). deepseek2 multiplies the router
// weights by expert_weights_scale and adds its shared experts' SwiGLU to the sum. The backend
// groups the rows per expert, so each chosen expert's matrices are read once per step however many
// rows chose it.
#include "models/llama.h"

namespace kvrun {

void moe_ffn(const Hparams& hp, const ArchSpec& spec, const LlamaLayer& L, Backend& be,
             LlamaScratch& s, const float* xn, int64_t n, float* out) {
  const int64_t ne = hp.n_expert, k = hp.n_expert_used, ff = hp.n_ff_exp;
  // Router rows: logits [n, n_expert], then the weights [n, k] and ids [n, k] (int32 in floats).
  float* route = s.grow(LlamaScratch::kMoeRoute, n * (ne + 2 * k));
  float* logits = route;
  float* weights = route + n * ne;
  int32_t* ids = reinterpret_cast<int32_t*>(weights + n * k);
  be.matmul(L.ffn_gate_inp, xn, n, logits);
  if (L.ffn_gate_inp_b.data) be.add_row(logits, L.ffn_gate_inp_b, n, ne);
  MoeRouteParams rp{ne, k, spec.moe_norm};
  rp.gating = spec.moe_gating;
  rp.n_group = spec.moe_n_group;
  rp.n_group_used = spec.moe_n_group_used;
  rp.group_top = spec.moe_group_top;
  if (L.ffn_exp_probs_b.data) rp.selection_bias = &L.ffn_exp_probs_b;
  be.moe_route(logits, n, rp, ids, weights);
  if (hp.expert_weights_scale != 1.0f) be.scale(weights, n * k, hp.expert_weights_scale);
  float* gate = s.grow(LlamaScratch::kMoeGate, n * k * ff);
  float* up = s.grow(LlamaScratch::kMoeUp, n * k * ff);
  auto bias = [](const Tensor& b) { return b.data ? &b : nullptr; };
  be.matmul_id(L.ffn_gate_exps, xn, false, ids, nullptr, n, k, gate, bias(L.ffn_gate_exps_b));
  be.matmul_id(L.ffn_up_exps, xn, false, ids, nullptr, n, k, up, bias(L.ffn_up_exps_b));
  be.glu(glu_kind(spec.ffn), gate, up, gate, n * k, ff);
  be.matmul_id(L.ffn_down_exps, gate, true, ids, weights, n, k, out, bias(L.ffn_down_exps_b));
  if (!L.ffn_up_shexp.data) return;
  // deepseek2's shared experts: one SwiGLU every row runs, added to the routed experts' sum.
  const int64_t fs = L.ffn_up_shexp.ne[1], d = hp.n_embd;
  float* sg = s.grow(LlamaScratch::kShexpGate, n * fs);
  float* su = s.grow(LlamaScratch::kShexpUp, n * fs);
  float* so = s.grow(LlamaScratch::kShexpOut, n * d);
  const MatmulOut outs[2] = {{&L.ffn_gate_shexp, sg}, {&L.ffn_up_shexp, su}};
  be.matmul_many(outs, 2, xn, n);
  be.glu(GluKind::kSwiGlu, sg, su, sg, n, fs);
  be.matmul(L.ffn_down_shexp, sg, n, so);
  be.add(out, so, n * d);
}

}  // namespace kvrun
