// hparams.h (models/) — a model's hyperparameters, read from GGUF metadata (`{arch}.*` keys).
//
// Keys (GGUF spec, "LLM" section): {arch}.block_count, .embedding_length, .feed_forward_length,
// .attention.head_count, .attention.head_count_kv, .attention.key_length / .value_length,
// .attention.layer_norm_rms_epsilon, .context_length, .rope.dimension_count, .rope.freq_base,
// .rope.scaling.{type,factor,original_context_length,attn_factor} (.rope.scale_linear: the old
// name of the factor; a factor without a type is linear, 0 is 1), .rope.scaling.yarn_{ext_factor,
// attn_factor,beta_fast,beta_slow}, .vocab_size. Defaults where a key is
// absent follow llama.cpp (head_count_kv = head_count, head_dim = n_embd / n_head,
// n_rot = head_dim, freq_base = 10000, rms eps = 1e-5).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf.h"

namespace kvrun {

/// A GGUF file that parses but is not a usable model (missing or inconsistent hyperparameters).
class ModelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// RoPE settings (RoFormer, Su et al. 2021; llama3-style scaling per Meta's Llama 3.1 release;
/// YaRN per Peng et al. 2023, arXiv:2309.00071, as ggml's rope implements it — see
/// models/rope_scaling.h).
struct RopeParams {
  float freq_base = 10000.0f;  ///< θ base
  int64_t n_rot = 0;           ///< rotated dimensions per head (≤ head_dim)
  /// none, linear, yarn, llama3, longrope (from rope.scaling.type; --rope-scaling)
  std::string scaling_type = "none";
  float scaling_factor = 1.0f;    ///< context extension factor (1 = none); freq_scale = 1 / it
  int64_t n_ctx_orig = 0;         ///< rope.scaling.original_context_length (0 if absent)
  bool has_freq_factors = false;  ///< a `rope_freqs.weight` tensor (llama3-style scaling) exists
  /// rope.scaling.attn_factor: multiplies cos and sin (so Q·K by its square), as ggml's rope
  /// `mscale`; Phi-3's LongRoPE writes sqrt(1 + ln(factor) / ln(n_ctx_orig)) here.
  float attn_factor = 1.0f;
  /// YaRN (ggml's rope ext_factor, beta_fast, beta_slow; --yarn-* flags): the ramp's mix of
  /// extrapolated and interpolated frequencies; < 0 means "by type": 1 for yarn, else 0.
  float yarn_ext_factor = -1.0f;
  float yarn_attn_factor = 1.0f;  ///< further multiplies mscale (rope.scaling.yarn_attn_factor)
  float yarn_beta_fast = 32.0f;   ///< the paper's β: rotations in n_ctx_orig above which a
                                  ///< dimension is left unscaled (extrapolated)
  float yarn_beta_slow = 1.0f;    ///< the paper's α: rotations below which it is fully
                                  ///< interpolated (θ · freq_scale)
  int64_t yarn_orig_ctx = 0;      ///< --yarn-orig-ctx; 0: n_ctx_orig, or n_ctx_train when that is 0
  float freq_base_swa = 0.0f;   ///< θ base of sliding-window layers (gemma3: 10000); 0 = freq_base
  float freq_scale_swa = 0.0f;  ///< linear scaling of sliding-window layers; 0 = as the others
};

/// Hyperparameters common to the llama family; an architecture file adds its own extras.
struct Hparams {
  std::string arch;         ///< general.architecture ("llama", "qwen2", ...)
  int64_t n_layer = 0;      ///< transformer blocks
  int64_t n_embd = 0;       ///< residual width
  int64_t n_head = 0;       ///< query heads
  int64_t n_head_kv = 0;    ///< key/value heads (GQA when < n_head)
  int64_t head_dim = 0;     ///< K (and Q) head size
  int64_t head_dim_v = 0;   ///< V head size
  int64_t n_ff = 0;         ///< FFN hidden size (the largest, when given per layer)
  int64_t n_ctx_train = 0;  ///< context length the model was trained with
  int64_t n_vocab = 0;      ///< vocabulary size
  float rms_eps = 1e-5f;    ///< RMSNorm epsilon
  /// LayerNorm epsilon of encoders ({arch}.attention.layer_norm_epsilon; bert, nomic-bert).
  float norm_eps = 1e-12f;
  /// Token-type (segment) embedding rows of encoders (tokenizer.ggml.token_type_count).
  int64_t n_vocab_type = 0;
  RopeParams rope;
  /// Sliding-window attention (Beltagy et al. 2020, "Longformer"; Mistral 7B; Gemma 2): a query
  /// at position p of a sliding layer sees keys at positions p − n_swa < j ≤ p, as llama.cpp's
  /// KQ_mask_swa. 0 = every layer is global.
  int64_t n_swa = 0;
  std::vector<bool> swa_layers;  ///< [n_layer] true: the layer uses the window (empty: none)
  /// Soft-capping (Gemma 2 report, Team Gemma 2024, §2): s ← cap · tanh(s / cap); 0 = off.
  float attn_softcap = 0.0f;   ///< on attention scores (attn_logit_softcapping)
  float final_softcap = 0.0f;  ///< on the output logits (final_logit_softcapping)
  /// Mixture of experts (Shazeer et al. 2017; {arch}.expert_count, .expert_used_count,
  /// .expert_feed_forward_length): 0 experts = a dense FFN.
  int64_t n_expert = 0;               ///< experts per MoE layer
  int64_t n_expert_used = 0;          ///< experts each token is routed to (top-k)
  int64_t n_ff_exp = 0;               ///< hidden size of one expert's FFN
  int64_t n_expert_shared = 0;        ///< shared experts every token also runs (deepseek2)
  int64_t n_layer_dense_lead = 0;     ///< leading layers with a dense FFN (deepseek2)
  float expert_weights_scale = 1.0f;  ///< the routed experts' weights are multiplied by it
  /// Multi-head latent attention (DeepSeek-AI 2024, "DeepSeek-V2", §2.1; deepseek2's
  /// attention.kv_lora_rank): K and V of every head are up-projections of one compressed latent
  /// of kv_lora_rank values per token, which the KV cache stores with the RoPE part of K
  /// (rope.n_rot values, shared by the heads) instead of K and V per head. 0: not MLA.
  int64_t kv_lora_rank = 0;
  int64_t q_lora_rank = 0;  ///< Q through a rank-q_lora_rank bottleneck (0: a plain projection)
  /// rope.scaling.yarn_log_multiplier (deepseek2: 0.1 · mscale_all_dim): the score scale is
  /// (1 + it · ln(1 / freq_scale))² / sqrt(head_dim)
  float yarn_log_mul = 0.0f;

  /// The KV cache's rows of this model (docs/kv-cache.md): per layer a K row of n_head_kv ×
  /// head_dim values and a V row of n_head_kv × head_dim_v; for MLA one K "head" of
  /// n_rot + kv_lora_rank values (the RoPE'd shared key part, then the normalized latent) and no
  /// V row (head_dim_v = 0: attention reads V as the latent inside the K row).
  struct KvRows {
    int64_t n_head_kv, head_dim, head_dim_v;
  };
  KvRows kv_rows() const {
    if (kv_lora_rank > 0) return {1, rope.n_rot + kv_lora_rank, 0};
    return {n_head_kv, head_dim, head_dim_v};
  }

  /// n_swa when every layer attends within the sliding window (then blocks before the window
  /// of the newest position can be given back), else 0.
  int64_t all_swa_window() const {
    for (int64_t il = 0; il < n_layer; ++il)
      if (!is_swa(il)) return 0;
    return n_swa;
  }
  /// Whether layer `il` attends within the sliding window only.
  bool is_swa(int64_t il) const {
    return n_swa > 0 && size_t(il) < swa_layers.size() && swa_layers[size_t(il)];
  }
};

/// Reads the hyperparameters of `file`. Throws ModelError naming the missing or invalid key
/// (e.g. "llama.block_count is missing"), or gguf::GgufError when a key has the wrong type.
Hparams load_hparams(const gguf::File& file);

}  // namespace kvrun
