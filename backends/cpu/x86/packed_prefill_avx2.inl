// packed_prefill_avx2.inl — the avx2 prefill (two activation rows or more; q4_K, q5_K, q6_K
// four or more) of packed q8_0, q4_K, q5_K and q6_K weights (pack.h layouts): the machinery both
// summation orders share and the exact order's kernels (the default; packed_fast_avx2.inl has
// the fast order's). Included by packed_x86.inl after packed_avx2.inl and packed_q5k_avx2.inl
// (their scale and value unpacking, and the decode forms that fewer rows take) inside namespace
// kvrun::cpu::KVRUN_SIMD_NS when the level has no VNNI. Same rules as kernels_x86.inl.
//
// The activation rows are taken in chunks that stay in L2 while every group of the call passes
// over them (prefill_walk), and a chunk's quants are interleaved by 8 rows, so one base
// register addresses the broadcasts of 8 activation rows. For the K-quants each group half is
// also unpacked once per chunk into a per-thread scratch (kquant_walk: the values as bytes, the
// scales and min or offset pairs as VPMADDWD multipliers): q5_K's fifth bit and q6_K's split
// bits are put together once per group half and chunk rather than once per pass of activation
// rows, and the inner loops are a broadcast, VPMADDUBSW, an add or VPMADDWD per 4 values, 8
// weight rows and activation row.
//
// The exact kernels give the floats of vec_dot_q8_0_q8_0 / vec_dot_q4_K_q8_K /
// vec_dot_q5_K_q8_K / vec_dot_q6_K_q8_K (vec_dot_legacy.cpp, vec_dot_k.cpp) bit for bit: per
// (super-)block and row the 8 lanes (lane i: values 4i..4i+3 of each 32-value block; K-quants:
// Σ_j sc_j · Σ of values 4i..4i+3 of sub-block j times x, q6_K's lane 4h + i over the sub-blocks
// j ≡ h mod 2), lane = fma(d_x·d_w, float(lane), lane) and fold8 at the end, the min or offset
// terms as there. The lanes run one at a time, each weight vector serving C activation rows.
#ifndef KVRUN_SIMD_NS
#error "included by kernels_x86.inl only"
#endif

namespace {

/// Activation bytes of one column chunk of the avx2 prefill kernels: the chunk's rows stay in L2
/// (512 KiB and up) while every group of the call passes over them.
constexpr size_t kPrefillChunkBytes = 128 * 1024;

/// Runs `half_fn(C, g, gi, half, j, j0)` for every group gi of `ngroups` (g: group_bytes apart
/// from wp), both halves, and the activation rows [0, nx) in chunks [j0, j1) of about
/// kPrefillChunkBytes (xs bytes per row), C rows j at a time and then the rest of a chunk 4 (when
/// C > 4), 3, 2 or 1 at a time. `chunk_fn(j0, j1)` runs before each chunk, `prep_fn(g, half)`
/// before each group half's rows of a chunk.
template <int C, typename ChunkFn, typename PrepFn, typename HalfFn>
inline void prefill_walk(const void* wp, size_t group_bytes, int64_t ngroups, size_t xs, int64_t nx,
                         ChunkFn&& chunk_fn, PrepFn&& prep_fn, HalfFn&& half_fn) {
  const int64_t chunk = std::max<int64_t>(C, int64_t(kPrefillChunkBytes / xs) / C * C);
  for (int64_t j0 = 0; j0 < nx; j0 += chunk) {
    const int64_t j1 = std::min(nx, j0 + chunk);
    chunk_fn(j0, j1);
    for (int64_t gi = 0; gi < ngroups; ++gi) {
      const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * group_bytes;
      for (int half = 0; half < 2; ++half) {
        prep_fn(g, half);
        const auto run = [&](auto cc, int64_t j) { half_fn(cc, g, gi, half, j, j0); };
        int64_t j = j0;
        for (; j + C <= j1; j += C) run(std::integral_constant<int, C>{}, j);
        if constexpr (C > 4)
          for (; j + 4 <= j1; j += 4) run(std::integral_constant<int, 4>{}, j);
        switch (j1 - j) {
          case 3:
            run(std::integral_constant<int, 3>{}, j);
            break;
          case 2:
            run(std::integral_constant<int, 2>{}, j);
            break;
          case 1:
            run(std::integral_constant<int, 1>{}, j);
            break;
          default:
            break;
        }
      }
    }
  }
}

/// prefill_walk without the hooks: `half_fn(C, g, gi, half, j)`.
template <int C, typename HalfFn>
inline void prefill_walk(const void* wp, size_t group_bytes, int64_t ngroups, size_t xs, int64_t nx,
                         HalfFn&& half_fn) {
  prefill_walk<C>(
      wp, group_bytes, ngroups, xs, nx, [](int64_t, int64_t) {}, [](const uint8_t*, int) {},
      [&](auto cc, const uint8_t* g, int64_t gi, int half, int64_t j, int64_t) {
        half_fn(cc, g, gi, half, j);
      });
}

/// 32 aligned bytes: the unit of the K-quant kernels' per-thread scratch (a type of this
/// translation unit's own, so its std::vector is not shared with the other level's; see
/// kernels_x86.inl).
struct alignas(32) Lane32 {
  uint8_t b[32];
};

inline __m256i load_lane(const Lane32& l) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(l.b));
}
inline void store_lane(Lane32& l, __m256i v) {
  _mm256_store_si256(reinterpret_cast<__m256i*>(l.b), v);
}

/// The unpacked half super-block of q4_K and q5_K (rows 8·half .. 8·half+7), in Lane32 units:
/// [0, 64) the values of sub-block j, 4i .. 4i+3 of each row at unit 8j + i (bytes 0..15, q5_K
/// 0..31); [64, 72) sc_j per row in both int16 halves; [72, 76) the min pairs (m_2k low, m_2k+1
/// high int16); 76 d_w, 77 dmin_w as floats.
constexpr int kQ4KUnits = 78;

/// Unpacks rows 8·half .. 8·half+7 of the packed q4_K (kQ5: q5_K) super-block at g into u.
template <bool kQ5>
inline void unpack_q4_K_half(const uint8_t* g, int half, Lane32* u) {
  const __m256i m15 = _mm256_set1_epi8(0x0F), m16 = _mm256_set1_epi8(0x10);
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 8; ++i) {
      __m256i v = load256(g + 256 + 64 * (8 * (j / 2) + i) + 32 * half);
      if (j % 2 == 1) v = _mm256_srli_epi16(v, 4);
      v = _mm256_and_si256(v, m15);
      if constexpr (kQ5) {  // bit j of the high-bit chunk's bytes is sub-block j's fifth
        const __m256i hb = load256(g + 2304 + 64 * i + 32 * half);
        const __m256i sh = j < 4 ? _mm256_sll_epi16(hb, _mm_cvtsi32_si128(4 - j))
                                 : _mm256_srl_epi16(hb, _mm_cvtsi32_si128(j - 4));
        v = _mm256_or_si256(v, _mm256_and_si256(sh, m16));
      }
      store_lane(u[8 * j + i], v);
    }
  alignas(32) __m256i sc[8], mn[8];
  q4_K_half_scales(g, half, sc, mn);
  for (int j = 0; j < 8; ++j) store_lane(u[64 + j], sc[j]);
  for (int k = 0; k < 4; ++k)
    store_lane(u[72 + k], _mm256_blend_epi16(mn[2 * k], mn[2 * k + 1], 0xAA));
  _mm256_store_ps(
      reinterpret_cast<float*>(u[76].b),
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * half))));
  _mm256_store_ps(
      reinterpret_cast<float*>(u[77].b),
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 32 + 16 * half))));
}

/// q8_K's bsums of one block as the int16 pairs of the q4_K min term: pair k = (bsum_4k +
/// bsum_4k+1) | (bsum_4k+2 + bsum_4k+3) << 16 (sub-blocks 2k, 2k + 1; each ≤ 4064 in magnitude).
inline void q4_K_bsum_pairs(const block_q8_K& xb, int32_t* out) {
  for (int k = 0; k < 4; ++k) {
    const int s0 = xb.bsums[4 * k] + xb.bsums[4 * k + 1];
    const int s1 = xb.bsums[4 * k + 2] + xb.bsums[4 * k + 3];
    out[k] = int32_t((uint32_t(s0) & 0xFFFF) | (uint32_t(s1) << 16));
  }
}

/// The unpacked half super-block of q6_K (rows 8·half .. 8·half+7), in Lane32 units (both
/// orders; unpack_q6_K_half).
constexpr int kQ6KUnits = 89;

/// Unpacks rows 8·half .. 8·half+7 of the packed q6_K super-block at g into u (both orders):
/// [0, 64) the signed values q of sub-block j (16 values), 4i .. 4i+3 of each row at unit 4j + i,
/// [64, 80) sc_j in both int16 halves, [80, 88) lane l = 4h + i's offset −128·Σ_j sc_j·Q_j,i per
/// row (Q_j,i the sum of the 4 values 4i..4i+3 of sub-block j, j = 2·j2 + h; |Q| ≤ 128), 88 d_w.
/// With the activations as x + 128 (unsigned) Σ q·x = Σ q·(x + 128) − 128·Q, so a lane starts from
/// its offset.
inline void unpack_q6_K_half(const uint8_t* g, int half, Lane32* u) {
  const __m256i m32 = _mm256_set1_epi8(32), ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256i off[8];
  for (int l = 0; l < 8; ++l) off[l] = _mm256_setzero_si256();
  for (int j = 0; j < 16; ++j) {
    const __m256i sc_lo = q6_K_half_scales(g, j, half);  // sc in the low int16 half, 0 above
    for (int i = 0; i < 4; ++i) {
      const __m256i q = _mm256_sub_epi8(q6_K_half_values(g + 288 + 192 * j + 32 * half, i), m32);
      store_lane(u[4 * j + i], q);
      const __m256i sum4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
      off[4 * (j % 2) + i] = _mm256_add_epi32(off[4 * (j % 2) + i], _mm256_madd_epi16(sum4, sc_lo));
    }
    store_lane(u[64 + j], q6_K_half_scales_both(g, j, half));
  }
  for (int l = 0; l < 8; ++l)
    store_lane(u[80 + l], _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off[l], 7)));
  _mm256_store_ps(
      reinterpret_cast<float*>(u[88].b),
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * half))));
}

/// Per-thread scratch of the K-quant kernels: a group half's unpacked super-blocks, the pairs of
/// a chunk's activation rows, and (kX8) their quants interleaved by 8 rows. Grown on demand and
/// kept.
thread_local std::vector<Lane32> tl_unpacked, tl_x8;
thread_local std::vector<int32_t> tl_bsum_pairs;

/// How kquant_walk hands the activation quants to the kernels besides the q8_K rows: not at
/// all, or interleaved by 8 rows (per 8-row group and super-block, quad p of row slot r at byte
/// 32·p + 4·r of a 2 KiB block), as they are or + 128 (unsigned).
enum class X8 { none, plain, plus128 };

/// The chunk's activation rows j0 .. j1 − 1 (Block: block_q8_K or block_q8_0, xs bytes apart, nb
/// blocks each) interleaved by 8 rows into tl_x8 (X8 layout, Block's quads per block: 64 for
/// q8_K, 8 for q8_0; slots past j1 left as they were).
template <typename Block>
inline void interleave_x8(const uint8_t* xb, size_t xs, int64_t nb, int64_t j0, int64_t j1,
                          bool plus128) {
  constexpr int kQuads = int(sizeof(Block::qs)) / 4;
  const int64_t ng = (j1 - j0 + 7) / 8;
  if (tl_x8.size() < size_t(ng * nb * kQuads)) tl_x8.resize(size_t(ng * nb * kQuads));
  const uint32_t flip = plus128 ? 0x80808080u : 0;
  for (int64_t j = j0; j < j1; ++j) {
    const int64_t g = (j - j0) / 8, r = (j - j0) % 8;
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* q = block_at<Block>(xb + size_t(j) * xs, 0, 0, b).qs;
      Lane32* out = &tl_x8[size_t((g * nb + b) * kQuads)];
      for (int p = 0; p < kQuads; ++p) {
        uint32_t v;
        std::memcpy(&v, q + 4 * p, 4);
        v ^= flip;
        std::memcpy(out[p].b + 4 * r, &v, 4);
      }
    }
  }
}

/// The interleaved quads (tl_x8, X8 layout) of activation row r of a chunk, at its slot's bytes;
/// quads: the Block's quads per block times nb.
inline const uint8_t* x8_row(int64_t r, int64_t quads) {
  return tl_x8[size_t(r / 8 * quads)].b + 4 * (r % 8);
}

/// The K-quant prefill (both orders): for each activation chunk (prefill_walk) the rows'
/// pairs (kPairs int32 per super-block, pairs_fn) and, unless kX8 is none, their interleaved
/// quads; then for each group half its nb super-blocks unpacked once (kUnits Lane32 each,
/// unpack_fn) and run against the chunk's rows C at a time: half_fn(C, unpacked, x row, pairs
/// row, interleaved quads of the row (its slot's bytes; nullptr without kX8), y row).
template <int C, int kUnits, int kPairs, X8 kX8, typename UnpackFn, typename PairsFn,
          typename HalfFn>
inline void kquant_walk(int64_t n, size_t sb_bytes, const void* wp, int64_t ngroups, const void* x,
                        size_t xs, int64_t nx, float* y, size_t ys, UnpackFn&& unpack_fn,
                        PairsFn&& pairs_fn, HalfFn&& half_fn) {
  static_assert(kX8 == X8::none || C <= 8, "8 interleaved rows per group");
  const int64_t nb = n / QK_K;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  if (tl_unpacked.size() < size_t(nb * kUnits)) tl_unpacked.resize(size_t(nb * kUnits));
  Lane32* wu = tl_unpacked.data();
  prefill_walk<C>(
      wp, size_t(nb) * sb_bytes, ngroups, xs, nx,
      [&](int64_t j0, int64_t j1) {
        const size_t need = size_t((j1 - j0) * nb * kPairs);
        if (tl_bsum_pairs.size() < need) tl_bsum_pairs.resize(need);
        if constexpr (kPairs > 0)
          for (int64_t j = j0; j < j1; ++j)
            for (int64_t b = 0; b < nb; ++b)
              pairs_fn(block_at<block_q8_K>(xb + size_t(j) * xs, 0, 0, b),
                       &tl_bsum_pairs[size_t(((j - j0) * nb + b) * kPairs)]);
        if constexpr (kX8 != X8::none)
          interleave_x8<block_q8_K>(xb, xs, nb, j0, j1, kX8 == X8::plus128);
      },
      [&](const uint8_t* g, int half) {
        for (int64_t b = 0; b < nb; ++b) unpack_fn(g + size_t(b) * sb_bytes, half, wu + b * kUnits);
      },
      [&](auto cc, const uint8_t* /*g*/, int64_t gi, int half, int64_t j, int64_t j0) {
        const uint8_t* xi = nullptr;
        if constexpr (kX8 != X8::none) xi = x8_row(j - j0, nb * 64);
        half_fn(cc, wu, xb + size_t(j) * xs, tl_bsum_pairs.data() + (j - j0) * nb * kPairs, xi,
                y + gi * 16 + 8 * half + size_t(j) * ys);
      });
}

/// Activation rows per pass of the exact K-quant kernels (C integer lane sums live; the float
/// lanes are touched once per lane and super-block), and the fewest rows worth unpacking a group
/// for (fewer run the decode forms, one row at a time).
constexpr int kExactKC = 8, kExactKMinRows = 4;

/// Rows 8·half .. 8·half+7 of one q4_K (kQ5: q5_K) group, unpacked by unpack_q4_K_half (nb half
/// super-blocks of kQ4KUnits at wu), against C q8_K activation rows (xs bytes apart; their
/// q4_K_bsum_pairs at xp, 4·nb int32 per row; their quants interleaved by 8 rows at xi, X8::plain):
/// y[c·ys + r] in vec_dot_q4_K_q8_K's order (q5_K: vec_dot_q5_K_q8_K's). Per super-block the min
/// terms from the bsum pairs (q4_K: 4 float lanes, lane k += fma(−d_x·d_min, float(m_2k·Σx(2k) +
/// m_2k+1·Σx(2k+1)), lane); q5_K: one sum, summs + (−d_x·d_min)·float(Σ_j m_j·Σx(j)), a multiply
/// and an add), then lane i of the 8 main lanes: Σ_j VPMADDWD(VPMADDUBSW(values 4i..4i+3 of
/// sub-block j, x), sc_j) (pair sums ≤ 2·31·128, int16), lane = fma(d_w·d_x, float(Σ), lane).
template <int C, bool kQ5>
inline void exact_q4_K_half(int64_t nb, const Lane32* wu, const uint8_t* x, size_t xs,
                            const int32_t* xp, const uint8_t* xi, float* y, size_t ys) {
  constexpr int kMinLanes = kQ5 ? 1 : 4;
  __m256 acc[C][8], acc_m[C][kMinLanes];
  for (int c = 0; c < C; ++c) {
    for (int l = 0; l < 8; ++l) acc[c][l] = _mm256_setzero_ps();
    for (int k = 0; k < kMinLanes; ++k) acc_m[c][k] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b, wu += kQ4KUnits, xi += 2048) {
    const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(wu[76].b));
    const __m256 dminw = _mm256_load_ps(reinterpret_cast<const float*>(wu[77].b));
    __m256 d[C];
    for (int c = 0; c < C; ++c) {
      const float dx = block_at<block_q8_K>(x, xs, c, b).d;
      d[c] = _mm256_mul_ps(dw, _mm256_set1_ps(dx));
      const __m256 dmin = _mm256_mul_ps(dminw, _mm256_set1_ps(-dx));  // the scalar −x.d · dmin
      const int32_t* pr = xp + size_t(c) * size_t(4 * nb) + size_t(4 * b);
      if constexpr (kQ5) {
        __m256i ms = _mm256_setzero_si256();
        for (int k = 0; k < 4; ++k)
          ms = _mm256_add_epi32(ms,
                                _mm256_madd_epi16(load_lane(wu[72 + k]), _mm256_set1_epi32(pr[k])));
        acc_m[c][0] = _mm256_add_ps(acc_m[c][0], _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(ms)));
      } else {
        for (int k = 0; k < 4; ++k)
          acc_m[c][k] = _mm256_fmadd_ps(dmin,
                                        _mm256_cvtepi32_ps(_mm256_madd_epi16(
                                            load_lane(wu[72 + k]), _mm256_set1_epi32(pr[k]))),
                                        acc_m[c][k]);
      }
    }
    for (int i = 0; i < 8; ++i) {
      __m256i lane[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) lane[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const __m256i v = load_lane(wu[8 * j + i]), sc = load_lane(wu[64 + j]);
        const uint8_t* quad = xi + 32 * (8 * j + i);  // quants 32j + 4i .. +3 of each row
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m256i xv = _mm256_broadcastd_epi32(_mm_loadu_si32(quad + 4 * c));
          lane[c] = _mm256_add_epi32(lane[c], _mm256_madd_epi16(_mm256_maddubs_epi16(v, xv), sc));
          asm("" : "+x"(lane[c]));  // keeps the chain (reassociated, every product is live: spills)
        }
      }
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c)
        acc[c][i] = _mm256_fmadd_ps(d[c], _mm256_cvtepi32_ps(lane[c]), acc[c][i]);
    }
  }
  for (int c = 0; c < C; ++c) {
    const __m256 r =
        kQ5 ? q5_K_half_result(acc[c], acc_m[c][0]) : q4_K_half_result(acc[c], acc_m[c]);
    _mm256_storeu_ps(y + size_t(c) * ys, r);
  }
}

/// Rows 8·half .. 8·half+7 of one q6_K group, unpacked by unpack_q6_K_half (nb half
/// super-blocks of kQ6KUnits at wu), against C q8_K activation rows (xs bytes apart; their quants
/// + 128 interleaved by 8 rows at xi, X8::plus128): y[c·ys + r] in vec_dot_q6_K_q8_K's order.
/// Lane l = 4h + i of a super-block, Σ_j sc_j·Σ q·x over values 4i..4i+3 of the sub-blocks
/// j = 2·j2 + h, is the lane's offset plus Σ_j VPMADDWD(VPMADDUBSW(x + 128, q), sc_j) (pair sums
/// ≤ 2·255·32, int16): the same integer. Then lane = fma(d_w·d_x, float(lane), lane), fold8 at
/// the end.
template <int C>
inline void exact_q6_K_half(int64_t nb, const Lane32* wu, const uint8_t* x, size_t xs,
                            const uint8_t* xi, float* y, size_t ys) {
  __m256 acc[C][8];
  for (int c = 0; c < C; ++c)
    for (int l = 0; l < 8; ++l) acc[c][l] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, wu += kQ6KUnits, xi += 2048) {
    const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(wu[88].b));
    __m256 d[C];
    for (int c = 0; c < C; ++c)
      d[c] = _mm256_mul_ps(dw, _mm256_set1_ps(block_at<block_q8_K>(x, xs, c, b).d));
    for (int l = 0; l < 8; ++l) {
      const int h = l / 4, i = l % 4;
      __m256i lane[C];
      const __m256i off = load_lane(wu[80 + l]);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) lane[c] = off;
#pragma GCC unroll 8
      for (int j2 = 0; j2 < 8; ++j2) {
        const int j = 2 * j2 + h;
        const __m256i q = load_lane(wu[4 * j + i]), sc = load_lane(wu[64 + j]);
        const uint8_t* quad = xi + 32 * (4 * j + i);  // quants 16j + 4i .. +3 of each row
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m256i xv = _mm256_broadcastd_epi32(_mm_loadu_si32(quad + 4 * c));
          lane[c] = _mm256_add_epi32(lane[c], _mm256_madd_epi16(_mm256_maddubs_epi16(xv, q), sc));
          asm("" : "+x"(lane[c]));  // as in exact_q4_K_half
        }
      }
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c)
        acc[c][l] = _mm256_fmadd_ps(d[c], _mm256_cvtepi32_ps(lane[c]), acc[c][l]);
    }
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + size_t(c) * ys, fold8_lanes(acc[c]));
}

/// Rows 8·half .. 8·half+7 of one packed q8_0 group (nb blocks of 544 bytes from g: 16 f16 scales,
/// then chunk i: quants 4i..4i+3 of the 16 rows, stored q + 128) against C q8_0 activation rows,
/// their quants interleaved by 8 rows at xi (X8::plain, 256 bytes per block) and d_w·d_x per
/// block and row at d (nb·C float vectors): y[c·ys + r] in vec_dot_q8_0_q8_0's order (lane i:
/// fma(d_w·d_x, float(Σ of the 4 products 4i..4i+3), lane) per block, fold8 at the end). Each
/// chunk is flipped back to signed q and multiplied by the sign trick (pair sums ≤ 2·128·127,
/// exact), as q8_0_half_block; the lanes run one at a time over the blocks, each weight chunk
/// serving C activation rows.
template <int C>
inline void exact_q8_0_half(int64_t nb, const uint8_t* g, int half, const uint8_t* xi,
                            const Lane32* d, float* y, size_t ys) {
  const __m256i flip = _mm256_set1_epi8(char(0x80)), ones = _mm256_set1_epi16(1);
  __m256 lanes[C][8];
  for (int i = 0; i < 8; ++i) {
    __m256 acc[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
    const uint8_t* gb = g + 32 + 64 * i + 32 * half;
    const uint8_t* quad = xi + 32 * i;
    const float* db = reinterpret_cast<const float*>(d);
    for (int64_t b = 0; b < nb; ++b, gb += 544, quad += 256, db += 8 * C) {
      const __m256i w = _mm256_xor_si256(load256(gb), flip);
      const __m256i aw = _mm256_sign_epi8(w, w);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m256i xv = _mm256_broadcastd_epi32(_mm_loadu_si32(quad + 4 * c));
        const __m256i p =
            _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, w)), ones);
        acc[c] = _mm256_fmadd_ps(_mm256_load_ps(db + 8 * c), _mm256_cvtepi32_ps(p), acc[c]);
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) lanes[c][i] = acc[c];
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + size_t(c) * ys, fold8_lanes(lanes[c]));
}

/// Activation rows per pass of exact_q8_0_half.
constexpr int kQ8ExactC = 8;

/// Per-thread table of d_w·d_x for exact_q8_0_half (nb·C float vectors, grown on demand).
thread_local std::vector<Lane32> tl_q8_0_d;

}  // namespace

namespace {

/// The exact packed q4_K (kQ5: q5_K) kernel of the avx2 level: kquant_walk and exact_q4_K_half
/// for kExactKMinRows activation rows or more, else the decode form a row at a time.
template <bool kQ5>
void exact_q4_K_rows(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                     int64_t nx, float* y, size_t ys) {
  constexpr size_t kSbBytes = kQ5 ? 2816 : 2304;
  const int64_t nb = n / QK_K;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  if (nx < kExactKMinRows) {
    for (int64_t gi = 0; gi < ngroups; ++gi)
      for (int64_t j = 0; j < nx; ++j) {
        const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi * nb) * kSbBytes;
        float* yr = y + gi * 16 + size_t(j) * ys;
        if constexpr (kQ5)
          packed_q5_K_group_decode(nb, g, xb + size_t(j) * xs, yr);
        else
          packed_q4_K_group_decode(nb, g, xb + size_t(j) * xs, yr);
      }
    return;
  }
  kquant_walk<kExactKC, kQ4KUnits, 4, X8::plain>(
      n, kSbBytes, wp, ngroups, x, xs, nx, y, ys, unpack_q4_K_half<kQ5>, q4_K_bsum_pairs,
      [&](auto cc, const Lane32* wu, const uint8_t* xr, const int32_t* xp, const uint8_t* xi,
          float* yr) {
        exact_q4_K_half<decltype(cc)::value, kQ5>(nb, wu, xr, xs, xp, xi, yr, ys);
      });
}

}  // namespace

// The avx2 level's exact packed K-quant kernels (the avx512 level runs q5_K's prefill through
// this one too): kquant_walk for kExactKMinRows activation rows or more, else the decode forms a
// row at a time. xoff is not used.
void packed_q4_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  exact_q4_K_rows<false>(n, wp, ngroups, x, xs, nx, y, ys);
}

void packed_q5_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  exact_q4_K_rows<true>(n, wp, ngroups, x, xs, nx, y, ys);
}

void packed_q6_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / QK_K;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  if (nx < kExactKMinRows) {
    for (int64_t gi = 0; gi < ngroups; ++gi)
      for (int64_t j = 0; j < nx; ++j)
        for (int half = 0; half < 2; ++half)
          packed_q6_K_half_decode(nb, static_cast<const uint8_t*>(wp) + size_t(gi * nb) * 3360,
                                  half, xb + size_t(j) * xs, y + gi * 16 + size_t(j) * ys);
    return;
  }
  kquant_walk<kExactKC, kQ6KUnits, 0, X8::plus128>(
      n, 3360, wp, ngroups, x, xs, nx, y, ys, unpack_q6_K_half, [](const block_q8_K&, int32_t*) {},
      [&](auto cc, const Lane32* wu, const uint8_t* xr, const int32_t*, const uint8_t* xi,
          float* yr) { exact_q6_K_half<decltype(cc)::value>(nb, wu, xr, xs, xi, yr, ys); });
}

// The avx2 level's packed q8_0 kernel (without VNNI; xoff is not needed, the weights are flipped
// back to signed bytes): one activation row in one pass (packed_q8_0_group_decode), more through
// prefill_walk, 8 rows of an activation chunk at a time (exact_q8_0_half; the chunk's quants
// interleaved by 8 rows, d_w·d_x tabled per pass).
void packed_q8_0_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t* /*xoff*/, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / 32;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  if (nx == 1) {
    for (int64_t gi = 0; gi < ngroups; ++gi)
      packed_q8_0_group_decode(nb, static_cast<const uint8_t*>(wp) + size_t(gi * nb) * 544, xb,
                               y + gi * 16);
    return;
  }
  if (tl_q8_0_d.size() < size_t(nb * 8)) tl_q8_0_d.resize(size_t(nb * 8));
  prefill_walk<kQ8ExactC>(
      wp, size_t(nb) * 544, ngroups, xs, nx,
      [&](int64_t j0, int64_t j1) { interleave_x8<block_q8_0>(xb, xs, nb, j0, j1, false); },
      [](const uint8_t*, int) {},
      [&](auto cc, const uint8_t* g, int64_t gi, int half, int64_t j, int64_t j0) {
        constexpr int kC = decltype(cc)::value;
        float* d = reinterpret_cast<float*>(tl_q8_0_d.data());
        for (int64_t b = 0; b < nb; ++b) {
          const __m256 dw = _mm256_cvtph_ps(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + size_t(b) * 544 + 16 * half)));
          for (int c = 0; c < kC; ++c)
            _mm256_store_ps(
                d + 8 * (b * kC + c),
                _mm256_mul_ps(dw, _mm256_set1_ps(
                                      h2f(block_at<block_q8_0>(xb + size_t(j) * xs, xs, c, b).d))));
        }
        const uint8_t* xi = x8_row(j - j0, nb * 8);
        exact_q8_0_half<kC>(nb, g, half, xi, tl_q8_0_d.data(),
                            y + gi * 16 + 8 * half + size_t(j) * ys, ys);
      });
}
