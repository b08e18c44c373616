// packed_neon.inl — the NEON packed-weight kernels (pack.h layouts), compiled twice by
// packed_neon.cpp: in namespace `plain` (baseline Armv8-A Advanced SIMD, KVRUN_NEON_DOTPROD 0)
// and in namespace `dotprod` (SDOT, under `#pragma GCC target`, KVRUN_NEON_DOTPROD 1). The two
// differ only in how the exact integer sums of a block are formed; every float operation is the
// scalar reference's, in its order, so both give its floats bit for bit:
//   * q4_0 against q8_0: repack_dot_q4_0_q8_0 (vec_dot.h): per block and row the whole 32-value
//     integer dot, then acc = fma(float(isum), d_w·d_x, acc), one accumulator per row;
//   * q8_0 and mxfp4 against q8_0: vec_dot_q8_0_q8_0, vec_dot_mxfp4_q8_0: per row 8 float lanes
//     (lane i: values 4i..4i+3 of each block), lane = fma(d_w·d_x, float(Σ of its 4 products),
//     lane), fold8 at the end;
//   * q6_K, q4_K and q5_K against q8_K: vec_dot_q6_K_q8_K, vec_dot_q4_K_q8_K and
//     vec_dot_q5_K_q8_K (8 integer lanes per super-block weighted by the integer sub-block scales,
//     fused into 8 float lanes; q4_K's mins in 4 more, q5_K's in one sum), folded as they fold.
// 16 rows of a packed group are four 128-bit registers (row r in register r / 4, lane r % 4),
// which is how pack.h's chunks load: 16 bytes of a chunk are 4 bytes of each of 4 rows.
#ifndef KVRUN_NEON_DOTPROD
#error "included by packed_neon.cpp only"
#endif

namespace {

/// The 16 rows' f16 scales at p (row r at 2·r) as floats (exact).
inline void load_scales16(const uint8_t* p, float32x4_t* d) {
  for (int k = 0; k < 4; ++k) d[k] = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(p + 8 * k)));
}

/// The 4 bytes at p repeated in all four 32-bit lanes.
inline int8x16_t splat4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return vreinterpretq_s8_s32(vdupq_n_s32(v));
}

/// acc + Σ of each 4 consecutive products w[4l + e]·x[4·L + e] per 32-bit lane l: the dot of 4
/// rows' 4 weights with activation quants 4L..4L+3 of xv (exact; |w|, |x| ≤ 128).
template <int L>
inline int32x4_t dot4(int32x4_t acc, int8x16_t w, int8x16_t xv) {
#if KVRUN_NEON_DOTPROD
  return vdotq_laneq_s32(acc, w, xv, L);
#else
  const int8x16_t xl = vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(xv), L));
  const int32x4_t p0 = vpaddlq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(xl)));
  const int32x4_t p1 = vpaddlq_s16(vmull_high_s8(w, xl));
  return vaddq_s32(acc, vpaddq_s32(p0, p1));
#endif
}

/// dot4 with the lane L a run-time value 0..3.
inline int32x4_t dot4_at(int L, int32x4_t acc, int8x16_t w, int8x16_t xv) {
  switch (L) {
    case 0:
      return dot4<0>(acc, w, xv);
    case 1:
      return dot4<1>(acc, w, xv);
    case 2:
      return dot4<2>(acc, w, xv);
    default:
      return dot4<3>(acc, w, xv);
  }
}

// ---- q4_0 (288-byte blocks: 16 f16 scales, then 4 chunks of 64 nibble bytes) ----

/// The integer dots of one packed q4_0 block's 16 rows with C activation blocks (q8_0 quants
/// xq[c]), each started from s[c][k] (−8·Σx, xoff): s[c][k] lane l = row 4k + l's Σ u·x − 8·Σx
/// = Σ (u − 8)·x. Exact in any order. The plain form sums the products of each (row, value
/// mod 4) in int16 (8 products ≤ 15·128 each: ≤ 15360) and widens once per block.
template <int C>
inline void q4_0_block_sums(const uint8_t* g, const int8_t* const* xq, int32x4_t (*s)[4]) {
  const uint8x16_t m15 = vdupq_n_u8(0x0F);
#if KVRUN_NEON_DOTPROD
  int8x16_t x0[C], x1[C];
  for (int c = 0; c < C; ++c) {
    x0[c] = vld1q_s8(xq[c]);
    x1[c] = vld1q_s8(xq[c] + 16);
  }
#pragma GCC unroll 4  // constant lanes: dot4_at's switch folds away
  for (int q = 0; q < 4; ++q)
    for (int k = 0; k < 4; ++k) {
      const uint8x16_t v = vld1q_u8(g + 32 + 64 * q + 16 * k);
      const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(v, m15));
      const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
      for (int c = 0; c < C; ++c) s[c][k] = dot4_at(q, dot4_at(q, s[c][k], lo, x0[c]), hi, x1[c]);
    }
#else
  int16x8_t a[C][4][2];
  for (int c = 0; c < C; ++c)
    for (int k = 0; k < 4; ++k) a[c][k][0] = a[c][k][1] = vdupq_n_s16(0);
  for (int q = 0; q < 4; ++q) {
    int8x16_t xl[C], xh[C];
    for (int c = 0; c < C; ++c) {
      xl[c] = splat4(xq[c] + 4 * q);
      xh[c] = splat4(xq[c] + 16 + 4 * q);
    }
    for (int k = 0; k < 4; ++k) {
      const uint8x16_t v = vld1q_u8(g + 32 + 64 * q + 16 * k);
      const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(v, m15));
      const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
      for (int c = 0; c < C; ++c) {
        a[c][k][0] = vmlal_s8(a[c][k][0], vget_low_s8(lo), vget_low_s8(xl[c]));
        a[c][k][1] = vmlal_high_s8(a[c][k][1], lo, xl[c]);
        a[c][k][0] = vmlal_s8(a[c][k][0], vget_low_s8(hi), vget_low_s8(xh[c]));
        a[c][k][1] = vmlal_high_s8(a[c][k][1], hi, xh[c]);
      }
    }
  }
  for (int c = 0; c < C; ++c)
    for (int k = 0; k < 4; ++k)  // rows 4k, 4k+1 in a[..][0], 4k+2, 4k+3 in a[..][1]
      s[c][k] = vaddq_s32(s[c][k], vpaddq_s32(vpaddlq_s16(a[c][k][0]), vpaddlq_s16(a[c][k][1])));
#endif
}

/// One packed q4_0 group (16 rows, nb blocks from g) against C activation rows (q8_0, xs bytes
/// apart; xoff: per block −8·Σx and the scale as float bits, 2·nb per row): y[c·ys + r].
template <int C>
inline void packed_q4_0_group(int64_t nb, const uint8_t* g, const uint8_t* x, size_t xs,
                              const int32_t* xoff, float* y, size_t ys) {
  float32x4_t acc[C][4];
  for (int c = 0; c < C; ++c)
    for (int k = 0; k < 4; ++k) acc[c][k] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b, g += 288) {
    const int8_t* xq[C];
    int32x4_t s[C][4];
    for (int c = 0; c < C; ++c) {
      xq[c] = reinterpret_cast<const block_q8_0*>(x + size_t(c) * xs)[b].qs;
      const int32x4_t off = vdupq_n_s32(xoff[(size_t(c) * size_t(nb) + size_t(b)) * 2]);
      for (int k = 0; k < 4; ++k) s[c][k] = off;
    }
    q4_0_block_sums<C>(g, xq, s);
    float32x4_t dw[4];
    load_scales16(g, dw);
    for (int c = 0; c < C; ++c) {
      float dx;
      std::memcpy(&dx, xoff + (size_t(c) * size_t(nb) + size_t(b)) * 2 + 1, sizeof dx);
      for (int k = 0; k < 4; ++k)  // fma(float(isum), d_w·d_x, acc)
        acc[c][k] = vfmaq_f32(acc[c][k], vcvtq_f32_s32(s[c][k]), vmulq_n_f32(dw[k], dx));
    }
  }
  for (int c = 0; c < C; ++c)
    for (int k = 0; k < 4; ++k) vst1q_f32(y + size_t(c) * ys + 4 * k, acc[c][k]);
}

// ---- q8_0 and mxfp4: 8 lanes of 4 values per 32-value block ----

/// q8_0 (544-byte blocks: 16 f16 scales, then 8 chunks of 64 bytes of q + 128): lane i of 4
/// rows is chunk i flipped back to signed q (XOR 0x80), so the offsets of xoff are not read.
struct Q8_0Lanes {
  static constexpr int kBlockBytes = 544;
  static void scales(const uint8_t* g, float32x4_t* d) { load_scales16(g, d); }
  static int8x16_t lane(const uint8_t* g, int i, int k) {
    return vreinterpretq_s8_u8(veorq_u8(vld1q_u8(g + 32 + 64 * i + 16 * k), vdupq_n_u8(0x80)));
  }
};

/// mxfp4 (272-byte blocks: 16 E8M0 bytes, then q4_0's 4 chunks of nibbles): the scale is
/// mxfp4_half_scale(e) (2^(e − 128): e − 1 as the float exponent field, the subnormals 2^−128
/// and 2^−127 for e = 0, 1), lane i the doubled E2M1 levels (kvalues_mxfp4, a table lookup) of
/// chunk i % 4's low (i < 4) or high nibbles. The offsets of xoff are not read.
struct Mxfp4Lanes {
  static constexpr int kBlockBytes = 272;
  static void scales(const uint8_t* g, float32x4_t* d) {
    const uint8x16_t e = vld1q_u8(g);
    const uint16x8_t h[2] = {vmovl_u8(vget_low_u8(e)), vmovl_high_u8(e)};
    for (int k = 0; k < 4; ++k) {
      const uint32x4_t v = k % 2 ? vmovl_high_u16(h[k / 2]) : vmovl_u16(vget_low_u16(h[k / 2]));
      const uint32x4_t normal = vshlq_n_u32(vsubq_u32(v, vdupq_n_u32(1)), 23);
      const uint32x4_t sub = vshlq_u32(vdupq_n_u32(0x00200000u), vreinterpretq_s32_u32(v));
      d[k] = vreinterpretq_f32_u32(vbslq_u32(vcgeq_u32(v, vdupq_n_u32(2)), normal, sub));
    }
  }
  static int8x16_t lane(const uint8_t* g, int i, int k) {
    const uint8x16_t v = vld1q_u8(g + 16 + 64 * (i % 4) + 16 * k);
    const uint8x16_t nib = i < 4 ? vandq_u8(v, vdupq_n_u8(0x0F)) : vshrq_n_u8(v, 4);
    return vqtbl1q_s8(vld1q_s8(kvalues_mxfp4), nib);
  }
};

/// Rows 4·k0 .. 4·(k0 + R) − 1 (R registers of 4 rows) of one packed group of format F (Q8_0Lanes,
/// Mxfp4Lanes) against C q8_0 activation rows (xs bytes apart; xoff: 9 per block, the scale as
/// float bits at 8): y[c·ys + 4·k0 + r]. vec_dot_q8_0_q8_0's / vec_dot_mxfp4_q8_0's order: per
/// row 8 float lanes (lane i: values 4i..4i+3), lane = fma(d_w·d_x, float(Σ of its 4 products),
/// lane), fold8 at the end; each Σ is exact (|w·x| ≤ 128², four in int32). R·C ≤ 2 keeps the
/// 8·R·C float accumulators in registers.
template <typename F, int R, int C>
inline void packed_lanes_part(int64_t nb, const uint8_t* g, int k0, const uint8_t* x, size_t xs,
                              const int32_t* xoff, float* y, size_t ys) {
  float32x4_t acc[C][8][R];
  for (int c = 0; c < C; ++c)
    for (int i = 0; i < 8; ++i)
      for (int k = 0; k < R; ++k) acc[c][i][k] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b, g += F::kBlockBytes) {
    float32x4_t dw[4];
    F::scales(g, dw);
    float32x4_t d[C][R];
    int8x16_t xv[C][2];
    for (int c = 0; c < C; ++c) {
      const int8_t* xq = reinterpret_cast<const block_q8_0*>(x + size_t(c) * xs)[b].qs;
      xv[c][0] = vld1q_s8(xq);
      xv[c][1] = vld1q_s8(xq + 16);
      float dx;
      std::memcpy(&dx, xoff + (size_t(c) * size_t(nb) + size_t(b)) * 9 + 8, sizeof dx);
      for (int k = 0; k < R; ++k) d[c][k] = vmulq_n_f32(dw[k0 + k], dx);
    }
#pragma GCC unroll 8  // constant lanes: dot4_at's switch folds away
    for (int i = 0; i < 8; ++i)
      for (int k = 0; k < R; ++k) {
        const int8x16_t w = F::lane(g, i, k0 + k);
        for (int c = 0; c < C; ++c) {
          const int32x4_t s = dot4_at(i % 4, vdupq_n_s32(0), w, xv[c][i / 4]);
          acc[c][i][k] = vfmaq_f32(acc[c][i][k], d[c][k], vcvtq_f32_s32(s));  // fma(d, Σ, lane)
        }
      }
  }
  for (int c = 0; c < C; ++c)
    for (int k = 0; k < R; ++k) {  // fold8: t[i] = v[i+4] + v[i], then (t0 + t2) + (t1 + t3)
      float32x4_t t[4];
      for (int i = 0; i < 4; ++i) t[i] = vaddq_f32(acc[c][i + 4][k], acc[c][i][k]);
      vst1q_f32(y + size_t(c) * ys + 4 * (k0 + k),
                vaddq_f32(vaddq_f32(t[0], t[2]), vaddq_f32(t[1], t[3])));
    }
}

// ---- q6_K (3360-byte super-blocks: 16 f16 d, 16×16 int8 scales, 16 quads of 192 bytes) ----

/// Values 4i..4i+3 (i < 4) of 4 rows of a 16-value sub-block (`quad`: pack.h's 192-byte quad at
/// the rows' 16-byte offset) as signed q = u − 32: u is P & 63, Q & 63, (R & 15) | (P >> 6) << 4
/// and (R >> 4) | (Q >> 6) << 4 for i = 0..3 (pack.h's P, Q, R chunks).
inline int8x16_t q6_K_values(const uint8_t* quad, int i) {
  uint8x16_t u;
  if (i < 2) {
    u = vandq_u8(vld1q_u8(quad + 64 * i), vdupq_n_u8(0x3F));
  } else {
    const uint8x16_t top = vshlq_n_u8(vshrq_n_u8(vld1q_u8(quad + 64 * (i - 2)), 6), 4);
    const uint8x16_t r = vld1q_u8(quad + 128);
    u = vorrq_u8(i == 2 ? vandq_u8(r, vdupq_n_u8(0x0F)) : vshrq_n_u8(r, 4), top);
  }
  return vsubq_s8(vreinterpretq_s8_u8(u), vdupq_n_s8(32));
}

/// The int8 scales of 16-value sub-block j of rows 4k .. 4k+3 of a packed q6_K super-block.
inline int32x4_t q6_K_scales(const uint8_t* g, int j, int k) {
  return vmovl_s16(
      vget_low_s16(vmovl_s8(vld1_s8(reinterpret_cast<const int8_t*>(g) + 32 + 16 * j + 4 * k))));
}

/// Rows 4k .. 4k+3 of one packed q6_K group against C q8_K activation rows (xs bytes apart):
/// y[c·ys + 4k + r]. vec_dot_q6_K_q8_K's order: per super-block 8 integer lanes (lane l = 4h + i:
/// values 4i..4i+3 of sub-blocks 2·j2 + h, each Σ q·x times its sub-block's scale; exact), then
/// lane = fma(d_x·d_w, float(isum), lane), fold8 at the end. The lanes are finished one at a
/// time (C integer sums live, 8·C float lanes). xoff is not read (q is made signed).
template <int C>
inline void packed_q6_K_part(int64_t nb, const uint8_t* g, int k, const uint8_t* x, size_t xs,
                             float* y, size_t ys) {
  float32x4_t acc[C][8];
  for (int c = 0; c < C; ++c)
    for (int l = 0; l < 8; ++l) acc[c][l] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b, g += 3360) {
    float32x4_t dw[4];
    load_scales16(g, dw);
    const int8_t* qx[C];
    float32x4_t d[C];
    for (int c = 0; c < C; ++c) {
      const block_q8_K& xb = reinterpret_cast<const block_q8_K*>(x + size_t(c) * xs)[b];
      qx[c] = xb.qs;
      d[c] = vmulq_n_f32(dw[k], xb.d);
    }
#pragma GCC unroll 8  // constant lanes: dot4_at's switch folds away
    for (int l = 0; l < 8; ++l) {
      const int h = l / 4, i = l % 4;
      int32x4_t lane[C];
      for (int c = 0; c < C; ++c) lane[c] = vdupq_n_s32(0);
      for (int j2 = 0; j2 < 8; ++j2) {
        const int j = 2 * j2 + h;
        const int8x16_t w = q6_K_values(g + 288 + 192 * j + 16 * k, i);
        const int32x4_t sc = q6_K_scales(g, j, k);
        for (int c = 0; c < C; ++c)
          lane[c] = vmlaq_s32(lane[c], dot4_at(i, vdupq_n_s32(0), w, vld1q_s8(qx[c] + 16 * j)), sc);
      }
      for (int c = 0; c < C; ++c) acc[c][l] = vfmaq_f32(acc[c][l], d[c], vcvtq_f32_s32(lane[c]));
    }
  }
  for (int c = 0; c < C; ++c) {
    float32x4_t t[4];
    for (int i = 0; i < 4; ++i) t[i] = vaddq_f32(acc[c][i + 4], acc[c][i]);
    vst1q_f32(y + size_t(c) * ys + 4 * k, vaddq_f32(vaddq_f32(t[0], t[2]), vaddq_f32(t[1], t[3])));
  }
}

// ---- q4_K (2304-byte super-blocks: 16 f16 d, 16 f16 dmin, 12×16 scale bytes, 32 chunks) ----

/// The 6-bit scales sc[j] and mins mn[j] of the 8 sub-blocks of rows 4k .. 4k+3 of a packed q4_K
/// super-block (byte t of row r at 64 + 16·t + r), by the scalar unpack_scale_min_k4.
inline void q4_K_scales(const uint8_t* g, int k, int32_t (*sc)[4], int32_t (*mn)[4]) {
  for (int r = 0; r < 4; ++r) {
    uint8_t q[K_SCALE_SIZE];
    for (int t = 0; t < K_SCALE_SIZE; ++t) q[t] = g[64 + 16 * t + 4 * k + r];
    for (int j = 0; j < 8; ++j) {
      int s, m;
      unpack_scale_min_k4(j, q, &s, &m);
      sc[j][r] = s;
      mn[j][r] = m;
    }
  }
}

/// Rows 4k .. 4k+3 of one packed q4_K (Q5 false) or q5_K (Q5 true) group against C q8_K
/// activation rows: y[c·ys + 4k + r]. The main term as vec_dot_q4_K_q8_K / vec_dot_q5_K_q8_K
/// form it, in 8 lanes (lane i = Σ_j sc_j · Σ of values 4i..4i+3 of sub-block j times x; exact),
/// lane = fma(d_x·d_w, float(isum), lane); q5_K's values are the nibble with its fifth bit from
/// qh (pack.h: the 16 bytes at 2304 + 64·i + 16·k hold rows 4k..4k+3's qh[4i..4i+3], the same
/// rows and values as lane i's nibbles; bit j is sub-block j's). The min term from the bsums:
/// q4_K in 4 lanes (lane t = m_2t·Σx(2t) + m_2t+1·Σx(2t+1)) fused with −d_x·dmin_w, added as
/// ((m0 + m2) + (m1 + m3)); q5_K in one sum per row, s += (−d_x·dmin_w)·float(Σ_j m_j·Σx(j)),
/// multiplied then added. Then fold8(main) + mins. xoff is not read.
template <int C, bool Q5>
inline void packed_k4_part(int64_t nb, const uint8_t* g, int k, const uint8_t* x, size_t xs,
                           float* y, size_t ys) {
  constexpr int64_t kBlockBytes = Q5 ? 2816 : 2304;
  float32x4_t acc[C][8], accm[C][4];
  for (int c = 0; c < C; ++c) {
    for (int l = 0; l < 8; ++l) acc[c][l] = vdupq_n_f32(0.0f);
    for (int t = 0; t < 4; ++t) accm[c][t] = vdupq_n_f32(0.0f);
  }
  for (int64_t b = 0; b < nb; ++b, g += kBlockBytes) {
    float32x4_t dw[4], dmw[4];
    load_scales16(g, dw);
    load_scales16(g + 32, dmw);
    int32_t sc[8][4], mn[8][4];
    q4_K_scales(g, k, sc, mn);
    const block_q8_K* xb[C];
    for (int c = 0; c < C; ++c) {
      xb[c] = reinterpret_cast<const block_q8_K*>(x + size_t(c) * xs) + b;
      const int16_t* bs = xb[c]->bsums;
      const float32x4_t dmin = vmulq_n_f32(dmw[k], -xb[c]->d);
      if constexpr (Q5) {
        int32x4_t m = vdupq_n_s32(0);
        for (int j = 0; j < 8; ++j) m = vmlaq_n_s32(m, vld1q_s32(mn[j]), bs[2 * j] + bs[2 * j + 1]);
        accm[c][0] = vaddq_f32(accm[c][0], vmulq_f32(dmin, vcvtq_f32_s32(m)));
      } else {
        for (int t = 0; t < 4; ++t) {
          const int32_t s0 = bs[4 * t] + bs[4 * t + 1], s1 = bs[4 * t + 2] + bs[4 * t + 3];
          const int32x4_t m =
              vmlaq_n_s32(vmulq_n_s32(vld1q_s32(mn[2 * t]), s0), vld1q_s32(mn[2 * t + 1]), s1);
          accm[c][t] = vfmaq_f32(accm[c][t], dmin, vcvtq_f32_s32(m));
        }
      }
    }
#pragma GCC unroll 8  // constant lanes: dot4_at's switch folds away
    for (int i = 0; i < 8; ++i) {
      int32x4_t lane[C];
      for (int c = 0; c < C; ++c) lane[c] = vdupq_n_s32(0);
      uint8x16_t qh = vdupq_n_u8(0);
      if constexpr (Q5) qh = vld1q_u8(g + 2304 + 64 * i + 16 * k);
      for (int j2 = 0; j2 < 4; ++j2) {
        const uint8x16_t v = vld1q_u8(g + 256 + 64 * (8 * j2 + i) + 16 * k);
        uint8x16_t u[2] = {vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8(v, 4)};
        if constexpr (Q5)  // sub-block j's bit to bit 4 (a negative count shifts right)
          for (int h = 0; h < 2; ++h)
            u[h] = vorrq_u8(
                u[h], vandq_u8(vshlq_u8(qh, vdupq_n_s8(int8_t(4 - 2 * j2 - h))), vdupq_n_u8(0x10)));
        for (int h = 0; h < 2; ++h) {
          const int j = 2 * j2 + h;
          const int32x4_t s = vld1q_s32(sc[j]);
          const int8x16_t w = vreinterpretq_s8_u8(u[h]);
          for (int c = 0; c < C; ++c) {
            const int8x16_t xv = vld1q_s8(xb[c]->qs + 32 * j + 16 * (i / 4));
            lane[c] = vmlaq_s32(lane[c], dot4_at(i % 4, vdupq_n_s32(0), w, xv), s);
          }
        }
      }
      for (int c = 0; c < C; ++c)
        acc[c][i] = vfmaq_f32(acc[c][i], vmulq_n_f32(dw[k], xb[c]->d), vcvtq_f32_s32(lane[c]));
    }
  }
  for (int c = 0; c < C; ++c) {
    float32x4_t t[4];
    for (int i = 0; i < 4; ++i) t[i] = vaddq_f32(acc[c][i + 4], acc[c][i]);
    const float32x4_t main = vaddq_f32(vaddq_f32(t[0], t[2]), vaddq_f32(t[1], t[3]));
    const float32x4_t mins =
        Q5 ? accm[c][0]
           : vaddq_f32(vaddq_f32(accm[c][0], accm[c][2]), vaddq_f32(accm[c][1], accm[c][3]));
    vst1q_f32(y + size_t(c) * ys + 4 * k, vaddq_f32(main, mins));
  }
}

}  // namespace

/// PackedTileFn of q4_0 (pack.h, vec_dot.h): two activation rows per pass over a group's
/// weights, then one.
void packed_q4_0_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t* xoff, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / 32;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  for (int64_t gi = 0; gi < ngroups; ++gi) {
    const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * size_t(nb) * 288;
    float* yg = y + gi * 16;
    int64_t j = 0;
    for (; j + 2 <= nx; j += 2)
      packed_q4_0_group<2>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 2, yg + size_t(j) * ys,
                           ys);
    for (; j < nx; ++j)
      packed_q4_0_group<1>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 2, yg + size_t(j) * ys,
                           ys);
  }
}

/// The passes of packed_lanes_part over a group of format F: one activation row in two passes
/// of 8 rows over the group's blocks, two rows in four passes of 4 rows, the weights found in
/// cache after the first pass.
template <typename F>
inline void packed_lanes(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                         const int32_t* xoff, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / 32;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  for (int64_t gi = 0; gi < ngroups; ++gi) {
    const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * size_t(nb) * F::kBlockBytes;
    float* yg = y + gi * 16;
    int64_t j = 0;
    for (; j + 2 <= nx; j += 2)
      for (int k0 = 0; k0 < 4; ++k0)
        packed_lanes_part<F, 1, 2>(nb, g, k0, xb + size_t(j) * xs, xs, xoff + j * nb * 9,
                                   yg + size_t(j) * ys, ys);
    for (; j < nx; ++j)
      for (int k0 = 0; k0 < 4; k0 += 2)
        packed_lanes_part<F, 2, 1>(nb, g, k0, xb + size_t(j) * xs, xs, xoff + j * nb * 9,
                                   yg + size_t(j) * ys, ys);
  }
}

/// PackedTileFn of q8_0.
void packed_q8_0_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t* xoff, int64_t nx, float* y, size_t ys) {
  packed_lanes<Q8_0Lanes>(n, wp, ngroups, x, xs, xoff, nx, y, ys);
}

/// PackedTileFn of mxfp4.
void packed_mxfp4_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                       const int32_t* xoff, int64_t nx, float* y, size_t ys) {
  packed_lanes<Mxfp4Lanes>(n, wp, ngroups, x, xs, xoff, nx, y, ys);
}

/// The passes of a K-quant packed kernel: per group, per pair of activation rows (then one), the
/// four 4-row parts `part<C>`(nb, g, k, x, xs, y, ys).
template <int kBlockBytes, typename Part>
inline void packed_k_rows(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                          int64_t nx, float* y, size_t ys, Part part) {
  const int64_t nb = n / QK_K;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  for (int64_t gi = 0; gi < ngroups; ++gi) {
    const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * size_t(nb) * kBlockBytes;
    float* yg = y + gi * 16;
    int64_t j = 0;
    for (; j + 2 <= nx; j += 2)
      for (int k = 0; k < 4; ++k)
        part.template operator()<2>(nb, g, k, xb + size_t(j) * xs, xs, yg + size_t(j) * ys, ys);
    for (; j < nx; ++j)
      for (int k = 0; k < 4; ++k)
        part.template operator()<1>(nb, g, k, xb + size_t(j) * xs, xs, yg + size_t(j) * ys, ys);
  }
}

/// PackedTileFn of q6_K (xoff not read).
void packed_q6_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t*, int64_t nx, float* y, size_t ys) {
  packed_k_rows<3360>(
      n, wp, ngroups, x, xs, nx, y, ys,
      []<int C>(int64_t nb, const uint8_t* g, int k, const uint8_t* xr, size_t xst, float* yr,
                size_t yst) { packed_q6_K_part<C>(nb, g, k, xr, xst, yr, yst); });
}

/// PackedTileFn of q4_K (xoff not read).
void packed_q4_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t*, int64_t nx, float* y, size_t ys) {
  packed_k_rows<2304>(
      n, wp, ngroups, x, xs, nx, y, ys,
      []<int C>(int64_t nb, const uint8_t* g, int k, const uint8_t* xr, size_t xst, float* yr,
                size_t yst) { packed_k4_part<C, false>(nb, g, k, xr, xst, yr, yst); });
}

/// PackedTileFn of q5_K (xoff not read).
void packed_q5_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t*, int64_t nx, float* y, size_t ys) {
  packed_k_rows<2816>(
      n, wp, ngroups, x, xs, nx, y, ys,
      []<int C>(int64_t nb, const uint8_t* g, int k, const uint8_t* xr, size_t xst, float* yr,
                size_t yst) { packed_k4_part<C, true>(nb, g, k, xr, xst, yr, yst); });
}
