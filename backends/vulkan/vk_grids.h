// vk_grids.h — the value grids of the grid i-quants (iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s,
// iq1_s, iq1_m) as the Vulkan shaders read them: one storage buffer per device, uploaded once,
// holding ggml-like's tables (iq_grids.h, the single source of the data) as 32-bit words.
//
// Why a buffer and not a shader include: the tables are 34 KiB together (iq1s alone 16 KiB). As
// GLSL `const` arrays indexed by a run-time code they would be a second copy of the data to keep
// equal to iq_grids.cpp, and many compilers place such arrays in per-invocation private memory
// (copied per thread) or need them staged into shared memory per workgroup (16 KiB per matvec
// workgroup, more than the row it decodes). A buffer read by device address is one copy, reached
// like the weights (no descriptor set), and cached by the GPU like any other read-only data.
#pragma once

#include <cstdint>
#include <vector>

#include "dtype.h"

namespace kvrun::vulkan {

/// Every grid, concatenated (see iq_grid_offset); a u64 grid entry e is words 2e (bytes 0..3)
/// and 2e + 1 (bytes 4..7), a u32 entry e is word e: value i of an entry is its byte i, exactly
/// as ggml-like's kIq*Grid tables hold them (iq_grids.h).
const std::vector<uint32_t>& iq_grid_words();

/// The word offset in iq_grid_words() of the grid weight type `t` decodes with (iq1_m shares
/// iq1_s's), or −1 when `t` is not a grid i-quant.
int64_t iq_grid_offset(DType t);

}  // namespace kvrun::vulkan
