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
// A q8_0 matrix is packed the same way with 544-byte blocks: the 16 f16 scales, then 8 chunks
// of 64 bytes, chunk i holding quants 4i..4i+3 of each row stored as q + 128 (unsigned bytes,
// so VPDPBUSD can multiply them by signed activations; the 128·Σx this adds is taken off, see
// pack_act_offsets). Its dot keeps q8_0's lane order (vec_dot.h), so it too is bit-identical.
//
// The packed copy is the same size as the original (18 or 34 bytes per 32 weights).
#pragma once

#include <cstdint>

#include "tensor.h"

namespace kvrun::cpu {

/// Rows per packed group.
constexpr int64_t kPackRows = 16;

/// True when `w` can be packed and the CPU kernels of the process's level have a packed kernel
/// for its type: 2-D, contiguous rows, ne[1] % 16 == 0; q4_0 at the avx2 and avx512 levels,
/// q8_0 at avx512 (VNNI).
bool pack_supported(const Tensor& w);

/// The packed copy of `w` (layout above). Throws std::invalid_argument when !pack_supported(w),
/// std::bad_alloc when memory runs out. The caller keeps the buffer and points w.packed at it.
Buffer pack_weight(const Tensor& w);

/// Bytes of one packed 16-row group of a type-`t` matrix with rows of `k` elements.
size_t packed_group_bytes(DType t, int64_t k);

/// int32 offsets per activation row that the packed kernel of type `t` needs (k/32 for q4_0,
/// k/4 for q8_0).
int64_t pack_act_offsets_per_row(DType t, int64_t k);

/// The offsets of `n` q8_0 activation rows (act_row bytes apart, k elements) for the packed
/// kernel of type `t` (PackedTileFn in vec_dot.h): out[n · pack_act_offsets_per_row(t, k)].
void pack_act_offsets(DType t, const void* act, size_t act_row, int64_t n, int64_t k, int32_t* out);

}  // namespace kvrun::cpu
