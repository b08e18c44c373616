// kernels_x86.inl — the x86 SIMD kernels, written once and compiled twice: by kernels_avx2.cpp
// (namespace avx2, -mavx2 -mfma -mf16c) and by kernels_avx512.cpp (namespace avx512, plus
// -mavx512f/bw/vl/vnni: VNNI for the int8 dots, zmm for the 16-lane float kernels). Only CPUs
// whose features cpu_level.h checked may call them. Not written from llama.cpp's code; the
// orders are those the scalar reference documents (vec_dot.h, vec_dot_*.cpp, fast_exp.h).
//
// Every kernel computes the same floats as its scalar reference (vec_dot_*.cpp), bit for bit:
//   * integer parts (the int8 products of the quantized dots) are exact in any order;
//   * every float operation is the one of the scalar code, lane for lane: the scalar code
//     emulates llama.cpp's SIMD lanes (8 lanes for the quantized dots, 16 for f32/f16/bf16),
//     and these kernels are those lanes (16 lanes are one zmm at avx512, two ymm at avx2);
//   * the translation units are built with -ffp-contract=off so that no a·b + c outside an
//     explicit fmadd becomes fused.
// The tile_* kernels (vec_dot.h DotTileFn) give the same float per output as the single-row dot;
// they run R weight rows × C activation rows per pass (weights decoded once per C activation
// rows, activations loaded once per R weight rows, R·C accumulation chains overlapped).
// Also here: the activation quantizers (f32 → q8_0 / q8_K) and the element-wise kernels of
// op_kernels.h (SiLU·up and softmax's exp with fast_exp.h's polynomial, RoPE's rotation).
//
// No standard-library templates or inline functions are used here on types both translation
// units share: they would be emitted in both with different instruction sets and the linker may
// keep either copy (packed_fast_avx512.inl's std::vector holds a type of this unit's own
// namespace).
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "blocks.h"
#include "cpu/x86/kernels_x86.h"
#include "iq_grids.h"

#ifndef KVRUN_SIMD_NS
#error "define KVRUN_SIMD_NS (avx2 or avx512) before including kernels_x86.inl"
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define KVRUN_X86_VNNI 1
#endif

namespace kvrun::cpu::KVRUN_SIMD_NS {

namespace {

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

/// 8 int32: Σ of each 4 consecutive products u[e]·s[e] (u unsigned bytes, s signed bytes).
/// Without VNNI the pair sums go through int16: callers keep |u·s + u'·s'| ≤ 32767.
inline __m256i dot_us(__m256i u, __m256i s) {
#ifdef KVRUN_X86_VNNI
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/// 8 int32: Σ of each 4 consecutive products a[e]·b[e] of signed bytes in −127…127.
inline __m256i dot_ss(__m256i a, __m256i b) {
  return dot_us(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

/// 8 int32: Σ of each 4 consecutive signed bytes.
inline __m256i sum4_s8(__m256i s) { return dot_us(_mm256_set1_epi8(1), s); }

/// 32 nibbles of a 32-element legacy block: low nibbles (elements 0..15), then high (16..31).
inline __m256i nibbles_32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

/// Sum of 8 lanes as the scalar fold8: (v0+v4 + v2+v6) + (v1+v5 + v3+v7), pairwise as a
/// 256-bit horizontal add does it.
inline float fold8(__m256 v) {
  const __m128 t = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
  return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
}

/// Sum of the 8 int32 lanes.
inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_extracti128_si256(v, 1), _mm256_castsi256_si128(v));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

/// Lane r = Σ of the 8 int32 lanes of p[r], for 8 vectors.
inline __m256i hsum8x8_i32(const __m256i* p) {
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
  // a = [s0 s1 s2 s3 | s0' s1' s2' s3'] (low and high 128-bit halves), b likewise for 4..7.
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                          _mm256_permute2x128_si256(a, b, 0x31));
}

/// 16 float lanes: one zmm with AVX-512, two ymm (lanes 0..7, 8..15) otherwise.
#ifdef __AVX512F__
// The maskz forms with a full mask: GCC 12's plain forms start from _mm512_undefined_*(), which
// -Wuninitialized reports (a false positive) once inlined.
constexpr __mmask16 kAll16 = 0xFFFF;
struct V16 {
  __m512 v;
};
inline V16 zero16() { return {_mm512_setzero_ps()}; }
inline V16 load16_f32(const float* p) { return {_mm512_loadu_ps(p)}; }
inline V16 load16_f16(const uint16_t* p) { return {_mm512_maskz_cvtph_ps(kAll16, load256(p))}; }
inline V16 load16_bf16(const uint16_t* p) {
  const __m512i u = _mm512_maskz_cvtepu16_epi32(kAll16, load256(p));
  return {_mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll16, u, 16))};
}
inline V16 fma16(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline V16 add16(V16 a, V16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline void store16(float* p, V16 a) { _mm512_storeu_ps(p, a.v); }
inline float fold16(V16 a) {
  const __m512d d = _mm512_castps_pd(a.v);
  const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, d, 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, d, 1));
  return fold8(_mm256_add_ps(hi, lo));
}
#else
struct V16 {
  __m256 lo, hi;
};
inline V16 zero16() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline V16 load16_f32(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline V16 load16_f16(const uint16_t* p) {
  const __m256i h = load256(p);
  return {_mm256_cvtph_ps(_mm256_castsi256_si128(h)),
          _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1))};
}
inline __m256 bf16x8(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline V16 load16_bf16(const uint16_t* p) {
  const __m256i h = load256(p);
  return {bf16x8(_mm256_castsi256_si128(h)), bf16x8(_mm256_extracti128_si256(h, 1))};
}
inline V16 fma16(V16 a, V16 b, V16 c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
inline V16 add16(V16 a, V16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
inline void store16(float* p, V16 a) {
  _mm256_storeu_ps(p, a.lo);
  _mm256_storeu_ps(p + 8, a.hi);
}
inline float fold16(V16 a) { return fold8(_mm256_add_ps(a.hi, a.lo)); }
#endif

/// Runs the tile kernel `k.template operator()<R, C>(w, x, y)` over `nrows` weight rows (ws bytes
/// apart) × `nx` activation rows (xs bytes apart), y[j·ys + r]: tiles of R × C, then the rest
/// with R or C = 1. Every output is computed by one kernel call in its own accumulators.
template <int R, int C, typename Kernel>
inline void for_tiles(const void* w, size_t ws, int64_t nrows, const void* x, size_t xs, int64_t nx,
                      float* y, size_t ys, Kernel k) {
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  auto pass = [&]<int CC>(int64_t j) {
    const uint8_t* xj = xb + size_t(j) * xs;
    float* yj = y + size_t(j) * ys;
    int64_t r = 0;
    for (; r + R <= nrows; r += R) k.template operator()<R, CC>(wb + size_t(r) * ws, xj, yj + r);
    for (; r < nrows; ++r) k.template operator()<1, CC>(wb + size_t(r) * ws, xj, yj + r);
  };
  int64_t j = 0;
  for (; j + C <= nx; j += C) pass.template operator()<C>(j);
  for (; j < nx; ++j) pass.template operator()<1>(j);
}

template <typename Block>
inline const Block& block_at(const uint8_t* row, size_t stride, int i, int64_t b) {
  return reinterpret_cast<const Block*>(row + size_t(i) * stride)[b];
}

// ---------------------------------------------------------------------------------------------
// Legacy quants against q8_0 (8 lanes of 4 consecutive elements, lane = fma(d_w·d_x, Σ, lane))
// ---------------------------------------------------------------------------------------------

template <int R, int C>
inline void q8_0_q8_0_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                           float* y, size_t ys) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i xq[C];
    float dx[C];
    for (int c = 0; c < C; ++c) {
      const block_q8_0& xb = block_at<block_q8_0>(x, xs, c, b);
      xq[c] = load256(xb.qs);
      dx[c] = h2f(xb.d);
    }
    for (int r = 0; r < R; ++r) {
      const block_q8_0& wb = block_at<block_q8_0>(w, ws, r, b);
      const __m256i wq = load256(wb.qs);
      const __m256i aw = _mm256_sign_epi8(wq, wq);
      const float dw = h2f(wb.d);
      for (int c = 0; c < C; ++c) {
        const __m256 p = _mm256_cvtepi32_ps(dot_us(aw, _mm256_sign_epi8(xq[c], wq)));
        acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[c]), p, acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[size_t(c) * ys + size_t(r)] = fold8(acc[r][c]);
}

/// q4_0 values are nibble − 8: Σ (u−8)·x = Σ u·x − 8·Σ x per 4 elements.
template <int R, int C>
inline void q4_0_q8_0_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                           float* y, size_t ys) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i xq[C], off[C];
    float dx[C];
    for (int c = 0; c < C; ++c) {
      const block_q8_0& xb = block_at<block_q8_0>(x, xs, c, b);
      xq[c] = load256(xb.qs);
      off[c] = _mm256_slli_epi32(sum4_s8(xq[c]), 3);
      dx[c] = h2f(xb.d);
    }
    for (int r = 0; r < R; ++r) {
      const block_q4_0& wb = block_at<block_q4_0>(w, ws, r, b);
      const __m256i u = nibbles_32(wb.qs);
      const float dw = h2f(wb.d);
      for (int c = 0; c < C; ++c) {
        const __m256i s = _mm256_sub_epi32(dot_us(u, xq[c]), off[c]);
        acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[c]), _mm256_cvtepi32_ps(s), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[size_t(c) * ys + size_t(r)] = fold8(acc[r][c]);
}

/// 0x10 in byte i where bit i of the little-endian 32-bit `qh` is set (q5_0's fifth bits).
inline __m256i fifth_bits_32(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(h)), _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                                    0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

/// q5_0 values are (nibble | fifth bit << 4) − 16: Σ (u−16)·x = Σ u·x − 16·Σ x per 4.
template <int R, int C>
inline void q5_0_q8_0_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                           float* y, size_t ys) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i xq[C], off[C];
    float dx[C];
    for (int c = 0; c < C; ++c) {
      const block_q8_0& xb = block_at<block_q8_0>(x, xs, c, b);
      xq[c] = load256(xb.qs);
      off[c] = _mm256_slli_epi32(sum4_s8(xq[c]), 4);
      dx[c] = h2f(xb.d);
    }
    for (int r = 0; r < R; ++r) {
      const block_q5_0& wb = block_at<block_q5_0>(w, ws, r, b);
      const __m256i u = _mm256_or_si256(nibbles_32(wb.qs), fifth_bits_32(wb.qh));
      const float dw = h2f(wb.d);
      for (int c = 0; c < C; ++c) {
        const __m256i s = _mm256_sub_epi32(dot_us(u, xq[c]), off[c]);
        acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[c]), _mm256_cvtepi32_ps(s), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[size_t(c) * ys + size_t(r)] = fold8(acc[r][c]);
}

/// q4_1 / q5_1 against q8_1: values are d·u + m (u the unsigned nibble, for q5_1 with its fifth
/// bit), so Σ (d·u + m)·d_x·q = d·d_x·Σ u·q (the lanes, as q4_0's) + m·s_x with s_x = d_x·Σ q
/// stored in the q8_1 block; the m·s_x terms go to one float per output, added in block order,
/// and that sum is added after the lanes' fold: the scalar dot_affine_q8_1's order.
template <bool kFifth, int R, int C>
inline void affine_q8_1_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                             float* y, size_t ys) {
  using Block = std::conditional_t<kFifth, block_q5_1, block_q4_1>;
  __m256 acc[R][C];
  float summs[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      acc[r][c] = _mm256_setzero_ps();
      summs[r][c] = 0.0f;
    }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i xq[C];
    float dx[C], sx[C];
    for (int c = 0; c < C; ++c) {
      const block_q8_1& xb = block_at<block_q8_1>(x, xs, c, b);
      xq[c] = load256(xb.qs);
      dx[c] = h2f(xb.d);
      sx[c] = h2f(xb.s);
    }
    for (int r = 0; r < R; ++r) {
      const Block& wb = block_at<Block>(w, ws, r, b);
      __m256i u = nibbles_32(wb.qs);
      if constexpr (kFifth) u = _mm256_or_si256(u, fifth_bits_32(wb.qh));
      const float dw = h2f(wb.d), mw = h2f(wb.m);
      for (int c = 0; c < C; ++c) {
        summs[r][c] += mw * sx[c];
        acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[c]),
                                    _mm256_cvtepi32_ps(dot_us(u, xq[c])), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[size_t(c) * ys + size_t(r)] = fold8(acc[r][c]) + summs[r][c];
}
template <int R, int C>
inline void q4_1_q8_1_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                           float* y, size_t ys) {
  affine_q8_1_tile<false, R, C>(nb, w, ws, x, xs, y, ys);
}
template <int R, int C>
inline void q5_1_q8_1_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                           float* y, size_t ys) {
  affine_q8_1_tile<true, R, C>(nb, w, ws, x, xs, y, ys);
}

/// The repacked order: per block the whole integer dot, acc = fma(isum, d_w·d_x, acc) with one
/// scalar accumulator per output. R = 8 runs 8 weight rows in the 8 lanes of one register; R = 1
/// is the plain scalar chain.
template <int R, int C>
inline void repack_q4_0_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                             float* y, size_t ys) {
  static_assert(R == 1 || R == 8);
  if constexpr (R == 1) {
    float acc[C] = {};
    for (int64_t b = 0; b < nb; ++b) {
      const block_q4_0& wb = block_at<block_q4_0>(w, 0, 0, b);
      const __m256i u = nibbles_32(wb.qs);
      const float dw = h2f(wb.d);
      for (int c = 0; c < C; ++c) {
        const block_q8_0& xb = block_at<block_q8_0>(x, xs, c, b);
        const __m256i xq = load256(xb.qs);
        const __m256i off = _mm256_slli_epi32(sum4_s8(xq), 3);
        const int32_t isum = hsum_i32(_mm256_sub_epi32(dot_us(u, xq), off));
        acc[c] = __builtin_fmaf(float(isum), dw * h2f(xb.d), acc[c]);
      }
    }
    for (int c = 0; c < C; ++c) y[size_t(c) * ys] = acc[c];
  } else {
    __m256 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m256i u[8];
      for (int r = 0; r < 8; ++r) u[r] = nibbles_32(block_at<block_q4_0>(w, ws, r, b).qs);
      // The 8 row scales as one vector (built in registers: no store-to-load forwarding stall).
      const auto d_of = [&](int r) { return short(block_at<block_q4_0>(w, ws, r, b).d); };
      const __m256 dw = _mm256_cvtph_ps(
          _mm_set_epi16(d_of(7), d_of(6), d_of(5), d_of(4), d_of(3), d_of(2), d_of(1), d_of(0)));
      for (int c = 0; c < C; ++c) {
        const block_q8_0& xb = block_at<block_q8_0>(x, xs, c, b);
        const __m256i xq = load256(xb.qs);
        // Σ (u−8)·x = Σ u·x − 8·Σ x: the offset is the same for all 8 rows, so it is taken off
        // the 8 row sums at once.
        const __m256i off = _mm256_set1_epi32(8 * hsum_i32(sum4_s8(xq)));
        __m256i p[8];
        for (int r = 0; r < 8; ++r) p[r] = dot_us(u[r], xq);
        const __m256 isum = _mm256_cvtepi32_ps(_mm256_sub_epi32(hsum8x8_i32(p), off));
        const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(h2f(xb.d)));
        acc[c] = _mm256_fmadd_ps(isum, d, acc[c]);
      }
    }
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + size_t(c) * ys, acc[c]);
  }
}

/// 16 int32 lanes (one per row of a packed group): one zmm with AVX-512, two ymm otherwise.
#ifdef __AVX512F__
struct I16 {
  __m512i v;
};
inline I16 zeroi16() { return {_mm512_setzero_si512()}; }
/// The 64 bytes at p split into their low and high nibbles.
inline void nibbles64(const uint8_t* p, I16* lo, I16* hi) {
  const __m512i q = _mm512_loadu_si512(p), m = _mm512_set1_epi8(0x0F);
  *lo = {_mm512_and_si512(q, m)};
  *hi = {_mm512_and_si512(_mm512_srli_epi16(q, 4), m)};
}
/// acc + Σ of each 4 consecutive products u[e]·s[e % 4] per lane (s: the 4 signed bytes at p,
/// broadcast from memory so no shuffle port is used).
inline I16 dp16(I16 acc, I16 u, const int8_t* p) {
  const __m512i s = _mm512_maskz_broadcastd_epi32(kAll16, _mm_loadu_si32(p));
#ifdef KVRUN_X86_VNNI
  return {_mm512_dpbusd_epi32(acc.v, u.v, s)};
#else
  return {_mm512_add_epi32(acc.v,
                           _mm512_madd_epi16(_mm512_maddubs_epi16(u.v, s), _mm512_set1_epi16(1)))};
#endif
}
/// float(a + b − c) per lane.
inline V16 sum_sub_cvt(I16 a, I16 b, int32_t c) {
  return {_mm512_maskz_cvtepi32_ps(
      kAll16, _mm512_sub_epi32(_mm512_add_epi32(a.v, b.v), _mm512_set1_epi32(c)))};
}
inline V16 mul16(V16 a, V16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline V16 splatf16(float x) { return {_mm512_set1_ps(x)}; }
inline I16 loadi16(const uint8_t* p) { return {_mm512_loadu_si512(p)}; }
inline I16 splati16(int32_t v) { return {_mm512_set1_epi32(v)}; }
inline V16 cvt16(I16 a) { return {_mm512_maskz_cvtepi32_ps(kAll16, a.v)}; }
#else
struct I16 {
  __m256i lo, hi;
};
inline I16 zeroi16() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
inline void nibbles64(const uint8_t* p, I16* lo, I16* hi) {
  const __m256i m = _mm256_set1_epi8(0x0F);
  const __m256i a = load256(p), b = load256(p + 32);
  *lo = {_mm256_and_si256(a, m), _mm256_and_si256(b, m)};
  *hi = {_mm256_and_si256(_mm256_srli_epi16(a, 4), m),
         _mm256_and_si256(_mm256_srli_epi16(b, 4), m)};
}
inline I16 dp16(I16 acc, I16 u, const int8_t* p) {
  const __m256i x = _mm256_broadcastd_epi32(_mm_loadu_si32(p));
  return {_mm256_add_epi32(acc.lo, dot_us(u.lo, x)), _mm256_add_epi32(acc.hi, dot_us(u.hi, x))};
}
inline V16 sum_sub_cvt(I16 a, I16 b, int32_t c) {
  const __m256i cc = _mm256_set1_epi32(c);
  return {_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_add_epi32(a.lo, b.lo), cc)),
          _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_add_epi32(a.hi, b.hi), cc))};
}
inline V16 mul16(V16 a, V16 b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline V16 splatf16(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
inline I16 loadi16(const uint8_t* p) { return {load256(p), load256(p + 32)}; }
inline I16 splati16(int32_t v) { return {_mm256_set1_epi32(v), _mm256_set1_epi32(v)}; }
inline V16 cvt16(I16 a) { return {_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }
#endif

/// Bytes ahead of the current block that the decode form (one activation row) of the packed
/// kernels prefetches: decode streams every weight byte once, and asking for the lines 4 KiB
/// ahead of the hardware prefetcher gave +10% tokens/s on llama3.2-1b Q4_0 here (1 KiB: +8%).
constexpr int kPrefetchAhead = 4096;

/// Bytes ahead that the avx2 q6_K and the avx512 q4_K and q5_K decode forms prefetch, into L2
/// (_MM_HINT_T1). For q6_K (its two passes over a group take more compute per byte than the other
/// types) 4 KiB into L1 left the stream at 12-13 GB/s on one core from DRAM where 16 KiB into L2
/// gave 19-21 (kvrun_bench matmul/q6_K/avx2-packed/dram_65536x2048, medians of 3, 2026-11-26);
/// packed_q4k_avx512.inl gives q4_K's figures.
constexpr int kPrefetchAheadL2 = 16384;

/// One packed q4_0 group (16 rows, pack.h layout, nb blocks from `g`) against C activation rows
/// (q8_0, xs bytes apart; xoff: per block −8·Σ quants and the scale as float bits, 2·nb apart):
/// y[c·ys + r]. The order of
/// repack_q4_0_tile: per block the whole integer dot (exact), then acc = fma(isum, d_w·d_x, acc)
/// per lane, a lane being a row. The 8 products of 4 elements go to two integer chains.
template <int C>
inline void packed_q4_0_group(int64_t nb, const uint8_t* g, const uint8_t* x, size_t xs,
                              const int32_t* xoff, float* y, size_t ys) {
  V16 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = zero16();
  for (int64_t b = 0; b < nb; ++b, g += 288) {
    if (C == 1)  // decode streams the weights once: ask for them ahead of the hardware prefetcher
      for (int l = 0; l < 288; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(g) + kPrefetchAhead + l, _MM_HINT_T0);
    const V16 dw = load16_f16(reinterpret_cast<const uint16_t*>(g));
    I16 u[8];  // u[q]: elements 4q..4q+3 of the 16 rows; u[q + 4]: elements 16+4q..16+4q+3
    for (int q = 0; q < 4; ++q) nibbles64(g + 32 + 64 * q, &u[q], &u[q + 4]);
    for (int c = 0; c < C; ++c) {
      const block_q8_0& xb = block_at<block_q8_0>(x, xs, c, b);
      I16 s0 = zeroi16(), s1 = zeroi16();
      for (int q = 0; q < 8; q += 2) {
        s0 = dp16(s0, u[q], xb.qs + 4 * q);
        s1 = dp16(s1, u[q + 1], xb.qs + 4 * q + 4);
      }
      const int32_t* o = xoff + (size_t(c) * size_t(nb) + size_t(b)) * 2;
      const V16 isum = sum_sub_cvt(s0, s1, -o[0]);
      float dx;
      std::memcpy(&dx, o + 1, sizeof dx);
      acc[c] = fma16(isum, mul16(dw, splatf16(dx)), acc[c]);
    }
  }
  for (int c = 0; c < C; ++c) store16(y + size_t(c) * ys, acc[c]);
}

#ifdef __AVX512F__
/// s[c] += VPDPBUSD(u[q], the 4 bytes at x + c·xs + 4q broadcast) for c < C, q = Q..7, in the
/// order q, then c (the C chains overlap). Inline assembly so that the broadcast is the
/// instruction's memory operand ({1to16}: one fused uop; GCC emits a separate broadcast load per
/// VPDPBUSD) and row c's address one addressing mode of x, x + 3·xs, xs and 3·xs (C ≤ 8).
template <int C, int Q>
inline void dpbusd_rows(__m512i* s, const __m512i* u, const uint8_t* x, size_t xs, size_t xs3) {
  static_assert(C <= 8);
  const uint8_t* x3 = x + xs3;
  // Row c's operand: displacement 4·Q off one of the 8 address forms.
#define KVRUN_DPB(c, addr)                                                                         \
  if constexpr (C > c)                                                                             \
  __asm__("vpdpbusd %c[d]" addr "%{1to16%}, %[u], %[s]"                                            \
          : [s] "+v"(s[c])                                                                         \
          : [u] "v"(u[Q]), [d] "i"(4 * Q), [x] "r"(x), [x3] "r"(x3), [xs] "r"(xs), [xs3] "r"(xs3), \
            "m"(*reinterpret_cast<const int32_t*>(x)))
  KVRUN_DPB(0, "(%[x])");
  KVRUN_DPB(1, "(%[x],%[xs],1)");
  KVRUN_DPB(2, "(%[x],%[xs],2)");
  KVRUN_DPB(3, "(%[x3])");
  KVRUN_DPB(4, "(%[x],%[xs],4)");
  KVRUN_DPB(5, "(%[x3],%[xs],2)");
  KVRUN_DPB(6, "(%[x],%[xs3],2)");
  KVRUN_DPB(7, "(%[x3],%[xs],4)");
#undef KVRUN_DPB
  if constexpr (Q < 7) dpbusd_rows<C, Q + 1>(s, u, x, xs, xs3);
}

/// The AVX-512 prefill form of packed_q4_0_group (C ≥ 2 activation rows, same order, same
/// results): the C rows' int32 sums start from −8·Σx (a broadcast load, no ALU work) and take the
/// 8 VPDPBUSD of a block in one chain, so a block costs each row 8 VPDPBUSD and 3 float
/// operations (convert, d_w·d_x with the activation scale broadcast from memory, FMA), and the
/// unpacked nibbles are shared by all C rows. All accumulators stay in registers (2·C + 10 zmm).
template <int C>
inline void packed_q4_0_rows(int64_t nb, const uint8_t* g, const uint8_t* x, size_t xs,
                             const int32_t* xoff, float* y, size_t ys) {
  static_assert(C >= 2 && 2 * C + 10 <= 32);
  __m512 acc[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  const __m512i m = _mm512_set1_epi8(0x0F);
  const size_t os = size_t(nb) * 2, os3 = 3 * os, xs3 = 3 * xs;
  for (int64_t b = 0; b < nb; ++b, g += 288) {
    __m512i u[8];  // u[q]: elements 4q..4q+3 of the 16 rows; u[q + 4]: elements 16+4q..16+4q+3
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const __m512i v = _mm512_loadu_si512(g + 32 + 64 * q);
      u[q] = _mm512_and_si512(v, m);
      u[q + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
    }
    const __m512 dw = _mm512_maskz_cvtph_ps(kAll16, load256(g));
    // The C rows' quants and offsets addressed from two bases each (row c at base + c·stride,
    // the strides and 3·strides in registers): per-row pointers would take 2·C general
    // registers, more than there are.
    const uint8_t* xb = x + size_t(b) * sizeof(block_q8_0) + offsetof(block_q8_0, qs);
    const int32_t* ob = xoff + size_t(b) * 2;
    __asm__("" : "+r"(xb), "+r"(ob));  // (keeps the compiler from one induction variable per row)
    const int32_t* orow[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      orow[c] = c == 6                 ? ob + 2 * os3
                : c % 2 == 1 && c >= 3 ? ob + os3 + size_t(c - 3) * os
                                       : ob + size_t(c) * os;
    }
    // Row-interleaved, so the C chains of dependent VPDPBUSD (latency 4-5) overlap.
    __m512i s[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) s[c] = _mm512_set1_epi32(orow[c][0]);
    dpbusd_rows<C, 0>(s, u, xb, xs, xs3);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      float dx;
      std::memcpy(&dx, orow[c] + 1, sizeof dx);
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(dx));
      acc[c] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(kAll16, s[c]), d, acc[c]);
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + size_t(c) * ys, acc[c]);
}

/// packed_q4_0_rows for the r ≤ C rows left over (r ≥ 2).
template <int C>
inline void packed_q4_0_rows_tail(int64_t r, int64_t nb, const uint8_t* g, const uint8_t* x,
                                  size_t xs, const int32_t* xoff, float* y, size_t ys) {
  if constexpr (C >= 2) {
    if (r == C) return packed_q4_0_rows<C>(nb, g, x, xs, xoff, y, ys);
    packed_q4_0_rows_tail<C - 1>(r, nb, g, x, xs, xoff, y, ys);
  }
}
#endif

/// One packed q8_0 group (16 rows, pack.h layout: quants stored + 128 as unsigned bytes) against
/// C activation rows: y[c·ys + r]. The order of q8_0_q8_0_tile, lane by lane: 8 lanes of 4
/// consecutive elements per row, lane = fma(d_w·d_x, Σ, lane), folded at the end as fold8. Each
/// lane's sum starts from −128·Σ of its 4 activation quants (xoff, 8 per block, then the block's
/// activation scale as float bits) so that the unsigned products give Σ w·x exactly.
#ifdef KVRUN_X86_VNNI
template <int C>
inline void packed_q8_0_group(int64_t nb, const uint8_t* g, const uint8_t* x, size_t xs,
                              const int32_t* xoff, float* y, size_t ys) {
  V16 acc[C][8];
  for (int c = 0; c < C; ++c)
    for (int i = 0; i < 8; ++i) acc[c][i] = zero16();
  for (int64_t b = 0; b < nb; ++b, g += 544) {
    if (C == 1)  // decode: see kPrefetchAhead
      for (int l = 0; l < 544; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(g) + kPrefetchAhead + l, _MM_HINT_T0);
    const V16 dw = load16_f16(reinterpret_cast<const uint16_t*>(g));
    I16 u[8];
    for (int i = 0; i < 8; ++i) u[i] = loadi16(g + 32 + 64 * i);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const block_q8_0& xb = block_at<block_q8_0>(x, xs, c, b);
      const int32_t* off = xoff + (size_t(c) * size_t(nb) + size_t(b)) * 9;
      float dx;  // the block's activation scale, as float (pack_act_offsets)
      std::memcpy(&dx, off + 8, sizeof dx);
      const V16 d = mul16(dw, splatf16(dx));
      for (int i = 0; i < 8; ++i) {
        const V16 si = cvt16(dp16(splati16(off[i]), u[i], xb.qs + 4 * i));
        acc[c][i] = fma16(d, si, acc[c][i]);
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    // fold8 per lane: (v0+v4 + v2+v6) + (v1+v5 + v3+v7)
    V16 t[4];
    for (int i = 0; i < 4; ++i) t[i] = add16(acc[c][i + 4], acc[c][i]);
    store16(y + size_t(c) * ys, add16(add16(t[0], t[2]), add16(t[1], t[3])));
  }
}
#endif

/// One packed q6_K group (16 rows, pack.h layout) against C q8_K activation rows: y[c·ys + r].
/// The order of vec_dot_q6_K_q8_K, lane by lane, a row per int32 / float lane: per super-block 8
/// integer lanes (q6_K lane l: values 4l..4l+3 of each 32, each times the scale of its 16-value
/// sub-block), lane = fma(d_x·d_w, float(isum), lane), fold8 at the end. Per 4 values of a row
/// VPDPBUSD gives s = −32·Σx + Σ (q+32)·x = Σ q·x, |s| ≤ 4·32·127 (int16), starting from the
/// xoff entry; VPDPWSSD adds s·sc (s's low 16 bits times the scale, zero-extended from int16 so
/// the high halves multiply to 0) to the lane: exact integers like the scalar sums. The decode
/// form (C = 1) prefetches kPrefetchAhead bytes ahead.
#if defined(KVRUN_X86_VNNI) && defined(__AVX512F__)
template <int C>
inline void packed_q6_K_group(int64_t nb, const uint8_t* g, const uint8_t* x, size_t xs,
                              const int32_t* xoff, float* y, size_t ys) {
  V16 acc[C][8];
  for (int c = 0; c < C; ++c)
    for (int l = 0; l < 8; ++l) acc[c][l] = zero16();
  const __m512i m63 = _mm512_set1_epi8(0x3F), m192 = _mm512_set1_epi8(char(0xC0));
  const __m512i m15 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b, g += 3360) {
    if (C == 1)  // decode streams the weights once: ask for them ahead of the hardware prefetcher
      for (int l = 0; l < 288; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(g) + kPrefetchAhead + l, _MM_HINT_T0);
    __m512i lane[C][8];
    for (int c = 0; c < C; ++c)
      for (int l = 0; l < 8; ++l) lane[c][l] = _mm512_setzero_si512();
    for (int j2 = 0; j2 < 8; ++j2)
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * j2 + h;  // sub-block j: q6_K lanes 4h..4h+3 of 32-value group j2
        const uint8_t* quad = g + 288 + 192 * j;
        if (C == 1)
          for (int l = 0; l < 192; l += 64)
            _mm_prefetch(reinterpret_cast<const char*>(quad) + kPrefetchAhead + l, _MM_HINT_T0);
        // Scale of sub-block j per row, as int32 lanes holding the int16 value zero-extended.
        const __m512i sc = _mm512_maskz_cvtepu16_epi32(
            kAll16, _mm256_cvtepi8_epi16(
                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 32 + 16 * j))));
        const __m512i p = _mm512_loadu_si512(quad), q = _mm512_loadu_si512(quad + 64);
        const __m512i r = _mm512_loadu_si512(quad + 128);
        __m512i u[4];
        u[0] = _mm512_and_si512(p, m63);
        u[1] = _mm512_and_si512(q, m63);
        // (a & 15) | b for b = the top two bits moved to bits 4..5 (16-bit shifts after masking,
        // so no bits cross between bytes).
        u[2] = _mm512_ternarylogic_epi32(r, _mm512_srli_epi16(_mm512_and_si512(p, m192), 2), m15,
                                         0xEC);
        u[3] = _mm512_ternarylogic_epi32(
            _mm512_srli_epi16(r, 4), _mm512_srli_epi16(_mm512_and_si512(q, m192), 2), m15, 0xEC);
        for (int c = 0; c < C; ++c) {
          const int8_t* qx = block_at<block_q8_K>(x, xs, c, b).qs + 16 * j;
          const int32_t* off = xoff + (size_t(c) * size_t(nb) + size_t(b)) * 64 + 4 * j;
          for (int i = 0; i < 4; ++i) {
            const __m512i xv = _mm512_maskz_broadcastd_epi32(kAll16, _mm_loadu_si32(qx + 4 * i));
            const __m512i s = _mm512_dpbusd_epi32(_mm512_set1_epi32(off[i]), u[i], xv);
            lane[c][4 * h + i] = _mm512_dpwssd_epi32(lane[c][4 * h + i], s, sc);
          }
        }
      }
    const V16 dw = load16_f16(reinterpret_cast<const uint16_t*>(g));
    for (int c = 0; c < C; ++c) {
      const V16 d = mul16(dw, splatf16(block_at<block_q8_K>(x, xs, c, b).d));
      for (int l = 0; l < 8; ++l) acc[c][l] = fma16(d, cvt16(I16{lane[c][l]}), acc[c][l]);
    }
  }
  for (int c = 0; c < C; ++c) {
    V16 t[4];
    for (int i = 0; i < 4; ++i) t[i] = add16(acc[c][i + 4], acc[c][i]);
    store16(y + size_t(c) * ys, add16(add16(t[0], t[2]), add16(t[1], t[3])));
  }
}
#endif

// ---------------------------------------------------------------------------------------------
// K-quants against q8_K
// ---------------------------------------------------------------------------------------------

/// The 8 six-bit scales (bytes 0..7 of *sc) and mins (bytes 0..7 of *m) of a q4_K / q5_K
/// super-block from its 12-byte packing (blocks.h / quants_k.cpp): sub-block j < 4 has
/// sc = q[j] & 63, m = q[j+4] & 63; j ≥ 4 has sc = (q[j+4] & 15) | (q[j−4] >> 6) << 4 and
/// m = (q[j+4] >> 4) | (q[j] >> 6) << 4 — done four sub-blocks per 32-bit word.
inline void scales_mins_k4(const uint8_t* q, uint64_t* sc, uint64_t* m) {
  uint32_t w[3];
  std::memcpy(w, q, 12);
  const uint32_t low6 = 0x3F3F3F3Fu, low4 = 0x0F0F0F0Fu, low2 = 0x03030303u;
  const uint32_t sc_lo = w[0] & low6, m_lo = w[1] & low6;
  const uint32_t sc_hi = (w[2] & low4) | (((w[0] >> 6) & low2) << 4);
  const uint32_t m_hi = ((w[2] >> 4) & low4) | (((w[1] >> 6) & low2) << 4);
  *sc = uint64_t(sc_lo) | (uint64_t(sc_hi) << 32);
  *m = uint64_t(m_lo) | (uint64_t(m_hi) << 32);
}

/// q4_K in llama.cpp's AVX2 order (vec_dot_k.cpp): main term in 8 float lanes, the min term
/// in 4 float lanes, folded at the end.
template <int R, int C>
inline void q4_K_q8_K_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                           float* y, size_t ys) {
  __m256 acc[R][C];
  __m128 acc_m[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      acc[r][c] = _mm256_setzero_ps();
      acc_m[r][c] = _mm_setzero_ps();
    }
  const __m256i mask = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    __m128i s32[C];  // Σ q_x over each 32-element sub-block j (int16 lanes j = 0..7)
    for (int c = 0; c < C; ++c) {
      const int16_t* bs = block_at<block_q8_K>(x, xs, c, b).bsums;
      s32[c] = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bs)),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(bs + 8)));
    }
    for (int r = 0; r < R; ++r) {
      const block_q4_K& wb = block_at<block_q4_K>(w, ws, r, b);
      uint64_t sc8, m8;
      scales_mins_k4(wb.scales, &sc8, &m8);
      const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(m8)));
      const float dw = h2f(wb.d), dminw = h2f(wb.dmin);
      __m256i lane[C];
      for (int c = 0; c < C; ++c) {
        const float xd = block_at<block_q8_K>(x, xs, c, b).d;
        const float dmin = -xd * dminw;
        // lane k = m_2k·Σq_x(2k) + m_2k+1·Σq_x(2k+1), exact in int32.
        const __m128i msum = _mm_madd_epi16(m16, s32[c]);
        acc_m[r][c] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(msum), acc_m[r][c]);
        lane[c] = _mm256_setzero_si256();
      }
      for (int j2 = 0; j2 < 4; ++j2) {
        const __m256i q = load256(wb.qs + 32 * j2);
        const __m256i lo = _mm256_and_si256(q, mask);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
        const __m256i sc0 = _mm256_set1_epi16(int16_t((sc8 >> (16 * j2)) & 0xFF));
        const __m256i sc1 = _mm256_set1_epi16(int16_t((sc8 >> (16 * j2 + 8)) & 0xFF));
        for (int c = 0; c < C; ++c) {
          const int8_t* qx = block_at<block_q8_K>(x, xs, c, b).qs + 64 * j2;
          // Pair sums of nibble·q_x fit int16 (≤ 2·15·128); madd by the scale gives sc·Σ of 4.
          const __m256i p0 = _mm256_maddubs_epi16(lo, load256(qx));
          const __m256i p1 = _mm256_maddubs_epi16(hi, load256(qx + 32));
          lane[c] = _mm256_add_epi32(lane[c], _mm256_madd_epi16(p0, sc0));
          lane[c] = _mm256_add_epi32(lane[c], _mm256_madd_epi16(p1, sc1));
        }
      }
      for (int c = 0; c < C; ++c) {
        const float d = block_at<block_q8_K>(x, xs, c, b).d * dw;
        acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lane[c]), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      const __m128 u = _mm_add_ps(acc_m[r][c], _mm_movehl_ps(acc_m[r][c], acc_m[r][c]));
      const float mins = _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
      y[size_t(c) * ys + size_t(r)] = fold8(acc[r][c]) + mins;
    }
}

/// q5_K in llama.cpp's AVX2 order (vec_dot_k.cpp): the main term as q4_K's with the fifth bit
/// of value 32j + e taken from bit j of qh[e]; the min term in one f32 sum, per super-block
/// summs = summs + dmin · Σ_j m_j·Σq_x(j) (unfused).
template <int R, int C>
inline void q5_K_q8_K_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                           float* y, size_t ys) {
  __m256 acc[R][C];
  float summs[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      acc[r][c] = _mm256_setzero_ps();
      summs[r][c] = 0.0f;
    }
  const __m256i mask = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(0x01);
  for (int64_t b = 0; b < nb; ++b) {
    __m128i s32[C];
    for (int c = 0; c < C; ++c) {
      const int16_t* bs = block_at<block_q8_K>(x, xs, c, b).bsums;
      s32[c] = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bs)),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(bs + 8)));
    }
    for (int r = 0; r < R; ++r) {
      const block_q5_K& wb = block_at<block_q5_K>(w, ws, r, b);
      uint64_t sc8, m8;
      scales_mins_k4(wb.scales, &sc8, &m8);
      const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(m8)));
      const float dw = h2f(wb.d), dminw = h2f(wb.dmin);
      __m256i lane[C];
      for (int c = 0; c < C; ++c) {
        const float xd = block_at<block_q8_K>(x, xs, c, b).d;
        const float dmin = -xd * dminw;
        __m128i ms = _mm_madd_epi16(m16, s32[c]);
        ms = _mm_add_epi32(ms, _mm_shuffle_epi32(ms, 0x4E));
        ms = _mm_add_epi32(ms, _mm_shuffle_epi32(ms, 0xB1));
        const float prod = dmin * float(_mm_cvtsi128_si32(ms));
        summs[r][c] = summs[r][c] + prod;
        lane[c] = _mm256_setzero_si256();
      }
      const __m256i qh = load256(wb.qh);
      for (int j2 = 0; j2 < 4; ++j2) {
        const __m256i q = load256(wb.qs + 32 * j2);
        const int j0 = 2 * j2, j1 = 2 * j2 + 1;
        const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, j0), one), 4);
        const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, j1), one), 4);
        const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, mask), h0);
        const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask), h1);
        const __m256i sc0 = _mm256_set1_epi16(int16_t((sc8 >> (8 * j0)) & 0xFF));
        const __m256i sc1 = _mm256_set1_epi16(int16_t((sc8 >> (8 * j1)) & 0xFF));
        for (int c = 0; c < C; ++c) {
          const int8_t* qx = block_at<block_q8_K>(x, xs, c, b).qs + 64 * j2;
          // Pair sums of value·q_x fit int16 (≤ 2·31·128); madd by the scale: sc·Σ of 4.
          const __m256i p0 = _mm256_maddubs_epi16(lo, load256(qx));
          const __m256i p1 = _mm256_maddubs_epi16(hi, load256(qx + 32));
          lane[c] = _mm256_add_epi32(lane[c], _mm256_madd_epi16(p0, sc0));
          lane[c] = _mm256_add_epi32(lane[c], _mm256_madd_epi16(p1, sc1));
        }
      }
      for (int c = 0; c < C; ++c) {
        const float d = block_at<block_q8_K>(x, xs, c, b).d * dw;
        acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lane[c]), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[size_t(c) * ys + size_t(r)] = fold8(acc[r][c]) + summs[r][c];
}

/// q6_K in llama.cpp's AVX2 order: 8 integer lanes per super-block (lane l: values 4l..4l+3
/// of each 32-value group, times the scale of their 16-value sub-block), one fma per lane.
/// q6 values are u − 32 with u in 0..63: Σ (u−32)·x = Σ u·x − 32·Σ x per 4 elements.
template <int R, int C>
inline void q6_K_q8_K_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                           float* y, size_t ys) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
  for (int64_t b = 0; b < nb; ++b) {
    __m256i off[C][8];
    for (int c = 0; c < C; ++c)
      for (int g = 0; g < 8; ++g)
        off[c][g] =
            _mm256_slli_epi32(sum4_s8(load256(block_at<block_q8_K>(x, xs, c, b).qs + 32 * g)), 5);
    for (int r = 0; r < R; ++r) {
      const block_q6_K& wb = block_at<block_q6_K>(w, ws, r, b);
      __m256i lane[C];
      for (int c = 0; c < C; ++c) lane[c] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = load256(wb.ql + 64 * h), ql1 = load256(wb.ql + 64 * h + 32);
        const __m256i qh = load256(wb.qh + 32 * h);
        for (int g4 = 0; g4 < 4; ++g4) {
          const int g = 4 * h + g4;
          const __m256i l = g4 & 1 ? ql1 : ql0;
          const __m256i lo =
              g4 < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
          const __m256i hi =
              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g4), m2), 4);
          const __m256i u = _mm256_or_si256(lo, hi);
          const __m256i scv = _mm256_set_m128i(_mm_set1_epi32(wb.scales[2 * g + 1]),
                                               _mm_set1_epi32(wb.scales[2 * g]));
          for (int c = 0; c < C; ++c) {
            const __m256i xq = load256(block_at<block_q8_K>(x, xs, c, b).qs + 32 * g);
            const __m256i s = _mm256_sub_epi32(dot_us(u, xq), off[c][g]);
            lane[c] = _mm256_add_epi32(lane[c], _mm256_mullo_epi32(s, scv));
          }
        }
      }
      const float dw = h2f(wb.d);
      for (int c = 0; c < C; ++c) {
        const float d = block_at<block_q8_K>(x, xs, c, b).d * dw;
        acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lane[c]), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[size_t(c) * ys + size_t(r)] = fold8(acc[r][c]);
}

// ---------------------------------------------------------------------------------------------
// Float weights (16 lanes; see vec_dot.h for the vec and gemm orders)
// ---------------------------------------------------------------------------------------------

/// ggml_vec_dot order over the first n & ~63 elements: 4 accumulators of 16 lanes, folded.
template <typename Load>
inline float vec_body(int64_t np, Load load_ab) {
  V16 acc[4] = {zero16(), zero16(), zero16(), zero16()};
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j) {
      V16 a, b;
      load_ab(i + 16 * j, &a, &b);
      acc[j] = fma16(a, b, acc[j]);
    }
  acc[0] = add16(acc[0], acc[2]);
  acc[1] = add16(acc[1], acc[3]);
  return fold16(add16(acc[0], acc[1]));
}

template <typename Load>
inline float gemm_body(int64_t n, Load load_ab) {
  V16 acc = zero16();
  for (int64_t i = 0; i < n; i += 16) {
    V16 a, b;
    load_ab(i, &a, &b);
    acc = fma16(a, b, acc);
  }
  return fold16(acc);
}

/// gemm_body for R weight rows × C activation rows, each output in its own accumulator.
template <int R, int C, typename T, typename Load>
inline void gemm_tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y,
                      size_t ys, Load load) {
  V16 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = zero16();
  for (int64_t i = 0; i < n; i += 16) {
    V16 b[C];
    for (int c = 0; c < C; ++c) b[c] = load(reinterpret_cast<const T*>(x + size_t(c) * xs) + i);
    for (int r = 0; r < R; ++r) {
      const V16 a = load(reinterpret_cast<const T*>(w + size_t(r) * ws) + i);
      for (int c = 0; c < C; ++c) acc[r][c] = fma16(a, b[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[size_t(c) * ys + size_t(r)] = fold16(acc[r][c]);
}

/// Tile sizes: registers hold R·C accumulators (a V16 is two ymm registers without AVX-512).
#ifdef __AVX512F__
constexpr int kGemmR = 4, kGemmC = 4;
constexpr int kQuantR = 4, kQuantC = 4;  // q8_0 / q4_0 / q5_0 (C also for the repacked q4_0)
#else
constexpr int kGemmR = 2, kGemmC = 2;
constexpr int kQuantR = 4, kQuantC = 2;
#endif
#ifdef __AVX512F__
constexpr int kKR = 2, kKC = 4;  // q4_K / q6_K
#else
constexpr int kKR = 2, kKC = 2;
#endif

#include "cpu/x86/iq_grid_x86.inl"  // the grid i-quants
#include "cpu/x86/iq_x86.inl"       // mxfp4 and iq4_xs

}  // namespace

// ---------------------------------------------------------------------------------------------
// Exported kernels (declared in kernels_x86.h)
// ---------------------------------------------------------------------------------------------

float vec_dot_f32(int64_t n, const void* w, const void* x) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(x);
  const int64_t np = n & ~int64_t(63);
  float sum = vec_body(np, [a, b](int64_t i, V16* va, V16* vb) {
    *va = load16_f32(a + i);
    *vb = load16_f32(b + i);
  });
  // The tail as vec_dot_float.cpp: unfused up to unfused_end, fused after.
  const int64_t c = n - np;
  const int64_t unfused_end = np + c / 16 * 16 + (c % 16 >= 8 ? 8 : 0);
  for (int64_t i = np; i < n; ++i) {
    if (i < unfused_end) {
      const float p = a[i] * b[i];
      sum = sum + p;
    } else {
      sum = __builtin_fmaf(a[i], b[i], sum);
    }
  }
  return sum;
}

float vec_dot_f16(int64_t n, const void* w, const void* x) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const uint16_t* b = static_cast<const uint16_t*>(x);
  const int64_t np = n & ~int64_t(63);
  // f16·f16 products are exact in f32: the fma is the scalar code's c + a·b.
  double sum = vec_body(np, [a, b](int64_t i, V16* va, V16* vb) {
    *va = load16_f16(a + i);
    *vb = load16_f16(b + i);
  });
  for (int64_t i = np; i < n; ++i) sum += double(h2f(a[i]) * h2f(b[i]));
  return float(sum);
}

float gemm_dot_f32(int64_t n, const void* w, const void* x) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(x);
  return gemm_body(n, [a, b](int64_t i, V16* va, V16* vb) {
    *va = load16_f32(a + i);
    *vb = load16_f32(b + i);
  });
}

float gemm_dot_f16(int64_t n, const void* w, const void* x) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const uint16_t* b = static_cast<const uint16_t*>(x);
  return gemm_body(n, [a, b](int64_t i, V16* va, V16* vb) {
    *va = load16_f16(a + i);
    *vb = load16_f16(b + i);
  });
}

void tile_gemm_f32(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs,
                   int64_t nx, float* y, size_t ys) {
  for_tiles<kGemmR, kGemmC>(w, ws, nrows, x, xs, nx, y, ys,
                            [&]<int R, int C>(const uint8_t* wr, const uint8_t* xr, float* yr) {
                              gemm_tile<R, C, float>(n, wr, ws, xr, xs, yr, ys,
                                                     [](const float* p) { return load16_f32(p); });
                            });
}

void tile_gemm_f16(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs,
                   int64_t nx, float* y, size_t ys) {
  for_tiles<kGemmR, kGemmC>(w, ws, nrows, x, xs, nx, y, ys,
                            [&]<int R, int C>(const uint8_t* wr, const uint8_t* xr, float* yr) {
                              gemm_tile<R, C, uint16_t>(
                                  n, wr, ws, xr, xs, yr, ys,
                                  [](const uint16_t* p) { return load16_f16(p); });
                            });
}

float vec_dot_bf16(int64_t n, const void* w, const void* x) {
  // 16 lane sums (bf16 products are exact in f32), the tail into lane i % 16, then the lanes
  // added in order from 0 (vec_dot_float.cpp lane_dot).
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const uint16_t* b = static_cast<const uint16_t*>(x);
  V16 acc = zero16();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = fma16(load16_bf16(a + i), load16_bf16(b + i), acc);
  alignas(64) float lane[16];
  store16(lane, acc);
  for (; i < n; ++i) {
    const float p = _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(int(uint32_t(a[i]) << 16)))) *
                    _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(int(uint32_t(b[i]) << 16))));
    lane[i % 16] = lane[i % 16] + p;
  }
  float s = 0.0f;
  for (int l = 0; l < 16; ++l) s = s + lane[l];
  return s;
}

/// The exported single-row dot and tile function of a tile kernel template.
#define KVRUN_X86_DOT_AND_TILE(dot_name, tile_name, kernel, blk, TR, TC)                        \
  float dot_name(int64_t n, const void* w, const void* x) {                                     \
    float y;                                                                                    \
    kernel<1, 1>(n / blk, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(x), 0, \
                 &y, 0);                                                                        \
    return y;                                                                                   \
  }                                                                                             \
  void tile_name(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs,  \
                 int64_t nx, float* y, size_t ys) {                                             \
    for_tiles<TR, TC>(w, ws, nrows, x, xs, nx, y, ys,                                           \
                      [&]<int R, int C>(const uint8_t* wr, const uint8_t* xr, float* yr) {      \
                        kernel<R, C>(n / blk, wr, ws, xr, xs, yr, ys);                          \
                      });                                                                       \
  }

KVRUN_X86_DOT_AND_TILE(vec_dot_q8_0_q8_0, tile_q8_0_q8_0, q8_0_q8_0_tile, 32, kQuantR, kQuantC)
KVRUN_X86_DOT_AND_TILE(vec_dot_q4_0_q8_0, tile_q4_0_q8_0, q4_0_q8_0_tile, 32, kQuantR, kQuantC)
KVRUN_X86_DOT_AND_TILE(vec_dot_q5_0_q8_0, tile_q5_0_q8_0, q5_0_q8_0_tile, 32, kQuantR, kQuantC)
KVRUN_X86_DOT_AND_TILE(vec_dot_q4_1_q8_1, tile_q4_1_q8_1, q4_1_q8_1_tile, 32, kQuantR, kQuantC)
KVRUN_X86_DOT_AND_TILE(vec_dot_q5_1_q8_1, tile_q5_1_q8_1, q5_1_q8_1_tile, 32, kQuantR, kQuantC)
KVRUN_X86_DOT_AND_TILE(repack_dot_q4_0_q8_0, tile_repack_q4_0_q8_0, repack_q4_0_tile, 32, 8,
                       kQuantC)
KVRUN_X86_DOT_AND_TILE(vec_dot_q4_K_q8_K, tile_q4_K_q8_K, q4_K_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_q5_K_q8_K, tile_q5_K_q8_K, q5_K_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_q6_K_q8_K, tile_q6_K_q8_K, q6_K_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_mxfp4_q8_0, tile_mxfp4_q8_0, mxfp4_q8_0_tile, QK_MXFP4, kQuantR,
                       kQuantC)
KVRUN_X86_DOT_AND_TILE(vec_dot_iq4_xs_q8_K, tile_iq4_xs_q8_K, iq4_xs_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_iq3_s_q8_K, tile_iq3_s_q8_K, iq3_s_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_iq2_s_q8_K, tile_iq2_s_q8_K, iq2_s_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_iq3_xxs_q8_K, tile_iq3_xxs_q8_K, iq3_xxs_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_iq2_xxs_q8_K, tile_iq2_xxs_q8_K, iq2_xxs_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_iq2_xs_q8_K, tile_iq2_xs_q8_K, iq2_xs_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_iq1_s_q8_K, tile_iq1_s_q8_K, iq1_s_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_iq1_m_q8_K, tile_iq1_m_q8_K, iq1_m_q8_K_tile, QK_K, kKR, kKC)

#undef KVRUN_X86_DOT_AND_TILE

#ifndef KVRUN_X86_VNNI
#include "cpu/x86/packed_avx2.inl"
#include "cpu/x86/packed_fast_avx2.inl"  // --kernels fast
#include "cpu/x86/packed_q5k_avx2.inl"
#endif

#include "cpu/x86/packed_mxfp4.inl"  // both levels

#ifdef KVRUN_X86_VNNI
// With VNNI the unsigned × signed products need no int16 step ((q + 128)·x pair sums reach
// 2·255·127, past VPMADDUBSW's range; the avx2 form, packed_avx2.inl, flips the bytes back).
void packed_q8_0_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t* xoff, int64_t nx, float* y, size_t ys) {
#ifdef __AVX512F__
  constexpr int kC = 2;  // 8 lane accumulators per activation row
#else
  constexpr int kC = 1;
#endif
  const int64_t nb = n / 32;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  for (int64_t gi = 0; gi < ngroups; ++gi) {
    const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * size_t(nb) * 544;
    float* yg = y + gi * 16;
    int64_t j = 0;
    for (; j + kC <= nx; j += kC)
      packed_q8_0_group<kC>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 9, yg + size_t(j) * ys,
                            ys);
    for (; j < nx; ++j)
      packed_q8_0_group<1>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 9, yg + size_t(j) * ys,
                           ys);
  }
}

#ifdef __AVX512F__
// The AVX-512 form: the 16 int32 lanes of a q6_K pass are one zmm each (as ymm pairs, the 8 int
// lanes per activation row would not fit the avx2 level's 16 registers; packed_q6_K_half runs
// 8 rows and one lane at a time instead).
void packed_q6_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t* xoff, int64_t nx, float* y, size_t ys) {
  constexpr int kC = 2;  // 16 int32 and 16 float lane accumulators per pass
  const int64_t nb = n / QK_K;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  for (int64_t gi = 0; gi < ngroups; ++gi) {
    const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * size_t(nb) * 3360;
    float* yg = y + gi * 16;
    int64_t j = 0;
    for (; j + kC <= nx; j += kC)
      packed_q6_K_group<kC>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 64, yg + size_t(j) * ys,
                            ys);
    for (; j < nx; ++j)
      packed_q6_K_group<1>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 64, yg + size_t(j) * ys,
                           ys);
  }
}
#endif

#ifdef __AVX512F__
#include "cpu/x86/packed_q4k_avx512.inl"  // q4_K, one zmm per 16-row group
// (after it: q4_K_scales16)
#include "cpu/x86/packed_fast_avx512.inl"  // --kernels fast: q8_0, mxfp4, q4_K
#endif

#endif

#ifndef __AVX512F__
namespace {

/// The avx2 prefill form of packed_q4_0_group: rows 8·half .. 8·half+7 of one packed q4_0 group
/// (pack.h layout) against C activation rows (q8_0, xs bytes apart; xoff as there), y[c·ys +
/// 8·half + r]. The same order per row: per block the whole integer dot (exact), then
/// acc = fma(float(isum), d_w·d_x, acc). The integer dot is summed differently but exactly: the
/// 8 VPMADDUBSW results of a block (pair sums u·x + u'·x', u ≤ 15, |x| ≤ 128, so ≤ 3840) are
/// added as int16 (≤ 8·3840 = 30720 < 2^15) and widened by one VPMADDWD, instead of one
/// VPMADDWD per 4 elements. Eight rows keep the C ≤ 4 accumulators, C int16 partial sums and a
/// 4-element slice of the weights in the 16 ymm registers (the 16-row form spilled).
template <int C>
inline void packed_q4_0_half(int64_t nb, const uint8_t* g, int half, const uint8_t* x, size_t xs,
                             const int32_t* xoff, float* y, size_t ys) {
  static_assert(C >= 1 && C <= 4, "accumulators must fit the ymm registers");
  __m256 acc[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  const __m256i m = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b, g += 288) {
    __m256i p[C];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const __m256i w = load256(g + 32 + 64 * q + 32 * half);
      const __m256i lo = _mm256_and_si256(w, m), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const int8_t* xq = block_at<block_q8_0>(x, xs, c, b).qs;
        const __m256i a =
            _mm256_maddubs_epi16(lo, _mm256_broadcastd_epi32(_mm_loadu_si32(xq + 4 * q)));
        const __m256i e =
            _mm256_maddubs_epi16(hi, _mm256_broadcastd_epi32(_mm_loadu_si32(xq + 16 + 4 * q)));
        p[c] = q == 0 ? _mm256_add_epi16(a, e) : _mm256_add_epi16(p[c], _mm256_add_epi16(a, e));
        asm("" : "+x"(p[c]));  // keeps the chain: reassociated, every product is live (spills)
      }
    }
    const __m256 dw =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * half)));
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const int32_t* o = xoff + (size_t(c) * size_t(nb) + size_t(b)) * 2;
      const __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(p[c], ones), _mm256_set1_epi32(o[0]));
      float dx;
      std::memcpy(&dx, o + 1, sizeof dx);
      acc[c] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(dx)), acc[c]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + size_t(c) * ys + 8 * half, acc[c]);
}

/// Activation bytes of one column chunk of packed_q4_0_prefill_avx2: the chunk's rows stay in L2
/// (512 KiB and up) while every group of the call passes over them.
constexpr size_t kQ4PrefillChunkBytes = 128 * 1024;

/// packed_q4_0_q8_0 for nx ≥ 2 activation rows at the avx2 level: the activation rows in chunks
/// of about kQ4PrefillChunkBytes (a multiple of 4 rows), and per chunk every group, each half of
/// it (8 rows) against 4 activation rows at a time (then 3, 2 or 1). Outputs as
/// packed_q4_0_group's, float for float.
void packed_q4_0_prefill_avx2(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                              const int32_t* xoff, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / 32;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  const int64_t chunk = std::max<int64_t>(4, int64_t(kQ4PrefillChunkBytes / xs) & ~int64_t(3));
  for (int64_t j0 = 0; j0 < nx; j0 += chunk) {
    const int64_t j1 = std::min(nx, j0 + chunk);
    for (int64_t gi = 0; gi < ngroups; ++gi) {
      const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * size_t(nb) * 288;
      float* yg = y + gi * 16;
      for (int half = 0; half < 2; ++half) {
        int64_t j = j0;
        for (; j + 4 <= j1; j += 4)
          packed_q4_0_half<4>(nb, g, half, xb + size_t(j) * xs, xs, xoff + j * nb * 2,
                              yg + size_t(j) * ys, ys);
        const uint8_t* xj = xb + size_t(j) * xs;
        const int32_t* oj = xoff + j * nb * 2;
        float* yj = yg + size_t(j) * ys;
        switch (j1 - j) {
          case 3:
            packed_q4_0_half<3>(nb, g, half, xj, xs, oj, yj, ys);
            break;
          case 2:
            packed_q4_0_half<2>(nb, g, half, xj, xs, oj, yj, ys);
            break;
          case 1:
            packed_q4_0_half<1>(nb, g, half, xj, xs, oj, yj, ys);
            break;
          default:
            break;
        }
      }
    }
  }
}

}  // namespace
#endif

void packed_q4_0_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t* xoff, int64_t nx, float* y, size_t ys) {
#ifndef __AVX512F__
  if (nx >= 2) return packed_q4_0_prefill_avx2(n, wp, ngroups, x, xs, xoff, nx, y, ys);
#else
  constexpr int kC = 8;  // activation rows per pass over a group's weights
#endif
  const int64_t nb = n / 32;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  for (int64_t gi = 0; gi < ngroups; ++gi) {
    const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * size_t(nb) * 288;
    float* yg = y + gi * 16;
    int64_t j = 0;
#ifdef __AVX512F__
    for (; j + kC <= nx; j += kC)
      packed_q4_0_rows<kC>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 2, yg + size_t(j) * ys,
                           ys);
    if (nx - j >= 2) {  // the last 2..7 rows in one pass (one row: the decode form below)
      packed_q4_0_rows_tail<kC - 1>(nx - j, nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 2,
                                    yg + size_t(j) * ys, ys);
      j = nx;
    }
#endif
    for (; j < nx; ++j)
      packed_q4_0_group<1>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 2, yg + size_t(j) * ys,
                           ys);
  }
}

// ---------------------------------------------------------------------------------------------
// Activation quantizers (rules in vec_dot.h)
// ---------------------------------------------------------------------------------------------

namespace {

/// 32 int32 lanes (4 vectors, in element order) packed to 32 int8 in element order.
inline __m256i pack_32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  const __m256i abcd = _mm256_packs_epi16(ab, cd);
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline __m256i round_to_i32(__m256 v) {
  return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

}  // namespace

void act_from_float_f16(const float* src, void* dst, int64_t n) {
  // VCVTPS2PH rounds to nearest even as f32_to_fp16 does (overflow → ±inf, gradual underflow);
  // only NaNs differ (the instruction keeps payload bits), so they become sign | 0x7e00 as in
  // f32_to_fp16.
  uint16_t* y = static_cast<uint16_t*>(dst);
  auto convert8 = [](const float* x, uint16_t* out) {
    const __m256 v = _mm256_loadu_ps(x);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const int nan = _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    for (int l = 0; l < 8; ++l)
      if (nan >> l & 1) {
        uint32_t bits;
        std::memcpy(&bits, x + l, 4);
        out[l] = uint16_t(((bits >> 16) & 0x8000u) | 0x7e00u);
      }
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) convert8(src + i, y + i);
  if (i < n) {
    float x[8] = {};
    uint16_t out[8];
    std::memcpy(x, src + i, size_t(n - i) * sizeof(float));
    convert8(x, out);
    std::memcpy(y + i, out, size_t(n - i) * sizeof(uint16_t));
  }
}

void act_from_float_q8_0(const float* src, void* dst, int64_t n) {
  block_q8_0* y = static_cast<block_q8_0*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* x = src + 32 * b;
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
    const float amax = hmax8(_mm256_max_ps(_mm256_max_ps(abs8(v[0]), abs8(v[1])),
                                           _mm256_max_ps(abs8(v[2]), abs8(v[3]))));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = round_to_i32(_mm256_mul_ps(v[i], vid));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), pack_32(q[0], q[1], q[2], q[3]));
    y[b].d = uint16_t(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
  }
}

void act_from_float_q8_K(const float* src, void* dst, int64_t n) {
  block_q8_K* y = static_cast<block_q8_K*>(dst);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float* x = src + b * QK_K;
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < QK_K; i += 8) m = _mm256_max_ps(m, abs8(_mm256_loadu_ps(x + i)));
    const float amax = hmax8(m);
    if (amax == 0.0f) {
      std::memset(&y[b], 0, sizeof(block_q8_K));
      continue;
    }
    // The first element whose |x| is the maximum (the scalar code keeps the first on ties).
    float max = 0.0f;
    const __m256 va = _mm256_set1_ps(amax);
    for (int i = 0; i < QK_K; i += 8) {
      const int hit =
          _mm256_movemask_ps(_mm256_cmp_ps(abs8(_mm256_loadu_ps(x + i)), va, _CMP_EQ_OQ));
      if (hit) {
        max = x[i + __builtin_ctz(unsigned(hit))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i lim = _mm256_set1_epi32(127);
    for (int g = 0; g < QK_K; g += 32) {
      __m256i q[4];
      for (int i = 0; i < 4; ++i)
        q[i] =
            _mm256_min_epi32(lim, round_to_i32(_mm256_mul_ps(_mm256_loadu_ps(x + g + 8 * i), vs)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs + g), pack_32(q[0], q[1], q[2], q[3]));
    }
    for (int s = 0; s < QK_K / 16; ++s) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y[b].qs + 16 * s));
      const __m256i w = _mm256_cvtepi8_epi16(q);
      y[b].bsums[s] = int16_t(hsum_i32(_mm256_madd_epi16(w, _mm256_set1_epi16(1))));
    }
    y[b].d = 1.0f / iscale;
  }
}

// ---------------------------------------------------------------------------------------------
// SiLU · up with the polynomial e^x of fast_exp.h (expf_lane, silu_lane), lane for lane
// ---------------------------------------------------------------------------------------------

namespace {

constexpr float kExpShift = 0x1.8p23f, kExpInvLn2 = 0x1.715476p+0f, kExpLn2Hi = 0x1.62e4p-1f,
                kExpLn2Lo = 0x1.7f7d1cp-20f, kExpC0 = 0x1.ffffecp-1f, kExpC1 = 0x1.fffdb6p-2f,
                kExpC2 = 0x1.555e66p-3f, kExpC3 = 0x1.573e2ep-5f, kExpC4 = 0x1.0e4020p-7f;

#ifdef __AVX512F__
/// expf_lane on 16 lanes: the same fused and unfused operations; VSCALEFPS is the scaling that
/// scale_pow2 emulates.
inline __m512 expf16(__m512 x) {
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(kExpInvLn2), _mm512_set1_ps(kExpShift));
  const __m512 n = _mm512_sub_ps(z, _mm512_set1_ps(kExpShift));
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Lo),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Hi), x));
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 hi =
      _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(kExpC4), b, _mm512_set1_ps(kExpC3)), u,
                      _mm512_fmadd_ps(_mm512_set1_ps(kExpC2), b, _mm512_set1_ps(kExpC1)));
  const __m512 j =
      _mm512_fmadd_ps(hi, u, _mm512_fmadd_ps(_mm512_set1_ps(kExpC0), b, _mm512_set1_ps(1.0f)));
  const __m512 res = _mm512_maskz_scalef_ps(0xFFFF, j, n);
  const __m512 an = _mm512_castsi512_ps(
      _mm512_maskz_and_epi32(0xFFFF, _mm512_castps_si512(n), _mm512_set1_epi32(0x7FFFFFFF)));
  const __mmask16 out = _mm512_cmp_ps_mask(an, _mm512_set1_ps(192.0f), _CMP_GT_OQ);
  const __mmask16 pos = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_GT_OQ);
  const __m512 big = _mm512_maskz_mov_ps(pos, _mm512_set1_ps(__builtin_inff()));
  return _mm512_mask_mov_ps(res, out, big);
}
#endif

/// expf_lane on 8 lanes; j·2^n is formed in double (exact) and rounded once, as scale_pow2.
inline __m256 expf8(__m256 x) {
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(kExpInvLn2), _mm256_set1_ps(kExpShift));
  const __m256 n = _mm256_sub_ps(z, _mm256_set1_ps(kExpShift));
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Lo),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Hi), x));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 hi =
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(kExpC4), b, _mm256_set1_ps(kExpC3)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(kExpC2), b, _mm256_set1_ps(kExpC1)));
  const __m256 j =
      _mm256_fmadd_ps(hi, u, _mm256_fmadd_ps(_mm256_set1_ps(kExpC0), b, _mm256_set1_ps(1.0f)));
  // scale_pow2: n clamped to ±192 (fmin/fmax order as there; n is never NaN unless j is),
  // 2^n as double bits, one product in double, one rounding to float.
  const __m256 nc =
      _mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-192.0f)), _mm256_set1_ps(192.0f));
  const __m256i ni = _mm256_cvttps_epi32(nc);
  auto scale4 = [](__m128 j4, __m128i n4) {
    const __m256i e = _mm256_slli_epi64(
        _mm256_add_epi64(_mm256_cvtepi32_epi64(n4), _mm256_set1_epi64x(1023)), 52);
    return _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(j4), _mm256_castsi256_pd(e)));
  };
  const __m256 res =
      _mm256_set_m128(scale4(_mm256_extractf128_ps(j, 1), _mm256_extracti128_si256(ni, 1)),
                      scale4(_mm256_castps256_ps128(j), _mm256_castsi256_si128(ni)));
  const __m256 an = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
  const __m256 out = _mm256_cmp_ps(an, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
  const __m256 pos = _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_GT_OQ);
  const __m256 big = _mm256_and_ps(pos, _mm256_set1_ps(__builtin_inff()));
  return _mm256_blendv_ps(res, big, out);
}

}  // namespace

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) store16(dst + i, load16_f16(src + i));
  for (; i < n; ++i) dst[i] = h2f(src[i]);
}

void rope_rotate(float* v, const float* cs, const float* sn, int64_t half, bool neox) {
  // Per pair (x0, x1): x0·cos − x1·sin and x0·sin + x1·cos, the x0 product fused (ops.cpp).
  int64_t i = 0;
  if (neox) {
    for (; i + 8 <= half; i += 8) {
      const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + half + i);
      const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
      _mm256_storeu_ps(v + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
      _mm256_storeu_ps(v + half + i, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
    }
  } else {
    // 8 adjacent pairs: x0 / x1 hold pairs in the order 0 1 4 5 2 3 6 7 (in-lane shuffles);
    // cos and sin are permuted to match, and unpack restores the element order.
    const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    for (; i + 8 <= half; i += 8) {
      const __m256 a = _mm256_loadu_ps(v + 2 * i), b = _mm256_loadu_ps(v + 2 * i + 8);
      const __m256 x0 = _mm256_shuffle_ps(a, b, 0x88), x1 = _mm256_shuffle_ps(a, b, 0xDD);
      const __m256 c = _mm256_permutevar8x32_ps(_mm256_loadu_ps(cs + i), order);
      const __m256 s = _mm256_permutevar8x32_ps(_mm256_loadu_ps(sn + i), order);
      const __m256 y0 = _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s));
      const __m256 y1 = _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c));
      _mm256_storeu_ps(v + 2 * i, _mm256_unpacklo_ps(y0, y1));
      _mm256_storeu_ps(v + 2 * i + 8, _mm256_unpackhi_ps(y0, y1));
    }
  }
  for (; i < half; ++i) {
    float* p0 = neox ? v + i : v + 2 * i;
    float* p1 = neox ? v + i + half : v + 2 * i + 1;
    const float x0 = *p0, x1 = *p1;
    const float x1s = x1 * sn[i], x1c = x1 * cs[i];
    *p0 = __builtin_fmaf(x0, cs[i], -x1s);
    *p1 = __builtin_fmaf(x0, sn[i], x1c);
  }
}

double exp_blocks(const float* x, float* y, int64_t n, float max) {
  double sum = 0.0;
  for (int64_t i = 0; i + 16 <= n; i += 16) {
#ifdef __AVX512F__
    const V16 v = {expf16(_mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(max)))};
#else
    const __m256 m = _mm256_set1_ps(max);
    const V16 v = {expf8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m)),
                   expf8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m))};
#endif
    store16(y + i, v);
    sum += double(fold16(v));
  }
  return sum;
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = expf16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
  }
#endif
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = expf8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  if (i < n) {  // the last < 8 lanes through a padded register
    float g[8] = {}, u[8] = {}, o[8];
    std::memcpy(g, gate + i, size_t(n - i) * sizeof(float));
    std::memcpy(u, up + i, size_t(n - i) * sizeof(float));
    const __m256 gv = _mm256_loadu_ps(g);
    const __m256 e = expf8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
    const __m256 sv = _mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    _mm256_storeu_ps(o, _mm256_mul_ps(sv, _mm256_loadu_ps(u)));
    std::memcpy(out + i, o, size_t(n - i) * sizeof(float));
  }
}

}  // namespace kvrun::cpu::KVRUN_SIMD_NS
