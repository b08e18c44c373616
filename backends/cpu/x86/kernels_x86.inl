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
// Included from here, by topic: packed_groups_x86.inl (the 16-lane integer helpers and shared
// packed-group kernels), packed_x86.inl (the exported packed-weight kernels, which include the
// per-level packed_*.inl), quantize_ops_x86.inl (the activation quantizers, f32 → q8_0 / q8_K,
// and the element-wise kernels of op_kernels.h: SiLU·up and softmax's exp with fast_exp.h's
// polynomial, RoPE's rotation), iq_grid_x86.inl and iq_x86.inl (the i-quants and mxfp4).
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
#include <utility>
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

/// How far ahead of the tile being computed for_tiles asks for the weights into L2 when it
/// streams them once (one activation row: decode). The row kernels read R rows side by side and
/// stall on each miss; with the bytes 2 KiB on asked for, the iq4_xs decode of llama3.2-1b went
/// from ≈ 18 to ≈ 24–27 t/s on two Zen 4 threads (1 KiB–3 KiB into L2 measured alike; 4 KiB and
/// more into L1, or none, ≈ 18; docs/benchmarks.md), and the f16 one stayed at its ≈ 13 t/s.
constexpr size_t kTilePrefetchAhead = 2048;

/// Runs the tile kernel `k.template operator()<R, C>(w, x, y)` over `nrows` weight rows (ws bytes
/// apart) × `nx` activation rows (xs bytes apart), y[j·ys + r]: tiles of R × C, then the rest
/// with R or C = 1. Every output is computed by one kernel call in its own accumulators. With one
/// activation row, each tile first prefetches (kTilePrefetchAhead).
template <int R, int C, typename Kernel>
inline void for_tiles(const void* w, size_t ws, int64_t nrows, const void* x, size_t xs, int64_t nx,
                      float* y, size_t ys, Kernel k) {
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  const size_t wbytes = size_t(nrows) * ws;
  auto pass = [&]<int CC>(int64_t j) {
    const uint8_t* xj = xb + size_t(j) * xs;
    float* yj = y + size_t(j) * ys;
    int64_t r = 0;
    for (; r + R <= nrows; r += R) {
      if (nx == 1) {  // decode: the bytes kTilePrefetchAhead past this tile's, into L2
        const size_t e = std::min(size_t(r + R) * ws + kTilePrefetchAhead, wbytes);
        for (size_t o = size_t(r) * ws + kTilePrefetchAhead; o < e; o += 64)
          _mm_prefetch(reinterpret_cast<const char*>(wb + o), _MM_HINT_T1);
      }
      k.template operator()<R, CC>(wb + size_t(r) * ws, xj, yj + r);
    }
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

#include "cpu/x86/packed_groups_x86.inl"  // I16 and the shared packed-group kernels

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
/// iq4_xs: one weight row against 8 activation rows, at both levels. Its per-row work (the 16
/// levels looked up, the 8 scales decoded) is then shared by 8 rows; llama3.2-1b IQ4_XS pp512 at
/// avx2 57.4 / 58.4 t/s with 2 × 2 tiles, 76.0 / 78.6 with 1 × 4, 86.3 / 86.7 with 1 × 6, 87.0 /
/// 88.4 with 1 × 8; at avx512 66.5 / 73.8 (2 × 4) against 90.9 / 85.8 (1 × 8).
constexpr int kXsR = 1, kXsC = 8;
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
KVRUN_X86_DOT_AND_TILE(vec_dot_iq4_xs_q8_K, tile_iq4_xs_q8_K, iq4_xs_q8_K_tile, QK_K, kXsR, kXsC)
KVRUN_X86_DOT_AND_TILE(vec_dot_iq3_s_q8_K, tile_iq3_s_q8_K, iq3_s_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_iq2_s_q8_K, tile_iq2_s_q8_K, iq2_s_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_iq3_xxs_q8_K, tile_iq3_xxs_q8_K, iq3_xxs_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_iq2_xxs_q8_K, tile_iq2_xxs_q8_K, iq2_xxs_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_iq2_xs_q8_K, tile_iq2_xs_q8_K, iq2_xs_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_iq1_s_q8_K, tile_iq1_s_q8_K, iq1_s_q8_K_tile, QK_K, kKR, kKC)
KVRUN_X86_DOT_AND_TILE(vec_dot_iq1_m_q8_K, tile_iq1_m_q8_K, iq1_m_q8_K_tile, QK_K, kKR, kKC)

#undef KVRUN_X86_DOT_AND_TILE

#include "cpu/x86/packed_x86.inl"        // the exported packed-weight kernels
#include "cpu/x86/quantize_ops_x86.inl"  // activation quantizers, SiLU, softmax exp, RoPE

}  // namespace kvrun::cpu::KVRUN_SIMD_NS
