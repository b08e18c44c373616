// moe.h — the mixture-of-experts router and the weighted sum of the experts' outputs (CPU).
//
// The expert matmul itself is matmul_id (matmul.h). Gating as llama.cpp's build_moe_ffn:
// softmax (Qwen3-MoE, DeepSeek-V2) or sigmoid (DeepSeek-V3) scores over the router logits, the
// k best experts (by score + a selection bias where the model has one), their scores
// renormalized to sum 1 when norm_topk_prob is set; or gpt-oss's top-k logits then softmax.
#pragma once

#include <cstdint>

#include "backend.h"

namespace kvrun::cpu {

/// The router of n rows (Backend::moe_route): per row of logits [n_expert] the gate scores
/// (p.gating: softmax as llama.cpp's soft_max op, ops.h softmax; sigmoid 1 / (1 + expf(−x)) as
/// ggml's sigmoid op; or the logits), the p.n_used largest of score + p.selection_bias in
/// descending order (the lower id first on a tie) into ids [n, n_used] and their unbiased scores
/// into weights [n, n_used], divided by their sum (f32) when p.norm; with kTopkSoftmax (gpt-oss)
/// softmax (ops.h) over the n_used chosen logits instead. With group-limited routing
/// (p.n_group > 1, p.n_group_used < p.n_group) the experts are chosen only among those of the
/// p.n_group_used groups whose p.group_top best selection scores sum highest (f32 sum in
/// descending order). Throws std::invalid_argument when n_used is not in [1, n_expert], the
/// bias is not {n_expert} f32, or the groups do not divide the experts or cannot give n_used.
void moe_route(const float* logits, int64_t n, const MoeRouteParams& p, int32_t* ids,
               float* weights);

/// ys[r, j, :] += bias[ids[r, j], :] for r < n, j < n_used (ggml's add_id): one f32 bias row of
/// m per expert, bias [n_expert, m].
void moe_add_bias(float* ys, const float* bias, const int32_t* ids, int64_t n, int64_t n_used,
                  int64_t m);

/// y[r, :] = Σ_j weights[r, j] · ys[r, j, :] over j < n_used in slot order (f32 multiply, then
/// add), the experts' outputs ys [n, n_used, m] combined into y [n, m].
void moe_combine(const float* ys, const float* weights, int64_t n, int64_t n_used, int64_t m,
                 float* y);

}  // namespace kvrun::cpu
