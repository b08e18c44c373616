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
// (The avx2 level, without VNNI, flips each 32 bytes back to signed q with one XOR and uses the
// sign trick instead; it does not read the offsets. The neon level flips them back too and
// multiplies signed by signed.)
//
// A q6_K matrix (k a multiple of 256) is packed in 3360-byte super-blocks (16 rows × 256
// values, exactly 16 × q6_K's 210 bytes, so no more memory traffic than the plain rows):
//   bytes    0 ..   31: the 16 rows' f16 d (row r at 2·r);
//   bytes   32 ..  287: the int8 sub-block scales, sub-block j (values 16j..16j+15) at 32 + 16·j,
//                       row r at + r (16 bytes the kernel widens to 16 int32 lanes, one per row);
//   bytes  288 .. 3359: 16 quads of 192 bytes, quad j holding values 16j..16j+15 as u = q + 32
//                       (6 bits, 0..63) in three 64-byte chunks, byte 4·r + e of each for row r:
//                         P: u[16j+e]      | (u[16j+8+e]  >> 4) << 6
//                         Q: u[16j+4+e]    | (u[16j+12+e] >> 4) << 6
//                         R: (u[16j+8+e] & 15) | (u[16j+12+e] & 15) << 4
// so the four 16-row × 4-value vectors of a quad come out of three loads in nine integer
// operations (P & 63, Q & 63, and two shift/mask/merge chains), with no bytes spent on
// expansion (storing u as whole bytes would be 4384 bytes, 1.3× the stream). A quad is one
// 16-value sub-block: four of q6_K's 8 lanes (llama.cpp's AVX2 lane l covers values 4l..4l+3 of
// each 32), all with the same scale, and the kernel keeps q6_K's 8-lane order (vec_dot.h):
// VPDPBUSD gives Σ (q+32)·x − 32·Σx per row (the −32·Σx from pack_act_offsets as the starting
// sum), a value within int16, and VPDPWSSD multiplies it by the row's scale into the lane's
// int32 sum exactly. Bit-identical to vec_dot_q6_K_q8_K.
//
// A q4_K matrix (k a multiple of 256) is packed in 2304-byte super-blocks (16 × q4_K's 144):
//   bytes    0 ..   31: the 16 rows' f16 d (row r at 2·r); bytes 32 .. 63: their f16 dmin;
//   bytes   64 ..  255: the 12 packed scale/min bytes, byte t of row r at 64 + 16·t + r (the
//                       kernel unpacks the 6-bit scales and mins of 16 rows with byte vectors);
//   bytes  256 .. 2303: 32 chunks of 64 bytes, chunk 8·j2 + i holding bytes 4i..4i+3 of row r's
//                       qs[32·j2 .. 32·j2+31] at 4·r: low nibbles are values 4i..4i+3 of
//                       sub-block 2·j2, high nibbles those of sub-block 2·j2+1 (GGUF q4_K order).
// So one 32-byte half-chunk gives 8 rows' values of q4_K lane i (llama.cpp's AVX2 lane: values
// 4i..4i+3 of each 32) for two sub-blocks; the kernel keeps vec_dot_q4_K_q8_K's order (8 main
// lanes, 4 min lanes; vec_dot_k.cpp), so it is bit-identical. Its xoff is empty: the min term
// uses q8_K's bsums.
//
// A q5_K matrix (k a multiple of 256) is packed in 2816-byte super-blocks (16 × q5_K's 176):
//   bytes    0 .. 2303: q4_K's layout above (d, dmin, the scale/min bytes, the 4-bit qs);
//   bytes 2304 .. 2815: the high bits qh in 8 chunks of 64 bytes, chunk i holding row r's
//                       qh[4i .. 4i+3] at 2304 + 64·i + 4·r (bit j of qh[e] is the fifth bit of
//                       value 32·j + e, GGUF q5_K order).
// So lane i's 32-byte half-chunk of qh gives 8 rows' fifth bits of values 4i..4i+3 of all 8
// sub-blocks, the same bytes as lane i's nibbles: sub-block j's bit is moved to bit 4 with one
// 16-bit shift (none for j = 4) and an AND, then ORed into the nibble (NEON: a byte shift). The
// kernels (x86/packed_q5k_avx2.inl, arm/packed_neon.inl) keep vec_dot_q5_K_q8_K's order (8 main
// lanes as q4_K, the min term in one float sum per row, multiplied then added), so they are
// bit-identical; their xoff is empty.
//
// An mxfp4 matrix is packed like q4_0 in 272-byte blocks: bytes 0 .. 15 the 16 rows' E8M0
// scale bytes e (row r at r), bytes 16 .. 271 their nibbles in q4_0's 4 chunks of 64 bytes. The
// x86 kernel (x86/packed_mxfp4.inl) looks the nibbles up as level + 12 (unsigned) and takes the
// 12·Σx this adds off with pack_act_offsets (8 per block, then the activation scale, as q8_0);
// it keeps vec_dot_mxfp4_q8_0's 8-lane order, so it is bit-identical. The neon kernel looks them
// up as the signed levels (TBL) and does not read the offsets.
//
// The packed copy is the same size as the original (17, 18 or 34 bytes per 32 weights, 144,
// 176 or 210 per 256).
#pragma once

#include <cstdint>

#include "cpu/cpu_level.h"
#include "tensor.h"

namespace kvrun::cpu {

/// Rows per packed group.
constexpr int64_t kPackRows = 16;

/// True when `w` can be packed and the CPU kernels of the process's level (cpu_level()) have a
/// packed kernel for its type: pack_supported(w, cpu_level()).
bool pack_supported(const Tensor& w);

/// True when `w` can be packed and the kernels of `level` have a packed kernel for its type:
/// 2-D, contiguous rows, ne[1] % 16 == 0; q4_0, q8_0, mxfp4, q4_K, q5_K and q6_K (ne[0] % 256 == 0
/// for the K-quants) at the avx2 and avx512 levels, and q4_0, q8_0, mxfp4, q4_K, q5_K and q6_K
/// at the neon level (backends/cpu/arm/packed_neon.cpp). False for a
/// level this build has no kernels for. The layout does not depend on the level: a matrix packed
/// for one level is read by every level with a packed kernel for its type (and ignored by the
/// others, which read the rows).
bool pack_supported(const Tensor& w, CpuLevel level);

/// The packed copy of `w` (layout above): pack_weight(w, cpu_level()).
Buffer pack_weight(const Tensor& w);

/// The packed copy of `w` (layout above), made by up to min(16, physical cores) threads
/// (pack_weight(w, level, n)). Throws std::invalid_argument when !pack_supported(w, level),
/// std::bad_alloc when memory runs out. The caller keeps the buffer and points w.packed at it.
Buffer pack_weight(const Tensor& w, CpuLevel level);

/// pack_weight with at most `n_threads` threads (at least 4 MiB of the copy each; one for a
/// smaller matrix), each packing a contiguous range of groups: loading a model is mostly this
/// copy, its page faults and the file's reads, which then run in parallel. The bytes do not
/// depend on n_threads.
Buffer pack_weight(const Tensor& w, CpuLevel level, int n_threads);

/// Bytes of one packed 16-row group of a type-`t` matrix with rows of `k` elements.
size_t packed_group_bytes(DType t, int64_t k);

/// int32 offsets per activation row that the packed kernel of type `t` needs (k/16 for q4_0: an
/// offset and the scale as float bits per block; 9·k/32 for q8_0 and mxfp4: 8 offsets and the
/// scale; k/4 for q6_K; none for q4_K and q5_K).
int64_t pack_act_offsets_per_row(DType t, int64_t k);

/// The offsets of `n` activation rows (q8_0 for q4_0/q8_0/mxfp4, q8_K for q6_K; act_row bytes
/// apart, k elements) for the packed kernel of type `t` (PackedTileFn in vec_dot.h): out[n ·
/// pack_act_offsets_per_row(t, k)].
void pack_act_offsets(DType t, const void* act, size_t act_row, int64_t n, int64_t k, int32_t* out);

}  // namespace kvrun::cpu
