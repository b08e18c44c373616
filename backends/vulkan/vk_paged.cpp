// vk_paged.cpp — see vk_paged.h.
#include "vulkan/vk_paged.h"

#include <algorithm>

namespace kvrun::vulkan {

int kv_code(DType t) {
  switch (t) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::BF16:
      return 2;
    case DType::Q8_0:
      return 3;
    case DType::FP8_E4M3:
      return 4;
    case DType::FP8_E5M2:
      return 5;
    case DType::Q4_0:
      return 6;
    case DType::NVFP4:
      return 7;
    default:
      return -1;
  }
}

std::vector<uint64_t> kv_store_targets(const KvLayer& kv, const PageTable& pt) {
  std::vector<uint64_t> out(size_t(pt.n_tokens) * 2);
  for (int64_t s = 0; s < pt.n_seqs; ++s) {
    const int32_t* table = pt.block_ids + pt.block_indptr[s];
    for (int64_t r = pt.seq_indptr[s]; r < pt.seq_indptr[s + 1]; ++r) {
      const int64_t pos = pt.pos[r];
      const int32_t id = table[pos / kv.block_size];
      const int64_t j = pos % kv.block_size;
      out[size_t(2 * r)] = uint64_t(uintptr_t(kv.k_block(id) + j * kv.k_row_bytes));
      out[size_t(2 * r + 1)] = uint64_t(uintptr_t(kv.v_block(id) + j * kv.v_row_bytes));
    }
  }
  return out;
}

std::vector<uint64_t> block_addresses(const KvLayer& kv, const PageTable& pt, KvTier tier) {
  const int64_t n = pt.n_seqs > 0 ? pt.block_indptr[pt.n_seqs] : 0;
  std::vector<uint64_t> out(size_t(std::max<int64_t>(n, 1)) * 2, 0);
  for (int64_t e = 0; e < n; ++e) {
    const int32_t id = pt.block_ids[e];
    if (id < 0 || !kv.in_tier(id, tier)) continue;
    out[size_t(2 * e)] = uint64_t(uintptr_t(kv.k_block(id)));
    out[size_t(2 * e + 1)] = uint64_t(uintptr_t(kv.v_block(id)));
  }
  return out;
}

std::vector<int32_t> row_info(const PageTable& pt) {
  std::vector<int32_t> out(size_t(pt.n_tokens) * 2);
  for (int64_t s = 0; s < pt.n_seqs; ++s)
    for (int64_t r = pt.seq_indptr[s]; r < pt.seq_indptr[s + 1]; ++r) {
      out[size_t(2 * r)] = pt.pos[r];
      out[size_t(2 * r + 1)] = pt.block_indptr[s];
    }
  return out;
}

int64_t max_visible(const PageTable& pt, int64_t window) {
  int64_t most = 0;
  for (int64_t r = 0; r < pt.n_tokens; ++r) {
    const int64_t pos = pt.pos[r];
    const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
    most = std::max(most, pos - lo + 1);
  }
  return most;
}

}  // namespace kvrun::vulkan
