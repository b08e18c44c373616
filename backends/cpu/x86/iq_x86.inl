// iq_x86.inl — the x86 kernels of the non-linear 4-bit weights whose levels come from a 16-entry
// table: mxfp4 × q8_0 (the doubled E2M1 levels, blocks.h) and iq4_xs × q8_K (the iq4_nl levels).
// Included by kernels_x86.inl inside its anonymous namespace (its helpers, tile sizes and
// KVRUN_X86_DOT_AND_TILE), so it is compiled once per x86 level like the rest. The levels are
// looked up 32 at a time with a byte shuffle; the float steps are those of the scalar
// references (vec_dot_mxfp4_q8_0 in vec_dot_legacy.cpp, vec_dot_iq4_xs_q8_K in vec_dot_k.cpp),
// so the results are bit-identical to them.

// blocks.h's inline mxfp4_half_scale is not called here: an inline function emitted in both
// level's translation units may be kept by the linker in either instruction set
// (kernels_x86.inl). half_scale_e8m0 is its internal-linkage form. (iq4_xs_scale_code is not
// needed: the scales are decoded 8 at a time, xs_scales16.)

/// 2^(e − 128) (blocks.h mxfp4_half_scale).
inline float half_scale_e8m0(uint8_t e) {
  const uint32_t bits = e >= 2 ? uint32_t(e - 1) << 23 : (0x00200000u << e);
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(int(bits))));
}

/// The 32 levels of a 32-element block whose codes are the nibbles at qs (low nibbles elements
/// 0..15, high 16..31), looked up in the 16-entry table `levels` (in both 128-bit halves).
inline __m256i levels_32(const uint8_t* qs, __m256i levels) {
  return _mm256_shuffle_epi8(levels, nibbles_32(qs));
}

/// The 16 signed levels of `t` in both 128-bit halves of a register.
inline __m256i level_table(const int8_t* t) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t));
  return _mm256_set_m128i(v, v);
}

/// mxfp4 against q8_0: lane = fma(half_scale(e)·d_x, Σ of 4 level·q_x, lane), as iq4_nl's order.
template <int R, int C>
inline void mxfp4_q8_0_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                            float* y, size_t ys) {
  const __m256i table = level_table(kvalues_mxfp4);
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
      const block_mxfp4& wb = block_at<block_mxfp4>(w, ws, r, b);
      const __m256i v = levels_32(wb.qs, table);
      const float dw = half_scale_e8m0(wb.e);
      for (int c = 0; c < C; ++c) {
        const __m256 p = _mm256_cvtepi32_ps(dot_ss(v, xq[c]));
        acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[c]), p, acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[size_t(c) * ys + size_t(r)] = fold8(acc[r][c]);
}

/// The 8 sub-block scales ls_j − 32 of an iq4_xs super-block (blocks.h iq4_xs_scale_code: the
/// low 4 bits from nibble j of scales_l, the high 2 from bits 2j, 2j + 1 of scales_h) as int16
/// lane j of both 128-bit halves (int32 lane j with VNNI), decoded side by side: the nibbles spread
/// to one 16-bit lane each and picked by a blend; the high bits shifted to the top of lane j by a
/// multiply by 2^(14 − 2j) (16-bit products wrap) and back down by 14.
inline __m256i xs_scales16(const block_iq4_xs& b) {
  int32_t l4;
  std::memcpy(&l4, b.scales_l, sizeof l4);
  const __m128i bytes = _mm_shuffle_epi8(
      _mm_cvtsi32_si128(l4), _mm_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3,
                                           -1));  // lane j: scales_l[j / 2]
  const __m128i m15 = _mm_set1_epi16(0x0F);
  const __m128i lo = _mm_blend_epi16(_mm_and_si128(bytes, m15),
                                     _mm_and_si128(_mm_srli_epi16(bytes, 4), m15), 0xAA);
  const __m128i h =
      _mm_mullo_epi16(_mm_set1_epi16(int16_t(b.scales_h)),
                      _mm_setr_epi16(1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6, 1 << 4, 1 << 2, 1));
  const __m128i ls = _mm_or_si128(lo, _mm_slli_epi16(_mm_srli_epi16(h, 14), 4));
  const __m128i sc = _mm_sub_epi16(ls, _mm_set1_epi16(32));
#ifdef KVRUN_X86_VNNI
  return _mm256_cvtepi16_epi32(sc);  // int32 lane j
#else
  return _mm256_set_m128i(sc, sc);
#endif
}

/// Scale J of xs_scales16's vector in every lane: int16 without VNNI (the madd's multiplier),
/// int32 with it (the mullo's).
template <int J>
inline __m256i xs_scale_splat(__m256i sc) {
#ifdef KVRUN_X86_VNNI
  return _mm256_permutevar8x32_epi32(sc, _mm256_set1_epi32(J));
#else
  return _mm256_shuffle_epi8(sc, _mm256_set1_epi16(int16_t(0x0100 * (2 * J + 1) + 2 * J)));
#endif
}

/// 8 int32: sc · Σ of each 4 consecutive products a[e]·b[e] (signed bytes, |a|, |b| ≤ 127,
/// |sc| ≤ 32; sc in every lane as xs_scale_splat gives it). Without VNNI the pair sums are int16
/// (≤ 2·127·127) and the scale is applied by the int16 multiply-add, as q4_K's kernel does.
inline __m256i scaled_dot_ss(__m256i a, __m256i b, __m256i sc) {
#ifdef KVRUN_X86_VNNI
  return _mm256_mullo_epi32(dot_ss(a, b), sc);
#else
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
  return _mm256_madd_epi16(p, sc);
#endif
}

/// One sub-block J of iq4_xs_q8_K_tile: lane[c] += (ls_J − 32) · Σ of 4 level·q_x.
template <int J, int C>
inline void xs_sub_block(const block_iq4_xs& wb, __m256i table, __m256i sc16, const uint8_t* x,
                         size_t xs, int64_t b, __m256i* lane) {
  const __m256i v = levels_32(wb.qs + 16 * J, table);
  const __m256i sc = xs_scale_splat<J>(sc16);
  for (int c = 0; c < C; ++c) {
    const __m256i qx = load256(block_at<block_q8_K>(x, xs, c, b).qs + 32 * J);
    lane[c] = _mm256_add_epi32(lane[c], scaled_dot_ss(v, qx, sc));
  }
}

/// iq4_xs against q8_K: per super-block 8 int32 lanes Σ_j (ls_j − 32)·Σ of 4 level·q_x, then
/// lane = fma(d_x·d_w, lane, acc) (vec_dot_iq4_xs_q8_K's order).
template <int R, int C>
inline void iq4_xs_q8_K_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                             float* y, size_t ys) {
  const __m256i table = level_table(kvalues_iq4nl);
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    for (int r = 0; r < R; ++r) {
      const block_iq4_xs& wb = block_at<block_iq4_xs>(w, ws, r, b);
      const __m256i sc16 = xs_scales16(wb);
      __m256i lane[C];
      for (int c = 0; c < C; ++c) lane[c] = _mm256_setzero_si256();
      [&]<int... J>(std::integer_sequence<int, J...>) {  // sub-blocks 0..7, in order
        (xs_sub_block<J, C>(wb, table, sc16, x, xs, b, lane), ...);
      }
      (std::make_integer_sequence<int, 8>{});
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
