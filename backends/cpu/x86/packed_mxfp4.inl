// packed_mxfp4.inl — the packed mxfp4 kernel (pack.h layout: 16 rows' E8M0 bytes, then their
// nibbles in q4_0's 4 chunks of 64 bytes) of both x86 levels, against q8_0 activations. Included
// by kernels_x86.inl inside namespace kvrun::cpu::KVRUN_SIMD_NS; 8 rows (one ymm) per pass, as
// packed_avx2.inl's kernels. Bit-identical to vec_dot_mxfp4_q8_0 (vec_dot_legacy.cpp).
#ifndef KVRUN_SIMD_NS
#error "included by kernels_x86.inl only"
#endif

namespace {

/// Σ of the 32 signed bytes at p (exact): VPSADBW of the bytes + 128, less 32·128.
inline int32_t sum_i8_32(const int8_t* p) {
  const __m256i v = _mm256_xor_si256(load256(p), _mm256_set1_epi8(char(0x80)));
  const __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
  __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  t = _mm_add_epi64(t, _mm_unpackhi_epi64(t, t));
  return _mm_cvtsi128_si32(t) - 32 * 128;
}

/// One q8_0 activation block as the fast-order kernels (packed_fast_avx512.inl, and the avx2
/// mxfp4 one below) read it: −o · Σ of its 32 quants (the offset of
/// the weights' unsigned storage) and its scale d_x as f32.
struct FastXBlock {
  int32_t off;
  float d;
};

/// The FastXBlocks of nx activation rows of nb q8_0 blocks (xs bytes apart), row j's at j·nb, in
/// a buffer of the calling thread (valid until its next call).
inline const FastXBlock* fast_x_blocks(const uint8_t* x, size_t xs, int64_t nx, int64_t nb,
                                       int32_t o) {
  thread_local std::vector<FastXBlock> tl_xb;
  std::vector<FastXBlock>& xb = tl_xb;
  xb.resize(size_t(nx) * size_t(nb));
  for (int64_t j = 0; j < nx; ++j)
    for (int64_t b = 0; b < nb; ++b) {
      const block_q8_0& blk = block_at<block_q8_0>(x, xs, int(j), b);
      xb[size_t(j * nb + b)] = {-o * sum_i8_32(blk.qs), h2f(blk.d)};
    }
  return xb.data();
}

/// 8 int32: c + Σ of each 4 consecutive products u·x (u unsigned ≤ 24, x signed): exact, the
/// pair sums of VPMADDUBSW stay within int16 (≤ 2·24·128). One VPDPBUSD with VNNI.
inline __m256i u4_dot_plus(__m256i u, __m256i x, int32_t c) {
#ifdef KVRUN_X86_VNNI
  return _mm256_dpbusd_epi32(_mm256_set1_epi32(c), u, x);
#else
  return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)),
                          _mm256_set1_epi32(c));
#endif
}

/// The VPSHUFB table of the MXFP4 levels as u = level + 12 (0..24, unsigned, so VPMADDUBSW and
/// VPDPBUSD multiply them by signed activation bytes), in both 128-bit lanes.
inline __m256i mxfp4_u_table8() {
  alignas(16) int8_t u_levels[16];
  for (int i = 0; i < 16; ++i) u_levels[i] = int8_t(kvalues_mxfp4[i] + 12);
  return level_table(u_levels);
}

/// The 8 rows' MXFP4 half scales 2^(e − 128) (blocks.h mxfp4_half_scale, as half_scale_e8m0)
/// of the E8M0 bytes at e: (e − 1) << 23 as float bits for e ≥ 2, the subnormals 2^21 << e
/// below.
inline __m256 mxfp4_half_scales8(const uint8_t* e) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e)));
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(v, _mm256_set1_epi32(1)), 23);
  const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), v);
  const __m256i is_normal = _mm256_cmpgt_epi32(v, _mm256_set1_epi32(1));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(sub, normal, is_normal));
}

#ifdef __AVX512F__
/// mxfp4_u_table8 in all four 128-bit lanes.
inline __m512i mxfp4_u_table16() {
  return _mm512_maskz_broadcast_i32x4(kAll16, _mm256_castsi256_si128(mxfp4_u_table8()));
}

/// mxfp4_half_scales8 for the 16 rows' E8M0 bytes at e, one zmm. (The maskz forms with kAll16,
/// as kernels_x86.inl's V16: GCC 12 warns on the plain forms.)
inline __m512 mxfp4_half_scales16(const uint8_t* e) {
  const __m512i v =
      _mm512_maskz_cvtepu8_epi32(kAll16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(e)));
  const __m512i normal =
      _mm512_maskz_slli_epi32(kAll16, _mm512_sub_epi32(v, _mm512_set1_epi32(1)), 23);
  const __m512i sub = _mm512_maskz_sllv_epi32(kAll16, _mm512_set1_epi32(0x00200000), v);
  return _mm512_castsi512_ps(
      _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(v, _mm512_set1_epi32(1)), sub, normal));
}
#endif

/// Rows 8·half .. 8·half+7 of one packed mxfp4 group (pack.h: 272-byte blocks) against C q8_0
/// activation rows (xs bytes apart; xoff: per block 8 offsets −12·Σ of 4 quants and the scale as
/// float bits, 9·nb per row): y[c·ys + 8·half + r]. Same order as vec_dot_mxfp4_q8_0, lane by
/// lane: 8 float lanes per row (lane i: elements 4i..4i+3 of each block), lane = fma(d_w·d_x,
/// Σ, lane), fold8 at the end. The nibbles are looked up as u = level + 12 (0..24, unsigned),
/// so VPMADDUBSW multiplies them by the signed activation bytes directly (pair sums ≤ 2·24·127)
/// and the offset takes the 12·Σx back off: Σ is the exact integer of the scalar dot. C = 1
/// (decode) prefetches the weights kPrefetchAhead ahead in the first half. 8 lane accumulators
/// per activation row: C = 2 fills the 16 ymm registers of avx2 (some spill; still fewer
/// instructions than two C = 1 passes), the avx512 level's 32 hold them.
template <int C>
inline void packed_mxfp4_half(int64_t nb, const uint8_t* g, int half, const uint8_t* x, size_t xs,
                              const int32_t* xoff, float* y, size_t ys) {
  __m256 acc[C][8];
  for (int c = 0; c < C; ++c)
    for (int i = 0; i < 8; ++i) acc[c][i] = _mm256_setzero_ps();
  const __m256i table = mxfp4_u_table8();
  const __m256i m15 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b, g += 272) {
    if (C == 1 && half == 0)
      for (int l = 0; l < 272; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(g) + kPrefetchAhead + l, _MM_HINT_T0);
    const __m256 dw = mxfp4_half_scales8(g + 8 * half);
    __m256 d[C];
    const int8_t* qx[C];
    const int32_t* off[C];
    for (int c = 0; c < C; ++c) {
      off[c] = xoff + (size_t(c) * size_t(nb) + size_t(b)) * 9;
      float dx;
      std::memcpy(&dx, off[c] + 8, sizeof dx);
      d[c] = _mm256_mul_ps(dw, _mm256_set1_ps(dx));
      qx[c] = block_at<block_q8_0>(x, xs, c, b).qs;
    }
    for (int i = 0; i < 4; ++i) {
      const __m256i q = load256(g + 16 + 64 * i + 32 * half);
      const __m256i ul = _mm256_shuffle_epi8(table, _mm256_and_si256(q, m15));
      const __m256i uh = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m15));
      for (int c = 0; c < C; ++c) {
        const __m256i xl = _mm256_broadcastd_epi32(_mm_loadu_si32(qx[c] + 4 * i));
        const __m256i xh = _mm256_broadcastd_epi32(_mm_loadu_si32(qx[c] + 16 + 4 * i));
        const __m256i sl = u4_dot_plus(ul, xl, off[c][i]);
        const __m256i sh = u4_dot_plus(uh, xh, off[c][4 + i]);
        acc[c][i] = _mm256_fmadd_ps(d[c], _mm256_cvtepi32_ps(sl), acc[c][i]);
        acc[c][4 + i] = _mm256_fmadd_ps(d[c], _mm256_cvtepi32_ps(sh), acc[c][4 + i]);
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    __m256 t[4];
    for (int i = 0; i < 4; ++i) t[i] = _mm256_add_ps(acc[c][i + 4], acc[c][i]);
    _mm256_storeu_ps(y + size_t(c) * ys + 8 * half,
                     _mm256_add_ps(_mm256_add_ps(t[0], t[2]), _mm256_add_ps(t[1], t[3])));
  }
}

#ifdef __AVX512F__
/// The avx512 form of packed_mxfp4_half: all 16 rows of the group in one zmm per lane, so a group
/// is one pass over its blocks (the avx2 form makes two). Same integer sums (VPDPBUSD from the
/// offset), same float steps lane by lane, so the same floats.
template <int C>
inline void packed_mxfp4_group(int64_t nb, const uint8_t* g, const uint8_t* x, size_t xs,
                               const int32_t* xoff, float* y, size_t ys) {
  __m512 acc[C][8];
  for (int c = 0; c < C; ++c)
    for (int i = 0; i < 8; ++i) acc[c][i] = _mm512_setzero_ps();
  const __m512i table = mxfp4_u_table16();
  const __m512i m15 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b, g += 272) {
    if (C == 1)
      for (int l = 0; l < 272; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(g) + kPrefetchAhead + l, _MM_HINT_T0);
    const __m512 dw = mxfp4_half_scales16(g);
    __m512 d[C];
    const int8_t* qx[C];
    const int32_t* off[C];
    for (int c = 0; c < C; ++c) {
      off[c] = xoff + (size_t(c) * size_t(nb) + size_t(b)) * 9;
      float dx;
      std::memcpy(&dx, off[c] + 8, sizeof dx);
      d[c] = _mm512_mul_ps(dw, _mm512_set1_ps(dx));
      qx[c] = block_at<block_q8_0>(x, xs, c, b).qs;
    }
    for (int i = 0; i < 4; ++i) {
      const __m512i q = _mm512_loadu_si512(g + 16 + 64 * i);
      const __m512i ul = _mm512_shuffle_epi8(table, _mm512_and_si512(q, m15));
      const __m512i uh = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), m15));
      for (int c = 0; c < C; ++c) {
        int32_t xl, xh;
        std::memcpy(&xl, qx[c] + 4 * i, 4);
        std::memcpy(&xh, qx[c] + 16 + 4 * i, 4);
        const __m512i sl =
            _mm512_dpbusd_epi32(_mm512_set1_epi32(off[c][i]), ul, _mm512_set1_epi32(xl));
        const __m512i sh =
            _mm512_dpbusd_epi32(_mm512_set1_epi32(off[c][4 + i]), uh, _mm512_set1_epi32(xh));
        acc[c][i] = _mm512_fmadd_ps(d[c], _mm512_maskz_cvtepi32_ps(kAll16, sl), acc[c][i]);
        acc[c][4 + i] = _mm512_fmadd_ps(d[c], _mm512_maskz_cvtepi32_ps(kAll16, sh), acc[c][4 + i]);
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    __m512 t[4];
    for (int i = 0; i < 4; ++i) t[i] = _mm512_add_ps(acc[c][i + 4], acc[c][i]);
    _mm512_storeu_ps(y + size_t(c) * ys,
                     _mm512_add_ps(_mm512_add_ps(t[0], t[2]), _mm512_add_ps(t[1], t[3])));
  }
}
#endif

#ifndef KVRUN_X86_VNNI
/// The fast-order form (`--kernels fast`; fast_dot_mxfp4_q8_0's floats) of the avx2 level: rows
/// 8·half .. 8·half+7 of one packed mxfp4 group against C activation rows (xs bytes apart, their
/// FastXBlocks at xb, nb apart): y[c·ys + 8·half + r]. Per block and activation row the whole
/// 32-element dot of each row: VPMADDUBSW of u = level + 12 (≤ 24) by the activation bytes, the
/// four pair-sum vectors of each nibble half added in int16 (≤ 4·2·24·128 = 24576: exact), two
/// VPMADDWD by 1, and −12·Σx (xb.off); then acc = fma(float(Σ), d_w·d_x, acc). The levels of a
/// block are looked up once for the C rows.
template <int C>
inline void fast_mxfp4_half(int64_t nb, const uint8_t* g, int half, const uint8_t* x, size_t xs,
                            const FastXBlock* xb, float* y, size_t ys) {
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  const __m256i table = mxfp4_u_table8();
  const __m256i m15 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b, g += 272) {
    const __m256 dw = mxfp4_half_scales8(g + 8 * half);
    __m256i ul[4], uh[4];
    for (int i = 0; i < 4; ++i) {
      const __m256i q = load256(g + 16 + 64 * i + 32 * half);
      ul[i] = _mm256_shuffle_epi8(table, _mm256_and_si256(q, m15));
      uh[i] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m15));
    }
    for (int c = 0; c < C; ++c) {
      const int8_t* qs = block_at<block_q8_0>(x, xs, c, b).qs;
      const FastXBlock& xc = xb[size_t(c) * size_t(nb) + size_t(b)];
      __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
      for (int i = 0; i < 4; ++i) {
        const __m256i xl = _mm256_broadcastd_epi32(_mm_loadu_si32(qs + 4 * i));
        const __m256i xh = _mm256_broadcastd_epi32(_mm_loadu_si32(qs + 16 + 4 * i));
        lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(ul[i], xl));
        hi = _mm256_add_epi16(hi, _mm256_maddubs_epi16(uh[i], xh));
      }
      const __m256i s = _mm256_add_epi32(
          _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones)),
          _mm256_set1_epi32(xc.off));
      const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(xc.d));
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc[c]);
    }
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + size_t(c) * ys + 8 * half, acc[c]);
}
#endif

}  // namespace

#ifndef KVRUN_X86_VNNI
/// mxfp4 × q8_0 in the fast order at the avx2 level (PackedTileFn): the activation blocks'
/// offsets and scales once per call, then prefill_walk (packed_prefill_avx2.inl), 4 activation
/// rows per pass (8 level vectors and 4 accumulators of the 16 ymm registers).
void packed_fast_mxfp4_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                            const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / QK_MXFP4;
  const uint8_t* xp = static_cast<const uint8_t*>(x);
  const FastXBlock* xb = fast_x_blocks(xp, xs, nx, nb, 12);
  prefill_walk<4>(wp, size_t(nb) * 272, ngroups, xs, nx,
                  [&](auto cc, const uint8_t* g, int64_t gi, int half, int64_t j) {
                    fast_mxfp4_half<decltype(cc)::value>(nb, g, half, xp + size_t(j) * xs, xs,
                                                         xb + j * nb, y + gi * 16 + size_t(j) * ys,
                                                         ys);
                  });
}
#endif

/// mxfp4 × q8_0 over packed groups (PackedTileFn, vec_dot.h): C = 2 activation rows share each
/// unpacked half-chunk; a last odd row, and decode, run one at a time (prefetching).
void packed_mxfp4_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                       const int32_t* xoff, int64_t nx, float* y, size_t ys) {
  constexpr int kC = 2;
  const int64_t nb = n / QK_MXFP4;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  for (int64_t gi = 0; gi < ngroups; ++gi) {
    const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * size_t(nb) * 272;
    float* yg = y + gi * 16;
    int64_t j = 0;
#ifdef __AVX512F__
    for (; j + kC <= nx; j += kC)
      packed_mxfp4_group<kC>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 9, yg + size_t(j) * ys,
                             ys);
    for (; j < nx; ++j)
      packed_mxfp4_group<1>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 9, yg + size_t(j) * ys,
                            ys);
#endif
    for (; j + kC <= nx; j += kC)
      for (int half = 0; half < 2; ++half)
        packed_mxfp4_half<kC>(nb, g, half, xb + size_t(j) * xs, xs, xoff + j * nb * 9,
                              yg + size_t(j) * ys, ys);
    for (; j < nx; ++j)
      for (int half = 0; half < 2; ++half)
        packed_mxfp4_half<1>(nb, g, half, xb + size_t(j) * xs, xs, xoff + j * nb * 9,
                             yg + size_t(j) * ys, ys);
  }
}
