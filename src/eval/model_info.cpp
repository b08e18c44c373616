// model_info.cpp — the facts `kvrun info` reports (see model_info.h).
#include "eval/model_info.h"

#include <algorithm>
#include <map>

#include "kv_layout.h"
#include "models/arch.h"

namespace kvrun {

ModelInfo describe_model(const gguf::File& file, int64_t n_ctx, int64_t block_size) {
  ModelInfo mi;
  mi.path = file.path();
  mi.gguf_version = file.version();
  mi.file_bytes = file.file_size();
  mi.hp = load_hparams(file);
  try {
    configure_arch(file, mi.hp);  // sliding window, soft-caps (an unknown arch is still described)
  } catch (const ModelError&) {
  }
  if (auto v = file.get_string("tokenizer.ggml.model")) mi.tokenizer_model = std::string(*v);
  if (auto v = file.get_string("tokenizer.ggml.pre")) mi.tokenizer_pre = std::string(*v);
  if (auto v = file.get_string("general.name")) mi.name = std::string(*v);

  std::map<uint32_t, QuantMixEntry> mix;
  bool all_data = true;
  for (const gguf::TensorInfo& t : file.tensors()) {
    QuantMixEntry& e = mix[static_cast<uint32_t>(t.type)];
    e.type = t.type;
    e.n_tensors++;
    e.bytes += int64_t(t.n_bytes);
    mi.n_tensors++;
    mi.weight_bytes += int64_t(t.n_bytes);
    all_data = all_data && t.data != nullptr;
    mi.data_bytes_needed = std::max(mi.data_bytes_needed, int64_t(t.offset + t.n_bytes));
  }
  if (file.file_size() > file.data_offset())
    mi.data_bytes_present = int64_t(file.file_size() - file.data_offset());
  mi.has_weights = mi.n_tensors > 0 && all_data;
  size_t n_types = 0;
  const DType* types = all_dtypes(&n_types);
  for (size_t i = 0; i < n_types; ++i)
    if (auto it = mix.find(static_cast<uint32_t>(types[i])); it != mix.end())
      mi.quant_mix.push_back(it->second);

  mi.n_ctx = n_ctx > 0 ? n_ctx : mi.hp.n_ctx_train;
  // Every layer windowed: the blocks of the newest position's window (and its partial ends) are
  // all a sequence holds (KvSequence::release_before).
  mi.kv_tokens = mi.n_ctx;
  if (const int64_t w = mi.hp.all_swa_window(); w > 0 && block_size > 0)
    mi.kv_tokens = std::min(mi.n_ctx, ((w - 1 + block_size - 1) / block_size + 1) * block_size);
  for (DType t : kKvCacheTypes) {
    KvSizeEntry e;
    e.type = t;
    e.bytes_per_token =
        kv_bytes_per_token(t, t, mi.hp.n_layer, mi.hp.n_head_kv, mi.hp.head_dim, mi.hp.head_dim_v);
    e.bytes_total = e.bytes_per_token * mi.kv_tokens;
    mi.kv.push_back(e);
  }
  return mi;
}

void plan_kv_tiers(ModelInfo& mi, int64_t fast_budget) {
  mi.kv_fast_budget = std::max<int64_t>(0, fast_budget);
  for (KvSizeEntry& e : mi.kv) {
    e.bytes_fast = std::min(e.bytes_total, mi.kv_fast_budget);
    e.bytes_offloaded = e.bytes_total - e.bytes_fast;
  }
}

}  // namespace kvrun
