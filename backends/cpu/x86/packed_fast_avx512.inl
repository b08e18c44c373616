// packed_fast_avx512.inl — the fast-order prefill kernels of the avx512 level (`--kernels fast`;
// docs/architecture.md, "Summation order") for the packed q8_0, mxfp4, q4_K, q5_K and q6_K
// layouts (pack.h), with the floats of their scalar references (vec_dot.h fast_dot_*): for q8_0
// and mxfp4, per block and row the whole 32-element integer dot, then
// acc = fma(float(isum), d_w·d_x, acc); the K-quants at packed_fast_q4_K_group (q4_K, q5_K) and
// packed_fast_q6_K_group.
// Included by kernels_x86.inl inside namespace kvrun::cpu::avx512, after packed_q4k_avx512.inl
// (q4_K_scales16).
//
// The 16 rows of a group are one zmm: per block and activation row, 8 VPDPBUSD (4 unsigned
// weight bytes × 4 broadcast activation bytes per lane) from the offset −o·Σx that takes the
// weights' unsigned storage back off (o = 128 for q8_0's q + 128, 12 for mxfp4's level + 12),
// one convert and one multiply-add. The offsets and scales of the activation blocks are computed
// once per call (fast_x_blocks), and 8 activation rows share each unpacked block (8 weight
// vectors and 8 accumulators of the 32 registers). Against the exact kernels, which convert and
// add each of the 8 four-element lanes per block, this is about a third of the instructions.
#if !defined(__AVX512F__) || !defined(KVRUN_X86_VNNI)
#error "the avx512 level only"
#endif

namespace {

/// acc[c] = fma(float(Σ_i u[i]·x_c's bytes 4·pos(i) .. +3, from xc.off), dw · d_x, acc[c]) for C
/// activation rows: one block of the fast order. pos(i) is the activation position of weight
/// vector i's 4 bytes per row (q8_0: 4i; mxfp4: the low nibbles 4i, the high 16 + 4(i − 4)).
template <int C, bool kMxfp4>
[[gnu::always_inline]] inline void fast_block(const __m512i* u, __m512 dw, const uint8_t* x,
                                              size_t xs, int64_t b, const FastXBlock* xb,
                                              int64_t nb, __m512* acc) {
  for (int c = 0; c < C; ++c) {
    const int8_t* qs = block_at<block_q8_0>(x, xs, c, b).qs;
    const FastXBlock& xc = xb[size_t(c) * size_t(nb) + size_t(b)];
    __m512i s = _mm512_set1_epi32(xc.off);
    for (int i = 0; i < 8; ++i) {
      int32_t xv;
      std::memcpy(&xv, qs + (kMxfp4 && i >= 4 ? 16 + 4 * (i - 4) : 4 * i), 4);
      s = _mm512_dpbusd_epi32(s, u[i], _mm512_set1_epi32(xv));
    }
    const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(xc.d));
    acc[c] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(kAll16, s), d, acc[c]);
  }
}

/// One packed q8_0 group (544-byte blocks: 16 f16 scales, 8 chunks of 64 bytes q + 128) against C
/// activation rows: y[c·ys + r] = fast_dot_q8_0_q8_0.
template <int C>
inline void packed_fast_q8_0_group(int64_t nb, const uint8_t* g, const uint8_t* x, size_t xs,
                                   const FastXBlock* xb, float* y, size_t ys) {
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, g += 544) {
    const __m512 dw = load16_f16(reinterpret_cast<const uint16_t*>(g)).v;
    __m512i u[8];
    for (int i = 0; i < 8; ++i) u[i] = _mm512_loadu_si512(g + 32 + 64 * i);
    fast_block<C, false>(u, dw, x, xs, b, xb, nb, acc);
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + size_t(c) * ys, acc[c]);
}

/// One packed mxfp4 group (272-byte blocks: 16 E8M0 bytes, then q4_0's 4 chunks of 64 nibble
/// bytes) against C activation rows: y[c·ys + r] = fast_dot_mxfp4_q8_0. The nibbles are looked up
/// as u = level + 12 (mxfp4_u_table16), the half scales by mxfp4_half_scales16.
template <int C>
inline void packed_fast_mxfp4_group(int64_t nb, const uint8_t* g, const uint8_t* x, size_t xs,
                                    const FastXBlock* xb, float* y, size_t ys) {
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  const __m512i table = mxfp4_u_table16();
  const __m512i m15 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b, g += 272) {
    const __m512 dw = mxfp4_half_scales16(g);
    __m512i u[8];
    for (int i = 0; i < 4; ++i) {
      const __m512i q = _mm512_loadu_si512(g + 16 + 64 * i);
      u[i] = _mm512_shuffle_epi8(table, _mm512_and_si512(q, m15));
      u[4 + i] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), m15));
    }
    fast_block<C, true>(u, dw, x, xs, b, xb, nb, acc);
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + size_t(c) * ys, acc[c]);
}

/// Bit j (0..7) of each byte of `h` moved to bit 4 (the fifth bit of a q5_K value; pack.h: byte
/// (row, e) of a super-block's high-bit chunk i holds the fifth bits of its values 32·j + 4·i + e
/// in bit j), every other bit cleared: as packed_q5k_avx2.inl's q5_K_high_bit, on 16 rows.
[[gnu::always_inline]] inline __m512i q5_K_high_bit512(__m512i h, int j) {
  const __m512i m16 = _mm512_set1_epi8(0x10);
  if (j < 4) return _mm512_and_si512(_mm512_slli_epi16(h, unsigned(4 - j)), m16);
  return _mm512_and_si512(_mm512_srli_epi16(h, unsigned(j - 4)), m16);
}

/// One packed q4_K group (pack.h, 2304-byte super-blocks) against C q8_K activation rows:
/// y[c·ys + r] = fast_dot_q4_K_q8_K; with kQ5 a packed q5_K group (2816-byte super-blocks: q4_K's
/// layout, then the fifth bits), fast_dot_q5_K_q8_K (values ≤ 31: |t_j| ≤ 32·31·128, exact). Per
/// super-block and activation row one int32 lane per row holds the whole main term Σ_j sc_j · t_j,
/// t_j = Σ q·x over sub-block j: VPDPBUSD of the unsigned nibbles by the signed activation bytes
/// (|t_j| ≤ 32·15·128, exact), then one VPMULLD by sc_j and an add per sub-block (the exact kernel
/// needs VPMADDUBSW and VPDPWSSD per chunk instead, as it keeps 8 lanes per sub-block apart); and
/// one lane the min term Σ_j m_j · bsum_j (VPMADDWD of (m_2k, m_2k+1) by the (bsum_2k, bsum_2k+1)
/// pairs, as packed_q4_K_group512); then acc = fma(d_w·d_x, float(main), acc) and acc =
/// fma(d_min·(−d_x), float(min), acc). Each unpacked 64-byte chunk serves the C rows.
template <int C, bool kQ5 = false>
inline void packed_fast_q4_K_group(int64_t nb, const uint8_t* g, const uint8_t* x, size_t xs,
                                   float* y, size_t ys) {
  constexpr int64_t kSuperBytes = kQ5 ? 2816 : 2304;
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  const __m512i m15 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b, g += kSuperBytes) {
    alignas(64) __m512i sc[8], mn[8];
    q4_K_scales16(g, sc, mn);
    const int8_t* qx[C];
    __m512i isum[C];
    for (int c = 0; c < C; ++c) {
      qx[c] = block_at<block_q8_K>(x, xs, c, b).qs;
      isum[c] = _mm512_setzero_si512();
    }
#pragma GCC unroll 4
    for (int j2 = 0; j2 < 4; ++j2) {
      // Sub-blocks 2·j2 (low nibbles of chunks 8·j2 .. 8·j2+7) and 2·j2 + 1 (their high ones).
      __m512i tlo[C], thi[C];
      for (int c = 0; c < C; ++c) tlo[c] = thi[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const __m512i q = _mm512_loadu_si512(g + 256 + 64 * (8 * j2 + i));
        __m512i lo = _mm512_and_si512(q, m15);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m15);
        if constexpr (kQ5) {  // q5_K: the fifth bits of sub-blocks 2·j2 and 2·j2 + 1
          const __m512i h = _mm512_loadu_si512(g + 2304 + 64 * i);
          lo = _mm512_or_si512(lo, q5_K_high_bit512(h, 2 * j2));
          hi = _mm512_or_si512(hi, q5_K_high_bit512(h, 2 * j2 + 1));
        }
        for (int c = 0; c < C; ++c) {
          int32_t x0, x1;
          std::memcpy(&x0, qx[c] + 64 * j2 + 4 * i, 4);
          std::memcpy(&x1, qx[c] + 64 * j2 + 32 + 4 * i, 4);
          tlo[c] = _mm512_dpbusd_epi32(tlo[c], lo, _mm512_set1_epi32(x0));
          thi[c] = _mm512_dpbusd_epi32(thi[c], hi, _mm512_set1_epi32(x1));
        }
      }
      // sc[j] holds the scale in both int16 halves (q4_K_scales16); the low one as int32.
      const __m512i s_lo = _mm512_and_si512(sc[2 * j2], _mm512_set1_epi32(0xFFFF));
      const __m512i s_hi = _mm512_and_si512(sc[2 * j2 + 1], _mm512_set1_epi32(0xFFFF));
      for (int c = 0; c < C; ++c)
        isum[c] = _mm512_add_epi32(isum[c], _mm512_add_epi32(_mm512_mullo_epi32(tlo[c], s_lo),
                                                             _mm512_mullo_epi32(thi[c], s_hi)));
    }
    const __m512 dw = load16_f16(reinterpret_cast<const uint16_t*>(g)).v;
    const __m512 dminw = load16_f16(reinterpret_cast<const uint16_t*>(g + 32)).v;
    __m512i mpair[4];
    for (int k = 0; k < 4; ++k)
      mpair[k] = _mm512_mask_blend_epi16(0xAAAAAAAAu, mn[2 * k], mn[2 * k + 1]);
    for (int c = 0; c < C; ++c) {
      const block_q8_K& xb = block_at<block_q8_K>(x, xs, c, b);
      __m512i msum = _mm512_setzero_si512();
      for (int k = 0; k < 4; ++k) {
        const int s0 = xb.bsums[4 * k] + xb.bsums[4 * k + 1];
        const int s1 = xb.bsums[4 * k + 2] + xb.bsums[4 * k + 3];
        const __m512i spair =
            _mm512_set1_epi32(int32_t((uint32_t(s0) & 0xFFFF) | (uint32_t(s1) << 16)));
        msum = _mm512_add_epi32(msum, _mm512_madd_epi16(mpair[k], spair));
      }
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(xb.d));
      const __m512 dmin = _mm512_mul_ps(dminw, _mm512_set1_ps(-xb.d));
      acc[c] = _mm512_fmadd_ps(d, _mm512_maskz_cvtepi32_ps(kAll16, isum[c]), acc[c]);
      acc[c] = _mm512_fmadd_ps(dmin, _mm512_maskz_cvtepi32_ps(kAll16, msum), acc[c]);
    }
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + size_t(c) * ys, acc[c]);
}

/// One packed q6_K group (pack.h, 3360-byte super-blocks) against C q8_K activation rows:
/// y[c·ys + r] = fast_dot_q6_K_q8_K. Per 16-value sub-block j and activation row, t_j = Σ q·x
/// exactly: 4 VPDPBUSD of u = q + 32 (unpacked as packed_q6_K_group does) from −32·bsum_j (q8_K's
/// sum of those 16 activation quants; |t_j| ≤ 16·32·128), then one VPMULLD by the row's signed
/// scale and an add into the row's int32 lane (≤ 16·2^21: exact); per super-block one
/// acc = fma(d_x·d_w, float(Σ_j sc_j·t_j), acc). Each unpacked quad serves the C rows.
template <int C>
inline void packed_fast_q6_K_group(int64_t nb, const uint8_t* g, const uint8_t* x, size_t xs,
                                   float* y, size_t ys) {
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  const __m512i m63 = _mm512_set1_epi8(0x3F), m192 = _mm512_set1_epi8(char(0xC0));
  const __m512i m15 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b, g += 3360) {
    __m512i isum[C];
    for (int c = 0; c < C; ++c) isum[c] = _mm512_setzero_si512();
    for (int j = 0; j < 16; ++j) {
      const uint8_t* quad = g + 288 + 192 * j;
      const __m512i sc = _mm512_maskz_cvtepi8_epi32(
          kAll16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 32 + 16 * j)));
      const __m512i p = _mm512_loadu_si512(quad), q = _mm512_loadu_si512(quad + 64);
      const __m512i r = _mm512_loadu_si512(quad + 128);
      __m512i u[4];
      u[0] = _mm512_and_si512(p, m63);
      u[1] = _mm512_and_si512(q, m63);
      u[2] =
          _mm512_ternarylogic_epi32(r, _mm512_srli_epi16(_mm512_and_si512(p, m192), 2), m15, 0xEC);
      u[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(r, 4),
                                       _mm512_srli_epi16(_mm512_and_si512(q, m192), 2), m15, 0xEC);
      for (int c = 0; c < C; ++c) {
        const block_q8_K& xb = block_at<block_q8_K>(x, xs, c, b);
        __m512i t = _mm512_set1_epi32(-32 * int32_t(xb.bsums[j]));
        for (int i = 0; i < 4; ++i) {
          int32_t xv;
          std::memcpy(&xv, xb.qs + 16 * j + 4 * i, 4);
          t = _mm512_dpbusd_epi32(t, u[i], _mm512_set1_epi32(xv));
        }
        isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(t, sc));
      }
    }
    const __m512 dw = load16_f16(reinterpret_cast<const uint16_t*>(g)).v;
    for (int c = 0; c < C; ++c) {
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(block_at<block_q8_K>(x, xs, c, b).d));
      acc[c] = _mm512_fmadd_ps(d, _mm512_maskz_cvtepi32_ps(kAll16, isum[c]), acc[c]);
    }
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + size_t(c) * ys, acc[c]);
}

/// Every group against the nx activation rows, 8, then 4, then 1 per pass: group(c_const, g, gi,
/// j) runs rows [j, j + C) of group gi (its bytes at g) with C = c_const's value.
template <typename Group>
inline void fast_walk(const void* wp, size_t group_bytes, int64_t ngroups, int64_t nx,
                      Group group) {
  for (int64_t gi = 0; gi < ngroups; ++gi) {
    const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * group_bytes;
    int64_t j = 0;
    for (; j + 8 <= nx; j += 8) group(std::integral_constant<int, 8>{}, g, gi, j);
    if (j + 4 <= nx) {
      group(std::integral_constant<int, 4>{}, g, gi, j);
      j += 4;
    }
    for (; j < nx; ++j) group(std::integral_constant<int, 1>{}, g, gi, j);
  }
}

}  // namespace

void packed_fast_q8_0_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                           const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / QK8_0;
  const uint8_t* xp = static_cast<const uint8_t*>(x);
  const FastXBlock* xb = fast_x_blocks(xp, xs, nx, nb, 128);
  fast_walk(wp, size_t(nb) * 544, ngroups, nx,
            [&](auto cc, const uint8_t* g, int64_t gi, int64_t j) {
              packed_fast_q8_0_group<decltype(cc)::value>(
                  nb, g, xp + size_t(j) * xs, xs, xb + j * nb, y + gi * 16 + size_t(j) * ys, ys);
            });
}

void packed_fast_mxfp4_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                            const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / QK_MXFP4;
  const uint8_t* xp = static_cast<const uint8_t*>(x);
  const FastXBlock* xb = fast_x_blocks(xp, xs, nx, nb, 12);
  fast_walk(wp, size_t(nb) * 272, ngroups, nx,
            [&](auto cc, const uint8_t* g, int64_t gi, int64_t j) {
              packed_fast_mxfp4_group<decltype(cc)::value>(
                  nb, g, xp + size_t(j) * xs, xs, xb + j * nb, y + gi * 16 + size_t(j) * ys, ys);
            });
}

void packed_fast_q4_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                           const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / QK_K;
  const uint8_t* xp = static_cast<const uint8_t*>(x);
  fast_walk(wp, size_t(nb) * 2304, ngroups, nx,
            [&](auto cc, const uint8_t* g, int64_t gi, int64_t j) {
              packed_fast_q4_K_group<decltype(cc)::value>(nb, g, xp + size_t(j) * xs, xs,
                                                          y + gi * 16 + size_t(j) * ys, ys);
            });
}

void packed_fast_q5_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                           const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / QK_K;
  const uint8_t* xp = static_cast<const uint8_t*>(x);
  fast_walk(wp, size_t(nb) * 2816, ngroups, nx,
            [&](auto cc, const uint8_t* g, int64_t gi, int64_t j) {
              packed_fast_q4_K_group<decltype(cc)::value, true>(nb, g, xp + size_t(j) * xs, xs,
                                                                y + gi * 16 + size_t(j) * ys, ys);
            });
}

void packed_fast_q6_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                           const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / QK_K;
  const uint8_t* xp = static_cast<const uint8_t*>(x);
  fast_walk(wp, size_t(nb) * 3360, ngroups, nx,
            [&](auto cc, const uint8_t* g, int64_t gi, int64_t j) {
              packed_fast_q6_K_group<decltype(cc)::value>(nb, g, xp + size_t(j) * xs, xs,
                                                          y + gi * 16 + size_t(j) * ys, ys);
            });
}
