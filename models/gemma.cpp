// gemma.cpp — Gemma 2 and Gemma 3 (text): the llama block with the embedding scaled by
// sqrt(n_embd), RMSNorm before and after each sub-block (attn_norm / post_attention_norm,
// ffn_norm / post_ffw_norm; GGUF norm weights already hold Gemma's 1 + w), GeGLU with the tanh
// GELU, NeoX RoPE, tied output, and sliding-window layers interleaved with global ones.
//   gemma2 (Team Gemma 2024, "Gemma 2", §2): windowed layers are the even ones (window
//     gemma2.attention.sliding_window, default 4096); scores soft-capped at
//     attn_logit_softcapping (default 50), logits at final_logit_softcapping (default 30);
//     Q scaled by 1/sqrt(head_dim) before attention (1/sqrt(n_embd / n_head) for the 46-layer
//     27B, as llama.cpp; both after gemma_pytorch's query_pre_attn_scalar).
//   gemma3 (Team Gemma 2025, "Gemma 3", §2): five windowed layers per global one
//     ((il + 1) % 6 != 0; window gemma3.attention.sliding_window, required), per-head Q/K
//     RMSNorm, no soft-capping; windowed layers use RoPE base 10000 without scaling, global
//     ones rope.freq_base and the file's rope scaling; scores scaled by 1/sqrt(head_dim)
//     (1/sqrt(n_embd / n_head) for the 62-layer 27B).
#include <cmath>

#include "models/arch.h"

namespace kvrun {

ArchSpec gemma2_arch(const gguf::File& f, Hparams& hp) {
  hp.n_swa = read_sliding_window(f, hp, 4096);
  hp.swa_layers.resize(size_t(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) hp.swa_layers[size_t(il)] = il % 2 == 0;
  hp.attn_softcap = float(f.get_float("gemma2.attn_logit_softcapping").value_or(50.0));
  hp.final_softcap = float(f.get_float("gemma2.final_logit_softcapping").value_or(30.0));
  if (!(hp.attn_softcap > 0) || !(hp.final_softcap > 0))
    throw ModelError("gemma2 soft-capping values must be positive");
  ArchSpec s;
  s.rope_neox = true;
  s.post_norms = true;
  s.embd_scale = true;
  s.q_scale = 1.0f / std::sqrt(float(hp.n_layer == 46 ? hp.n_embd / hp.n_head : hp.head_dim));
  s.ffn = FfnAct::GeluTanh;
  return s;
}

ArchSpec gemma3_arch(const gguf::File& f, Hparams& hp) {
  hp.n_swa = read_sliding_window(f, hp, -1);
  if (hp.n_swa < 0) throw ModelError("gemma3.attention.sliding_window is missing");
  hp.swa_layers.resize(size_t(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) hp.swa_layers[size_t(il)] = (il + 1) % 6 != 0;
  hp.rope.freq_base_swa = 10000.0f;
  hp.rope.freq_scale_swa = 1.0f;
  ArchSpec s;
  s.rope_neox = true;
  s.qk_norm = true;
  s.post_norms = true;
  s.embd_scale = true;
  s.attn_scale = 1.0f / std::sqrt(float(hp.n_layer == 62 ? hp.n_embd / hp.n_head : hp.head_dim));
  s.ffn = FfnAct::GeluTanh;
  return s;
}

}  // namespace kvrun
