// iq_x86.inl — the x86 kernels of the non-linear 4-bit weights whose levels come from a 16-entry
// table: mxfp4 × q8_0 (the doubled E2M1 levels, blocks.h) and iq4_xs × q8_K (the iq4_nl levels).
// Included by kernels_x86.inl inside its anonymous namespace (its helpers, tile sizes and
// KVRUN_X86_DOT_AND_TILE), so it is compiled once per x86 level like the rest. The levels are
// looked up 32 at a time with a byte shuffle; the float steps are those of the scalar
// references (vec_dot_mxfp4_q8_0 in vec_dot_legacy.cpp, vec_dot_iq4_xs_q8_K in vec_dot_k.cpp),
// so the results are bit-identical to them.

// blocks.h's inline mxfp4_half_scale and iq4_xs_scale_code are not called here: an inline
// function emitted in both level's translation units may be kept by the linker in either
// instruction set (kernels_x86.inl). These are their internal-linkage forms.

/// 2^(e − 128) (blocks.h mxfp4_half_scale).
inline float half_scale_e8m0(uint8_t e) {
  const uint32_t bits = e >= 2 ? uint32_t(e - 1) << 23 : (0x00200000u << e);
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(int(bits))));
}

/// The 6-bit scale code of sub-block j of an iq4_xs super-block (blocks.h iq4_xs_scale_code).
inline int xs_scale_code(const block_iq4_xs& b, int j) {
  return ((b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0F) | (((b.scales_h >> (2 * j)) & 3) << 4);
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

/// 8 int32: sc · Σ of each 4 consecutive products a[e]·b[e] (signed bytes, |a|, |b| ≤ 127,
/// |sc| ≤ 32). Without VNNI the pair sums are int16 (≤ 2·127·127) and the scale is applied by
/// the int16 multiply-add, as q4_K's kernel does.
inline __m256i scaled_dot_ss(__m256i a, __m256i b, int sc) {
#ifdef KVRUN_X86_VNNI
  return _mm256_mullo_epi32(dot_ss(a, b), _mm256_set1_epi32(sc));
#else
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(int16_t(sc)));
#endif
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
      __m256i lane[C];
      for (int c = 0; c < C; ++c) lane[c] = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        const __m256i v = levels_32(wb.qs + 16 * j, table);
        const int sc = xs_scale_code(wb, j) - 32;
        for (int c = 0; c < C; ++c) {
          const __m256i qx = load256(block_at<block_q8_K>(x, xs, c, b).qs + 32 * j);
          lane[c] = _mm256_add_epi32(lane[c], scaled_dot_ss(v, qx, sc));
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
