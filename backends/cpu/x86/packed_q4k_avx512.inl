// packed_q4k_avx512.inl — the packed q4_K kernel (pack.h layout) of the avx512 level (AVX-512 with
// VNNI), and the decode form of its packed q5_K kernel (q4_K's with the fifth bits). Included by
// kernels_x86.inl inside namespace kvrun::cpu::KVRUN_SIMD_NS. Same rules as kernels_x86.inl: they
// give the floats of vec_dot_q4_K_q8_K / vec_dot_q5_K_q8_K (vec_dot_k.cpp) bit for bit.
//
// The avx2 kernel (packed_avx2.inl) takes 8 rows per ymm, so a group is two halves and each
// (sub-block, lane) pair costs VPMADDUBSW, VPMADDWD by the scale and VPADDD. Here the 16 rows of
// a group are one zmm: a 64-byte chunk of the layout is one load, and VPDPWSSD multiplies the
// VPMADDUBSW pair sums by the scale and adds them to the lane in one instruction, so a super-block
// of 16 rows takes about a third of the avx2 instructions.
#if !defined(__AVX512F__) || !defined(KVRUN_X86_VNNI)
#error "the avx512 level only"
#endif

namespace {

/// The 6-bit scales (sc[j]) and mins (mn[j]) of the 8 sub-blocks of the 16 rows of a packed q4_K
/// super-block (pack.h), each int32 lane holding its row's value in both int16 halves (VPDPWSSD
/// of two int16 by it adds the scale times their sum). scales_mins_k4's unpacking on 16-byte
/// vectors (byte t of the 12 for all 16 rows is one load): j < 4 has sc = q[j] & 63,
/// m = q[j+4] & 63; j ≥ 4 has sc = (q[j+4] & 15) | (q[j−4] >> 6) << 4 and m = (q[j+4] >> 4) |
/// (q[j] >> 6) << 4.
inline void q4_K_scales16(const uint8_t* g, __m512i* sc, __m512i* mn) {
  __m128i q[12];
  for (int t = 0; t < 12; ++t)
    q[t] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 64 + 16 * t));
  const __m128i m63 = _mm_set1_epi8(0x3F), m15 = _mm_set1_epi8(0x0F), m48 = _mm_set1_epi8(0x30);
  const auto pair = [](__m128i bytes) {
    const __m512i v = _mm512_maskz_cvtepu8_epi32(kAll16, bytes);
    return _mm512_or_si512(v, _mm512_maskz_slli_epi32(kAll16, v, 16));
  };
  for (int j = 0; j < 4; ++j) {
    sc[j] = pair(_mm_and_si128(q[j], m63));
    mn[j] = pair(_mm_and_si128(q[j + 4], m63));
    // 16-bit shifts: the bits a byte receives from its neighbour fall outside the 0x30 mask.
    const __m128i s =
        _mm_or_si128(_mm_and_si128(q[j + 8], m15), _mm_and_si128(_mm_srli_epi16(q[j], 2), m48));
    const __m128i m = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q[j + 8], 4), m15),
                                   _mm_and_si128(_mm_srli_epi16(q[j + 4], 2), m48));
    sc[j + 4] = pair(s);
    mn[j + 4] = pair(m);
  }
}

/// One packed q4_K group (16 rows, pack.h layout, nb super-blocks from `g`) against C q8_K
/// activation rows (xs bytes apart): y[c·ys + r], a row per zmm lane. The order of
/// vec_dot_q4_K_q8_K: per super-block the 4 min lanes (lane k: m_2k·Σx(2k) + m_2k+1·Σx(2k+1)
/// from q8_K's bsums, VPMADDWD of int16 pairs, then fma(−d_x·d_min, ·, lane)) and the 8 main
/// lanes (lane i: Σ_j sc_j · Σ of values 4i..4i+3 of sub-block j times x: VPMADDUBSW pair sums
/// ≤ 2·15·128 in int16, VPDPWSSD by sc in both halves adds sc·Σ of 4 exactly), each lane =
/// fma(d_x·d_w, float(isum), lane); at the end fold8(main) + ((m0 + m2) + (m1 + m3)). The
/// prefill form (C ≥ 2) finishes the lanes one at a time (C integer accumulators live, each
/// unpacked nibble vector serving the C rows); the decode form (C = 1) keeps the 8 integer lanes
/// live and reads the chunks in memory order, prefetching kPrefetchAheadL2 bytes ahead into L2
/// (with the lane-at-a-time order and 4 KiB into L1 it streamed 6.9 GB/s on one core from DRAM
/// where the avx2 kernel streamed 9.6; in memory order with the L2 prefetch, 10.4–11.1 against
/// 12.8–13.0, and 2 threads 18.4–20.7 against 12.4–21.4: kvrun_bench
/// matmul/q4_K/avx*-packed/dram_65536x2048, medians of 3, on a VM whose bandwidth moved from run to
/// run; from cache, ffn_up_8192x2048 n1 t1, 34 against 19 GB/s).
template <int C>
inline void packed_q4_K_group512(int64_t nb, const uint8_t* g, const uint8_t* x, size_t xs,
                                 float* y, size_t ys) {
  __m512 acc[C][8], acc_m[C][4];
  for (int c = 0; c < C; ++c) {
    for (int l = 0; l < 8; ++l) acc[c][l] = _mm512_setzero_ps();
    for (int k = 0; k < 4; ++k) acc_m[c][k] = _mm512_setzero_ps();
  }
  const __m512i m15 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b, g += 2304) {
    if (C == 1)  // decode streams the weights once: ask for them ahead of the hardware prefetcher
      for (int l = 0; l < 2304; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(g) + kPrefetchAheadL2 + l, _MM_HINT_T1);
    alignas(64) __m512i sc[8], mn[8];
    q4_K_scales16(g, sc, mn);
    const __m512 dw = load16_f16(reinterpret_cast<const uint16_t*>(g)).v;
    const __m512 dminw = load16_f16(reinterpret_cast<const uint16_t*>(g + 32)).v;
    __m512 d[C];
    const int8_t* qx[C];
    for (int c = 0; c < C; ++c) {
      const block_q8_K& xb = block_at<block_q8_K>(x, xs, c, b);
      d[c] = _mm512_mul_ps(dw, _mm512_set1_ps(xb.d));
      // −d_x·d_min: the scalar −x.d · dmin, the same float (negation is exact).
      const __m512 dmin = _mm512_mul_ps(dminw, _mm512_set1_ps(-xb.d));
      qx[c] = xb.qs;
      for (int k = 0; k < 4; ++k) {
        const int s0 = xb.bsums[4 * k] + xb.bsums[4 * k + 1];
        const int s1 = xb.bsums[4 * k + 2] + xb.bsums[4 * k + 3];
        const __m512i spair =
            _mm512_set1_epi32(int32_t((uint32_t(s0) & 0xFFFF) | (uint32_t(s1) << 16)));
        // lane: m_2k·s0 + m_2k+1·s1 (m_2k in the low int16 half, m_2k+1 in the high one)
        const __m512i mpair = _mm512_mask_blend_epi16(0xAAAAAAAAu, mn[2 * k], mn[2 * k + 1]);
        acc_m[c][k] = _mm512_fmadd_ps(
            dmin, _mm512_maskz_cvtepi32_ps(kAll16, _mm512_madd_epi16(mpair, spair)), acc_m[c][k]);
      }
    }
    if constexpr (C == 1) {
      // Decode: the chunks in memory order (j2 outer), the 8 integer lanes live.
      __m512i lane[8];
      for (int i = 0; i < 8; ++i) lane[i] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int j2 = 0; j2 < 4; ++j2)
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          const __m512i q = _mm512_loadu_si512(g + 256 + 64 * (8 * j2 + i));
          const __m512i lo = _mm512_and_si512(q, m15);
          const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m15);
          int32_t x0, x1;
          std::memcpy(&x0, qx[0] + 64 * j2 + 4 * i, 4);
          std::memcpy(&x1, qx[0] + 64 * j2 + 32 + 4 * i, 4);
          lane[i] = _mm512_dpwssd_epi32(lane[i], _mm512_maddubs_epi16(lo, _mm512_set1_epi32(x0)),
                                        sc[2 * j2]);
          lane[i] = _mm512_dpwssd_epi32(lane[i], _mm512_maddubs_epi16(hi, _mm512_set1_epi32(x1)),
                                        sc[2 * j2 + 1]);
        }
      for (int i = 0; i < 8; ++i)
        acc[0][i] = _mm512_fmadd_ps(d[0], _mm512_maskz_cvtepi32_ps(kAll16, lane[i]), acc[0][i]);
      continue;
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      __m512i lane[C];
      for (int c = 0; c < C; ++c) lane[c] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int j2 = 0; j2 < 4; ++j2) {
        const __m512i q = _mm512_loadu_si512(g + 256 + 64 * (8 * j2 + i));
        const __m512i lo = _mm512_and_si512(q, m15);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m15);
        for (int c = 0; c < C; ++c) {
          int32_t x0, x1;
          std::memcpy(&x0, qx[c] + 64 * j2 + 4 * i, 4);
          std::memcpy(&x1, qx[c] + 64 * j2 + 32 + 4 * i, 4);
          const __m512i p0 = _mm512_maddubs_epi16(lo, _mm512_set1_epi32(x0));
          const __m512i p1 = _mm512_maddubs_epi16(hi, _mm512_set1_epi32(x1));
          lane[c] = _mm512_dpwssd_epi32(lane[c], p0, sc[2 * j2]);
          lane[c] = _mm512_dpwssd_epi32(lane[c], p1, sc[2 * j2 + 1]);
        }
      }
      for (int c = 0; c < C; ++c)
        acc[c][i] = _mm512_fmadd_ps(d[c], _mm512_maskz_cvtepi32_ps(kAll16, lane[c]), acc[c][i]);
    }
  }
  for (int c = 0; c < C; ++c) {
    __m512 t[4];
    for (int i = 0; i < 4; ++i) t[i] = _mm512_add_ps(acc[c][i + 4], acc[c][i]);
    const __m512 main = _mm512_add_ps(_mm512_add_ps(t[0], t[2]), _mm512_add_ps(t[1], t[3]));
    const __m512 mins = _mm512_add_ps(_mm512_add_ps(acc_m[c][0], acc_m[c][2]),
                                      _mm512_add_ps(acc_m[c][1], acc_m[c][3]));
    _mm512_storeu_ps(y + size_t(c) * ys, _mm512_add_ps(main, mins));
  }
}

/// Bit j (0..7) of each byte of `h` moved to bit 4 (a q5_K value's fifth bit), every other bit
/// cleared (pack.h; 16-bit shifts move bits across the byte boundary only outside bit 4).
template <int J>
inline __m512i q5_K_high_bit16(__m512i h) {
  const __m512i m16 = _mm512_set1_epi8(0x10);
  if constexpr (J < 4) return _mm512_and_si512(_mm512_slli_epi16(h, 4 - J), m16);
  if constexpr (J == 4) return _mm512_and_si512(h, m16);
  if constexpr (J > 4) return _mm512_and_si512(_mm512_srli_epi16(h, J - 4), m16);
}

/// The avx512 decode form of the packed q5_K kernel: the 16 rows of one packed q5_K group (pack.h,
/// 2816-byte super-blocks) against one q8_K activation row x: y[0..15], a row per zmm lane. The
/// order of vec_dot_q5_K_q8_K, as the avx2 kernel (packed_q5k_avx2.inl): per super-block the min
/// sum summs = summs + (−d_x·d_min) · float(Σ_j m_j·Σx(j)) (a multiply, then an add), Σ_j
/// m_j·Σx(j) exact from bsums by VPMADDWD of (m_2k, m_2k+1) pairs; the 8 main lanes (lane i:
/// Σ_j sc_j · Σ of values 4i..4i+3 of sub-block j times x, the fifth bit ORed into each nibble,
/// VPMADDUBSW pair sums ≤ 2·31·128, VPDPWSSD by sc in both int16 halves) as fma(d_x·d_w,
/// float(isum), lane); at the end fold8(main) + summs. The chunks in memory order with the 8
/// integer lanes live and an L2 prefetch kPrefetchAheadL2 ahead, as packed_q4_K_group512's decode
/// form. (The avx512 level ran the avx2 kernel, 8 rows per ymm, for every q5_K matmul before.)
inline void packed_q5_K_group512_decode(int64_t nb, const uint8_t* g, const uint8_t* x, float* y) {
  __m512 acc[8], summs = _mm512_setzero_ps();
  for (int l = 0; l < 8; ++l) acc[l] = _mm512_setzero_ps();
  const __m512i m15 = _mm512_set1_epi8(0x0F);
  const block_q8_K* xbs = reinterpret_cast<const block_q8_K*>(x);
  for (int64_t b = 0; b < nb; ++b, g += 2816) {
    for (int l = 0; l < 2816; l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(g) + kPrefetchAheadL2 + l, _MM_HINT_T1);
    alignas(64) __m512i sc[8], mn[8];
    q4_K_scales16(g, sc, mn);
    const block_q8_K& xb = xbs[b];
    const __m512 d =
        _mm512_mul_ps(load16_f16(reinterpret_cast<const uint16_t*>(g)).v, _mm512_set1_ps(xb.d));
    const __m512 dmin = _mm512_mul_ps(load16_f16(reinterpret_cast<const uint16_t*>(g + 32)).v,
                                      _mm512_set1_ps(-xb.d));  // the scalar −x.d · dmin
    __m512i ms = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) {
      const int s0 = xb.bsums[4 * k] + xb.bsums[4 * k + 1];
      const int s1 = xb.bsums[4 * k + 2] + xb.bsums[4 * k + 3];
      const __m512i spair =
          _mm512_set1_epi32(int32_t((uint32_t(s0) & 0xFFFF) | (uint32_t(s1) << 16)));
      const __m512i mpair = _mm512_mask_blend_epi16(0xAAAAAAAAu, mn[2 * k], mn[2 * k + 1]);
      ms = _mm512_add_epi32(ms, _mm512_madd_epi16(mpair, spair));
    }
    summs = _mm512_add_ps(summs, _mm512_mul_ps(dmin, _mm512_maskz_cvtepi32_ps(kAll16, ms)));
    __m512i lane[8];
    for (int i = 0; i < 8; ++i) lane[i] = _mm512_setzero_si512();
    const auto pair = [&]<int J2>() {
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const __m512i q = _mm512_loadu_si512(g + 256 + 64 * (8 * J2 + i));
        const __m512i h = _mm512_loadu_si512(g + 2304 + 64 * i);
        const __m512i lo = _mm512_or_si512(_mm512_and_si512(q, m15), q5_K_high_bit16<2 * J2>(h));
        const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), m15),
                                           q5_K_high_bit16<2 * J2 + 1>(h));
        int32_t x0, x1;
        std::memcpy(&x0, xb.qs + 64 * J2 + 4 * i, 4);
        std::memcpy(&x1, xb.qs + 64 * J2 + 32 + 4 * i, 4);
        lane[i] = _mm512_dpwssd_epi32(lane[i], _mm512_maddubs_epi16(lo, _mm512_set1_epi32(x0)),
                                      sc[2 * J2]);
        lane[i] = _mm512_dpwssd_epi32(lane[i], _mm512_maddubs_epi16(hi, _mm512_set1_epi32(x1)),
                                      sc[2 * J2 + 1]);
      }
    };
    pair.template operator()<0>();
    pair.template operator()<1>();
    pair.template operator()<2>();
    pair.template operator()<3>();
    for (int i = 0; i < 8; ++i)
      acc[i] = _mm512_fmadd_ps(d, _mm512_maskz_cvtepi32_ps(kAll16, lane[i]), acc[i]);
  }
  __m512 t[4];
  for (int i = 0; i < 4; ++i) t[i] = _mm512_add_ps(acc[i + 4], acc[i]);
  const __m512 main = _mm512_add_ps(_mm512_add_ps(t[0], t[2]), _mm512_add_ps(t[1], t[3]));
  _mm512_storeu_ps(y, _mm512_add_ps(main, summs));
}

}  // namespace

// kC activation rows per pass over a group (its weights then come from cache for the next kC),
// then the rest one at a time (the decode form). xoff is not used (the min term reads bsums).
void packed_q4_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  constexpr int kC = 4;
  const int64_t nb = n / QK_K;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  for (int64_t gi = 0; gi < ngroups; ++gi) {
    const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * size_t(nb) * 2304;
    float* yg = y + gi * 16;
    int64_t j = 0;
    for (; j + kC <= nx; j += kC)
      packed_q4_K_group512<kC>(nb, g, xb + size_t(j) * xs, xs, yg + size_t(j) * ys, ys);
    for (; j < nx; ++j)
      packed_q4_K_group512<1>(nb, g, xb + size_t(j) * xs, xs, yg + size_t(j) * ys, ys);
  }
}

// q5_K: four activation rows or more through the avx2 kernel's prefill form (avx2::
// packed_q5_K_q8_K: 8 rows per ymm from unpacked group halves, packed_prefill_avx2.inl), fewer one
// at a time in the avx512 decode form (packed_q5_K_group512_decode). xoff is not used.
void packed_q5_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t* xoff, int64_t nx, float* y, size_t ys) {
  if (nx >= 4) {
    avx2::packed_q5_K_q8_K(n, wp, ngroups, x, xs, xoff, nx, y, ys);
    return;
  }
  const int64_t nb = n / QK_K;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  for (int64_t gi = 0; gi < ngroups; ++gi) {
    const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * size_t(nb) * 2816;
    for (int64_t j = 0; j < nx; ++j)
      packed_q5_K_group512_decode(nb, g, xb + size_t(j) * xs, y + gi * 16 + size_t(j) * ys);
  }
}
