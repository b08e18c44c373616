// model_info.cpp — the facts `kvrun info` reports (see model_info.h).
#include "model_info.h"

#include <algorithm>
#include <map>

#include "kv_layout.h"

namespace kvrun {

ModelInfo describe_model(const gguf::File& file, int64_t n_ctx) {
  ModelInfo mi;
  mi.path = file.path();
  mi.gguf_version = file.version();
  mi.file_bytes = file.file_size();
  mi.hp = load_hparams(file);
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
  }
  mi.has_weights = mi.n_tensors > 0 && all_data;
  size_t n_types = 0;
  const DType* types = all_dtypes(&n_types);
  for (size_t i = 0; i < n_types; ++i)
    if (auto it = mix.find(static_cast<uint32_t>(types[i])); it != mix.end())
      mi.quant_mix.push_back(it->second);

  mi.n_ctx = n_ctx > 0 ? n_ctx : mi.hp.n_ctx_train;
  for (DType t : kKvCacheTypes) {
    KvSizeEntry e;
    e.type = t;
    e.bytes_per_token =
        kv_bytes_per_token(t, t, mi.hp.n_layer, mi.hp.n_head_kv, mi.hp.head_dim, mi.hp.head_dim_v);
    e.bytes_total = e.bytes_per_token * mi.n_ctx;
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
