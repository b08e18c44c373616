// model_info.cpp — the facts `kvrun info` reports (see model_info.h).
#include "eval/model_info.h"

#include <algorithm>
#include <map>

#include "kv/kv_cache.h"
#include "kv_layout.h"
#include "models/arch.h"

namespace kvrun {

namespace {

/// Whether t is a mixture of experts' 3-D expert tensor (ne[2] = n_expert matrices), of which a
/// token reads n_expert_used.
bool is_expert_tensor(const gguf::TensorInfo& t, const Hparams& hp) {
  return hp.n_expert > 0 && t.n_dims == 3 && t.ne[2] == hp.n_expert;
}

}  // namespace

int64_t decode_weight_bytes(const gguf::File& file, const Hparams& hp) {
  int64_t total = 0, embd = 0;
  bool has_output = false;
  for (const gguf::TensorInfo& t : file.tensors()) {
    const bool experts = is_expert_tensor(t, hp);
    total += experts ? int64_t(t.n_bytes) / hp.n_expert * hp.n_expert_used : int64_t(t.n_bytes);
    if (t.name == "token_embd.weight") embd = int64_t(t.n_bytes);
    if (t.name == "output.weight") has_output = true;
  }
  return has_output ? total - embd : total;
}

ModelInfo describe_model(const gguf::File& file, int64_t n_ctx, int64_t block_size) {
  ModelInfo mi;
  mi.path = file.path();
  mi.gguf_version = file.version();
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
    int64_t elems = 1;
    for (int d = 0; d < t.n_dims; ++d) elems *= t.ne[d];
    mi.n_params += elems;
    const bool experts = is_expert_tensor(t, mi.hp);
    mi.n_params_active += experts ? elems / mi.hp.n_expert * mi.hp.n_expert_used : elems;
    all_data = all_data && t.data != nullptr;
  }
  const gguf::File::DataExtent extent = file.data_extent();  // every part of a split model
  mi.file_bytes = extent.file_bytes;
  mi.split_count = file.split_count();
  mi.data_bytes_needed = int64_t(extent.needed);
  mi.data_bytes_present = int64_t(extent.present);
  mi.has_weights = mi.n_tensors > 0 && all_data;
  mi.weight_bytes_active = decode_weight_bytes(file, mi.hp);
  size_t n_types = 0;
  const DType* types = all_dtypes(&n_types);
  for (size_t i = 0; i < n_types; ++i)
    if (auto it = mix.find(static_cast<uint32_t>(types[i])); it != mix.end())
      mi.quant_mix.push_back(it->second);

  mi.n_ctx = n_ctx > 0 ? n_ctx : mi.hp.n_ctx_train;
  // Every layer windowed: the blocks of the newest position's window (and its partial ends) are
  // all a sequence holds (KvSequence::release_before).
  // A mixed model's windowed layers hold as much with window tables (KvSequence::
  // release_window_before); its global layers hold n_ctx.
  mi.kv_tokens = mi.n_ctx;
  const int64_t bs = std::max<int64_t>(1, block_size);
  const int64_t window_tokens =
      mi.hp.n_swa > 0 ? std::min(mi.n_ctx, ((mi.hp.n_swa - 1 + bs - 1) / bs + 1) * bs) : 0;
  if (mi.hp.all_swa_window() > 0) mi.kv_tokens = window_tokens;
  mi.n_layer_window = kv_window_table_layers(mi.hp, KvCacheParams{});
  if (mi.n_layer_window > 0) mi.kv_window_tokens = window_tokens;
  const Hparams& hp = mi.hp;
  const Hparams::KvRows r = hp.kv_rows();  // MLA: the latent + RoPE part, one per layer
  for (DType t : kKvCacheTypes) {
    if (hp.kv_lora_rank > 0 && !kv_type_holds_mla(t, hp.rope.n_rot)) continue;
    KvSizeEntry e;
    e.type = t;
    e.bytes_per_token = kv_bytes_per_token(t, t, hp.n_layer, r.n_head_kv, r.head_dim, r.head_dim_v);
    e.bytes_global = kv_bytes_per_token(t, t, hp.n_layer - mi.n_layer_window, r.n_head_kv,
                                        r.head_dim, r.head_dim_v) *
                     mi.kv_tokens;
    e.bytes_window =
        kv_bytes_per_token(t, t, mi.n_layer_window, r.n_head_kv, r.head_dim, r.head_dim_v) *
        mi.kv_window_tokens;
    e.bytes_total = e.bytes_global + e.bytes_window;
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

namespace {

/// The layer index of a "blk.<i>.…" tensor name, or −1.
int64_t layer_of(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  int64_t i = 0;
  size_t p = 4;
  if (p >= name.size() || name[p] < '0' || name[p] > '9') return -1;
  for (; p < name.size() && name[p] >= '0' && name[p] <= '9'; ++p) i = i * 10 + (name[p] - '0');
  return p < name.size() && name[p] == '.' ? i : -1;
}

}  // namespace

GpuPlan plan_gpu(const ModelInfo& mi, const gguf::File& file, int64_t n_gpu, DType type_k,
                 DType type_v, bool kv_on_gpu, int64_t n_batch,
                 const std::vector<bool>* ffn_on_host) {
  const Hparams& hp = mi.hp;
  GpuPlan p;
  p.n_gpu = std::max<int64_t>(0, n_gpu);
  p.layers = std::min(p.n_gpu, hp.n_layer);
  p.output = p.n_gpu > hp.n_layer;
  const int64_t first = hp.n_layer - p.layers;  // the last `layers` layers
  bool has_output = false;
  int64_t embd = 0;
  uint64_t rope_freqs = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    const int64_t il = layer_of(t.name);
    const bool kept = ffn_on_host && il >= 0 && il < int64_t(ffn_on_host->size()) &&
                      (*ffn_on_host)[size_t(il)] && t.name.find(".ffn_") != std::string_view::npos;
    if (il >= first && il < hp.n_layer && !kept) p.weight_bytes += int64_t(t.n_bytes);
    if (t.name == "output.weight") has_output = true;
    if (t.name == "token_embd.weight") embd = int64_t(t.n_bytes);
    if (t.name == "rope_freqs.weight") rope_freqs = t.n_bytes;
    if (p.output && (t.name == "output.weight" || t.name == "output_norm.weight"))
      p.weight_bytes += int64_t(t.n_bytes);
  }
  if (p.output && !has_output) p.weight_bytes += embd;  // a tied head uploads the embedding
  // RoPE frequency factors (llama3 scaling): one copy on the GPU for its layers.
  if (p.layers > 0) p.weight_bytes += int64_t(rope_freqs);
  if (kv_on_gpu && p.layers > 0)
    p.kv_bytes = kv_bytes_per_token(type_k, type_v, p.layers, hp.kv_rows().n_head_kv,
                                    hp.kv_rows().head_dim, hp.kv_rows().head_dim_v) *
                 mi.kv_tokens;
  if (p.n_gpu > 0) {
    const int64_t q = hp.n_head * hp.head_dim, kv = 2 * hp.n_head_kv * hp.head_dim;
    const int64_t per_row = 4 * hp.n_embd + q + kv + 3 * hp.n_ff + (p.output ? hp.n_vocab : 0);
    p.scratch_bytes = n_batch * per_row * 4 + (int64_t(64) << 20) + (int64_t(128) << 20);
  }
  return p;
}

int64_t fit_gpu_layers(const ModelInfo& mi, const gguf::File& file, DType type_k, DType type_v,
                       bool kv_on_gpu, int64_t free_bytes, int64_t n_batch,
                       const std::vector<bool>* ffn_on_host) {
  int64_t n = 0;
  while (n <= mi.hp.n_layer &&
         plan_gpu(mi, file, n + 1, type_k, type_v, kv_on_gpu, n_batch, ffn_on_host).total() <=
             free_bytes)
    ++n;
  return n;
}

}  // namespace kvrun
