// qwen3moe.cpp — Qwen3 MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention (NeoX RoPE,
// per-head Q/K RMSNorm) with a mixture-of-experts FFN in every layer. Keys (llama.cpp's GGUF
// names): qwen3moe.expert_count, .expert_used_count, .expert_feed_forward_length. Gating: softmax
// over the experts, top expert_used_count, weights renormalized (the model's norm_topk_prob).
#include <string>

#include "models/arch.h"

namespace kvrun {

namespace {

/// `key` as an integer in [1, max]; ModelError naming it otherwise.
int64_t require_count(const gguf::File& file, const std::string& key, int64_t max) {
  const auto v = file.get_int(key);
  if (!v) throw ModelError(key + " is missing");
  if (*v < 1 || *v > max) throw ModelError(key + " = " + std::to_string(*v) + " is out of range");
  return *v;
}

}  // namespace

void read_moe_counts(const gguf::File& file, Hparams& hp) {
  const std::string p = hp.arch + ".";
  hp.n_expert = require_count(file, p + "expert_count", 4096);
  hp.n_expert_used = require_count(file, p + "expert_used_count", hp.n_expert);
  hp.n_ff_exp = require_count(file, p + "expert_feed_forward_length", int64_t(1) << 24);
}

ArchSpec qwen3moe_arch(const gguf::File& file, Hparams& hp) {
  read_moe_counts(file, hp);
  ArchSpec s;
  s.rope_neox = true;
  s.qk_norm = true;
  s.moe = true;
  s.moe_norm = true;
  return s;
}

}  // namespace kvrun
