// pack.h — weight matrices repacked at load into the CPU backend's row-interleaved layout.
//
// A q4_0 matrix of m rows (m a multiple of 16) and k columns is stored as m/16 groups of 16
// consecutive rows; a group holds its k/32 blocks one after the other, each block of the 16
// rows as 288 bytes:
//   bytes   0 ..  31: the 16 rows' f16 scales d (row r at 2·r);
//   bytes  32 .. 287: their 16-byte nibble arrays qs, in 4 chunks q = 0..3 of 64 bytes, chunk q
//                     holding bytes 4q..4q+3 of row 0, then of row 1, …, of row 15.
// So one 64-byte load gives, for 16 rows, the low nibbles of elements 4q..4q+3 and the high
// nibbles of elements 16+4q..16+4q+3 (q4_0's nibble order: GGUF / ggml block_q4_0), and a
// multiply-add of unsigned bytes by 4 broadcast activation bytes (VPDPBUSD) gives 16 row sums,
// one per int32 lane, with no horizontal reduction. This is the idea of llama.cpp's repacked
// CPU buffers (q4_0_8x8) and ik_llama.cpp's run-time repacking (-rtr), done in kvrun's own
// layout. The dot over the packed rows is computed in the order of repack_dot_q4_0_q8_0
// (vec_dot.h), so a packed matrix gives bit-identical results to the plain one.
//
// The packed copy is the same size as the original (18 bytes per 32 weights).
#pragma once

#include <cstdint>

#include "tensor.h"

namespace kvrun::cpu {

/// Rows per packed group.
constexpr int64_t kPackRows = 16;

/// True when `w` can be packed and the CPU kernels of the process's level have a packed kernel
/// for its type: today q4_0, 2-D, contiguous rows, ne[1] % 16 == 0, at the avx2 and avx512
/// levels.
bool pack_supported(const Tensor& w);

/// The packed copy of `w` (layout above). Throws std::invalid_argument when !pack_supported(w),
/// std::bad_alloc when memory runs out. The caller keeps the buffer and points w.packed at it.
Buffer pack_weight(const Tensor& w);

}  // namespace kvrun::cpu
