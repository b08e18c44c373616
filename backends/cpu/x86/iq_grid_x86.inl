// iq_grid_x86.inl — the x86 kernels of the grid-based i-quants against q8_K: iq3_s, iq2_s,
// iq3_xxs, iq2_xxs, iq2_xs, iq1_s and iq1_m (whose weights 8·grid ± 1 go through the same path
// as magnitudes and sign bits).
// Included by kernels_x86.inl inside its anonymous namespace, after iq_x86.inl (its helpers),
// so it is compiled once per x86 level. Per 32 values: the grid entries are placed side by side
// in a register (magnitudes ≤ 62, unsigned bytes), the 32 sign bits negate the matching q_x
// bytes (|q_x| ≤ 127, so negation is exact), and an unsigned × signed byte dot weighted by the
// integer scale factors 1 + 2·s gives int32 lanes. The super-block's integer sum is exact, as in
// the scalar references (vec_dot_iq.cpp), and the float step is theirs, so the results are
// bit-identical to them.

// The grids are read through plain pointers to the std::arrays' elements (each array is a
// standard-layout aggregate whose storage starts at its address): no library inline function is
// called from these kernels (kernels_x86.inl says why).
template <typename T, size_t N>
inline const T* grid_ptr(const std::array<T, N>& a) {
  return reinterpret_cast<const T*>(&a);
}

/// 32 bytes, byte e 0xFF when bit e of `bits` is set, else 0x00.
inline __m256i sign_bytes_32(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(bits)),
      _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll, 0x0101010101010101ll, 0));
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

/// The 32 sign bits of four 7-bit sign codes (bits 7l..7l+6 of `codes`) through kIqSigns.
inline uint32_t signs_of_codes(uint32_t codes) {
  const uint8_t* t = grid_ptr(kIqSigns);
  return uint32_t(t[codes & 127]) | uint32_t(t[(codes >> 7) & 127]) << 8 |
         uint32_t(t[(codes >> 14) & 127]) << 16 | uint32_t(t[(codes >> 21) & 127]) << 24;
}

/// 8 int32: Σ of each 4 consecutive products g[e]·s[e] (g unsigned ≤ 127 with every pair sum in
/// int16, s signed), times sc_lo in lanes 0..3 (bytes 0..15) and sc_hi in lanes 4..7.
inline __m256i scaled_dot_us2(__m256i g, __m256i s, int sc_lo, int sc_hi) {
#ifdef KVRUN_X86_VNNI
  return _mm256_mullo_epi32(dot_us(g, s),
                            _mm256_set_m128i(_mm_set1_epi32(sc_hi), _mm_set1_epi32(sc_lo)));
#else
  return _mm256_madd_epi16(
      _mm256_maddubs_epi16(g, s),
      _mm256_set_m128i(_mm_set1_epi16(int16_t(sc_hi)), _mm_set1_epi16(int16_t(sc_lo))));
#endif
}

/// One sub-block (32 values) of a grid i-quant: grid magnitudes, sign bits, and the odd scale
/// factors 1 + 2·s of its two halves of 16.
struct GridSub {
  __m256i g;
  uint32_t signs;
  int sc_lo, sc_hi;
};

/// iq3_s (vec_dot_iq3_s_q8_K): 8 quads of kIq3sGrid, sign bytes, one 4-bit scale per 32.
struct Iq3sX86 {
  using Block = block_iq3_s;
  static uint16_t dbits(const Block& b) { return b.d; }
  static GridSub sub(const Block& b, int j) {
    const uint32_t* grid = grid_ptr(kIq3sGrid);
    const uint8_t* qs = b.qs + 8 * j;
    const int h = b.qh[j];
    auto g = [&](int k) { return int(grid[qs[k] | (((h >> k) & 1) << 8)]); };
    const int sc = 1 + 2 * ((b.scales[j / 2] >> (4 * (j % 2))) & 0x0F);
    return {_mm256_set_epi32(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0)),
            load_u32(b.signs + 4 * j), sc, sc};
  }
};

/// iq2_s (vec_dot_iq2_s_q8_K): 4 groups of kIq2sGrid, sign bytes, 4-bit scales per 16.
struct Iq2sX86 {
  using Block = block_iq2_s;
  static uint16_t dbits(const Block& b) { return b.d; }
  static GridSub sub(const Block& b, int j) {
    const uint64_t* grid = grid_ptr(kIq2sGrid);
    const uint8_t* qs = b.qs + 4 * j;
    const int h = b.qh[j];
    auto g = [&](int l) { return int64_t(grid[qs[l] | (((h >> (2 * l)) & 3) << 8)]); };
    return {_mm256_set_epi64x(g(3), g(2), g(1), g(0)), load_u32(b.qs + QK_K / 8 + 4 * j),
            1 + 2 * (b.scales[j] & 0x0F), 1 + 2 * (b.scales[j] >> 4)};
  }
};

/// iq3_xxs (vec_dot_iq3_xxs_q8_K): 8 kIq3xxsGrid entries, 4 sign codes and one 4-bit scale in
/// the sub-block's uint32.
struct Iq3xxsX86 {
  using Block = block_iq3_xxs;
  static uint16_t dbits(const Block& b) { return b.d; }
  static GridSub sub(const Block& b, int j) {
    const uint32_t* grid = grid_ptr(kIq3xxsGrid);
    const uint8_t* qs = b.qs + 8 * j;
    auto g = [&](int k) { return int(grid[qs[k]]); };
    const uint32_t aux = load_u32(b.qs + QK_K / 4 + 4 * j);
    const int sc = int(1 + 2 * (aux >> 28));
    return {_mm256_set_epi32(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0)), signs_of_codes(aux),
            sc, sc};
  }
};

/// iq2_xxs (vec_dot_iq2_xxs_q8_K): 4 kIq2xxsGrid entries, then 4 sign codes and one 4-bit scale.
struct Iq2xxsX86 {
  using Block = block_iq2_xxs;
  static uint16_t dbits(const Block& b) { return b.d; }
  static GridSub sub(const Block& b, int j) {
    const uint64_t* grid = grid_ptr(kIq2xxsGrid);
    const auto* q = reinterpret_cast<const uint8_t*>(b.qs + 4 * j);
    const uint32_t aux = load_u32(q + 4);
    auto g = [&](int l) { return int64_t(grid[q[l]]); };
    const int sc = int(1 + 2 * (aux >> 28));
    return {_mm256_set_epi64x(g(3), g(2), g(1), g(0)), signs_of_codes(aux), sc, sc};
  }
};

/// iq2_xs (vec_dot_iq2_xs_q8_K): 4 uint16 of 9-bit kIq2xsGrid index and 7-bit sign code,
/// 4-bit scales per 16.
struct Iq2xsX86 {
  using Block = block_iq2_xs;
  static uint16_t dbits(const Block& b) { return b.d; }
  static GridSub sub(const Block& b, int j) {
    const uint64_t* grid = grid_ptr(kIq2xsGrid);
    const uint8_t* st = grid_ptr(kIqSigns);
    uint16_t q[4];
    std::memcpy(q, reinterpret_cast<const uint8_t*>(b.qs) + 8 * j, 8);
    auto g = [&](int l) { return int64_t(grid[q[l] & 511]); };
    const uint32_t signs = uint32_t(st[q[0] >> 9]) | uint32_t(st[q[1] >> 9]) << 8 |
                           uint32_t(st[q[2] >> 9]) << 16 | uint32_t(st[q[3] >> 9]) << 24;
    return {_mm256_set_epi64x(g(3), g(2), g(1), g(0)), signs, 1 + 2 * (b.scales[j] & 0x0F),
            1 + 2 * (b.scales[j] >> 4)};
  }
};

/// iq1_s / iq1_m: 32 int8 weights 8·grid + σ (grid −1, 0, 1 from kIq1sGrid at idx[0..3], σ = ±1
/// per 8 values from bit 3 of each shift nibble) as magnitudes and sign bits: |8·grid ± 1| ≤ 9.
inline GridSub iq1_sub(const int* idx, const int* sigma, int sc_lo, int sc_hi) {
  const uint64_t* grid = grid_ptr(kIq1sGrid);
  const __m256i g = _mm256_set_epi64x(int64_t(grid[idx[3]]), int64_t(grid[idx[2]]),
                                      int64_t(grid[idx[1]]), int64_t(grid[idx[0]]));
  auto sg = [&](int l) { return sigma[l] < 0 ? int64_t(-1) : int64_t(0x0101010101010101ll); };
  const __m256i v = _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), g),
                                    _mm256_set_epi64x(sg(3), sg(2), sg(1), sg(0)));
  return {_mm256_abs_epi8(v), uint32_t(_mm256_movemask_epi8(v)), sc_lo, sc_hi};
}

/// iq1_s (vec_dot_iq1_s_q8_K): 11-bit indices, one 3-bit scale and shift sign per 32.
struct Iq1sX86 {
  using Block = block_iq1_s;
  static uint16_t dbits(const Block& b) { return b.d; }
  static GridSub sub(const Block& b, int j) {
    const int qh = b.qh[j];
    int idx[4], sigma[4];
    for (int l = 0; l < 4; ++l) {
      idx[l] = b.qs[4 * j + l] | (((qh >> (3 * l)) & 7) << 8);
      sigma[l] = qh & 0x8000 ? -1 : 1;
    }
    const int sc = 1 + 2 * ((qh >> 12) & 7);
    return iq1_sub(idx, sigma, sc, sc);
  }
};

/// iq1_m (vec_dot_iq1_m_q8_K): d and 3-bit scales per 16 in the scale words, a shift sign per 8.
struct Iq1mX86 {
  using Block = block_iq1_m;
  static uint16_t dbits(const Block& b) {
    uint16_t sc[4];
    std::memcpy(sc, b.scales, 8);
    return uint16_t((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) |
                    (sc[3] & 0xF000));
  }
  static GridSub sub(const Block& b, int j) {
    int idx[4], sigma[4];
    for (int l = 0; l < 4; ++l) {
      const int nib = (b.qh[2 * j + l / 2] >> (4 * (l % 2))) & 15;
      idx[l] = b.qs[4 * j + l] | ((nib & 7) << 8);
      sigma[l] = nib & 8 ? -1 : 1;
    }
    uint16_t w;
    std::memcpy(&w, b.scales + 2 * (j / 2), 2);
    const int shift = 6 * (j % 2);
    return iq1_sub(idx, sigma, 1 + 2 * ((w >> shift) & 7), 1 + 2 * ((w >> (shift + 3)) & 7));
  }
};

/// The tile of a grid i-quant against q8_K (`T` one of the structs above). Per super-block and
/// activation column the int32 lanes Σ_j scale·dot are summed to isum, then
/// acc = fma(d_x·d_w, float(isum), acc); the outputs are acc · `factor` (the scalar's order).
template <typename T, int R, int C>
inline void iq_grid_q8_K_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                              float* y, size_t ys, float factor) {
  float acc[R][C] = {};
  for (int64_t b = 0; b < nb; ++b) {
    for (int r = 0; r < R; ++r) {
      const typename T::Block& wb = block_at<typename T::Block>(w, ws, r, b);
      __m256i lane[C];
      for (int c = 0; c < C; ++c) lane[c] = _mm256_setzero_si256();
      for (int j = 0; j < QK_K / 32; ++j) {
        const GridSub s = T::sub(wb, j);
        // −1 where the sign bit is set, +1 elsewhere: negates those q_x bytes (|q_x| ≤ 127).
        const __m256i sign1 = _mm256_or_si256(sign_bytes_32(s.signs), _mm256_set1_epi8(1));
        for (int c = 0; c < C; ++c) {
          const __m256i qx = load256(block_at<block_q8_K>(x, xs, c, b).qs + 32 * j);
          lane[c] = _mm256_add_epi32(
              lane[c], scaled_dot_us2(s.g, _mm256_sign_epi8(qx, sign1), s.sc_lo, s.sc_hi));
        }
      }
      const float dw = h2f(T::dbits(wb));
      for (int c = 0; c < C; ++c) {
        const float d = block_at<block_q8_K>(x, xs, c, b).d * dw;
        acc[r][c] = __builtin_fmaf(d, float(hsum_i32(lane[c])), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[size_t(c) * ys + size_t(r)] = acc[r][c] * factor;
}

template <int R, int C>
inline void iq3_s_q8_K_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                            float* y, size_t ys) {
  iq_grid_q8_K_tile<Iq3sX86, R, C>(nb, w, ws, x, xs, y, ys, 1.0f);
}

template <int R, int C>
inline void iq2_s_q8_K_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                            float* y, size_t ys) {
  iq_grid_q8_K_tile<Iq2sX86, R, C>(nb, w, ws, x, xs, y, ys, 0.125f);
}

template <int R, int C>
inline void iq3_xxs_q8_K_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                              float* y, size_t ys) {
  iq_grid_q8_K_tile<Iq3xxsX86, R, C>(nb, w, ws, x, xs, y, ys, 0.25f);
}

template <int R, int C>
inline void iq2_xxs_q8_K_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                              float* y, size_t ys) {
  iq_grid_q8_K_tile<Iq2xxsX86, R, C>(nb, w, ws, x, xs, y, ys, 0.125f);
}

template <int R, int C>
inline void iq2_xs_q8_K_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                             float* y, size_t ys) {
  iq_grid_q8_K_tile<Iq2xsX86, R, C>(nb, w, ws, x, xs, y, ys, 0.125f);
}

template <int R, int C>
inline void iq1_s_q8_K_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                            float* y, size_t ys) {
  iq_grid_q8_K_tile<Iq1sX86, R, C>(nb, w, ws, x, xs, y, ys, 0.125f);
}

template <int R, int C>
inline void iq1_m_q8_K_tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                            float* y, size_t ys) {
  iq_grid_q8_K_tile<Iq1mX86, R, C>(nb, w, ws, x, xs, y, ys, 0.125f);
}
