// packed_fast_avx2.inl — the fast-order prefill kernels of packed q8_0, q4_K, q5_K and q6_K weights
// (pack.h layouts) at the avx2 level, for `kvrun --kernels fast` (cpu_level.h KernelOrder).
// Included by packed_x86.inl after packed_prefill_avx2.inl (prefill_walk, kquant_walk and the
// K-quant unpacking it shares with the exact order), inside namespace kvrun::cpu::KVRUN_SIMD_NS,
// when the level has no VNNI.
//
// Each gives the floats of its scalar reference fast_dot_* (vec_dot.h) bit for bit: per weight
// row and (super-)block one exact int32 dot, then one float multiply-add into one accumulator.
// That is what lets these kernels block 8 weight rows (one ymm, a row per lane) × 8 (q8_0, q4_K,
// q5_K) or 4 (q6_K; and mxfp4 in packed_mxfp4.inl) activation rows with one accumulator register
// per 8 pairs, where the exact order needs 8 float lanes per pair. The integer sums are formed
// differently from the scalar code (int16 partial sums where their range allows, VPMADDWD by the
// scale) but exactly, so the integers and the float steps are the same. The activation rows are
// taken in chunks that stay in L2 while every group of the call passes over them
// (prefill_walk); the K-quant kernels run on each group half unpacked once per chunk
// (kquant_walk: values as bytes, scales as the VPMADDWD multipliers; q4_K/q5_K with the chunk's
// bsum pairs for the min term, q6_K against the interleaved x + 128 with its offset from the
// weights), so the inner loop is a broadcast, VPMADDUBSW and an int16 add per 4 values, 8 rows
// and activation row.
#ifndef KVRUN_SIMD_NS
#error "included by kernels_x86.inl only"
#endif

namespace {

/// Rows 8·half .. 8·half+7 of one packed q8_0 group against C q8_0 activation rows (xs bytes
/// apart): y[c·ys + 8·half + r] = fast_dot_q8_0_q8_0. Per block and activation row, the 8
/// half-chunks (4 quants of each of the 8 rows, stored q + 128: flipped back to signed q) go
/// through the sign trick (VPMADDUBSW of |q| and x with q's sign, pair sums ≤ 2·128·128, int16)
/// and VPMADDWD by 1 into int32 lanes, summed: the block's exact dot per row.
/// Activation rows per pass of fast_q8_0_half.
constexpr int kQ8FastC = 8;

template <int C>
inline void fast_q8_0_half(int64_t nb, const uint8_t* g, int half, const uint8_t* x, size_t xs,
                           float* y, size_t ys) {
  __m256 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  const __m256i flip = _mm256_set1_epi8(char(0x80)), ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b, g += 544) {
    __m256i isum[C];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      const __m256i w = _mm256_xor_si256(load256(g + 32 + 64 * i + 32 * half), flip);
      const __m256i aw = _mm256_sign_epi8(w, w);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const int8_t* xq = block_at<block_q8_0>(x, xs, c, b).qs;
        const __m256i xv = _mm256_broadcastd_epi32(_mm_loadu_si32(xq + 4 * i));
        const __m256i p =
            _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, w)), ones);
        isum[c] = i == 0 ? p : _mm256_add_epi32(isum[c], p);
        asm("" : "+x"(isum[c]));  // keeps the chain, as in fast_q4_K_half
      }
    }
    const __m256 dw =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * half)));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(h2f(block_at<block_q8_0>(x, xs, c, b).d)));
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), d, acc[c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + size_t(c) * ys + 8 * half, acc[c]);
}

}  // namespace

void packed_fast_q8_0_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                           const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / 32;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  prefill_walk<kQ8FastC>(wp, size_t(nb) * 544, ngroups, xs, nx,
                         [&](auto cc, const uint8_t* g, int64_t gi, int half, int64_t j) {
                           fast_q8_0_half<decltype(cc)::value>(nb, g, half, xb + size_t(j) * xs, xs,
                                                               y + gi * 16 + size_t(j) * ys, ys);
                         });
}

namespace {

/// Rows 8·half .. 8·half+7 of one q4_K (kQ5: q5_K) group, unpacked by unpack_q4_K_half (nb half
/// super-blocks of kQ4KUnits at wu), against C q8_K activation rows (xs bytes apart; their
/// q4_K_bsum_pairs at xp, 4·nb int32 per row): y[c·ys + 8·half + r] = fast_dot_q4_K_q8_K
/// (fast_dot_q5_K_q8_K). Per super-block, sub-block j's dot per row is the VPMADDUBSW results of
/// its values (pair sums ≤ 2·15·128; q5_K's ≤ 2·31·128) added as int16, eight at a time (q5_K:
/// four; ≤ 30720 and 31744, exact), then one VPMADDWD by sc_j: sc_j · Σ, int32. The min term
/// Σ_j m_j·bsum_j is VPMADDWD of the min pairs by the bsum pairs. Then acc = fma(d_w·d_x,
/// float(main), acc), acc = fma(dmin_w·(−d_x), float(min), acc).
template <int C, bool kQ5>
inline void fast_q4_K_half(int64_t nb, const Lane32* wu, const uint8_t* x, size_t xs,
                           const int32_t* xp, float* y, size_t ys) {
  __m256 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, wu += kQ4KUnits) {
    const int8_t* qx[C];
    __m256i isum[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      qx[c] = block_at<block_q8_K>(x, xs, c, b).qs;
      isum[c] = _mm256_setzero_si256();
    }
    for (int j = 0; j < 8; ++j) {
      const __m256i s = load_lane(wu[64 + j]);
      __m256i p[C];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const __m256i v = load_lane(wu[8 * j + i]);
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m256i t = _mm256_maddubs_epi16(
              v, _mm256_broadcastd_epi32(_mm_loadu_si32(qx[c] + 32 * j + 4 * i)));
          p[c] = i % (kQ5 ? 4 : 8) == 0 ? t : _mm256_add_epi16(p[c], t);
          asm("" : "+x"(p[c]));  // keeps the chain (reassociated, every product is live: spills)
        }
        if (i % (kQ5 ? 4 : 8) == (kQ5 ? 3 : 7))
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c)
            isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p[c], s));
      }
    }
    const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(wu[76].b));
    const __m256 dminw = _mm256_load_ps(reinterpret_cast<const float*>(wu[77].b));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const int32_t* pr = xp + size_t(c) * size_t(4 * nb) + size_t(4 * b);
      __m256i imin = _mm256_madd_epi16(load_lane(wu[72]), _mm256_set1_epi32(pr[0]));
      for (int k = 1; k < 4; ++k)
        imin = _mm256_add_epi32(imin,
                                _mm256_madd_epi16(load_lane(wu[72 + k]), _mm256_set1_epi32(pr[k])));
      const float dx = block_at<block_q8_K>(x, xs, c, b).d;
      acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(isum[c]),
                               acc[c]);
      acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dminw, _mm256_set1_ps(-dx)), _mm256_cvtepi32_ps(imin),
                               acc[c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + size_t(c) * ys, acc[c]);
}

/// Rows 8·half .. 8·half+7 of one q6_K group, unpacked by unpack_q6_K_half (nb half
/// super-blocks of kQ6KUnits at wu), against C q8_K activation rows (xs bytes apart; their quants
/// + 128 interleaved by 8 rows at xi, X8::plus128): y[c·ys + r] = fast_dot_q6_K_q8_K. Per
/// super-block the integer Σ_j sc_j·Σ q·x per row starts from the sum of the 8 lane offsets
/// (−128·Σ_j sc_j·Q_j: Σ q·x = Σ q·(x + 128) − 128·Q); sub-block j adds two int16 sums of two
/// VPMADDUBSW(x + 128, q) results each (pair sums ≤ 2·255·32, two of them ≤ 32640, exact), each
/// times sc_j by VPMADDWD. Then acc = fma(d_w·d_x, float(isum), acc).
template <int C>
inline void fast_q6_K_half(int64_t nb, const Lane32* wu, const uint8_t* x, size_t xs,
                           const uint8_t* xi, float* y, size_t ys) {
  __m256 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, wu += kQ6KUnits, xi += 2048) {
    __m256i off = load_lane(wu[80]);
    for (int l = 1; l < 8; ++l) off = _mm256_add_epi32(off, load_lane(wu[80 + l]));
    __m256i isum[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) isum[c] = off;
    for (int j = 0; j < 16; ++j) {
      const __m256i sc = load_lane(wu[64 + j]);
      __m256i p[C];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const __m256i q = load_lane(wu[4 * j + i]);
        const uint8_t* quad = xi + 32 * (4 * j + i);  // quants 16j + 4i .. +3 of each row
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m256i t =
              _mm256_maddubs_epi16(_mm256_broadcastd_epi32(_mm_loadu_si32(quad + 4 * c)), q);
          if (i % 2 == 0) {
            p[c] = t;
          } else {
            isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(_mm256_add_epi16(p[c], t), sc));
          }
        }
      }
    }
    const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(wu[88].b));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const float dx = block_at<block_q8_K>(x, xs, c, b).d;
      acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(isum[c]),
                               acc[c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + size_t(c) * ys, acc[c]);
}

/// Activation rows per pass of the q4_K / q5_K and q6_K fast kernels (8: 1.06× and 1.03× over 4
/// for q4_K and q5_K; q6_K's 8 spill, 0.82×: the kernel microbenchmark in docs/benchmarks.md).
constexpr int kQ4KFastC = 8, kQ6KFastC = 4;

}  // namespace

void packed_fast_q4_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                           const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  kquant_walk<kQ4KFastC, kQ4KUnits, 4, X8::none>(
      n, 2304, wp, ngroups, x, xs, nx, y, ys, unpack_q4_K_half<false>, q4_K_bsum_pairs,
      [&](auto cc, const Lane32* wu, const uint8_t* xr, const int32_t* xp, const uint8_t*,
          float* yr) {
        fast_q4_K_half<decltype(cc)::value, false>(n / QK_K, wu, xr, xs, xp, yr, ys);
      });
}

void packed_fast_q5_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                           const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  kquant_walk<kQ4KFastC, kQ4KUnits, 4, X8::none>(
      n, 2816, wp, ngroups, x, xs, nx, y, ys, unpack_q4_K_half<true>, q4_K_bsum_pairs,
      [&](auto cc, const Lane32* wu, const uint8_t* xr, const int32_t* xp, const uint8_t*,
          float* yr) {
        fast_q4_K_half<decltype(cc)::value, true>(n / QK_K, wu, xr, xs, xp, yr, ys);
      });
}

void packed_fast_q6_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                           const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  kquant_walk<kQ6KFastC, kQ6KUnits, 0, X8::plus128>(
      n, 3360, wp, ngroups, x, xs, nx, y, ys, unpack_q6_K_half, [](const block_q8_K&, int32_t*) {},
      [&](auto cc, const Lane32* wu, const uint8_t* xr, const int32_t*, const uint8_t* xi,
          float* yr) { fast_q6_K_half<decltype(cc)::value>(n / QK_K, wu, xr, xs, xi, yr, ys); });
}
