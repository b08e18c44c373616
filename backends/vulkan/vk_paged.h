// vk_paged.h — the host side of the Vulkan KV store and paged attention: what the shaders
// (kv_store.comp, attention.comp, attn_merge.comp) read per call, resolved on the host from the
// step's PageTable and the layer's KvLayer (block id → slot → fast or slow tier address), so
// the shaders never see slot tables or tiers.
#pragma once

#include <cstdint>
#include <vector>

#include "backend.h"

namespace kvrun::vulkan {

/// The cache type code of kv_common.glsl (0 f32, 1 f16, 2 bf16, 3 q8_0, 4 fp8_e4m3, 5
/// fp8_e5m2, 6 q4_0, 7 nvfp4), or −1 for a type that is not a KV cache type.
int kv_code(DType t);

/// Per row of the step: the device address of its K row and of its V row (row r at [2r] and
/// [2r + 1]), where kv_store writes it (the block of its position in its sequence's table).
std::vector<uint64_t> kv_store_targets(const KvLayer& kv, const PageTable& pt);

/// Per entry of the step's concatenated block tables: the K and V block addresses (entry e at
/// [2e] and [2e + 1]; 0 for id −1, a block a sliding window gave back, and for a block outside
/// `tier`: attention.comp skips those).
std::vector<uint64_t> block_addresses(const KvLayer& kv, const PageTable& pt,
                                      KvTier tier = KvTier::kAll);

/// Per row: its position and the index of its sequence's first block-table entry ([2r],
/// [2r + 1]).
std::vector<int32_t> row_info(const PageTable& pt);

/// Visible positions of the row that sees the most (its window), over the step's rows.
int64_t max_visible(const PageTable& pt, int64_t window);

}  // namespace kvrun::vulkan
