// arch.h (models/) — what distinguishes one decoder-only architecture from another.
//
// Every supported architecture is the llama block (models/llama.h) with options: each has one
// small file (models/<arch>.cpp) that reads its own GGUF keys into Hparams and returns its
// ArchSpec; the weights loader and the forward pass are shared. Tensor names are llama.cpp's
// (src/llama-arch.cpp): fused tensors (attn_qkv, a 2·n_ff-row ffn_up) and optional ones
// (biases, attn_q_norm / attn_k_norm, post_attention_norm / post_ffw_norm) are used when present.
//
//   llama    Touvron et al. 2023; Mistral 7B / Ministral are GGUF arch "llama", with
//            llama.attention.sliding_window when the file sets it (every layer windowed)
//   qwen2    Q/K/V biases, NeoX RoPE (Qwen2 technical report, Yang et al. 2024)
//   qwen3    per-head RMSNorm of Q and K before RoPE, no biases (Qwen3 technical report 2025)
//   phi3     fused QKV and gate/up, NeoX RoPE with LongRoPE short/long factors and
//            rope.scaling.attn_factor, Q pre-scaled, sliding window on every layer
//            (Abdin et al. 2024, "Phi-3 Technical Report")
//   gemma2   embedding · √n_embd, GeGLU (tanh GELU), post-norms, attention and final logit
//            soft-capping, sliding window on even layers (Team Gemma 2024, "Gemma 2")
//   gemma3   as gemma2 without soft-capping, with per-head Q/K RMSNorm, 5 windowed layers per
//            global one, RoPE base 10000 on windowed layers (Team Gemma 2025, "Gemma 3")
//   qwen3moe qwen3's attention with a mixture-of-experts FFN in every layer: a router
//            (ffn_gate_inp), softmax, top-k experts with renormalized weights, SwiGLU experts
//            (ffn_{gate,up,down}_exps, 3-D) (Qwen3 technical report 2025, Qwen3-30B-A3B)
//
// Encoders (embedding models, ArchSpec::encoder; models/bert.h runs them): a different block,
// loaded and run by models/bert.cpp, never used for text generation.
//   bert       token + token-type + absolute position embeddings, embedding LayerNorm,
//              bidirectional attention with Q/K/V and output biases, post-LayerNorm blocks, GELU
//              FFN with biases (Devlin et al. 2019, "BERT")
//   nomic-bert bert without position embeddings or biases: fused QKV, NeoX RoPE, SwiGLU FFN
//              (Nussbaum et al. 2024, "Nomic Embed")
//   deepseek2 multi-head latent attention (one cached latent + shared RoPE key part per
//            token; Q through a LoRA unless V2-Lite), plain RoPE with YaRN and its log-scaled
//            score factor, the first leading_dense_block_count FFNs dense, the others softmax-gated
//            experts (weights × expert_weights_scale) plus shared experts (DeepSeek-AI 2024,
//            "DeepSeek-V2"; models/deepseek2.cpp); DeepSeek-V3-style files (Moonlight, V3, R1)
//            gate by sigmoid with an expert selection bias (exp_probs_b) and renormalize
//   gpt-oss  (GGUF arch "gpt-oss", llama.cpp's LLM_ARCH_OPENAI_MOE) Q/K/V and output biases,
//            a learned attention sink per head, a 128-token window on even layers, YaRN RoPE;
//            a MoE FFN in every layer whose norm is named post_attention_norm: router with
//            bias, top-k of the logits then softmax over the k, experts with biases and the
//            clamped SwiGLU (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card")
#pragma once

#include <string>
#include <string_view>

#include "backend.h"
#include "gguf.h"
#include "models/hparams.h"

namespace kvrun {

/// The feed-forward block's gated activation.
enum class FfnAct {
  SiLU,      ///< SwiGLU: silu(gate) · up (llama, qwen, phi3, mistral)
  GeluTanh,  ///< GeGLU: gelu_tanh(gate) · up (gemma)
  SiluOai,   ///< gpt-oss's clamped SwiGLU (GluKind::kSwiGluOai, backend.h)
};

/// How the shared forward pass runs one architecture (defaults: plain llama).
struct ArchSpec {
  std::string name;         ///< general.architecture
  bool rope_neox = false;   ///< NeoX rotation (x[i], x[i + n_rot/2]); false: adjacent pairs
  bool qk_norm = false;     ///< attn_q_norm / attn_k_norm {head_dim}: RMSNorm per head before RoPE
  bool post_norms = false;  ///< post_attention_norm / post_ffw_norm: RMSNorm of each sub-block's
                            ///< output before the residual add
  bool embd_scale = false;  ///< token embeddings multiplied by sqrt(n_embd)
  float q_scale = 0;        ///< > 0: Q multiplied by it after RoPE and the scores unscaled, as
                            ///< llama.cpp's phi3 / gemma2 graphs do (ggml_scale of Q)
  float attn_scale = 0;     ///< score scale when q_scale is 0; 0 = 1/sqrt(head_dim)
  FfnAct ffn = FfnAct::SiLU;
  bool output_optional = true;  ///< output.weight may be absent (tied to token_embd)
  bool moe = false;             ///< the FFN is a mixture of experts (Hparams::n_expert)
  bool moe_norm = true;         ///< the top-k router weights are renormalized to sum 1
  /// An encoder (bert, nomic-bert): bidirectional attention over whole inputs, outputs
  /// embeddings only (no output head); loaded and run by models/bert.h.
  bool encoder = false;
  /// The router's gate function (backend.h MoeGating): softmax (qwen3moe, DeepSeek-V2),
  /// sigmoid (DeepSeek-V3 files of deepseek2), or the top-k logits then a softmax over those k
  /// (gpt-oss; moe_norm unused)
  MoeGating moe_gating = MoeGating::kSoftmax;
  /// Group-limited routing (backend.h MoeRouteParams n_group / n_group_used / group_top):
  /// deepseek2 files with expert_group_count > 1; 1 / 1 / 1 elsewhere (no restriction).
  int64_t moe_n_group = 1;
  int64_t moe_n_group_used = 1;
  int64_t moe_group_top = 1;
  /// Biases of the router and the experts are required: ffn_gate_inp.bias {n_expert},
  /// ffn_{gate,up}_exps.bias {n_ff_exp, n_expert}, ffn_down_exps.bias {n_embd, n_expert}
  /// (gpt-oss; other MoE architectures use them when present)
  bool moe_bias = false;
  bool attn_sinks = false;  ///< attn_sinks {n_head} f32: a learned sink logit per head (gpt-oss)
  /// The FFN's pre-norm is stored as post_attention_norm (gpt-oss: Hugging Face's
  /// post_attention_layernorm name), not ffn_norm; there is no attention post-norm
  bool ffn_norm_is_post_attention = false;
  /// Multi-head latent attention (deepseek2): the layers' attention is mla_attention_block
  /// (models/llama.h) over a KV cache of latents (Hparams::kv_lora_rank)
  bool mla = false;
};

/// Whether `arch` (general.architecture) is an encoder kvrun knows (bert, nomic-bert): an
/// embedding model that cannot generate text.
bool is_encoder_arch(std::string_view arch);

/// The architectures kvrun runs, comma-separated (for error messages).
const char* supported_archs();

/// Reads the architecture-specific keys of `file` into `hp` (sliding window, soft-caps, RoPE
/// variants) and returns the spec of hp.arch. Throws ModelError for an unsupported
/// architecture or an invalid architecture key.
ArchSpec configure_arch(const gguf::File& file, Hparams& hp);

// One per architecture (models/<arch>.cpp).
ArchSpec llama_arch(const gguf::File& file, Hparams& hp);      ///< llama / mistral
ArchSpec qwen2_arch(const gguf::File& file, Hparams& hp);      ///< qwen2
ArchSpec qwen3_arch(const gguf::File& file, Hparams& hp);      ///< qwen3
ArchSpec phi3_arch(const gguf::File& file, Hparams& hp);       ///< phi3
ArchSpec gemma2_arch(const gguf::File& file, Hparams& hp);     ///< gemma2
ArchSpec gemma3_arch(const gguf::File& file, Hparams& hp);     ///< gemma3
ArchSpec qwen3moe_arch(const gguf::File& file, Hparams& hp);   ///< qwen3moe
ArchSpec bert_arch(const gguf::File& file, Hparams& hp);       ///< bert, nomic-bert
ArchSpec gptoss_arch(const gguf::File& file, Hparams& hp);     ///< gpt-oss
ArchSpec deepseek2_arch(const gguf::File& file, Hparams& hp);  ///< deepseek2

/// Reads `{arch}.expert_count`, `.expert_used_count` (≤ expert_count) and
/// `.expert_feed_forward_length` into hp (all required, ≥ 1). Throws ModelError naming the key.
void read_moe_counts(const gguf::File& file, Hparams& hp);

/// `{arch}.attention.sliding_window` if present (else `fallback`), checked to be ≥ 0.
int64_t read_sliding_window(const gguf::File& file, const Hparams& hp, int64_t fallback);

}  // namespace kvrun
