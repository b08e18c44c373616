// packed_q5k_avx2.inl — the packed q5_K kernels (pack.h layout) of the avx2 level, whose prefill
// form the avx512 level runs too (packed_q4k_avx512.inl has its decode form). Included by
// kernels_x86.inl after packed_avx2.inl (it reuses q4_K_half_scales: q5_K packs its scales and mins
// as q4_K does) inside namespace kvrun::cpu::KVRUN_SIMD_NS when the level has no VNNI. Same rules
// as kernels_x86.inl: the floats of vec_dot_q5_K_q8_K (vec_dot_k.cpp), bit for bit.
//
// The shape is packed_q4_K's (packed_avx2.inl): 8 rows of a 16-row group per "half", a row per
// ymm lane; the scalar code's 8 main float lanes per row are 8 ymm accumulators, its one min
// sum (summs) a ninth.
#ifndef KVRUN_SIMD_NS
#error "included by kernels_x86.inl only"
#endif

namespace {

/// Bit j (0..7) of each byte of `h` moved to bit 4 (the fifth bit of a q5_K value) and every
/// other bit cleared. 16-bit shifts move bits across the byte boundary only outside bit 4.
template <int J>
inline __m256i q5_K_high_bit(__m256i h) {
  const __m256i m16 = _mm256_set1_epi8(0x10);
  if constexpr (J < 4) return _mm256_and_si256(_mm256_slli_epi16(h, 4 - J), m16);
  if constexpr (J == 4) return _mm256_and_si256(h, m16);
  if constexpr (J > 4) return _mm256_and_si256(_mm256_srli_epi16(h, J - 4), m16);
}

/// Lane i of one super-block of rows 8·half .. 8·half+7 (the packed q5_K super-block at `g`)
/// against C q8_K activation quants qx[c]: Σ_j sc_j · Σ (values 4i..4i+3 of sub-block j) · x
/// per row, added to acc[c][i] as fma(d[c], float(Σ), acc[c][i]). VPMADDUBSW pair sums of the
/// 5-bit values are ≤ 2·31·128 (int16), VPMADDWD by sc in both halves gives sc · Σ of 4 exactly.
template <int C, int I>
inline void q5_K_half_lane(const uint8_t* g, int half, const __m256i* sc, const __m256* d,
                           const int8_t* const* qx, __m256 (*acc)[8]) {
  const __m256i m15 = _mm256_set1_epi8(0x0F);
  const __m256i h = load256(g + 2304 + 64 * I + 32 * half);
  __m256i lane[C];
  for (int c = 0; c < C; ++c) lane[c] = _mm256_setzero_si256();
  const auto pair = [&]<int J2>() {
    const __m256i q = load256(g + 256 + 64 * (8 * J2 + I) + 32 * half);
    const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m15), q5_K_high_bit<2 * J2>(h));
    const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m15),
                                       q5_K_high_bit<2 * J2 + 1>(h));
    for (int c = 0; c < C; ++c) {
      const int8_t* xq = qx[c] + 64 * J2 + 4 * I;
      const __m256i x0 = _mm256_broadcastd_epi32(_mm_loadu_si32(xq));
      const __m256i x1 = _mm256_broadcastd_epi32(_mm_loadu_si32(xq + 32));
      const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), sc[2 * J2]);
      const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), sc[2 * J2 + 1]);
      lane[c] = _mm256_add_epi32(lane[c], _mm256_add_epi32(p0, p1));
    }
  };
  pair.template operator()<0>();
  pair.template operator()<1>();
  pair.template operator()<2>();
  pair.template operator()<3>();
  for (int c = 0; c < C; ++c)
    acc[c][I] = _mm256_fmadd_ps(d[c], _mm256_cvtepi32_ps(lane[c]), acc[c][I]);
}

/// One super-block b of the avx2 packed q5_K kernel: rows 8·half .. 8·half+7 of the packed q5_K
/// super-block at `g` (pack.h) against C q8_K activation rows (xs bytes apart), added to the
/// main float lanes acc[c][0..7] and the min sums summs[c], a row per ymm lane. The order of
/// vec_dot_q5_K_q8_K: summs = summs + (−d_x·d_min) · float(Σ_j m_j·Σx(j)) (a multiply, then an
/// add: the scalar code is compiled with -ffp-contract=off), Σ_j m_j·Σx(j) exact in int32 from
/// q8_K's bsums by four VPMADDWD of (m_2k, m_2k+1) pairs; then the 8 main lanes
/// (q5_K_half_lane).
template <int C>
inline void q5_K_half_block(const uint8_t* g, int half, const uint8_t* x, size_t xs, int64_t b,
                            __m256 (*acc)[8], __m256* summs) {
  __m256i sc[8], mn[8];
  q4_K_half_scales(g, half, sc, mn);
  __m256i mpair[4];  // m_2k in the low int16 half of each lane, m_2k+1 in the high one
  for (int k = 0; k < 4; ++k) mpair[k] = _mm256_blend_epi16(mn[2 * k], mn[2 * k + 1], 0xAA);
  const __m256 dw =
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * half)));
  const __m256 dminw =
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 32 + 16 * half)));
  __m256 d[C];
  const int8_t* qx[C];
  for (int c = 0; c < C; ++c) {
    const block_q8_K& xb = block_at<block_q8_K>(x, xs, c, b);
    d[c] = _mm256_mul_ps(dw, _mm256_set1_ps(xb.d));
    const __m256 dmin = _mm256_mul_ps(dminw, _mm256_set1_ps(-xb.d));  // the scalar −x.d · dmin
    qx[c] = xb.qs;
    __m256i ms = _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {
      const int s0 = xb.bsums[4 * k] + xb.bsums[4 * k + 1];
      const int s1 = xb.bsums[4 * k + 2] + xb.bsums[4 * k + 3];
      const __m256i spair =
          _mm256_set1_epi32(int32_t((uint32_t(s0) & 0xFFFF) | (uint32_t(s1) << 16)));
      ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mpair[k], spair));
    }
    summs[c] = _mm256_add_ps(summs[c], _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(ms)));
  }
  q5_K_half_lane<C, 0>(g, half, sc, d, qx, acc);
  q5_K_half_lane<C, 1>(g, half, sc, d, qx, acc);
  q5_K_half_lane<C, 2>(g, half, sc, d, qx, acc);
  q5_K_half_lane<C, 3>(g, half, sc, d, qx, acc);
  q5_K_half_lane<C, 4>(g, half, sc, d, qx, acc);
  q5_K_half_lane<C, 5>(g, half, sc, d, qx, acc);
  q5_K_half_lane<C, 6>(g, half, sc, d, qx, acc);
  q5_K_half_lane<C, 7>(g, half, sc, d, qx, acc);
}

/// The end of a q5_K half: fold8(main) + summs per row.
inline __m256 q5_K_half_result(const __m256* acc, __m256 summs) {
  return _mm256_add_ps(fold8_lanes(acc), summs);
}

/// The avx2 packed q5_K decode kernel: the 16 rows of one packed q5_K group against one q8_K
/// activation row x: y[0..15]. One pass over the super-blocks, both halves of each back to
/// back, the stream prefetched kPrefetchAhead ahead (as packed_q4_K_group_decode).
inline void packed_q5_K_group_decode(int64_t nb, const uint8_t* g, const uint8_t* x, float* y) {
  __m256 acc[2][1][8], summs[2][1];
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 8; ++l) acc[h][0][l] = _mm256_setzero_ps();
    summs[h][0] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b, g += 2816) {
    for (int l = 0; l < 2816; l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(g) + kPrefetchAhead + l, _MM_HINT_T0);
    q5_K_half_block<1>(g, 0, x, 0, b, acc[0], summs[0]);
    q5_K_half_block<1>(g, 1, x, 0, b, acc[1], summs[1]);
  }
  for (int h = 0; h < 2; ++h) _mm256_storeu_ps(y + 8 * h, q5_K_half_result(acc[h][0], summs[h][0]));
}

}  // namespace
