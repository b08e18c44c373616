// paged_attention_flash.cpp — the flash scheme's large-tile kernel (flash_tile; see
// paged_attention.h and paged_attention_impl.h).
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
// (GCC target_clones). kFlashTile and the order of the items: paged_attention.cpp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "cpu/kv_row_ops.h"
#include "cpu/paged_attention_impl.h"
#include "fp16.h"
#include "kv_layout.h"

namespace kvrun::cpu::paged_attn {

namespace {

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

}  // namespace

// start_rows, visible_rows, write_tile_rows and flash_tile: paged_attention_impl.h.
void start_rows(Scratch& sc, int64_t rows, int64_t acc_len) {
  sc.acc.assign(size_t(rows * acc_len), 0.0f);
  sc.m.assign(size_t(rows), -INFINITY);
  sc.l.assign(size_t(rows), 0.0f);
  sc.nv.resize(size_t(rows));
  sc.lo.resize(size_t(rows));
}

void visible_rows(const Call& c, const PagedSeq& seq, int64_t i0, int64_t i1, int64_t p0, int64_t n,
                  Scratch& sc) {
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t g = 0; g < c.group; ++g) {
      const int64_t r = (i - i0) * c.group + g;
      sc.nv[size_t(r)] = std::min(n, seq.pos0 + i + 1 - p0);
      sc.lo[size_t(r)] = c.p.window > 0 ? seq.pos0 + i - c.p.window + 1 - p0 : 0;
    }
}

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
      // A sink (the finished row only; a partial state gets it at the merge): one more term of
      // the denominator, the accumulator rescaled when it raises the max.
      float inv = partial ? 1.0f : 1.0f / l[r];
      if (!partial && c.p.sinks) inv = attn_sink_inv(c.p.sinks[hk * G + g], m[r], l[r]);
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
  start_rows(sc, rows, acc_len);
  sc.s.resize(size_t(bsp));
  sc.krow.resize(size_t(std::max(hd, hdv)));
  sc.kt.assign(size_t(hd * bsp), 0.0f);
  sc.vtile.assign(size_t(bsp * hdv), 0.0f);
  if (direct) sc.w.assign(size_t(rows * bsp), 0.0f);
  const int64_t off = direct ? kv_head_offset(kv.k_type, hd, hk) : 0;
  const int64_t end = seq.pos0 + i1;  // positions the last query of the tile sees
  // With a sliding window, the first query of the tile sees nothing before `first`.
  const int64_t first = c.p.window > 0 ? std::max<int64_t>(0, seq.pos0 + i0 - c.p.window + 1) : 0;
  for (int64_t b = std::max(b_begin, first / bs); b < b_end && b * bs < end; ++b) {
    if (!block_in_tier(c, seq.block_table[b])) continue;
    const int64_t n = std::min(bs, end - b * bs);
    const uint8_t* kb = kv.k_block(seq.block_table[b]);
    const uint8_t* vb = kv.v_block(seq.block_table[b]);
    visible_rows(c, seq, i0, i1, b * bs, n, sc);
    for (int64_t r = 0; r < rows; ++r)
      if (sc.lo[size_t(r)] >= sc.nv[size_t(r)]) sc.nv[size_t(r)] = 0;  // all before the window
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

}  // namespace kvrun::cpu::paged_attn
