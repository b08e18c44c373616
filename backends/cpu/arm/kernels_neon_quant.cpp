// kernels_neon_quant.cpp — the NEON quantized dots and their tiles, and the q8_0 / q8_K
// activation quantizers (kernels_neon.h). Not written from llama.cpp's code; the orders are
// those vec_dot_legacy.cpp and vec_dot_k.cpp document, bit for bit:
//   * the int8 products are exact in any order; each of the 8 lanes of a 32-value block is the
//     sum of 4 consecutive products (neon_lanes.h block_lanes), K-quants weight it by their
//     integer sub-block scales, and every lane is converted and fused-multiply-added with the
//     float scale product as the scalar code does, then folded as fold8;
//   * a tile (R weight rows × C activation rows) keeps one set of lanes per output, so it gives
//     the single-row dot's float for every output; weights are unpacked once per C activation
//     rows and activations loaded once per R weight rows.
#include <arm_neon.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "blocks.h"
#include "cpu/arm/kernels_neon.h"
#include "cpu/arm/neon_lanes.h"
#include "fp16.h"

namespace kvrun::cpu::neon {

namespace {

/// Byte e (0..15) is 0x10 where bit `first + e` of the 32-bit `h` is set, else 0: the fifth
/// bits of 16 q5_0 quants.
inline uint8x16_t fifth_bits(uint32_t h, int first) {
  const uint8x8_t bytes = vcreate_u8(uint64_t(h >> first));  // byte k: bits first+8k …
  const uint8x16_t rep = vcombine_u8(vdup_lane_u8(bytes, 0), vdup_lane_u8(bytes, 1));
  const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
  return vandq_u8(vtstq_u8(rep, bit), vdupq_n_u8(0x10));
}

// ---- legacy 32-value blocks against q8_0 ----

/// The 32 signed quants of a weight block (q[0]: elements 0..15, q[1]: 16..31) and its scale.
inline float quants(const block_q4_0& b, int8x16_t* q) {
  const uint8x16_t v = vld1q_u8(b.qs);  // low nibbles: elements 0..15, high: 16..31
  q[0] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
  q[1] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vdupq_n_s8(8));
  return fp16_to_f32(b.d);
}

inline float quants(const block_q5_0& b, int8x16_t* q) {
  uint32_t h;
  std::memcpy(&h, b.qh, 4);
  const uint8x16_t v = vld1q_u8(b.qs);  // nibble | bit i of qh << 4, minus 16
  const uint8x16_t lo = vorrq_u8(vandq_u8(v, vdupq_n_u8(0x0F)), fifth_bits(h, 0));
  const uint8x16_t hi = vorrq_u8(vshrq_n_u8(v, 4), fifth_bits(h, 16));
  q[0] = vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8(16));
  q[1] = vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8(16));
  return fp16_to_f32(b.d);
}

inline float quants(const block_q8_0& b, int8x16_t* q) {
  q[0] = vld1q_s8(b.qs);
  q[1] = vld1q_s8(b.qs + 16);
  return fp16_to_f32(b.d);
}

/// vec_dot_legacy.cpp's order for R × C outputs: per block, lane = fma(d_w·d_x, lane sum, lane)
/// in 8 lanes, folded at the end (`repack`: the whole block's integer sum, one scalar fma).
template <int R, int C, typename Block, bool kRepack>
inline void legacy_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                        float* y, size_t ys) {
  float32x4_t lo[R][C], hi[R][C];
  float acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      lo[r][c] = hi[r][c] = vdupq_n_f32(0.0f);
      acc[r][c] = 0.0f;
    }
  for (int64_t b = 0; b < nb; ++b) {
    int8x16_t xq[C][2];
    float xd[C];
    for (int c = 0; c < C; ++c)
      xd[c] = quants(reinterpret_cast<const block_q8_0*>(x + size_t(c) * xs)[b], xq[c]);
    for (int r = 0; r < R; ++r) {
      int8x16_t q[2];
      const float dw = quants(reinterpret_cast<const Block*>(w + size_t(r) * ws)[b], q);
      for (int c = 0; c < C; ++c) {
        const I8Lanes s = block_lanes(q[0], q[1], xq[c][0], xq[c][1]);
        if constexpr (kRepack) {
          const int32_t isum = vaddvq_s32(vaddq_s32(s.lo, s.hi));  // exact
          acc[r][c] = std::fma(float(isum), dw * xd[c], acc[r][c]);
        } else {
          lanes_fma(s, dw * xd[c], lo[r][c], hi[r][c]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      y[size_t(c) * ys + size_t(r)] = kRepack ? acc[r][c] : fold8(lo[r][c], hi[r][c]);
}

// ---- K-quants against q8_K ----

/// One weight super-block unpacked: 256 int8 quants, the integer scale of each 32-value group's
/// lanes 0..3 (sc_lo) and 4..7 (sc_hi), the 8 mins (q4_K / q5_K), and d / dmin as floats.
struct KBlock {
  int8_t q[QK_K];
  int32_t sc_lo[8], sc_hi[8], m[8];
  float d, dmin;
};

/// q4_K / q5_K: the 6-bit scales (one per 32-value group, both lane halves) and mins, d, dmin.
template <typename Block>
inline void scales_mins(const Block& b, KBlock& k) {
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    unpack_scale_min_k4(j, b.scales, &sc, &m);
    k.sc_lo[j] = k.sc_hi[j] = sc;
    k.m[j] = m;
  }
  k.d = fp16_to_f32(b.d);
  k.dmin = fp16_to_f32(b.dmin);
}

/// q4_K: value i is the nibble of byte 32·(i/64) + i%32 (low for the first 32 of 64).
inline void unpack(const block_q4_K& b, KBlock& k) {
  for (int j = 0; j < 4; ++j)
    for (int h = 0; h < 2; ++h) {
      const uint8x16_t v = vld1q_u8(b.qs + 32 * j + 16 * h);
      vst1q_u8(reinterpret_cast<uint8_t*>(k.q) + 64 * j + 16 * h, vandq_u8(v, vdupq_n_u8(0x0F)));
      vst1q_u8(reinterpret_cast<uint8_t*>(k.q) + 64 * j + 32 + 16 * h, vshrq_n_u8(v, 4));
    }
  scales_mins(b, k);
}

/// q5_K: q4_K's nibble | bit i/32 of qh[i % 32] << 4.
inline void unpack(const block_q5_K& b, KBlock& k) {
  const uint8x16_t qh[2] = {vld1q_u8(b.qh), vld1q_u8(b.qh + 16)};
  for (int j = 0; j < 8; ++j)
    for (int h = 0; h < 2; ++h) {
      const uint8x16_t v = vld1q_u8(b.qs + 32 * (j / 2) + 16 * h);
      const uint8x16_t nib = j % 2 ? vshrq_n_u8(v, 4) : vandq_u8(v, vdupq_n_u8(0x0F));
      const uint8x16_t bit = vandq_u8(vshlq_u8(qh[h], vdupq_n_s8(int8_t(-j))), vdupq_n_u8(1));
      vst1q_u8(reinterpret_cast<uint8_t*>(k.q) + 32 * j + 16 * h,
               vorrq_u8(nib, vshlq_n_u8(bit, 4)));
    }
  scales_mins(b, k);
}

/// q6_K: value i of half h = i/128 (r = i%128): low 4 bits from ql[64h + i%32 + 32·((r/32)&1)]
/// (>> 4 when r ≥ 64), high 2 bits from qh[32h + i%32] >> 2·(r/32); minus 32. Group j's lanes
/// 0..3 take scale 2j, lanes 4..7 scale 2j + 1 (16-value sub-blocks).
inline void unpack(const block_q6_K& b, KBlock& k) {
  for (int h = 0; h < 2; ++h)
    for (int g = 0; g < 4; ++g)
      for (int s = 0; s < 2; ++s) {
        const uint8x16_t l = vld1q_u8(b.ql + 64 * h + 32 * (g & 1) + 16 * s);
        const uint8x16_t low = g < 2 ? vandq_u8(l, vdupq_n_u8(0x0F)) : vshrq_n_u8(l, 4);
        const uint8x16_t qh = vld1q_u8(b.qh + 32 * h + 16 * s);
        const uint8x16_t high = vandq_u8(vshlq_u8(qh, vdupq_n_s8(int8_t(-2 * g))), vdupq_n_u8(3));
        const int8x16_t q =
            vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low, vshlq_n_u8(high, 4))), vdupq_n_s8(32));
        vst1q_s8(k.q + 128 * h + 32 * g + 16 * s, q);
      }
  for (int j = 0; j < 8; ++j) {
    k.sc_lo[j] = b.scales[2 * j];
    k.sc_hi[j] = b.scales[2 * j + 1];
  }
  k.d = fp16_to_f32(b.d);
}

/// The 8 integer lanes of a super-block: Σ over the eight 32-value groups of the group's
/// block_lanes times its scales (exact).
inline I8Lanes k_lanes(const KBlock& k, const int8_t* qx) {
  I8Lanes acc = zero_lanes();
  for (int j = 0; j < 8; ++j)
    lanes_mla(acc, block_lanes(k.q + 32 * j, qx + 32 * j), k.sc_lo[j], k.sc_hi[j]);
  return acc;
}

/// vec_dot_k.cpp's orders for R × C outputs. q4_K: the main term in 8 lanes, the mins in 4
/// (lane k = m_2k·Σq_x(2k) + m_2k+1·Σq_x(2k+1), fused with −d_x·dmin), fold8 + fold4. q5_K: the
/// mins in one f32 sum. q6_K: the main term only.
template <int R, int C, typename Block>
inline void k_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y,
                   size_t ys) {
  float32x4_t lo[R][C], hi[R][C], acc_m[R][C];
  float summs[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      lo[r][c] = hi[r][c] = acc_m[r][c] = vdupq_n_f32(0.0f);
      summs[r][c] = 0.0f;
    }
  KBlock k;
  for (int64_t b = 0; b < nb; ++b)
    for (int r = 0; r < R; ++r) {
      unpack(reinterpret_cast<const Block*>(w + size_t(r) * ws)[b], k);
      for (int c = 0; c < C; ++c) {
        const block_q8_K& xb = reinterpret_cast<const block_q8_K*>(x + size_t(c) * xs)[b];
        if constexpr (!std::is_same_v<Block, block_q6_K>) {
          const float dmin = -xb.d * k.dmin;
          if constexpr (std::is_same_v<Block, block_q4_K>) {
            int32_t mins[4];
            for (int i = 0; i < 4; ++i)
              mins[i] = k.m[2 * i] * (xb.bsums[4 * i] + xb.bsums[4 * i + 1]) +
                        k.m[2 * i + 1] * (xb.bsums[4 * i + 2] + xb.bsums[4 * i + 3]);
            acc_m[r][c] = vfmaq_n_f32(acc_m[r][c], vcvtq_f32_s32(vld1q_s32(mins)), dmin);
          } else {
            int32_t mins = 0;
            for (int j = 0; j < 8; ++j) mins += k.m[j] * (xb.bsums[2 * j] + xb.bsums[2 * j + 1]);
            summs[r][c] += dmin * float(mins);
          }
        }
        lanes_fma(k_lanes(k, xb.qs), xb.d * k.d, lo[r][c], hi[r][c]);
      }
    }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float v = fold8(lo[r][c], hi[r][c]);
      if constexpr (std::is_same_v<Block, block_q4_K>) v = v + fold4(acc_m[r][c]);
      if constexpr (std::is_same_v<Block, block_q5_K>) v = v + summs[r][c];
      y[size_t(c) * ys + size_t(r)] = v;
    }
}

constexpr int kLegacyR = 4, kLegacyC = 2;  // 16 accumulator registers
constexpr int kKR = 2, kKC = 2;

}  // namespace

// The exported single-row dot and tile function of the tile kernel template `kernel`
// <R, C, the further template arguments>.
#define KVRUN_NEON_DOT_AND_TILE(dot_name, tile_name, blk, TR, TC, kernel, ...)                 \
  float dot_name(int64_t n, const void* w, const void* x) {                                    \
    float y;                                                                                   \
    kernel<1, 1, __VA_ARGS__>(n / blk, static_cast<const uint8_t*>(w), 0,                      \
                              static_cast<const uint8_t*>(x), 0, &y, 0);                       \
    return y;                                                                                  \
  }                                                                                            \
  void tile_name(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs, \
                 int64_t nx, float* y, size_t ys) {                                            \
    for_tiles<TR, TC>(w, ws, nrows, x, xs, nx, y, ys,                                          \
                      [&]<int R, int C>(const uint8_t* wr, const uint8_t* xr, float* yr) {     \
                        kernel<R, C, __VA_ARGS__>(n / blk, wr, ws, xr, xs, yr, ys);            \
                      });                                                                      \
  }

KVRUN_NEON_DOT_AND_TILE(vec_dot_q4_0_q8_0, tile_q4_0_q8_0, 32, kLegacyR, kLegacyC, legacy_tile,
                        block_q4_0, false)
KVRUN_NEON_DOT_AND_TILE(vec_dot_q5_0_q8_0, tile_q5_0_q8_0, 32, kLegacyR, kLegacyC, legacy_tile,
                        block_q5_0, false)
KVRUN_NEON_DOT_AND_TILE(vec_dot_q8_0_q8_0, tile_q8_0_q8_0, 32, kLegacyR, kLegacyC, legacy_tile,
                        block_q8_0, false)
KVRUN_NEON_DOT_AND_TILE(repack_dot_q4_0_q8_0, tile_repack_q4_0_q8_0, 32, kLegacyR, kLegacyC,
                        legacy_tile, block_q4_0, true)
KVRUN_NEON_DOT_AND_TILE(vec_dot_q4_K_q8_K, tile_q4_K_q8_K, QK_K, kKR, kKC, k_tile, block_q4_K)
KVRUN_NEON_DOT_AND_TILE(vec_dot_q5_K_q8_K, tile_q5_K_q8_K, QK_K, kKR, kKC, k_tile, block_q5_K)
KVRUN_NEON_DOT_AND_TILE(vec_dot_q6_K_q8_K, tile_q6_K_q8_K, QK_K, kKR, kKC, k_tile, block_q6_K)

#undef KVRUN_NEON_DOT_AND_TILE

void act_from_float_q8_0(const float* src, void* dst, int64_t n) {
  block_q8_0* y = static_cast<block_q8_0*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* x = src + 32 * b;
    float32x4_t v[8];
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int i = 0; i < 8; ++i) {
      v[i] = vld1q_f32(x + 4 * i);
      m = vmaxnmq_f32(m, vabsq_f32(v[i]));  // fmax: a NaN is ignored, as in the scalar code
    }
    const float amax = vmaxnmvq_f32(m);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int16x8_t h[4];
    for (int i = 0; i < 4; ++i) {
      // round-half-even(x · id) as nearbyint in the default rounding mode; |x · id| ≤ 127.
      const int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(v[2 * i], id));
      const int32x4_t c = vcvtnq_s32_f32(vmulq_n_f32(v[2 * i + 1], id));
      h[i] = vcombine_s16(vqmovn_s32(a), vqmovn_s32(c));
    }
    vst1q_s8(y[b].qs, vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])));
    vst1q_s8(y[b].qs + 16, vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3])));
    y[b].d = f32_to_fp16(amax / 127.0f);
  }
}

void act_from_float_q8_K(const float* src, void* dst, int64_t n) {
  block_q8_K* y = static_cast<block_q8_K*>(dst);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float* x = src + b * QK_K;
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int i = 0; i < QK_K; i += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(x + i)));
    const float amax = vmaxnmvq_f32(m);
    if (amax == 0.0f) {
      y[b] = block_q8_K{};
      continue;
    }
    // The scalar rule: `max` is the first x with the largest |x|.
    int first = 0;
    while (std::fabs(x[first]) != amax) ++first;
    const float iscale = -127.0f / x[first];
    const int32x4_t top = vdupq_n_s32(127);
    for (int i = 0; i < QK_K; i += 16) {
      int16x8_t h[2];
      for (int k = 0; k < 2; ++k) {
        // min(127, round-half-even(iscale · x)); |iscale · x| ≤ 127 up to rounding.
        const float* p = x + i + 8 * k;
        const int32x4_t a = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(p), iscale)), top);
        const int32x4_t c = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(p + 4), iscale)), top);
        h[k] = vcombine_s16(vqmovn_s32(a), vqmovn_s32(c));
      }
      const int8x16_t q = vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1]));
      vst1q_s8(y[b].qs + i, q);
      y[b].bsums[i / 16] = int16_t(vaddlvq_s8(q));
    }
    y[b].d = 1.0f / iscale;
  }
}

}  // namespace kvrun::cpu::neon
