// hparams.cpp — hyperparameters from GGUF metadata (see hparams.h).
#include "models/hparams.h"

#include <algorithm>
#include <string>

namespace kvrun {
namespace {

/// Reads `{arch}.{name}` as an integer that may also be given per layer (an array: the max).
std::optional<int64_t> get_int_or_max(const gguf::File& f, const std::string& key) {
  const gguf::Value* v = f.find(key);
  if (!v) return std::nullopt;
  if (v->type == gguf::ValueType::ARRAY) {
    auto arr = f.get_int_array(key);
    if (!arr || arr->empty()) throw ModelError(key + " is an empty array");
    return *std::max_element(arr->begin(), arr->end());
  }
  return f.get_int(key);
}

int64_t require_positive(const gguf::File& f, const std::string& key) {
  auto v = get_int_or_max(f, key);
  if (!v) throw ModelError(key + " is missing");
  if (*v <= 0 || *v > (int64_t(1) << 40))
    throw ModelError(key + " = " + std::to_string(*v) + " is out of range");
  return *v;
}

int64_t optional_positive(const gguf::File& f, const std::string& key, int64_t fallback) {
  auto v = get_int_or_max(f, key);
  if (!v) return fallback;
  if (*v <= 0 || *v > (int64_t(1) << 40))
    throw ModelError(key + " = " + std::to_string(*v) + " is out of range");
  return *v;
}

int64_t vocab_size(const gguf::File& f, const std::string& arch) {
  if (const gguf::Value* v = f.find("tokenizer.ggml.tokens");
      v && v->type == gguf::ValueType::ARRAY)
    return int64_t(v->count);
  if (auto n = f.get_int(arch + ".vocab_size")) return *n;
  if (const gguf::TensorInfo* t = f.find_tensor("token_embd.weight")) return t->ne[1];
  return 0;
}

}  // namespace

Hparams load_hparams(const gguf::File& f) {
  Hparams hp;
  auto arch = f.get_string("general.architecture");
  if (!arch || arch->empty()) throw ModelError("general.architecture is missing");
  hp.arch = std::string(*arch);
  const std::string p = hp.arch + ".";

  hp.n_layer = require_positive(f, p + "block_count");
  hp.n_embd = require_positive(f, p + "embedding_length");
  hp.n_head = require_positive(f, p + "attention.head_count");
  hp.n_head_kv = optional_positive(f, p + "attention.head_count_kv", hp.n_head);
  if (hp.n_head % hp.n_head_kv != 0)
    throw ModelError(p + "attention.head_count (" + std::to_string(hp.n_head) +
                     ") is not a multiple of head_count_kv (" + std::to_string(hp.n_head_kv) + ")");
  if (hp.n_embd % hp.n_head != 0 && !f.find(p + "attention.key_length"))
    throw ModelError(p + "embedding_length is not a multiple of attention.head_count and " + p +
                     "attention.key_length is absent");
  hp.head_dim = optional_positive(f, p + "attention.key_length", hp.n_embd / hp.n_head);
  hp.head_dim_v = optional_positive(f, p + "attention.value_length", hp.head_dim);
  hp.n_ff = optional_positive(f, p + "feed_forward_length", 0);
  hp.n_ctx_train = optional_positive(f, p + "context_length", 0);
  hp.n_vocab = vocab_size(f, hp.arch);
  if (auto eps = f.get_float(p + "attention.layer_norm_rms_epsilon")) hp.rms_eps = float(*eps);

  hp.rope.n_rot = optional_positive(f, p + "rope.dimension_count", hp.head_dim);
  if (hp.rope.n_rot > hp.head_dim)
    throw ModelError(p + "rope.dimension_count exceeds the head size");
  if (auto base = f.get_float(p + "rope.freq_base")) hp.rope.freq_base = float(*base);
  if (auto type = f.get_string(p + "rope.scaling.type")) hp.rope.scaling_type = std::string(*type);
  if (auto factor = f.get_float(p + "rope.scaling.factor"))
    hp.rope.scaling_factor = float(*factor);
  else if (auto lin = f.get_float(p + "rope.scale_linear"))
    hp.rope.scaling_factor = float(*lin);
  if (hp.rope.scaling_factor == 0.0f) hp.rope.scaling_factor = 1.0f;  // 0: unset, as llama.cpp
  // A factor without a type scales linearly (llama.cpp's default type); "none" never scales.
  if (!f.find(p + "rope.scaling.type") && hp.rope.scaling_factor != 1.0f)
    hp.rope.scaling_type = "linear";
  if (auto orig = f.get_int(p + "rope.scaling.original_context_length")) hp.rope.n_ctx_orig = *orig;
  if (auto af = f.get_float(p + "rope.scaling.attn_factor")) hp.rope.attn_factor = float(*af);
  if (auto v = f.get_float(p + "rope.scaling.yarn_ext_factor")) hp.rope.yarn_ext_factor = float(*v);
  if (auto v = f.get_float(p + "rope.scaling.yarn_attn_factor"))
    hp.rope.yarn_attn_factor = float(*v);
  if (auto v = f.get_float(p + "rope.scaling.yarn_beta_fast")) hp.rope.yarn_beta_fast = float(*v);
  if (auto v = f.get_float(p + "rope.scaling.yarn_beta_slow")) hp.rope.yarn_beta_slow = float(*v);
  hp.rope.has_freq_factors = f.find_tensor("rope_freqs.weight") != nullptr;
  return hp;
}

}  // namespace kvrun
