// paged_attention_decode.cpp — the flash scheme through the decode block kernel
// (flash_tile_decode; see paged_attention.h, paged_attention_impl.h and flash_decode.h).
//
// Small tiles (decode: at most kFlashSplitMaxQueries query tokens, paged_attention.cpp) with
// head_dim and head_dim_v multiples of 16, and every tile when K is F16, Q8_0 or Q4_0 read in
// place, take this path rather than flash_tile (paged_attention_flash.cpp): no transposed
// tiles, K and V read in place in their cache type (f16 widened with F16C, q8_0 / q4_0 widened
// from int8 and scaled, fp8 through binary16 and scaled by its row's E8M0 byte, in registers) by
// the block kernel of flash_decode.h at the process's kernel level (cpu_level(): AVX-512, AVX2 or
// the portable copy, which AArch64 runs), every query row of the tile (the GQA group) against each
// K row and each V row at once. Q is converted as llama.cpp's flash attention does (q8_0 for a q8_0
// / q4_0 K: integer block dots, VNNI on AVX-512; f16 for an f16 K; else f32). Types it cannot read
// in place (nvfp4, q8_0 / q4_0 heads that straddle blocks; fp8 blocks with a row scale byte of 0 or
// 255) are decoded row by row to f32 first.
#include <algorithm>
#include <cmath>

#include "blocks.h"
#include "cpu/kv_row_ops.h"
#include "cpu/paged_attention_impl.h"
#include "fp16.h"
#include "kv_layout.h"

namespace kvrun::cpu::paged_attn {

namespace {

/// Prefetches `bytes` bytes at the start of each of `n` rows (row j at p + j·stride) into the
/// cache.
inline void prefetch_rows(const uint8_t* p, int64_t stride, int64_t bytes, int64_t n) {
  if (bytes <= 0) return;
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = p + j * stride;
    for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(row + o);
    __builtin_prefetch(row + bytes - 1);
  }
}

/// For an FP8 row: the offset of head hk's E8M0 scale byte from the head's first value byte.
inline int64_t fp8_scale_offset(int64_t n_head_kv, int64_t head_dim, int64_t hk) {
  return n_head_kv * head_dim + hk - hk * head_dim;
}

/// True unless `type` is FP8 and one of the first n rows has, for a head in [hk0, hk1), a scale
/// byte 0 or 255 (2^−127 is not a normal float, 255 is NaN): such blocks are decoded to f32 by
/// the codec instead of read in place (FlashDecodeBlock::k_scale_off).
inline bool scales_in_place(DType type, const uint8_t* block, int64_t row_bytes, int64_t n,
                            int64_t n_head_kv, int64_t head_dim, int64_t hk0, int64_t hk1) {
  if (!is_fp8(type)) return true;
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* sc = block + j * row_bytes + n_head_kv * head_dim;
    for (int64_t hk = hk0; hk < hk1; ++hk)
      if (sc[hk] == 0 || sc[hk] == 255) return false;
  }
  return true;
}

/// The first of a block's `n` rows of KV head hk as the decode kernel reads them: in place
/// (`in_place`: the head's bytes inside the stored rows, row_bytes apart) or decoded to f32 into
/// `tile` ([n][head_dim]).
inline const uint8_t* head_rows(DType type, bool in_place, int64_t n_head_kv, int64_t head_dim,
                                const uint8_t* block, int64_t row_bytes, int64_t hk, int64_t n,
                                float* tile) {
  if (in_place) return block + kv_head_offset(type, head_dim, hk);
  for (int64_t j = 0; j < n; ++j)
    kv_decode_head(type, n_head_kv, head_dim, block + j * row_bytes, hk, tile + j * head_dim);
  return reinterpret_cast<const uint8_t*>(tile);
}

}  // namespace

/// flash_tile for a tile of KV heads [hk0, hk1) (decode tiles of at most kFlashSplitMaxQueries
/// query tokens; any tile with Call::decode_tiles) with head_dim and head_dim_v multiples of 16:
/// per block, one call of the decode kernel (flash_decode.h) for each of the heads in turn,
/// which reads K and V in place (F32, F16, BF16, and Q8_0 / Q4_0 heads on block boundaries,
/// head_rows) and dots or accumulates every query row of the tile against each row; other
/// types are decoded row by row into f32 first. Walking the heads inside the block loop reads
/// each block's rows of those heads as one run of memory (rows hold all KV heads, so one head
/// alone is a short piece every row stride, which the hardware prefetchers follow poorly). Q in K's
/// dot type (see the file comment). Each head's rows are computed exactly as alone; results as
/// flash_tile (out, or m, l, acc per row into `partial`; head hk0 + h at partial + h · part_stride
/// floats).
void flash_tile_decode(const Call& c, const PagedSeq& seq, int64_t i0, int64_t i1, int64_t hk0,
                       int64_t hk1, int64_t b_begin, int64_t b_end, const float* q, float* out,
                       float* partial, int64_t part_stride, Scratch& sc) {
  const PagedKvLayer& kv = c.kv;
  const AttnParams& a = c.p.attn;
  const int64_t hd = a.head_dim, hdv = a.head_dim_v, bs = kv.block_size, G = c.group;
  const int64_t rows = (i1 - i0) * G, nh = hk1 - hk0, hrows = nh * rows;
  FlashDecodeBlock fb;
  fb.rows = rows;
  fb.hd = hd;
  fb.hdv = hdv;
  fb.bsp = (bs + kLanes - 1) / kLanes * kLanes;
  fb.scale = a.scale;
  fb.softcap = c.p.softcap;
  const bool k_in_place = flash_decode_in_place(kv.k_type, hd);
  const bool v_in_place = flash_decode_in_place(kv.v_type, hdv);
  // Q in K's dot type, as llama.cpp's flash attention converts it: quantized to q8_0 for a
  // Q8_0 / Q4_0 K read in place (integer block dots), rounded to f16 for an f16 K, else f32.
  const bool q8 = k_in_place && (kv.k_type == DType::Q8_0 || kv.k_type == DType::Q4_0);
  const int64_t nb = hd / 32;
  sc.qf.resize(size_t(hrows * hd));
  if (q8) {
    sc.qx.resize(size_t(nb) * sizeof(block_q8_0));
    sc.qi.resize(size_t(hrows * hd));
    sc.qd.resize(size_t(hrows * nb));
    sc.qcorr.resize(size_t(hrows * hd / 4));
  }
  // Row r of head hk0 + h is row h · rows + r of the scratch arrays.
  for (int64_t h = 0; h < nh; ++h)
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t g = 0; g < G; ++g) {
        const int64_t r = h * rows + (i - i0) * G + g;
        float* qf = sc.qf.data() + r * hd;
        std::copy_n(q + (seq.q0 + i) * a.n_head * hd + ((hk0 + h) * G + g) * hd, hd, qf);
        if (c.p.rotate) hadamard_rotate(qf, hd);
        if (q8) {
          c.kd.q_convert(qf, sc.qx.data(), hd);
          const auto* blocks = reinterpret_cast<const block_q8_0*>(sc.qx.data());
          for (int64_t b = 0; b < nb; ++b) {
            for (int e = 0; e < 32; ++e) sc.qi[size_t(r * hd + b * 32 + e)] = blocks[b].qs[e];
            sc.qd[size_t(r * nb + b)] = fp16_to_f32(blocks[b].d);
          }
          for (int64_t e = 0; e < hd / 4; ++e) {
            const int8_t* v = sc.qi.data() + r * hd + 4 * e;
            // K offset that makes it unsigned for VNNI: 128 for q8_0, 8 for q4_0 (flash_decode.h)
            const int32_t o = kv.k_type == DType::Q8_0 ? 128 : 8;
            sc.qcorr[size_t(r * hd / 4 + e)] = -o * (int32_t(v[0]) + v[1] + v[2] + v[3]);
          }
        } else if (kv.k_type == DType::F16) {
          for (int64_t d = 0; d < hd; ++d) qf[d] = fp16_to_f32(f32_to_fp16(qf[d]));
        }
      }
  start_rows(sc, hrows, hdv);  // nv and lo: the `rows` of one head, shared by the heads
  sc.corr.resize(size_t(rows));
  sc.s.resize(size_t(rows * fb.bsp));
  fb.nv = sc.nv.data();
  fb.lo = sc.lo.data();
  fb.s = sc.s.data();
  fb.corr = sc.corr.data();
  // Bytes of the heads' run in a stored row, from the first head's offset: what the block reads
  // in place and what prefetch_rows asks for.
  const int64_t k_off0 = k_in_place ? kv_head_offset(kv.k_type, hd, hk0) : 0;
  const int64_t v_off0 = v_in_place ? kv_head_offset(kv.v_type, hdv, hk0) : 0;
  const int64_t k_bytes = k_in_place ? kv_row_bytes(kv.k_type, nh, hd) : 0;
  const int64_t v_bytes = v_in_place ? kv_row_bytes(kv.v_type, nh, hdv) : 0;
  if (!k_in_place || is_fp8(kv.k_type)) sc.ktile.resize(size_t(bs * hd));
  if (!v_in_place || is_fp8(kv.v_type)) sc.vtile.resize(size_t(bs * hdv));
  const int64_t end = seq.pos0 + i1;  // positions the last query of the tile sees
  const int64_t first = c.p.window > 0 ? std::max<int64_t>(0, seq.pos0 + i0 - c.p.window + 1) : 0;
  for (int64_t b = std::max(b_begin, first / bs); b < b_end && b * bs < end; ++b) {
    if (!block_in_tier(c, seq.block_table[b])) continue;
    const int64_t n = std::min(bs, end - b * bs);
    visible_rows(c, seq, i0, i1, b * bs, n, sc);
    fb.n = n;
    const uint8_t* kb = kv.k_block(seq.block_table[b]);
    const uint8_t* vb = kv.v_block(seq.block_table[b]);
    const bool k_ip =
        k_in_place && scales_in_place(kv.k_type, kb, kv.k_row_bytes, n, a.n_head_kv, hd, hk0, hk1);
    const bool v_ip =
        v_in_place && scales_in_place(kv.v_type, vb, kv.v_row_bytes, n, a.n_head_kv, hdv, hk0, hk1);
    fb.k_type = k_ip ? kv.k_type : DType::F32;
    fb.v_type = v_ip ? kv.v_type : DType::F32;
    fb.k_stride = k_ip ? kv.k_row_bytes : hd * 4;
    fb.v_stride = v_ip ? kv.v_row_bytes : hdv * 4;
    // Ask for the next block's rows of these heads while this one is computed.
    if (b + 1 < b_end && (b + 1) * bs < end && block_in_tier(c, seq.block_table[b + 1])) {
      prefetch_rows(kv.k_block(seq.block_table[b + 1]) + k_off0, kv.k_row_bytes, k_bytes,
                    std::min(bs, end - (b + 1) * bs));
      prefetch_rows(kv.v_block(seq.block_table[b + 1]) + v_off0, kv.v_row_bytes, v_bytes,
                    std::min(bs, end - (b + 1) * bs));
    }
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t hk = hk0 + h, r0 = h * rows;
      fb.k =
          head_rows(kv.k_type, k_ip, a.n_head_kv, hd, kb, kv.k_row_bytes, hk, n, sc.ktile.data());
      fb.v =
          head_rows(kv.v_type, v_ip, a.n_head_kv, hdv, vb, kv.v_row_bytes, hk, n, sc.vtile.data());
      fb.k_scale_off = fp8_scale_offset(a.n_head_kv, hd, hk);
      fb.v_scale_off = fp8_scale_offset(a.n_head_kv, hdv, hk);
      fb.q = sc.qf.data() + r0 * hd;
      if (q8) {
        fb.qx = sc.qi.data() + r0 * hd;
        fb.qd = sc.qd.data() + r0 * nb;
        fb.qcorr = sc.qcorr.data() + r0 * hd / 4;
      }
      fb.m = sc.m.data() + r0;
      fb.l = sc.l.data() + r0;
      fb.acc = sc.acc.data() + r0 * hdv;
      c.decode(fb);
    }
  }
  for (int64_t h = 0; h < nh; ++h) {
    const int64_t r0 = h * rows;
    write_tile_rows(c, seq, i0, i1, hk0 + h, sc.acc.data() + r0 * hdv, sc.m.data() + r0,
                    sc.l.data() + r0, 0, out, partial ? partial + h * part_stride : nullptr);
  }
}

}  // namespace kvrun::cpu::paged_attn
