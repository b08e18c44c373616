// packed_groups_x86.inl — the 16-lane integer helpers (I16: one zmm at avx512, two ymm at avx2)
// and the packed-group kernels both x86 levels share or that need VNNI: packed q4_0 (pack.h
// layout), the VNNI q8_0 group, the avx512 q6_K group, and the decode prefetch distances.
// Included by kernels_x86.inl inside its anonymous namespace within kvrun::cpu::KVRUN_SIMD_NS;
// the rules are kernels_x86.inl's: every kernel gives the floats of its scalar reference bit for
// bit.
#ifndef KVRUN_SIMD_NS
#error "included by kernels_x86.inl only"
#endif

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
