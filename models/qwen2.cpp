// qwen2.cpp — Qwen2 / Qwen2.5: the llama block with Q/K/V biases (loaded when present) and NeoX
// RoPE (llama.cpp: LLM_ARCH_QWEN2, rope type NEOX).
#include "models/arch.h"

namespace kvrun {

ArchSpec qwen2_arch(const gguf::File&, Hparams&) {
  ArchSpec s;
  s.rope_neox = true;
  return s;
}

}  // namespace kvrun
