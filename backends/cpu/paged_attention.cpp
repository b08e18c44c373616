// paged_attention.cpp — attention over the paged KV cache (see paged_attention.h and
// docs/kv-cache.md).
//
// Flash scheme. Work item = (sequence, tile of up to kFlashTile query tokens, KV head): the item
// converts the tile's query heads of the KV head's group once, then walks the block table up to
// the tile's last position; per block it decodes the K rows of the KV head once into a
// transposed head_dim × block tile and the V rows into a block × head_dim_v tile (f16 widened,
// quantized types dequantized; q8_0 / q4_0 K with head_dim % 32 == 0 is dotted in place against
// Q quantized to q8_0, as llama.cpp pairs them), and uses them for every query row of the tile
// (GQA group × tokens). Per row and block (FlashAttention-2, Dao 2023): scores of the block,
// block max, one rescale of the accumulator when the running max grows, e^(s − max) for the
// block's 16 lanes at once (exp_nonpos16), running sum, accumulation of V. Q is rounded to f16
// for an f16 K (llama.cpp's flash attention converts Q to K's type). The inner loop
// (flash_block) is compiled for AVX-512, AVX2+FMA and baseline x86-64 and picked at load time
// (GCC target_clones). Tiles are visited alternately from both ends of the sequence and the
// threads take items one at a time. Items are independent, so the result does not depend on the
// number of threads.
//
// Small tiles (decode: at most kFlashSplitMaxQueries query tokens) with head_dim and head_dim_v
// multiples of 16, and every tile when K is F16, Q8_0 or Q4_0 read in place, take
// flash_tile_decode instead: no transposed tiles, K and V read in place in
// their cache type (f16 widened with F16C, q8_0 / q4_0 widened from int8 and scaled, in
// registers) by the block kernel of flash_decode.h at the process's kernel level (cpu_level():
// AVX-512, AVX2 or the portable copy), every query row of the tile (the GQA group) against each
// K row and each V row at once. Q is converted as llama.cpp's flash attention does (q8_0 for a
// q8_0 / q4_0 K: integer block dots, VNNI on AVX-512; f16 for an f16 K; else f32). Types it
// cannot read in place (fp8, nvfp4, q8_0 /
// q4_0 heads that straddle blocks) are decoded row by row to f32 first.
//
// Exact scheme (flash = false), llama.cpp's default path. Work item = (sequence, query token, KV
// head): per block the K rows of the KV head are decoded (when the type cannot be read in place)
// into a block_size × head_dim tile; Q is dotted in "K's dot type" as llama.cpp's CPU backend
// pairs them (ggml-cpu type_traits_cpu[k].vec_dot_type):
//   f32 K: Q in f32, vec_dot_f32;  f16 K: Q rounded to f16, vec_dot_f16;
//   q8_0 / q4_0 K with head_dim % 32 == 0: Q quantized to q8_0 per head, the q8_0 block dot on
//   the stored blocks;  any other case (bf16, fp8, nvfp4, q8_0 / q4_0 with head_dim % 32 ≠ 0):
//   the head decoded to f32, Q in f32, vec_dot_f32.
// Numerics as attention.cpp (llama.cpp without -fa): the gemm accumulation order for batches
// (vec_dot.h); scores over the n_kv cells llama.cpp's KV cache exposes (a multiple of 32, at
// least 32; cells past the causal limit weigh 0), masked softmax with softmax_exp, weights
// rounded to f16 for an f16 V, then the weighted sum of V in the lane order of vec_dot_f16 /
// vec_dot_f32 (one token) or gemm_dot_* (batches), reproduced here block by block with per-lane
// accumulators (see LaneOrder).
#include "cpu/paged_attention.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "blocks.h"
#include "cpu/cpu_level.h"
#include "cpu/cpu_traits.h"
#include "cpu/flash_decode.h"
#include "cpu/kv_row_ops.h"
#include "cpu/ops.h"
#include "cpu/vec_dot.h"
#include "fp16.h"
#include "kv_layout.h"

namespace kvrun::cpu {

namespace {

/// How Q is dotted with the K rows of one KV head.
struct KDot {
  bool direct = false;                 ///< dot on the stored bytes (else on the decoded tile)
  ActFromFloatFn q_convert = nullptr;  ///< f32 Q head → K's dot type
  VecDotFn dot = nullptr;              ///< dot(head_dim, K head, converted Q head)
};

KDot make_kdot(DType kt, int64_t hd, bool flash, bool batched) {
  // The dots come from the CPU traits table at the process's kernel level (SIMD where the
  // machine has it, bit-identical to the scalar reference); the pairing is llama.cpp's.
  const bool gemm = !flash && batched && hd % 16 == 0;
  auto pick = [gemm](const CpuTypeTraits* t) {
    return gemm && t->gemm_dot ? t->gemm_dot : t->vec_dot;
  };
  const CpuTypeTraits* f32 = cpu_traits(DType::F32);
  if (kt == DType::F16 && flash) return {false, f32->act_from_float, f32->vec_dot};  // tile path
  if (kt == DType::F16) {
    const CpuTypeTraits* t = cpu_traits(DType::F16);
    return {true, t->act_from_float, pick(t)};
  }
  if ((kt == DType::Q8_0 || kt == DType::Q4_0) && hd % 32 == 0) {
    const CpuTypeTraits* t = cpu_traits(kt);
    return {true, t->act_from_float, t->vec_dot};
  }
  return {kt == DType::F32, f32->act_from_float, pick(f32)};
}

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
};

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

/// One block's rows of one KV head: stored rows (in place) or decoded tiles.
struct BlockView {
  const uint8_t* k = nullptr;  ///< first stored K row of the block
  const uint8_t* v = nullptr;  ///< first stored V row of the block
  int64_t k_off = 0;           ///< byte offset of the head inside a K row (direct dot)
};

/// Converts the query heads of KV head `hk` (rows of `q_row`: [n_head · head_dim]).
void prepare_q(const Call& c, const float* q_row, int64_t hk, Scratch& sc) {
  const int64_t hd = c.p.attn.head_dim;
  sc.qf.resize(size_t(c.group * hd));
  sc.qx.resize(size_t(c.group * hd * 4));
  for (int64_t g = 0; g < c.group; ++g) {
    float* qf = sc.qf.data() + g * hd;
    std::copy_n(q_row + (hk * c.group + g) * hd, hd, qf);
    if (c.p.rotate) hadamard_rotate(qf, hd);
    c.kd.q_convert(qf, sc.qx.data() + g * hd * 4, hd);
  }
}

/// Points `bv` at physical block `phys` and decodes the first `n` K rows of head `hk` into the
/// K tile when K is not read in place.
void load_k(const Call& c, int64_t phys, int64_t n, int64_t hk, Scratch& sc, BlockView& bv) {
  const PagedKvLayer& kv = c.kv;
  const int64_t hd = c.p.attn.head_dim;
  bv.k = kv.k_block(phys);
  if (c.kd.direct) {
    bv.k_off = kv_head_offset(kv.k_type, hd, hk);
    return;
  }
  sc.ktile.resize(size_t(kv.block_size * hd));
  for (int64_t j = 0; j < n; ++j)
    kv_decode_head(kv.k_type, c.p.attn.n_head_kv, hd, bv.k + j * kv.k_row_bytes, hk,
                   sc.ktile.data() + j * hd);
}

/// As load_k for V.
void load_v(const Call& c, int64_t phys, int64_t n, int64_t hk, Scratch& sc, BlockView& bv) {
  const PagedKvLayer& kv = c.kv;
  const int64_t hdv = c.p.attn.head_dim_v;
  bv.v = kv.v_block(phys);
  if (c.v_direct) return;
  sc.vtile.resize(size_t(kv.block_size * hdv));
  for (int64_t j = 0; j < n; ++j)
    kv_decode_head(kv.v_type, c.p.attn.n_head_kv, hdv, bv.v + j * kv.v_row_bytes, hk,
                   sc.vtile.data() + j * hdv);
}

/// Unscaled dot of query head g of the group with row j of the block.
inline float k_dot(const Call& c, const BlockView& bv, int64_t j, int64_t g, const Scratch& sc) {
  const int64_t hd = c.p.attn.head_dim;
  const void* qx = sc.qx.data() + g * hd * 4;
  if (c.kd.direct) return c.kd.dot(hd, bv.k + j * c.kv.k_row_bytes + bv.k_off, qx);
  return c.kd.dot(hd, sc.ktile.data() + j * hd, qx);
}

/// Row j of the block's V for KV head hk as f32 (non-f16 V: stored f32 or the decoded tile).
inline const float* v_f32(const Call& c, const BlockView& bv, int64_t j, int64_t hk,
                          const Scratch& sc) {
  const int64_t hdv = c.p.attn.head_dim_v;
  if (c.v_direct) return reinterpret_cast<const float*>(bv.v + j * c.kv.v_row_bytes) + hk * hdv;
  return sc.vtile.data() + j * hdv;
}

/// Row j of the block's f16 V for KV head hk.
inline const uint16_t* v_f16(const Call& c, const BlockView& bv, int64_t j, int64_t hk) {
  return reinterpret_cast<const uint16_t*>(bv.v + j * c.kv.v_row_bytes) + hk * c.p.attn.head_dim_v;
}

// ---- flash (online softmax, one block at a time) ----

/// e^x for x ≤ 0 (scores minus their running max), vectorizable: the Cody–Waite reduction and
/// degree-5 polynomial of fast_exp.h's expf_lane with plain f32 operations and the 2^n scaling
/// done on the exponent bits (n ≥ −126, so 2^n is normal). Relative error ≤ about 3 ulp;
/// x < −87.3 (including −inf) gives 0.
inline float exp_nonpos(float x) {
  constexpr float kShift = 0x1.8p23f, kInvLn2 = 0x1.715476p+0f, kLn2Hi = 0x1.62e4p-1f,
                  kLn2Lo = 0x1.7f7d1cp-20f, kC0 = 0x1.ffffecp-1f, kC1 = 0x1.fffdb6p-2f,
                  kC2 = 0x1.555e66p-3f, kC3 = 0x1.573e2ep-5f, kC4 = 0x1.0e4020p-7f;
  const float xc = x < -87.3f ? -87.3f : x;
  const float z = xc * kInvLn2 + kShift;
  const float n = z - kShift;
  const float b = (xc - n * kLn2Hi) - n * kLn2Lo;
  const float u = b * b;
  const float j = ((kC4 * b + kC3) * u + (kC2 * b + kC1)) * u + (kC0 * b + 1.0f);
  const float p2 = std::bit_cast<float>(uint32_t(int32_t(n) + 127) << 23);
  return x < -87.3f ? 0.0f : j * p2;
}

// The 16-lane helpers below are always inlined, so passing vectors by value never crosses a
// function boundary and GCC's note about the AVX-512 calling convention does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

/// 16 floats as one GCC/Clang vector: the compiler maps it to one AVX-512 register, two AVX2
/// registers or four SSE registers, whichever the function is compiled for.
using v16f = float __attribute__((vector_size(64)));
using v16i = int32_t __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;

[[gnu::always_inline]] inline v16f load16(const float* p) {
  v16f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void store16(float* p, v16f v) { std::memcpy(p, &v, sizeof v); }
[[gnu::always_inline]] inline v16f splat16(float x) { return v16f{} + x; }
[[gnu::always_inline]] inline float hmax16(v16f v) {
  float m = v[0];
  for (int k = 1; k < 16; ++k) m = v[k] > m ? v[k] : m;
  return m;
}
[[gnu::always_inline]] inline float hsum16(v16f v) {
  float t = 0.0f;
  for (int k = 0; k < 16; ++k) t += v[k];
  return t;
}

/// exp_nonpos on 16 lanes.
[[gnu::always_inline]] inline v16f exp_nonpos16(v16f x) {
  const v16f lo = splat16(-87.3f);
  const v16i under = x < lo;
  const v16f xc = under ? lo : x;
  const v16f z = xc * 0x1.715476p+0f + 0x1.8p23f;
  const v16f n = z - 0x1.8p23f;
  const v16f b = (xc - n * 0x1.62e4p-1f) - n * 0x1.7f7d1cp-20f;
  const v16f u = b * b;
  const v16f j =
      ((0x1.0e4020p-7f * b + 0x1.573e2ep-5f) * u + (0x1.555e66p-3f * b + 0x1.fffdb6p-2f)) * u +
      (0x1.ffffecp-1f * b + 1.0f);
  const v16i e = (__builtin_convertvector(n, v16i) + 127) << 23;
  v16f p2;
  std::memcpy(&p2, &e, sizeof p2);
  return under ? v16f{} : j * p2;
}

/// a[0 .. 16·NV) += Σ_j p[j] · v[j][·] over the n rows of v (16·NV floats each), with the
/// accumulator held in NV vector registers across the rows (no store/load per row).
template <int NV>
[[gnu::always_inline]] inline void accumulate_v(int64_t n, const float* p, const float* v,
                                                float* a) {
  v16f acc[NV];
  for (int k = 0; k < NV; ++k) acc[k] = load16(a + 16 * k);
  for (int64_t j = 0; j < n; ++j) {
    const v16f pj = splat16(p[j]);
    for (int k = 0; k < NV; ++k) acc[k] += pj * load16(v + j * 16 * NV + 16 * k);
  }
  for (int k = 0; k < NV; ++k) store16(a + 16 * k, acc[k]);
}

/// Scores, online-softmax update and V accumulation of `rows` query heads over one block, whose
/// width is padded to bsp (a multiple of kLanes). Row r sees the block's first nv[r] positions
/// (nv[r] ≤ 0: none). kt: the block's K rows transposed, [head_dim][bsp]; vt: its V rows,
/// [bsp][head_dim_v], or with `wide` transposed, [head_dim_v][bsp]; rows past the block's end
/// zero; q: [rows][head_dim] in K's precision; direct: when not null, the rows' unscaled scores
/// [rows][bsp] (kt and q unused); s: [bsp] scratch. m, l: the rows' running max and sum. acc:
/// with `wide`, [rows][head_dim_v][bsp] per-lane accumulators (summed over the lanes at the end;
/// for small head_dim_v, where a row of V is shorter than a vector), else [rows][head_dim_v].
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void flash_block(int64_t rows, const int64_t* nv, const int64_t* lo, float softcap, int64_t hd,
                 int64_t hdv, int64_t bsp, float scale, const float* q, const float* kt,
                 const float* vt, const float* direct, bool wide, float* s, float* m, float* l,
                 float* acc) {
  const int64_t acc_len = wide ? bsp * hdv : hdv;
  const v16f ninf = splat16(-INFINITY);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = nv[r];
    if (n <= 0) continue;
    for (int64_t j0 = 0; j0 < bsp; j0 += kLanes) {
      v16f sv{};
      if (direct) {
        sv = load16(direct + r * bsp + j0) * scale;
      } else {
        // Four partial sums over head_dim: four independent multiply-add chains instead of one.
        const float* qr = q + r * hd;
        v16f s1{}, s2{}, s3{};
        int64_t d = 0;
        for (; d + 4 <= hd; d += 4) {
          sv += (qr[d] * scale) * load16(kt + d * bsp + j0);
          s1 += (qr[d + 1] * scale) * load16(kt + (d + 1) * bsp + j0);
          s2 += (qr[d + 2] * scale) * load16(kt + (d + 2) * bsp + j0);
          s3 += (qr[d + 3] * scale) * load16(kt + (d + 3) * bsp + j0);
        }
        for (; d < hd; ++d) sv += (qr[d] * scale) * load16(kt + d * bsp + j0);
        sv = (sv + s1) + (s2 + s3);
      }
      store16(s + j0, sv);
    }
    if (softcap > 0)
      for (int64_t j = 0; j < n; ++j) s[j] = std::tanh(s[j] * (1.0f / softcap)) * softcap;
    for (int64_t j = 0; j < lo[r]; ++j) s[j] = -INFINITY;  // before the sliding window
    for (int64_t j = n; j < bsp; ++j) s[j] = -INFINITY;
    v16f mx = ninf;
    for (int64_t j0 = 0; j0 < bsp; j0 += kLanes) {
      const v16f sv = load16(s + j0);
      mx = mx > sv ? mx : sv;
    }
    float mb = std::max(m[r], hmax16(mx));
    float* a = acc + r * acc_len;
    if (mb > m[r]) {  // a new maximum: rescale what was accumulated (e^−inf = 0 the first time)
      const float corr = exp_nonpos(m[r] - mb);
      for (int64_t d = 0; d < acc_len; ++d) a[d] *= corr;
      l[r] *= corr;
      m[r] = mb;
    }
    v16f sum{};
    for (int64_t j0 = 0; j0 < bsp; j0 += kLanes) {
      const v16f e = exp_nonpos16(load16(s + j0) - mb);
      store16(s + j0, e);
      sum += e;
    }
    l[r] += hsum16(sum);
    if (wide) {  // per lane: a[d][j] += p_j · v[j][d], vt transposed
      for (int64_t d = 0; d < hdv; ++d)
        for (int64_t j0 = 0; j0 < bsp; j0 += kLanes)
          store16(a + d * bsp + j0,
                  load16(a + d * bsp + j0) + load16(s + j0) * load16(vt + d * bsp + j0));
    } else if (hdv == 64) {
      accumulate_v<4>(n, s, vt, a);
    } else if (hdv == 128) {
      accumulate_v<8>(n, s, vt, a);
    } else {
      for (int64_t j = 0; j < n; ++j) {
        const float p = s[j];
        const float* v = vt + j * hdv;
        for (int64_t d = 0; d < hdv; ++d) a[d] += p * v[d];
      }
    }
  }
}

/// Writes the results of query rows [i0, i1) of `seq` for KV head hk from their running max m
/// and sum l ([rows]) and accumulators acc_rows: out = acc / l, or for a segment of the blocks
/// (`partial` not null) m, l and acc as they are, [rows][2 + head_dim_v]. `lanes` > 0: acc_rows
/// holds that many per-lane partial sums per value ([rows][head_dim_v][lanes], summed here in
/// lane order); 0: one value each ([rows][head_dim_v]).
void write_tile_rows(const Call& c, const PagedSeq& seq, int64_t i0, int64_t i1, int64_t hk,
                     const float* acc_rows, const float* m, const float* l, int64_t lanes,
                     float* out, float* partial) {
  const AttnParams& a = c.p.attn;
  const int64_t hdv = a.head_dim_v, G = c.group, acc_len = lanes > 0 ? lanes * hdv : hdv;
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t r = (i - i0) * G + g;
      const float* acc = acc_rows + r * acc_len;
      float* o = partial ? partial + r * (hdv + 2) + 2
                         : out + (seq.q0 + i) * a.n_head * hdv + (hk * G + g) * hdv;
      const float inv = partial ? 1.0f : 1.0f / l[r];
      if (partial) {
        partial[r * (hdv + 2)] = m[r];
        partial[r * (hdv + 2) + 1] = l[r];
      }
      for (int64_t d = 0; d < hdv; ++d) {
        float t = acc[d];
        if (lanes > 0) {
          t = 0.0f;
          for (int64_t j = 0; j < lanes; ++j) t += acc[d * lanes + j];
        }
        o[d] = t * inv;
      }
    }
}

/// Query rows [i0, i1) of sequence `seq` (rows of q / out: seq.q0 + i), KV head hk, flash scheme.
/// Each block of the KV head is decoded once for all the tile's query heads.
void flash_tile(const Call& c, const PagedSeq& seq, int64_t i0, int64_t i1, int64_t hk,
                int64_t b_begin, int64_t b_end, const float* q, float* out, float* partial,
                Scratch& sc) {
  const PagedKvLayer& kv = c.kv;
  const AttnParams& a = c.p.attn;
  const int64_t hd = a.head_dim, hdv = a.head_dim_v, bs = kv.block_size, G = c.group;
  const int64_t bsp = (bs + kLanes - 1) / kLanes * kLanes;
  const bool wide = bsp * hdv <= 256;
  const int64_t rows = (i1 - i0) * G, acc_len = wide ? bsp * hdv : hdv;
  const bool direct = c.kd.direct;
  // Q heads of the tile in K's precision: f32, or rounded to f16 for an f16 K (as llama.cpp's
  // flash attention converts Q to K's type), or quantized for the in-place q8_0 / q4_0 dot.
  sc.qf.resize(size_t(rows * hd));
  if (direct) sc.qx.resize(size_t(rows * hd * 4));
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t r = (i - i0) * G + g;
      float* qf = sc.qf.data() + r * hd;
      std::copy_n(q + (seq.q0 + i) * a.n_head * hd + (hk * G + g) * hd, hd, qf);
      if (c.p.rotate) hadamard_rotate(qf, hd);
      if (direct) {
        c.kd.q_convert(qf, sc.qx.data() + r * hd * 4, hd);
      } else if (kv.k_type == DType::F16) {
        for (int64_t d = 0; d < hd; ++d) qf[d] = fp16_lut(f32_to_fp16(qf[d]));
      }
    }
  sc.acc.assign(size_t(rows * acc_len), 0.0f);
  sc.m.assign(size_t(rows), -INFINITY);
  sc.l.assign(size_t(rows), 0.0f);
  sc.nv.resize(size_t(rows));
  sc.s.resize(size_t(bsp));
  sc.krow.resize(size_t(std::max(hd, hdv)));
  sc.kt.assign(size_t(hd * bsp), 0.0f);
  sc.vtile.assign(size_t(bsp * hdv), 0.0f);
  if (direct) sc.w.assign(size_t(rows * bsp), 0.0f);
  const int64_t off = direct ? kv_head_offset(kv.k_type, hd, hk) : 0;
  const int64_t end = seq.pos0 + i1;  // positions the last query of the tile sees
  // With a sliding window, the first query of the tile sees nothing before `first`.
  const int64_t first = c.p.window > 0 ? std::max<int64_t>(0, seq.pos0 + i0 - c.p.window + 1) : 0;
  sc.lo.resize(size_t(rows));
  for (int64_t b = std::max(b_begin, first / bs); b < b_end && b * bs < end; ++b) {
    const int64_t n = std::min(bs, end - b * bs);
    const uint8_t* kb = kv.k_block(seq.block_table[b]);
    const uint8_t* vb = kv.v_block(seq.block_table[b]);
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t g = 0; g < G; ++g) {
        const int64_t r = (i - i0) * G + g;
        sc.nv[size_t(r)] = std::min(n, seq.pos0 + i + 1 - b * bs);
        sc.lo[size_t(r)] = c.p.window > 0 ? seq.pos0 + i - c.p.window + 1 - b * bs : 0;
        if (sc.lo[size_t(r)] >= sc.nv[size_t(r)]) sc.nv[size_t(r)] = 0;  // all before the window
      }
    if (direct) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < sc.nv[size_t(r)]; ++j)
          sc.w[size_t(r * bsp + j)] =
              c.kd.dot(hd, kb + j * kv.k_row_bytes + off, sc.qx.data() + r * hd * 4);
    } else {
      for (int64_t j = 0; j < n; ++j) {
        kv_decode_head(kv.k_type, a.n_head_kv, hd, kb + j * kv.k_row_bytes, hk, sc.krow.data());
        for (int64_t d = 0; d < hd; ++d) sc.kt[size_t(d * bsp + j)] = sc.krow[size_t(d)];
      }
    }
    if (wide) {
      for (int64_t j = 0; j < n; ++j) {
        kv_decode_head(kv.v_type, a.n_head_kv, hdv, vb + j * kv.v_row_bytes, hk, sc.krow.data());
        for (int64_t d = 0; d < hdv; ++d) sc.vtile[size_t(d * bsp + j)] = sc.krow[size_t(d)];
      }
      for (int64_t d = 0; d < hdv && n < bsp; ++d)
        std::fill_n(sc.vtile.begin() + d * bsp + n, bsp - n, 0.0f);
    } else {
      for (int64_t j = 0; j < n; ++j)
        kv_decode_head(kv.v_type, a.n_head_kv, hdv, vb + j * kv.v_row_bytes, hk,
                       sc.vtile.data() + j * hdv);
      if (n < bsp) std::fill(sc.vtile.begin() + n * hdv, sc.vtile.end(), 0.0f);
    }
    flash_block(rows, sc.nv.data(), sc.lo.data(), c.p.softcap, hd, hdv, bsp, a.scale, sc.qf.data(),
                sc.kt.data(), sc.vtile.data(), direct ? sc.w.data() : nullptr, wide, sc.s.data(),
                sc.m.data(), sc.l.data(), sc.acc.data());
  }
  write_tile_rows(c, seq, i0, i1, hk, sc.acc.data(), sc.m.data(), sc.l.data(), wide ? bsp : 0, out,
                  partial);
}

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
  sc.acc.assign(size_t(hrows * hdv), 0.0f);
  sc.m.assign(size_t(hrows), -INFINITY);
  sc.l.assign(size_t(hrows), 0.0f);
  sc.nv.resize(size_t(rows));
  sc.lo.resize(size_t(rows));
  sc.corr.resize(size_t(rows));
  sc.s.resize(size_t(rows * fb.bsp));
  fb.nv = sc.nv.data();
  fb.lo = sc.lo.data();
  fb.s = sc.s.data();
  fb.corr = sc.corr.data();
  fb.k_type = k_in_place ? kv.k_type : DType::F32;
  fb.v_type = v_in_place ? kv.v_type : DType::F32;
  fb.k_stride = k_in_place ? kv.k_row_bytes : hd * 4;
  fb.v_stride = v_in_place ? kv.v_row_bytes : hdv * 4;
  // Bytes of the heads' run in a stored row, from the first head's offset: what the block reads
  // in place and what prefetch_rows asks for.
  const int64_t k_off0 = k_in_place ? kv_head_offset(kv.k_type, hd, hk0) : 0;
  const int64_t v_off0 = v_in_place ? kv_head_offset(kv.v_type, hdv, hk0) : 0;
  const int64_t k_bytes = k_in_place ? kv_row_bytes(kv.k_type, nh, hd) : 0;
  const int64_t v_bytes = v_in_place ? kv_row_bytes(kv.v_type, nh, hdv) : 0;
  if (!k_in_place) sc.ktile.resize(size_t(bs * hd));
  if (!v_in_place) sc.vtile.resize(size_t(bs * hdv));
  const int64_t end = seq.pos0 + i1;  // positions the last query of the tile sees
  const int64_t first = c.p.window > 0 ? std::max<int64_t>(0, seq.pos0 + i0 - c.p.window + 1) : 0;
  for (int64_t b = std::max(b_begin, first / bs); b < b_end && b * bs < end; ++b) {
    const int64_t n = std::min(bs, end - b * bs);
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t g = 0; g < G; ++g) {
        const int64_t r = (i - i0) * G + g;
        sc.nv[size_t(r)] = std::min(n, seq.pos0 + i + 1 - b * bs);
        sc.lo[size_t(r)] = c.p.window > 0 ? seq.pos0 + i - c.p.window + 1 - b * bs : 0;
      }
    fb.n = n;
    const uint8_t* kb = kv.k_block(seq.block_table[b]);
    const uint8_t* vb = kv.v_block(seq.block_table[b]);
    // Ask for the next block's rows of these heads while this one is computed.
    if (b + 1 < b_end && (b + 1) * bs < end) {
      prefetch_rows(kv.k_block(seq.block_table[b + 1]) + k_off0, kv.k_row_bytes, k_bytes,
                    std::min(bs, end - (b + 1) * bs));
      prefetch_rows(kv.v_block(seq.block_table[b + 1]) + v_off0, kv.v_row_bytes, v_bytes,
                    std::min(bs, end - (b + 1) * bs));
    }
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t hk = hk0 + h, r0 = h * rows;
      fb.k = head_rows(kv.k_type, k_in_place, a.n_head_kv, hd, kb, kv.k_row_bytes, hk, n,
                       sc.ktile.data());
      fb.v = head_rows(kv.v_type, v_in_place, a.n_head_kv, hdv, vb, kv.v_row_bytes, hk, n,
                       sc.vtile.data());
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

// ---- exact (llama.cpp's non-flash softmax) ----

/// The 16-lane horizontal sum of a 512-bit register as _mm512_reduce_add_ps (halves, quarters,
/// pairs), the fold vec_dot_float.cpp uses.
inline float fold16(const float* v) {
  float s[8], t[4];
  for (int i = 0; i < 8; ++i) s[i] = v[i + 8] + v[i];
  for (int i = 0; i < 4; ++i) t[i] = s[i + 4] + s[i];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

/// The accumulation order of the weighted sum of V over n_kv cells, as vec_dot_f16/f32 (vec:
/// 4 × 16 lanes over the first n_kv & ~63 cells, folded, then the tail one by one) or
/// gemm_dot_f16/f32 (one 16-lane accumulator) compute out[d] = Σ_p V[p][d] · w[p]. Lanes are
/// kept per output element: lanes[slot][d]; the tail sum in tail[d].
struct LaneOrder {
  bool gemm = false;        ///< tinyBLAS order (batches) instead of ggml_vec_dot order
  bool f16 = false;         ///< f16 V and weights: products exact, tail in double
  int64_t np = 0;           ///< vec order: cells in the 4 × 16-lane body
  int64_t unfused_end = 0;  ///< vec order, f32: tail cells before this add an unfused product
  int64_t hdv = 0;          ///< head_dim_v

  LaneOrder(bool gemm_order, bool f16_values, int64_t n_kv, int64_t head_dim_v)
      : gemm(gemm_order), f16(f16_values), np(n_kv & ~int64_t(63)), hdv(head_dim_v) {
    const int64_t rest = n_kv - np;
    unfused_end = np + rest / 16 * 16 + (rest % 16 >= 8 ? 8 : 0);
  }

  /// out[d] of the vec-order body: the four 16-lane accumulators folded (acc0+acc2, acc1+acc3,
  /// their sum, then fold16).
  float fold_body(const float* lanes, int64_t d) const {
    float a[16];
    for (int l = 0; l < 16; ++l) {
      const float x0 = lanes[l * hdv + d] + lanes[(32 + l) * hdv + d];
      const float x1 = lanes[(16 + l) * hdv + d] + lanes[(48 + l) * hdv + d];
      a[l] = x0 + x1;
    }
    return fold16(a);
  }

  /// Adds cell p (cells come in order 0, 1, …, n_kv − 1) with values v[hdv] and weight w.
  void add(float* lanes, double* tail, int64_t p, const float* v, float w) const {
    if (gemm || p < np) {
      float* acc = lanes + (gemm ? p % 16 : p % 64) * hdv;
      for (int64_t d = 0; d < hdv; ++d)
        acc[d] = f16 ? acc[d] + v[d] * w : std::fma(v[d], w, acc[d]);
      return;
    }
    if (p == np)
      for (int64_t d = 0; d < hdv; ++d) tail[d] = fold_body(lanes, d);
    for (int64_t d = 0; d < hdv; ++d) {
      if (f16) {
        tail[d] += double(v[d] * w);
      } else {
        const float t = float(tail[d]);
        tail[d] = p < unfused_end ? t + v[d] * w : std::fma(v[d], w, t);
      }
    }
  }

  /// The sums after all n_kv cells (n_kv as given to the constructor).
  void finish(const float* lanes, const double* tail, int64_t n_kv, float* out) const {
    for (int64_t d = 0; d < hdv; ++d) {
      if (gemm) {
        float a[16];
        for (int l = 0; l < 16; ++l) a[l] = lanes[l * hdv + d];
        out[d] = fold16(a);
      } else {
        out[d] = n_kv > np ? float(tail[d]) : fold_body(lanes, d);
      }
    }
  }
};

/// First position a query at n_pos − 1 sees: 0, or the start of its sliding window.
inline int64_t window_start(const Call& c, int64_t n_pos) {
  return c.p.window > 0 ? std::max<int64_t>(0, n_pos - c.p.window) : 0;
}

/// Scores of the group's query heads over positions 0 … n_pos − 1 into sc.w, then weights.
void exact_weights(const Call& c, const PagedSeq& seq, int64_t n_pos, int64_t n_kv, int64_t hk,
                   Scratch& sc) {
  const int64_t bs = c.kv.block_size, G = c.group;
  const int64_t lo = window_start(c, n_pos);
  sc.w.resize(size_t(G * n_kv));
  BlockView bv;
  for (int64_t b = lo / bs; b * bs < n_pos; ++b) {
    const int64_t n = std::min(bs, n_pos - b * bs);
    load_k(c, seq.block_table[b], n, hk, sc, bv);
    for (int64_t g = 0; g < G; ++g)
      for (int64_t j = 0; j < n; ++j) sc.w[size_t(g * n_kv + b * bs + j)] = k_dot(c, bv, j, g, sc);
  }
  for (int64_t g = 0; g < G; ++g) {
    float* w = sc.w.data() + g * n_kv;
    float scale = c.p.attn.scale;
    if (c.p.softcap > 0) {  // as llama.cpp: scale by 1/cap, tanh, scale by cap, then the softmax
      for (int64_t j = lo; j < n_pos; ++j)
        w[j] = std::tanh(w[j] * scale * (1.0f / c.p.softcap)) * c.p.softcap;
      scale = 1.0f;  // applied above (models with soft-capping pre-scale Q: scale is 1 there)
    }
    std::fill_n(w, lo, -INFINITY);  // before the sliding window (masked, weight 0)
    masked_softmax(w, n_pos, n_kv, scale);
    if (c.v_f16)
      for (int64_t j = 0; j < n_kv; ++j) w[j] = fp16_lut(f32_to_fp16(w[j]));
  }
}

/// Query at position n_pos − 1, KV head hk, exact scheme over n_kv cells.
void exact_item(const Call& c, const PagedSeq& seq, int64_t n_pos, int64_t n_kv, int64_t hk,
                const float* q_row, float* out_row, Scratch& sc) {
  const int64_t hdv = c.p.attn.head_dim_v, bs = c.kv.block_size, G = c.group;
  prepare_q(c, q_row, hk, sc);
  exact_weights(c, seq, n_pos, n_kv, hk, sc);
  const LaneOrder order(c.batched, c.v_f16, n_kv, hdv);
  sc.acc.assign(size_t(G * 64 * hdv), 0.0f);
  sc.tail.assign(size_t(G * hdv), 0.0);
  sc.zeros.assign(size_t(hdv), 0.0f);
  sc.vrow.resize(size_t(hdv));
  BlockView bv;
  const int64_t b_first = window_start(c, n_pos) / bs;
  for (int64_t p = 0; p < b_first * bs; ++p)  // blocks before the window: weight 0, not read
    for (int64_t g = 0; g < G; ++g)
      order.add(sc.acc.data() + g * 64 * hdv, sc.tail.data() + g * hdv, p, sc.zeros.data(), 0.0f);
  for (int64_t b = b_first; b * bs < n_pos; ++b) {
    const int64_t n = std::min(bs, n_pos - b * bs);
    load_v(c, seq.block_table[b], n, hk, sc, bv);
    for (int64_t j = 0; j < n; ++j) {
      const float* v = nullptr;
      if (c.v_f16) {
        const uint16_t* h = v_f16(c, bv, j, hk);
        for (int64_t d = 0; d < hdv; ++d) sc.vrow[size_t(d)] = fp16_lut(h[d]);
        v = sc.vrow.data();
      } else {
        v = v_f32(c, bv, j, hk, sc);
      }
      for (int64_t g = 0; g < G; ++g)
        order.add(sc.acc.data() + g * 64 * hdv, sc.tail.data() + g * hdv, b * bs + j, v,
                  sc.w[size_t(g * n_kv + b * bs + j)]);
    }
  }
  for (int64_t p = n_pos; p < n_kv; ++p)
    for (int64_t g = 0; g < G; ++g)
      order.add(sc.acc.data() + g * 64 * hdv, sc.tail.data() + g * hdv, p, sc.zeros.data(), 0.0f);
  for (int64_t g = 0; g < G; ++g)
    order.finish(sc.acc.data() + g * 64 * hdv, sc.tail.data() + g * hdv, n_kv,
                 out_row + (hk * G + g) * hdv);
}

// ---- flash dispatch: tiles, segments of long contexts, and their merge ----

/// Query rows per flash work item: each K/V block is decoded once for this many queries.
constexpr int64_t kFlashTile = 32;
/// Sequences with at most this many query rows in a call (decode) split their context into
/// segments of kFlashSegment positions, computed as separate work items and merged by their
/// log-sum-exp (Flash-Decoding), so one long decode spreads over every thread. The split depends
/// only on the context length, never on the thread count.
constexpr int64_t kFlashSplitMaxQueries = 4;
constexpr int64_t kFlashSegment = 512;

/// One flash work item: query rows [i0, i1) of sequence s, KV heads [hk0, hk1) (several only
/// for flash_tile_decode), blocks [b0, b1); results go to `out` (part < 0) or, for head hk0 + h,
/// to the partial state at parts + part + h · part_stride (floats).
struct FlashItem {
  int64_t s, i0, i1, hk0, hk1, b0, b1, part, part_stride;
};

void flash_call(ThreadPool& pool, const Call& c, const PagedSeq* seqs, int64_t n_seqs,
                const float* q, float* out) {
  const AttnParams& a = c.p.attn;
  const int64_t bs = c.kv.block_size, hdv = a.head_dim_v, hkv = a.n_head_kv;
  const int64_t seg_blocks = std::max<int64_t>(1, kFlashSegment / bs);
  // Items: (sequence, query tile, KV heads[, segment]), taken by the threads one at a time in
  // this order. Decode tiles take several KV heads per item (every head when there are enough
  // segments to keep the threads busy, fewer otherwise): the block loop then reads each block's
  // rows of those heads as one run of memory. The grouping changes no result (each head is
  // computed as alone), so it may depend on the thread count; the segments may not.
  std::vector<FlashItem> items;
  struct Group {  // a decode row set split into segments: its partial states and where they go
    int64_t s, i0, i1, hk, first, n_parts, slot;  // floats: first state, and between states
  };
  std::vector<Group> groups;
  int64_t n_part_floats = 0;
  const int64_t want_items = 2 * int64_t(pool.size());
  for (int64_t s = 0; s < n_seqs; ++s) {
    const PagedSeq& seq = seqs[s];
    const int64_t nt = (seq.n_q + kFlashTile - 1) / kFlashTile;
    const int64_t n_blocks = (seq.pos0 + seq.n_q + bs - 1) / bs;
    const bool small = seq.n_q <= kFlashSplitMaxQueries;
    const int64_t n_seg = small ? (n_blocks + seg_blocks - 1) / seg_blocks : 1;
    int64_t hg = small && c.decode ? hkv : 1;  // KV heads per item
    while (hg > 1 && n_seg * ((hkv + hg - 1) / hg) < want_items) hg = (hg + 1) / 2;
    for (int64_t k = 0; k < nt; ++k) {
      const int64_t tile = k % 2 == 0 ? k / 2 : nt - 1 - k / 2;
      const int64_t i0 = tile * kFlashTile, i1 = std::min(seq.n_q, i0 + kFlashTile);
      const int64_t slot = (i1 - i0) * c.group * (hdv + 2), base = n_part_floats;
      if (n_seg > 1) {
        for (int64_t hk = 0; hk < hkv; ++hk)
          groups.push_back({s, i0, i1, hk, base + hk * n_seg * slot, n_seg, slot});
        n_part_floats += hkv * n_seg * slot;
      }
      for (int64_t g = 0; g < n_seg; ++g)
        for (int64_t hk0 = 0; hk0 < hkv; hk0 += hg)
          items.push_back({s, i0, i1, hk0, std::min(hkv, hk0 + hg), g * seg_blocks,
                           n_seg > 1 ? std::min(n_blocks, (g + 1) * seg_blocks) : n_blocks,
                           n_seg > 1 ? base + (hk0 * n_seg + g) * slot : -1, n_seg * slot});
    }
  }
  // Every partial state is written by its item before the merge reads it: no zeroing.
  std::unique_ptr<float[]> parts(n_part_floats > 0 ? new float[size_t(n_part_floats)] : nullptr);
  const int64_t n_items = int64_t(items.size());
  std::atomic<int64_t> next{0};
  pool.run(std::min<int64_t>(n_items, pool.size()), [&](int64_t, int64_t) {
    thread_local Scratch sc;
    for (int64_t it; (it = next.fetch_add(1, std::memory_order_relaxed)) < n_items;) {
      const FlashItem& f = items[size_t(it)];
      float* part = f.part < 0 ? nullptr : parts.get() + f.part;
      if (c.decode && (f.i1 - f.i0 <= kFlashSplitMaxQueries || c.decode_tiles))
        flash_tile_decode(c, seqs[f.s], f.i0, f.i1, f.hk0, f.hk1, f.b0, f.b1, q, out, part,
                          f.part_stride, sc);
      else
        flash_tile(c, seqs[f.s], f.i0, f.i1, f.hk0, f.b0, f.b1, q, out, part, sc);
    }
  });
  if (groups.empty()) return;
  pool.run(int64_t(groups.size()), [&](int64_t begin, int64_t end) {
    std::vector<float> m, l;
    for (int64_t gi = begin; gi < end; ++gi) {
      const Group& g = groups[size_t(gi)];
      const int64_t rows = (g.i1 - g.i0) * c.group;
      m.resize(size_t(g.n_parts));
      l.resize(size_t(g.n_parts));
      std::vector<const float*> accs(size_t(g.n_parts));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < g.n_parts; ++k) {
          const float* p = parts.get() + g.first + k * g.slot + r * (hdv + 2);
          m[size_t(k)] = p[0];
          l[size_t(k)] = p[1];
          accs[size_t(k)] = p + 2;
        }
        const int64_t i = g.i0 + r / c.group, h = g.hk * c.group + r % c.group;
        attn_merge_partials(g.n_parts, m.data(), l.data(), accs.data(), hdv,
                            out + (seqs[g.s].q0 + i) * a.n_head * hdv + h * hdv);
      }
    }
  });
}

// ---- checks and dispatch ----

void check_shapes(const PagedKvLayer& kv, const PagedAttnParams& p) {
  const AttnParams& a = p.attn;
  if (a.n_head <= 0 || a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0 || a.head_dim <= 0 ||
      a.head_dim_v <= 0 || kv.block_size <= 0)
    throw std::invalid_argument("paged attention: bad shape");
  if (kv.k_row_bytes != kv_row_bytes(kv.k_type, a.n_head_kv, a.head_dim) ||
      kv.v_row_bytes != kv_row_bytes(kv.v_type, a.n_head_kv, a.head_dim_v))
    throw std::invalid_argument("paged attention: row bytes do not match the KV types");
  if (p.rotate && (a.head_dim & (a.head_dim - 1)) != 0)
    throw std::invalid_argument("paged attention: rotate needs a power-of-two head_dim");
}

/// Cells llama.cpp's KV cache exposes to a batch ending at position `end`: a multiple of 32,
/// at least 32 (its n_ctx is a multiple of 32 too, so no cap applies).
int64_t padded_cells(int64_t end) { return std::max<int64_t>(32, (end + 31) / 32 * 32); }

}  // namespace

void paged_kv_store(const PagedKvLayer& kv, const PagedAttnParams& p, const PagedSeq* seqs,
                    int64_t n_seqs, const float* k, const float* v) {
  check_shapes(kv, p);
  const int64_t hkv = p.attn.n_head_kv, hd = p.attn.head_dim, hdv = p.attn.head_dim_v;
  std::vector<float> rot(size_t(hkv * hd));
  for (int64_t s = 0; s < n_seqs; ++s) {
    const PagedSeq& seq = seqs[s];
    for (int64_t i = 0; i < seq.n_q; ++i) {
      const int64_t pos = seq.pos0 + i, row = seq.q0 + i;
      const int32_t id = seq.block_table[pos / kv.block_size];
      const int64_t j = pos % kv.block_size;
      const float* krow = k + row * hkv * hd;
      if (p.rotate) {
        std::copy_n(krow, hkv * hd, rot.begin());
        for (int64_t h = 0; h < hkv; ++h) hadamard_rotate(rot.data() + h * hd, hd);
        krow = rot.data();
      }
      kv_encode_row(kv.k_type, hkv, hd, krow, kv.k_block(id) + j * kv.k_row_bytes);
      kv_encode_row(kv.v_type, hkv, hdv, v + row * hkv * hdv, kv.v_block(id) + j * kv.v_row_bytes);
    }
  }
}

void paged_attention(ThreadPool& pool, const PagedKvLayer& kv, const PagedAttnParams& p,
                     const PagedSeq* seqs, int64_t n_seqs, const float* q, float* out) {
  paged_attention_at_level(pool, cpu_level(), kv, p, seqs, n_seqs, q, out);
}

void paged_attention_at_level(ThreadPool& pool, CpuLevel level, const PagedKvLayer& kv,
                              const PagedAttnParams& p, const PagedSeq* seqs, int64_t n_seqs,
                              const float* q, float* out) {
  check_shapes(kv, p);
  const AttnParams& a = p.attn;
  std::vector<int64_t> first(size_t(n_seqs + 1), 0);  // first work item of each sequence
  int64_t rows = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    first[size_t(s + 1)] = first[size_t(s)] + seqs[s].n_q * a.n_head_kv;
    rows += seqs[s].n_q;
  }
  const bool batched = rows >= 2;
  const Call c{
      kv,
      p,
      a.n_head / a.n_head_kv,
      make_kdot(kv.k_type, a.head_dim, p.flash, batched),
      kv.v_type == DType::F16,
      kv.v_type == DType::F16 || kv.v_type == DType::F32,
      batched,
      a.head_dim % 16 == 0 && a.head_dim_v % 16 == 0 ? flash_decode_kernel(level) : nullptr,
      (kv.k_type == DType::Q8_0 || kv.k_type == DType::Q4_0 || kv.k_type == DType::F16) &&
          flash_decode_in_place(kv.k_type, a.head_dim)};
  if (p.flash) {
    flash_call(pool, c, seqs, n_seqs, q, out);
    return;
  }
  pool.run(first[size_t(n_seqs)], [&](int64_t begin, int64_t end) {
    thread_local Scratch sc;
    for (int64_t it = begin; it < end; ++it) {
      const int64_t s = std::upper_bound(first.begin(), first.end(), it) - first.begin() - 1;
      const PagedSeq& seq = seqs[s];
      const int64_t i = (it - first[size_t(s)]) / a.n_head_kv;
      const int64_t hk = (it - first[size_t(s)]) % a.n_head_kv;
      const float* q_row = q + (seq.q0 + i) * a.n_head * a.head_dim;
      float* out_row = out + (seq.q0 + i) * a.n_head * a.head_dim_v;
      exact_item(c, seq, seq.pos0 + i + 1, padded_cells(seq.pos0 + seq.n_q), hk, q_row, out_row,
                 sc);
    }
  });
}

void attn_merge_partials(int64_t n_parts, const float* m, const float* l, const float* const* acc,
                         int64_t head_dim_v, float* out) {
  float mx = -INFINITY;
  for (int64_t k = 0; k < n_parts; ++k) mx = std::max(mx, m[k]);
  float den = 0.0f;
  for (int64_t d = 0; d < head_dim_v; ++d) out[d] = 0.0f;
  for (int64_t k = 0; k < n_parts; ++k) {
    if (m[k] == -INFINITY) continue;  // a part that saw no position
    const float w = std::exp(m[k] - mx);
    den += w * l[k];
    for (int64_t d = 0; d < head_dim_v; ++d) out[d] += w * acc[k][d];
  }
  const float inv = 1.0f / den;
  for (int64_t d = 0; d < head_dim_v; ++d) out[d] *= inv;
}

void hadamard_rotate(float* x, int64_t n) {
  if (n <= 0 || (n & (n - 1)) != 0)
    throw std::invalid_argument("hadamard_rotate: n must be a power of two");
  for (int64_t len = 1; len < n; len <<= 1)
    for (int64_t i = 0; i < n; i += 2 * len)
      for (int64_t j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
  const float s = float(1.0 / std::sqrt(double(n)));
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace kvrun::cpu
