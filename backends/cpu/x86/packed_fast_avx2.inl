// packed_fast_avx2.inl — the fast-order prefill kernels of packed q8_0, q4_K, q5_K and q6_K weights
// (pack.h layouts) at the avx2 level, for `kvrun --kernels fast` (cpu_level.h KernelOrder).
// Included by kernels_x86.inl after packed_avx2.inl, inside namespace kvrun::cpu::KVRUN_SIMD_NS,
// when the level has no VNNI.
//
// Each gives the floats of its scalar reference fast_dot_* (vec_dot.h) bit for bit: per weight
// row and (super-)block one exact int32 dot, then one float multiply-add into one accumulator.
// That is what lets these kernels block 8 weight rows (one ymm, a row per lane) × 8 (q8_0) or 4
// (q4_K, q5_K, q6_K; and mxfp4 in packed_mxfp4.inl) activation rows with one accumulator register
// per 8 pairs, where the exact order needs 8 float lanes per pair. The integer sums are formed
// differently from the scalar code (int16 partial sums where their range allows, VPMADDWD by the
// scale) but exactly, so the integers and the float steps are the same. As packed_q4_0_prefill_avx2
// (kernels_x86.inl), the activation rows are taken in chunks that stay in L2 while every group of
// the call passes over them.
#ifndef KVRUN_SIMD_NS
#error "included by kernels_x86.inl only"
#endif

namespace {

/// Activation bytes of one column chunk of the fast prefill kernels (as kQ4PrefillChunkBytes).
constexpr size_t kFastChunkBytes = 128 * 1024;

/// Runs `half_fn<C>(g, half, j, C)` for every group of `ngroups` (group_bytes apart from wp),
/// both halves, and the activation rows [0, nx) in chunks of about kFastChunkBytes (xs bytes
/// per row), C rows at a time and then the rest of a chunk 4 (when C > 4), 3, 2 or 1 at a time.
template <int C, typename HalfFn>
inline void fast_prefill_walk(const void* wp, size_t group_bytes, int64_t ngroups, size_t xs,
                              int64_t nx, HalfFn&& half_fn) {
  const int64_t chunk = std::max<int64_t>(C, int64_t(kFastChunkBytes / xs) / C * C);
  for (int64_t j0 = 0; j0 < nx; j0 += chunk) {
    const int64_t j1 = std::min(nx, j0 + chunk);
    for (int64_t gi = 0; gi < ngroups; ++gi) {
      const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * group_bytes;
      for (int half = 0; half < 2; ++half) {
        int64_t j = j0;
        for (; j + C <= j1; j += C) half_fn(std::integral_constant<int, C>{}, g, gi, half, j);
        if constexpr (C > 4)
          for (; j + 4 <= j1; j += 4) half_fn(std::integral_constant<int, 4>{}, g, gi, half, j);
        switch (j1 - j) {
          case 3:
            half_fn(std::integral_constant<int, 3>{}, g, gi, half, j);
            break;
          case 2:
            half_fn(std::integral_constant<int, 2>{}, g, gi, half, j);
            break;
          case 1:
            half_fn(std::integral_constant<int, 1>{}, g, gi, half, j);
            break;
          default:
            break;
        }
      }
    }
  }
}

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
  fast_prefill_walk<kQ8FastC>(wp, size_t(nb) * 544, ngroups, xs, nx,
                              [&](auto cc, const uint8_t* g, int64_t gi, int half, int64_t j) {
                                fast_q8_0_half<decltype(cc)::value>(
                                    nb, g, half, xb + size_t(j) * xs, xs,
                                    y + gi * 16 + size_t(j) * ys, ys);
                              });
}

namespace {

/// Rows 8·half .. 8·half+7 of one packed q4_K group against C q8_K activation rows (xs bytes
/// apart): y[c·ys + 8·half + r] = fast_dot_q4_K_q8_K; with kQ5 of a packed q5_K group (2816-byte
/// super-blocks: q4_K's layout, then the fifth bits), fast_dot_q5_K_q8_K, its values ≤ 31 summed
/// in int16 four VPMADDUBSW results at a time. Per super-block, sub-block j's dot per row
/// is the 8 VPMADDUBSW results of its nibbles (pair sums ≤ 2·15·128) added as int16 (≤ 30720,
/// exact), then one VPMADDWD by sc_j in both int16 halves: sc_j · Σ, int32. The min term
/// Σ_j m_j·bsum_j is VPMADDWD of (m_2k, m_2k+1) by the activation's (bsum_2k, bsum_2k+1) pairs.
/// Then acc = fma(d_w·d_x, float(main), acc), acc = fma(dmin_w·(−d_x), float(min), acc).
template <int C, bool kQ5 = false>
inline void fast_q4_K_half(int64_t nb, const uint8_t* g, int half, const uint8_t* x, size_t xs,
                           float* y, size_t ys) {
  __m256 acc[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  const __m256i m15 = _mm256_set1_epi8(0x0F), m16 = _mm256_set1_epi8(0x10);
  for (int64_t b = 0; b < nb; ++b, g += kQ5 ? 2816 : 2304) {
    alignas(32) __m256i sc[8], mn[8];
    q4_K_half_scales(g, half, sc, mn);
    const int8_t* qx[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) qx[c] = block_at<block_q8_K>(x, xs, c, b).qs;
    __m256i isum[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
    // Sub-block j = 2·j2 + h: the low (h = 0) or high (h = 1) nibbles of chunks 8·j2 .. 8·j2+7.
    const auto sub_block = [&](int j2, auto h) {
      __m256i p[C];
      const __m256i s = sc[2 * j2 + decltype(h)::value];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        __m256i v = load256(g + 256 + 64 * (8 * j2 + i) + 32 * half);
        if constexpr (decltype(h)::value == 1) v = _mm256_srli_epi16(v, 4);
        v = _mm256_and_si256(v, m15);
        if constexpr (kQ5) {  // q5_K: bit j of the high-bit chunk's bytes is sub-block j's fifth
          const int j = 2 * j2 + decltype(h)::value;
          const __m256i hb = load256(g + 2304 + 64 * i + 32 * half);
          const __m256i sh = j < 4 ? _mm256_sll_epi16(hb, _mm_cvtsi32_si128(4 - j))
                                   : _mm256_srl_epi16(hb, _mm_cvtsi32_si128(j - 4));
          v = _mm256_or_si256(v, _mm256_and_si256(sh, m16));
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const int8_t* xq = qx[c] + 64 * j2 + 32 * decltype(h)::value + 4 * i;
          const __m256i t = _mm256_maddubs_epi16(v, _mm256_broadcastd_epi32(_mm_loadu_si32(xq)));
          p[c] = i % (kQ5 ? 4 : 8) == 0 ? t : _mm256_add_epi16(p[c], t);
          asm("" : "+x"(p[c]));  // keeps the chain (reassociated, every product is live: spills)
        }
        // q5_K's values reach 31: four pair sums (≤ 4·2·31·128 = 31744) per int16 sum, not eight.
        if constexpr (kQ5)
          if (i == 3 || i == 7)
#pragma GCC unroll 4
            for (int c = 0; c < C; ++c)
              isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p[c], s));
      }
      if constexpr (!kQ5)
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p[c], s));
    };
    for (int j2 = 0; j2 < 4; ++j2) {
      sub_block(j2, std::integral_constant<int, 0>{});
      sub_block(j2, std::integral_constant<int, 1>{});
    }
    const __m256 dw =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * half)));
    const __m256 dminw =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 32 + 16 * half)));
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const block_q8_K& xb = block_at<block_q8_K>(x, xs, c, b);
      __m256i imin = _mm256_setzero_si256();
      for (int k = 0; k < 4; ++k) {
        const int s0 = xb.bsums[4 * k] + xb.bsums[4 * k + 1];
        const int s1 = xb.bsums[4 * k + 2] + xb.bsums[4 * k + 3];
        const __m256i spair =
            _mm256_set1_epi32(int32_t((uint32_t(s0) & 0xFFFF) | (uint32_t(s1) << 16)));
        const __m256i mpair = _mm256_blend_epi16(mn[2 * k], mn[2 * k + 1], 0xAA);
        imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mpair, spair));
      }
      acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xb.d)), _mm256_cvtepi32_ps(isum[c]),
                               acc[c]);
      acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dminw, _mm256_set1_ps(-xb.d)),
                               _mm256_cvtepi32_ps(imin), acc[c]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + size_t(c) * ys + 8 * half, acc[c]);
}

/// Rows 8·half .. 8·half+7 of one packed q6_K group against C q8_K activation rows (xs bytes
/// apart): y[c·ys + 8·half + r] = fast_dot_q6_K_q8_K. Per super-block, sub-block j's Σ u·x per
/// row (u = q + 32 in 0..63 as stored) is two int16 sums of two VPMADDUBSW results each (pair
/// sums ≤ 2·63·128, two of them ≤ 32256, exact), each times sc_j by VPMADDWD (sc_j in both int16
/// halves); the −32 is taken off once per super-block as −32·Σ_j sc_j·bsum_j (VPMADDWD of scale
/// pairs by q8_K's bsum pairs). Then acc = fma(d_w·d_x, float(isum), acc).
template <int C>
inline void fast_q6_K_half(int64_t nb, const uint8_t* g, int half, const uint8_t* x, size_t xs,
                           float* y, size_t ys) {
  __m256 acc[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, g += 3360) {
    const int8_t* qx[C];
    __m256i isum[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      qx[c] = block_at<block_q8_K>(x, xs, c, b).qs;
      isum[c] = _mm256_setzero_si256();
    }
    for (int j = 0; j < 16; ++j) {
      const __m256i sc = q6_K_half_scales_both(g, j, half);
      const uint8_t* quad = g + 288 + 192 * j + 32 * half;
      __m256i p[C];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const __m256i u = q6_K_half_values(quad, i);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m256i xv = _mm256_broadcastd_epi32(_mm_loadu_si32(qx[c] + 16 * j + 4 * i));
          const __m256i t = _mm256_maddubs_epi16(u, xv);
          if (i % 2 == 0) {
            p[c] = t;
          } else {
            isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(_mm256_add_epi16(p[c], t), sc));
          }
        }
      }
    }
    // Σ_j sc_j·bsum_j: scale pairs (sc_2k low, sc_2k+1 high int16) by bsum pairs.
    __m256i spair[8];
    for (int k = 0; k < 8; ++k) {
      const __m256i lo = q6_K_half_scales(g, 2 * k, half);
      const __m256i hi = q6_K_half_scales(g, 2 * k + 1, half);
      spair[k] = _mm256_or_si256(lo, _mm256_slli_epi32(hi, 16));
    }
    const __m256 dw =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * half)));
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const block_q8_K& xb = block_at<block_q8_K>(x, xs, c, b);
      __m256i bias = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) {
        const __m256i bpair =
            _mm256_set1_epi32(int32_t((uint32_t(uint16_t(xb.bsums[2 * k]))) |
                                      (uint32_t(uint16_t(xb.bsums[2 * k + 1])) << 16)));
        bias = _mm256_add_epi32(bias, _mm256_madd_epi16(spair[k], bpair));
      }
      const __m256i isum_c = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(bias, 5));
      acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xb.d)), _mm256_cvtepi32_ps(isum_c),
                               acc[c]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + size_t(c) * ys + 8 * half, acc[c]);
}

}  // namespace

void packed_fast_q4_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                           const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / QK_K;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  fast_prefill_walk<4>(wp, size_t(nb) * 2304, ngroups, xs, nx,
                       [&](auto cc, const uint8_t* g, int64_t gi, int half, int64_t j) {
                         fast_q4_K_half<decltype(cc)::value>(nb, g, half, xb + size_t(j) * xs, xs,
                                                             y + gi * 16 + size_t(j) * ys, ys);
                       });
}

void packed_fast_q5_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                           const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / QK_K;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  fast_prefill_walk<4>(wp, size_t(nb) * 2816, ngroups, xs, nx,
                       [&](auto cc, const uint8_t* g, int64_t gi, int half, int64_t j) {
                         fast_q4_K_half<decltype(cc)::value, true>(nb, g, half, xb + size_t(j) * xs,
                                                                   xs, y + gi * 16 + size_t(j) * ys,
                                                                   ys);
                       });
}

void packed_fast_q6_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                           const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / QK_K;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  fast_prefill_walk<4>(wp, size_t(nb) * 3360, ngroups, xs, nx,
                       [&](auto cc, const uint8_t* g, int64_t gi, int half, int64_t j) {
                         fast_q6_K_half<decltype(cc)::value>(nb, g, half, xb + size_t(j) * xs, xs,
                                                             y + gi * 16 + size_t(j) * ys, ys);
                       });
}
