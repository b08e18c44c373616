// paged_attention_impl.h — what the files of the paged attention kernel share (internal to
// backends/cpu/paged_attention*.cpp): the per-call state (Call), the per-thread buffers
// (Scratch) and the work items of the two schemes. paged_attention.cpp picks the scheme and
// spreads the items over the threads; paged_attention_flash.cpp (large query tiles),
// paged_attention_decode.cpp (small tiles through flash_decode.h) and
// paged_attention_exact.cpp (llama.cpp's non-flash softmax) compute them.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/cpu_traits.h"
#include "cpu/flash_decode.h"
#include "cpu/paged_attention.h"

namespace kvrun::cpu::paged_attn {

/// How Q is dotted with the K rows of one KV head.
struct KDot {
  bool direct = false;                 ///< dot on the stored bytes (else on the decoded tile)
  ActFromFloatFn q_convert = nullptr;  ///< f32 Q head → K's dot type
  VecDotFn dot = nullptr;              ///< dot(head_dim, K head, converted Q head)
};

/// What one paged_attention call shares between its work items.
struct Call {
  const PagedKvLayer& kv;
  const PagedAttnParams& p;
  int64_t group;  ///< query heads per KV head
  KDot kd;
  bool v_f16;     ///< V is f16: read in place, f16 accumulation (flash) / f16 weights (exact)
  bool v_direct;  ///< V is f16 or f32 and read in place (else decoded to the tile)
  bool batched;   ///< ≥ 2 query rows in the call (selects the exact scheme's gemm order)
  FlashDecodeFn decode;  ///< flash: the block kernel for small query tiles (flash_tile_decode)
  /// flash, with `decode` set: every tile takes flash_tile_decode, not only small ones: for a
  /// Q8_0 / Q4_0 K read in place (flash_tile makes one block-dot call per query row and K row:
  /// filling 4096 positions of llama3.2-1b with q8_0 KV took 76 s with it, 47 s without) and an
  /// F16 K (42 → 38 s), both under load from another process, so indicative
  bool decode_tiles;
  /// The blocks read (paged_attention_states): all, or one tier of kv (KvLayer::n_fast).
  KvTier tier = KvTier::kAll;
};

/// True when block `id` of the call's layer is read (in c.tier).
inline bool block_in_tier(const Call& c, int32_t id) { return c.kv.in_tier(id, c.tier); }

/// Per-thread buffers; sized on use, reused across items.
struct Scratch {
  std::vector<float> qf;       ///< [rows][head_dim] Q heads in f32 (rotated when asked)
  std::vector<uint8_t> qx;     ///< [rows][4·head_dim] Q heads in K's dot type
  std::vector<float> ktile;    ///< exact: [block_size][head_dim] decoded K head rows
  std::vector<float> kt;       ///< flash: [head_dim][block_size] decoded K rows, transposed
  std::vector<float> krow;     ///< flash: [head_dim] one decoded K row
  std::vector<float> vtile;    ///< [block_size][head_dim_v] decoded V head rows
  std::vector<float> acc;      ///< flash: [rows][head_dim_v]; exact: [group][64][head_dim_v]
  std::vector<float> w;        ///< exact: [group][n_kv] scores, then weights; flash: [rows][bs]
  std::vector<double> tail;    ///< exact: [group][head_dim_v] vec-order tail sums
  std::vector<float> zeros;    ///< [head_dim_v] V of the cells past the causal limit
  std::vector<float> vrow;     ///< [head_dim_v] one f16 V row widened to f32 (exact scheme)
  std::vector<float> m, l;     ///< flash: [rows] running max and running sum
  std::vector<int64_t> nv;     ///< flash: [rows] positions of the block each row sees
  std::vector<int64_t> lo;     ///< flash: [rows] its first position inside the sliding window
  std::vector<float> s;        ///< flash: [padded block] one row's scores, then weights
  std::vector<float> corr;     ///< flash decode: [rows] rescale factors of one block
  std::vector<int8_t> qi;      ///< flash decode: [rows][head_dim] Q quantized to q8_0, values
  std::vector<float> qd;       ///< flash decode: [rows][head_dim / 32] their block scales
  std::vector<int32_t> qcorr;  ///< flash decode: [rows][head_dim / 4] −o · sums of 4 values
};

/// Positions per vector of the flash kernels: a block's score rows are padded to a multiple of
/// this (bsp).
constexpr int64_t kLanes = 16;

/// Starts the online-softmax state of `rows` query rows in `sc` (paged_attention_flash.cpp):
/// acc ([rows][acc_len]) zero, running max m −inf, running sum l zero; nv and lo sized.
void start_rows(Scratch& sc, int64_t rows, int64_t acc_len);

/// For the block of `seq` whose first position is p0 and whose first n positions are stored:
/// per query row r = (i − i0) · group + g of the tile [i0, i1), sc.nv[r] = the positions of the
/// block it sees (causal) and sc.lo[r] = its first position inside the sliding window, relative
/// to the block (0 without a window; may be negative, or ≥ nv[r] when the window starts later).
void visible_rows(const Call& c, const PagedSeq& seq, int64_t i0, int64_t i1, int64_t p0, int64_t n,
                  Scratch& sc);

/// Writes the results of query rows [i0, i1) of `seq` for KV head hk from their running max m
/// and sum l ([rows]) and accumulators acc_rows: out = acc / l, or for a segment of the blocks
/// (`partial` not null) m, l and acc as they are, [rows][2 + head_dim_v]. `lanes` > 0: acc_rows
/// holds that many per-lane partial sums per value ([rows][head_dim_v][lanes], summed here in
/// lane order); 0: one value each ([rows][head_dim_v]). rows = (i1 − i0) · group.
void write_tile_rows(const Call& c, const PagedSeq& seq, int64_t i0, int64_t i1, int64_t hk,
                     const float* acc_rows, const float* m, const float* l, int64_t lanes,
                     float* out, float* partial);

/// Flash scheme, any tile (paged_attention_flash.cpp): query rows [i0, i1) of `seq` (rows of
/// q / out: seq.q0 + i; q: [rows][n_head · head_dim]), KV head hk, blocks [b_begin, b_end) of its
/// block table; each block's K and V rows of the head are decoded once into f32 tiles for all
/// the tile's query heads. Writes out, or with `partial` the rows' m, l and acc
/// (write_tile_rows).
void flash_tile(const Call& c, const PagedSeq& seq, int64_t i0, int64_t i1, int64_t hk,
                int64_t b_begin, int64_t b_end, const float* q, float* out, float* partial,
                Scratch& sc);

/// Flash scheme through the decode block kernel (paged_attention_decode.cpp): flash_tile for KV
/// heads [hk0, hk1) at once, K and V read in place where the kernel can (c.decode must be set;
/// head_dim and head_dim_v multiples of 16). Head hk0 + h's partial state goes to
/// partial + h · part_stride floats.
void flash_tile_decode(const Call& c, const PagedSeq& seq, int64_t i0, int64_t i1, int64_t hk0,
                       int64_t hk1, int64_t b_begin, int64_t b_end, const float* q, float* out,
                       float* partial, int64_t part_stride, Scratch& sc);

/// Exact scheme (paged_attention_exact.cpp): the query at position n_pos − 1 (q_row: [n_head ·
/// head_dim]), the query heads of KV head hk, over n_kv cells (llama.cpp's padded KV view; cells
/// past n_pos weigh 0), into out_row ([n_head · head_dim_v]).
void exact_item(const Call& c, const PagedSeq& seq, int64_t n_pos, int64_t n_kv, int64_t hk,
                const float* q_row, float* out_row, Scratch& sc);

}  // namespace kvrun::cpu::paged_attn
