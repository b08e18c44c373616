// gptoss.cpp — gpt-oss (gpt-oss-20b, gpt-oss-120b; GGUF arch "gpt-oss", llama.cpp's
// LLM_ARCH_OPENAI_MOE). Facts from OpenAI's model card (2025) and the reference graph
// (ik_llama.cpp src/graphs/build_openai.cpp, src/llama-hparams.cpp, src/llama-load-tensors.cpp):
//  * attention: Q/K/V and output biases, NeoX RoPE with the file's rope scaling (YaRN ×32 over
//    4096 in the released files), scores scaled by 1/sqrt(head_dim), a learned sink logit per
//    head in the softmax denominator (attn_sinks); even layers attend within
//    gpt-oss.attention.sliding_window (128; required, as the reference reads it), odd ones
//    globally (the reference's fixed pattern of 2);
//  * FFN: its RMSNorm weight is stored as post_attention_norm; a mixture of experts in every
//    layer (gpt-oss.expert_count, .expert_used_count, .expert_feed_forward_length): router with
//    bias, the top expert_used_count logits then a softmax over them, experts with biases and
//    the clamped SwiGLU (alpha 1.702, limit 7: backend.h kSwiGluOai*);
//  * an untied output head.
#include "models/arch.h"

namespace kvrun {

ArchSpec gptoss_arch(const gguf::File& file, Hparams& hp) {
  read_moe_counts(file, hp);
  hp.n_swa = read_sliding_window(file, hp, -1);
  if (hp.n_swa <= 0) throw ModelError(hp.arch + ".attention.sliding_window is missing or 0");
  hp.swa_layers.resize(size_t(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) hp.swa_layers[size_t(il)] = il % 2 == 0;
  ArchSpec s;
  s.rope_neox = true;
  s.ffn = FfnAct::SiluOai;
  s.output_optional = false;
  s.moe = true;
  s.moe_norm = false;
  s.moe_gating = MoeGating::kTopkSoftmax;
  s.moe_bias = true;
  s.attn_sinks = true;
  s.ffn_norm_is_post_attention = true;
  return s;
}

}  // namespace kvrun
