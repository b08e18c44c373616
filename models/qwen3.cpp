// qwen3.cpp — Qwen3 (dense): the llama block with NeoX RoPE and an RMSNorm of every Q and K head
// (attn_q_norm / attn_k_norm, {head_dim}) between the projection and RoPE; no biases.
#include "models/arch.h"

namespace kvrun {

ArchSpec qwen3_arch(const gguf::File&, Hparams&) {
  ArchSpec s;
  s.rope_neox = true;
  s.qk_norm = true;
  return s;
}

}  // namespace kvrun
