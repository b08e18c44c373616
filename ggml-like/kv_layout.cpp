// kv_layout.cpp — KV row sizes per cache type (see kv_layout.h for the layout).
#include "kv_layout.h"

#include <numeric>
#include <stdexcept>
#include <string>

#include "blocks.h"

namespace kvrun {

std::optional<DType> kv_type_from_name(std::string_view name) {
  if (name == "fp8") return DType::FP8_E4M3;
  auto t = dtype_from_name(name);
  if (!t) return std::nullopt;
  for (DType k : kKvCacheTypes)
    if (k == *t) return t;
  return std::nullopt;
}

const char* kv_type_name(DType t) { return traits(t).name; }

int64_t kv_row_bytes(DType type, int64_t n_head_kv, int64_t head_dim) {
  if (n_head_kv <= 0 || head_dim <= 0)
    throw std::invalid_argument("KV row needs n_head_kv > 0 and head_dim > 0");
  const int64_t n = n_head_kv * head_dim;
  auto blocks = [](int64_t values, int64_t per_block) {
    return (values + per_block - 1) / per_block;
  };
  switch (type) {
    case DType::F32:
      return n * 4;
    case DType::F16:
    case DType::BF16:
      return n * 2;
    case DType::Q8_0:
      return blocks(n, QK8_0) * int64_t(sizeof(block_q8_0));
    case DType::Q4_0:
      return blocks(n, QK4_0) * int64_t(sizeof(block_q4_0));
    case DType::FP8_E4M3:
    case DType::FP8_E5M2:
      return n + n_head_kv;  // one E8M0 scale byte per head
    case DType::NVFP4: {
      const int64_t group = std::lcm(head_dim, int64_t(QK_NVFP4));
      const int64_t n_groups = blocks(n, group);
      return n_groups * (group / QK_NVFP4) * int64_t(sizeof(block_nvfp4)) + n_groups * 4;
    }
    default:
      throw std::invalid_argument(std::string(traits(type).name) + " is not a KV cache type");
  }
}

int64_t kv_bytes_per_token(DType type_k, DType type_v, int64_t n_layer, int64_t n_head_kv,
                           int64_t head_dim_k, int64_t head_dim_v) {
  return n_layer * (kv_row_bytes(type_k, n_head_kv, head_dim_k) +
                    kv_row_bytes(type_v, n_head_kv, head_dim_v));
}

}  // namespace kvrun
