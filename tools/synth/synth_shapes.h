// synth_shapes.h — the model shapes `kvrun synth` can generate (hyperparameters only).
//
// Real shapes use the published hyperparameters of the models' Hugging Face `config.json`
// (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
// head_dim, vocab_size, max_position_embeddings, rms_norm_eps, rope_theta, rope_scaling,
// tie_word_embeddings):
//   llama3.2-1b   meta-llama/Llama-3.2-1B/config.json
//   llama3.1-8b   meta-llama/Llama-3.1-8B/config.json
//   qwen2.5-0.5b  Qwen/Qwen2.5-0.5B/config.json (QKV biases: Qwen2 attention has bias=True)
//   qwen3-30b-a3b Qwen/Qwen3-30B-A3B/config.json (num_experts, num_experts_per_tok,
//                 moe_intermediate_size; norm_topk_prob true)
//   gpt-oss-20b   openai/gpt-oss-20b/config.json (num_local_experts 32, experts_per_token 4,
//                 intermediate_size 2880, sliding_window 128, rope_scaling yarn ×32 over 4096)
//   deepseek-v2-lite deepseek-ai/DeepSeek-V2-Lite/config.json (kv_lora_rank 512, q_lora_rank
//                 null, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128,
//                 n_routed_experts 64, num_experts_per_tok 6, n_shared_experts 2,
//                 moe_intermediate_size 1408, first_k_dense_replace 1, routed_scaling_factor 1,
//                 scoring_func softmax, norm_topk_prob false, rope_scaling yarn ×40 over 4096
//                 with mscale_all_dim 0.707); GGUF keys as llama.cpp's convert_hf_to_gguf.py
//                 writes them (rope.scaling.yarn_log_multiplier = 0.1 · mscale_all_dim)
//   moonlight-16b-a3b moonshotai/Moonlight-16B-A3B/config.json (DeepseekV3ForCausalLM, GGUF arch
//                 deepseek2: V2-Lite's attention and expert counts with intermediate_size 11264,
//                 vocab_size 163840, rope_theta 50000 without rope_scaling, rms_norm_eps 1e-5,
//                 max_position_embeddings 8192; scoring_func sigmoid, topk_method noaux_tc (an
//                 e_score_correction_bias per MoE layer), norm_topk_prob true,
//                 routed_scaling_factor 2.446, n_group 1 / topk_group 1)
// The tiny shapes are kvrun's own, for tests: head_dim 64 so every block quant applies, and
// n_embd 128 (not a multiple of 256) so the K-quant fallback is exercised too. tiny-qwen3,
// tiny-mistral, tiny-phi3, tiny-gemma2 and tiny-gemma3 have the tensor names and metadata
// llama.cpp expects of each architecture (src/llama-model.cpp), small windows (32 to 64) so a
// short generation crosses them, and gemma2's soft-caps lowered so they change the result.
// tiny-bert (CLS pooling, 512 positions) and tiny-nomic-bert (mean pooling, RoPE base 1000) are
// encoders with llama.cpp's bert / nomic-bert tensors and keys and a WordPiece vocabulary
// (synth_vocab.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvrun {

/// Llama 3 RoPE frequency scaling (Meta's Llama 3.1 release; `rope_scaling` with
/// rope_type "llama3" in config.json). `factor` 0 means no scaling.
struct SynthRopeScaling {
  double factor = 0;            ///< context extension factor ("factor")
  double low_freq_factor = 1;   ///< "low_freq_factor"
  double high_freq_factor = 4;  ///< "high_freq_factor"
  int64_t n_ctx_orig = 8192;    ///< "original_max_position_embeddings"
};

/// One generatable model shape. Sizes are element counts.
struct SynthShape {
  std::string name;       ///< what --shape takes, e.g. "llama3.2-1b"
  std::string arch;       ///< general.architecture: llama, qwen2, qwen3, phi3, gemma2/3, bert, …
  int64_t n_layer = 0;    ///< num_hidden_layers
  int64_t n_embd = 0;     ///< hidden_size
  int64_t n_head = 0;     ///< num_attention_heads
  int64_t n_head_kv = 0;  ///< num_key_value_heads
  int64_t head_dim = 0;   ///< head_dim (K, Q and V)
  int64_t n_ff = 0;       ///< intermediate_size
  int64_t n_vocab = 0;    ///< vocab_size
  int64_t n_ctx_train = 0;        ///< max_position_embeddings
  double rope_theta = 10000;      ///< rope_theta
  double rms_eps = 1e-5;          ///< rms_norm_eps
  bool tied = false;              ///< tie_word_embeddings: no output.weight tensor
  bool qkv_bias = false;          ///< attn_q/k/v biases (qwen2)
  SynthRopeScaling rope_scaling;  ///< llama3 scaling → a rope_freqs.weight tensor
  bool qk_norm = false;           ///< attn_q_norm / attn_k_norm {head_dim} (qwen3, gemma3)
  bool fused = false;             ///< attn_qkv and a 2·n_ff-row ffn_up instead of separate
                                  ///< Q/K/V and gate/up (phi3)
  bool post_norms = false;        ///< post_attention_norm / post_ffw_norm (gemma2, gemma3)
  int64_t sliding_window = 0;     ///< {arch}.attention.sliding_window when > 0
  double attn_softcap = 0;        ///< gemma2.attn_logit_softcapping when > 0
  double final_softcap = 0;       ///< gemma2.final_logit_softcapping when > 0
  double linear_rope_factor = 0;  ///< rope.scaling.type "linear" with this factor when > 0
  /// LongRoPE (phi3) when > 0: rope.scaling.original_context_length = this,
  /// rope.scaling.attn_factor = sqrt(1 + ln(n_ctx_train / this) / ln(this)) (Phi-3's
  /// configuration), and rope_factors_short / rope_factors_long tensors.
  int64_t longrope_n_ctx_orig = 0;
  /// YaRN (qwen2.5 long-context configuration) when > 0: rope.scaling.type "yarn" with this
  /// factor and rope.scaling.original_context_length = yarn_n_ctx_orig.
  double yarn_factor = 0;
  int64_t yarn_n_ctx_orig = 0;
  /// Mixture of experts when > 0 (qwen3moe): {arch}.expert_count, a router ffn_gate_inp and 3-D
  /// ffn_{gate,up,down}_exps instead of ffn_gate / ffn_up / ffn_down.
  int64_t n_expert = 0;       ///< num_experts
  int64_t n_expert_used = 0;  ///< num_experts_per_tok
  int64_t n_ff_exp = 0;       ///< moe_intermediate_size
  /// Encoders (arch bert, nomic-bert; models/bert.h): LayerNorm epsilon (layer_norm_eps),
  /// {arch}.pooling_type (llama.cpp's values: 1 mean, 2 cls) and a WordPiece vocabulary.
  double norm_eps = 0;
  int64_t pooling_type = 0;
  /// gpt-oss's tensors (llama.cpp's LLM_ARCH_OPENAI_MOE names): attn_output bias, attn_sinks
  /// (one logit per head), router and per-expert biases, the FFN's norm stored as
  /// post_attention_norm. In an MXFP4 file only the experts are MXFP4 and the other matrices
  /// Q8_0, as in the released GGUFs (ggml-org/gpt-oss-20b-GGUF: 12.1 GB = 19.1 G expert weights
  /// at 4.25 bits + 1.8 G others at 8.5 bits).
  bool gpt_oss = false;
  /// The experts' gate and up weights get this many times the usual standard deviation
  /// (tiny-gpt-oss: 3, so the clamped SwiGLU's limit of 7 is reached by a few percent of them).
  double expert_gain = 1;
  /// DeepSeek-V2 multi-head latent attention (arch deepseek2) when kv_lora_rank > 0 (DeepSeek-AI
  /// 2024, "DeepSeek-V2", §2.1): attn_kv_a_mqa {n_embd, kv_lora_rank + qk_rope}, attn_kv_a_norm,
  /// attn_kv_b {kv_lora_rank, n_head · (head_dim − qk_rope + head_dim_v)}, Q through attn_q or
  /// (q_lora_rank > 0) attn_q_a, attn_q_a_norm, attn_q_b; head_dim is qk_nope + qk_rope.
  int64_t kv_lora_rank = 0;
  int64_t q_lora_rank = 0;          ///< q_lora_rank (0: Q without LoRA, as V2-Lite)
  int64_t qk_rope = 0;              ///< qk_rope_head_dim (rope.dimension_count)
  int64_t head_dim_v = 0;           ///< v_head_dim (0: head_dim)
  int64_t n_expert_shared = 0;      ///< n_shared_experts: ffn_{gate,up,down}_shexp
  int64_t n_dense_lead = 0;         ///< first_k_dense_replace: leading dense FFN layers
  double expert_weights_scale = 0;  ///< routed_scaling_factor (deepseek2 keys when > 0)
  /// DeepSeek-V3's router (scoring_func sigmoid, topk_method noaux_tc): expert_gating_func 2 and
  /// an exp_probs_b.bias {n_expert} (e_score_correction_bias) per MoE layer; else 1 (softmax)
  bool sigmoid_gating = false;
  /// DeepSeek-V3's node-limited routing (n_group, topk_group): expert_group_count and
  /// expert_group_used_count when n_expert_group > 1
  int64_t n_expert_group = 0;
  int64_t n_expert_group_used = 0;
  bool expert_weights_norm = false;  ///< norm_topk_prob: {arch}.expert_weights_norm true
  double yarn_log_mul = 0;           ///< rope.scaling.yarn_log_multiplier when > 0
  std::string source;                ///< where the numbers come from
};

/// Every known shape, in a fixed order (the tiny ones first).
const std::vector<SynthShape>& synth_shapes();

/// The shape named `name` (exact match), or null.
const SynthShape* find_synth_shape(std::string_view name);

}  // namespace kvrun
