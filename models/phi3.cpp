// phi3.cpp — Phi-3 / Phi-3.5 / Phi-4-mini (llama.cpp LLM_ARCH_PHI3): fused attn_qkv
// {n_embd, n_embd + 2·n_embd_kv} and ffn_up {n_embd, 2·n_ff} (gate = first half, up = second),
// NeoX RoPE with LongRoPE frequency factors (rope_factors_short / rope_factors_long, the long ones
// when the context exceeds rope.scaling.original_context_length) and rope.scaling.attn_factor,
// Q scaled by 1/sqrt(head_dim) before attention, and a sliding window on every layer
// (phi3.attention.sliding_window; llama.cpp's defaults when absent: 2047 for the 4k models,
// 262144 / 131072 for the 128k mini / medium; else an error, as there).
#include <cmath>

#include "models/arch.h"

namespace kvrun {

ArchSpec phi3_arch(const gguf::File& f, Hparams& hp) {
  int64_t fallback = 0;
  if ((hp.n_layer == 32 || hp.n_layer == 40) && hp.n_ctx_train == 4096)
    fallback = 2047;
  else if (hp.n_layer == 32 && hp.n_head_kv == 32 && hp.n_ctx_train == 131072)
    fallback = 262144;
  else if (hp.n_layer == 40 && hp.n_ctx_train == 131072)
    fallback = 131072;
  hp.n_swa = read_sliding_window(f, hp, fallback);
  if (hp.n_swa == 0 && !f.find("phi3.attention.sliding_window"))
    throw ModelError("phi3.attention.sliding_window is missing");
  hp.swa_layers.assign(size_t(hp.n_layer), hp.n_swa > 0);
  ArchSpec s;
  s.rope_neox = true;
  s.q_scale = 1.0f / std::sqrt(float(hp.head_dim));
  s.output_optional = false;
  return s;
}

}  // namespace kvrun
