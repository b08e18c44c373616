// kv_contiguous.cpp — see kv_contiguous.h.
#include "kv_contiguous.h"

#include <stdexcept>

namespace kvrun {

KvContiguous::KvContiguous(const Hparams& hp, int64_t n_ctx, DType type)
    : n_ctx_(n_ctx), type_(type) {
  if (type != DType::F16 && type != DType::F32)
    throw std::invalid_argument("KvContiguous: the KV type must be f16 or f32");
  if (n_ctx < 1) throw std::invalid_argument("KvContiguous: n_ctx must be at least 1");
  const size_t elem = type == DType::F16 ? 2 : 4;
  const size_t k_bytes = size_t(n_ctx * hp.n_head_kv * hp.head_dim) * elem;
  const size_t v_bytes = size_t(n_ctx * hp.n_head_kv * hp.head_dim_v) * elem;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    buffers_.emplace_back(k_bytes + v_bytes);
    char* base = static_cast<char*>(buffers_.back().data());
    views_.push_back(cpu::KvLayerView{type, base, base + k_bytes, n_ctx});
    bytes_ += k_bytes + v_bytes;
  }
}

}  // namespace kvrun
