// packed_avx2.inl — the packed-weight kernels (pack.h layouts) of the avx2 level: q8_0, q4_K and
// q6_K. Included by kernels_x86.inl inside namespace kvrun::cpu::KVRUN_SIMD_NS when the level has
// no VNNI (the avx512 level has its own forms there; packed q4_0 is shared). Same rules as
// kernels_x86.inl: every kernel gives the floats of its scalar reference bit for bit.
//
// Common shape: 8 rows (one ymm of int32 / float lanes, a row per lane) of a 16-row group per
// pass, "half" 0 or 1; the scalar code's 8 float lanes per row are 8 ymm accumulators, so a
// whole group (16) would not fit the 16 ymm registers. The prefill forms make two passes over a
// group's blocks, the second finding them in cache. The decode forms of q8_0 and q4_K make one
// pass, both halves of each block back to back (the accumulators of the other half spill to L1,
// which costs less than leaving memory idle during a second pass); q6_K's decode form keeps two
// passes and spreads its prefetches over both (kPrefetchAheadL2).
#ifndef KVRUN_SIMD_NS
#error "included by kernels_x86.inl only"
#endif

namespace {

/// One q8_0 block of the avx2 form of packed_q8_0_group: rows 8·half .. 8·half+7 of the packed
/// q8_0 block at `g` (pack.h, 544 bytes) against the activation block xb, added to the 8 float
/// lanes acc[0..7] (a row per ymm lane). Same order as q8_0_q8_0_tile, lane by lane: lane i holds
/// elements 4i..4i+3 of each block, lane = fma(d_w·d_x, Σ, lane). Without VNNI the stored q + 128
/// would overflow VPMADDUBSW's int16 pair sums, so each 32-byte half-chunk is flipped back to
/// signed q (XOR 0x80) and multiplied by the sign trick (|q| times x with q's sign): pair sums ≤
/// 2·128·127, exact.
inline void q8_0_half_block(const uint8_t* g, int half, const block_q8_0& xb, __m256* acc) {
  const __m256i flip = _mm256_set1_epi8(char(0x80)), ones = _mm256_set1_epi16(1);
  const __m256 dw =
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * half)));
  const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(h2f(xb.d)));
  for (int i = 0; i < 8; ++i) {
    const __m256i w = _mm256_xor_si256(load256(g + 32 + 64 * i + 32 * half), flip);
    const __m256i xv = _mm256_broadcastd_epi32(_mm_loadu_si32(xb.qs + 4 * i));
    const __m256i p = _mm256_madd_epi16(
        _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w)), ones);
    acc[i] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[i]);
  }
}

/// fold8 of the 8 float lanes of a half, per row: (v0+v4 + v2+v6) + (v1+v5 + v3+v7) (the scalar
/// kernels' fold of their 8 lanes); used by every avx2 packed kernel here and in
/// packed_q5k_avx2.inl.
inline __m256 fold8_lanes(const __m256* acc) {
  __m256 t[4];
  for (int i = 0; i < 4; ++i) t[i] = _mm256_add_ps(acc[i + 4], acc[i]);
  return _mm256_add_ps(_mm256_add_ps(t[0], t[2]), _mm256_add_ps(t[1], t[3]));
}

/// The decode form: the 16 rows of one packed q8_0 group against one activation row x: y[0..15],
/// one pass over the blocks, both halves of each back to back, prefetched kPrefetchAhead ahead
/// (the pass per half it replaces left memory idle during the second: llama3.2-1b Q8_0 tg64
/// 1.17×, KVRUN_CPU=avx2, interleaved A/B, docs/benchmarks.md). The prefill form is
/// exact_q8_0_half (packed_prefill_avx2.inl), with the same floats.
inline void packed_q8_0_group_decode(int64_t nb, const uint8_t* g, const uint8_t* x, float* y) {
  __m256 acc[2][8];
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 8; ++i) acc[h][i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, g += 544) {
    for (int l = 0; l < 544; l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(g) + kPrefetchAhead + l, _MM_HINT_T0);
    const block_q8_0& xb = block_at<block_q8_0>(x, 0, 0, b);
    q8_0_half_block(g, 0, xb, acc[0]);
    q8_0_half_block(g, 1, xb, acc[1]);
  }
  for (int h = 0; h < 2; ++h) _mm256_storeu_ps(y + 8 * h, fold8_lanes(acc[h]));
}

/// The 16-value sub-block j's scales of rows 8·half .. 8·half+7 of a packed q6_K super-block
/// (pack.h layout), each int32 lane holding its scale as int16 in the low half and 0 in the
/// high half (VPMADDWD by it multiplies an int32 within int16 range by the scale exactly).
inline __m256i q6_K_half_scales(const uint8_t* g, int j, int half) {
  const __m256i s = _mm256_cvtepi8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 32 + 16 * j + 8 * half)));
  return _mm256_and_si256(s, _mm256_set1_epi32(0xFFFF));
}

/// Values 4i..4i+3 (i < 4) of sub-block `quad` (pack.h's 192-byte quad, at the half's 32-byte
/// offset) of 8 rows, as u = q + 32 in 0..63.
inline __m256i q6_K_half_values(const uint8_t* quad, int i) {
  const __m256i m63 = _mm256_set1_epi8(0x3F), m15 = _mm256_set1_epi8(0x0F);
  const __m256i m192 = _mm256_set1_epi8(char(0xC0));
  if (i < 2) return _mm256_and_si256(load256(quad + 64 * i), m63);
  const __m256i top = _mm256_srli_epi16(_mm256_and_si256(load256(quad + 64 * (i - 2)), m192), 2);
  __m256i low = load256(quad + 128);
  if (i == 3) low = _mm256_srli_epi16(low, 4);
  return _mm256_or_si256(_mm256_and_si256(low, m15), top);
}

/// The 16-value sub-block j's scales of rows 8·half .. 8·half+7 of a packed q6_K super-block
/// (pack.h layout), each int32 lane holding its row's int8 scale as int16 in both halves
/// (VPMADDWD of two int16 by it multiplies their sum by the scale).
inline __m256i q6_K_half_scales_both(const uint8_t* g, int j, int half) {
  const __m128i s = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 32 + 16 * j + 8 * half));
  return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s, s));  // each byte twice, sign-extended
}

/// The int16 pairs 32·(x_4g + x_4g+1) (low half) and 32·(x_4g+2 + x_4g+3) (high half) of the 64
/// groups of 4 quants of the q8_K block xb, group g (values 4g..4g+3) at ot[g]: the +32 of the
/// stored q6_K values u = q + 32 times the activations, per VPMADDUBSW pair.
inline void q6_K_pair_offsets(const block_q8_K& xb, int32_t* ot) {
  for (int k = 0; k < 8; ++k)
    _mm256_store_si256(reinterpret_cast<__m256i*>(ot + 8 * k),
                       _mm256_maddubs_epi16(_mm256_set1_epi8(32), load256(xb.qs + 32 * k)));
}

/// The avx2 decode form of packed_q6_K_group: rows 8·half .. 8·half+7 of one packed q6_K group
/// against one q8_K activation row x: y[8·half + r]. Same order as vec_dot_q6_K_q8_K, lane by
/// lane: per super-block the 8 integer lanes (lane l = 4h + i: values 4i..4i+3 of sub-blocks
/// j = 2·j2 + h, each Σ q·x times its sub-block's scale), then lane = fma(d_x·d_w, float(isum),
/// lane), fold8 at the end. Σ q·x of 4 values is VPMADDUBSW of the stored u = q + 32 (0..63) and
/// x (pair sums ≤ 2·63·128) minus the pair's 32·(x + x') (q6_K_pair_offsets, ≤ 2·32·128): within
/// int16, so one VPMADDWD by the scale in both int16 halves gives scale · Σ of 4 exactly (the
/// same integer lanes as the scalar code). The offsets of super-block b + 1 are formed while b
/// is computed, in a two-entry ring, so their loads never wait on the stores that wrote them
/// (formed just before use, the 4-byte loads of a 32-byte store stalled: slower than the sign
/// trick this form replaces, which cost three more instructions per 4 values and ran at 0.88×
/// this form's speed, L1-resident, one thread). The loop runs over the sub-blocks j, each
/// unpacked from its three 32-byte loads into the 4 lanes it feeds. Both halves prefetch, each
/// half the bytes of a block, kPrefetchAheadL2 ahead of the stream's position in the group (half
/// 0 at block b: byte b·1680, half 1: (nb + b)·1680), into L2: with the first half alone
/// prefetching 4 KiB ahead into L1, memory idled during the second half. (A one-pass form, as
/// q8_0's and q4_K's, measured 0.8-0.9× this one here.)
inline void packed_q6_K_half_decode(int64_t nb, const uint8_t* g, int half, const uint8_t* x,
                                    float* y) {
  __m256 acc[8];
  for (int l = 0; l < 8; ++l) acc[l] = _mm256_setzero_ps();
  const char* pf = reinterpret_cast<const char*>(g) + kPrefetchAheadL2 + half * nb * 1680;
  alignas(32) int32_t ot[2][64];
  q6_K_pair_offsets(block_at<block_q8_K>(x, 0, 0, 0), ot[0]);
  for (int64_t b = 0; b < nb; ++b, g += 3360, pf += 1680) {
    for (int l = 0; l < 1680; l += 64) _mm_prefetch(pf + l, _MM_HINT_T1);
    if (b + 1 < nb) q6_K_pair_offsets(block_at<block_q8_K>(x, 0, 0, b + 1), ot[(b + 1) & 1]);
    const int32_t* o = ot[b & 1];
    alignas(32) __m256i sc[16];
    for (int j = 0; j < 16; ++j) sc[j] = q6_K_half_scales_both(g, j, half);
    const block_q8_K& xb = block_at<block_q8_K>(x, 0, 0, b);
    const __m256 d = _mm256_mul_ps(
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * half))),
        _mm256_set1_ps(xb.d));
    // Sub-block j's three 32-byte loads give its 4 lanes' values (q6_K_half_values' unpacking
    // without reloading), so the loop runs over j with the 4 integer lanes of h = j % 2 live.
    const __m256i m63 = _mm256_set1_epi8(0x3F), m15 = _mm256_set1_epi8(0x0F);
    const __m256i m192 = _mm256_set1_epi8(char(0xC0));
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i lane[4];
      for (int i = 0; i < 4; ++i) lane[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int j2 = 0; j2 < 8; ++j2) {
        const int j = 2 * j2 + h;
        const uint8_t* quad = g + 288 + 192 * j + 32 * half;
        const __m256i q0 = load256(quad), q1 = load256(quad + 64), q2 = load256(quad + 128);
        __m256i u[4];
        u[0] = _mm256_and_si256(q0, m63);
        u[1] = _mm256_and_si256(q1, m63);
        u[2] = _mm256_or_si256(_mm256_srli_epi16(_mm256_and_si256(q0, m192), 2),
                               _mm256_and_si256(q2, m15));
        u[3] = _mm256_or_si256(_mm256_srli_epi16(_mm256_and_si256(q1, m192), 2),
                               _mm256_and_si256(_mm256_srli_epi16(q2, 4), m15));
        for (int i = 0; i < 4; ++i) {
          const __m256i xv = _mm256_broadcastd_epi32(_mm_loadu_si32(xb.qs + 16 * j + 4 * i));
          const __m256i t =
              _mm256_sub_epi16(_mm256_maddubs_epi16(u[i], xv), _mm256_set1_epi32(o[4 * j + i]));
          lane[i] = _mm256_add_epi32(lane[i], _mm256_madd_epi16(t, sc[j]));
          asm("" : "+x"(lane[i]));  // keeps the chain: reassociated, the products spilled
        }
      }
      for (int i = 0; i < 4; ++i)
        acc[4 * h + i] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lane[i]), acc[4 * h + i]);
    }
  }
  _mm256_storeu_ps(y + 8 * half, fold8_lanes(acc));
}

/// The 6-bit scales (sc[j]) and mins (mn[j]) of the 8 sub-blocks of rows 8·half .. 8·half+7 of
/// a packed q4_K super-block (pack.h), each int32 lane holding its row's value in both int16
/// halves (VPMADDWD of two int16 by it multiplies their sum by it). The unpacking of
/// scales_mins_k4, on byte vectors: sub-block j < 4 has sc = q[j] & 63, m = q[j+4] & 63; j ≥ 4
/// has sc = (q[j+4] & 15) | (q[j−4] >> 6) << 4 and m = (q[j+4] >> 4) | (q[j] >> 6) << 4.
inline void q4_K_half_scales(const uint8_t* g, int half, __m256i* sc, __m256i* mn) {
  __m128i q[12];
  for (int t = 0; t < 12; ++t)
    q[t] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 64 + 16 * t + 8 * half));
  const __m128i m63 = _mm_set1_epi8(0x3F), m15 = _mm_set1_epi8(0x0F), m48 = _mm_set1_epi8(0x30);
  const auto pair = [](__m128i bytes) {
    const __m256i v = _mm256_cvtepu8_epi32(bytes);
    return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
  };
  for (int j = 0; j < 4; ++j) {
    sc[j] = pair(_mm_and_si128(q[j], m63));
    mn[j] = pair(_mm_and_si128(q[j + 4], m63));
    const __m128i s =
        _mm_or_si128(_mm_and_si128(q[j + 8], m15), _mm_and_si128(_mm_srli_epi16(q[j], 2), m48));
    const __m128i m = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q[j + 8], 4), m15),
                                   _mm_and_si128(_mm_srli_epi16(q[j + 4], 2), m48));
    sc[j + 4] = pair(s);
    mn[j + 4] = pair(m);
  }
}

/// The 4 min lanes of one super-block of rows 8·half .. 8·half+7 (the packed q4_K super-block
/// at `g`, its mins mn[0..7] as q4_K_half_scales gives them) against the q8_K block xb, in
/// vec_dot_q4_K_q8_K's order: lane k += fma(−d_x·d_min, float(m_2k·Σx(2k) + m_2k+1·Σx(2k+1)))
/// from q8_K's bsums, one VPMADDWD of int16 pairs. Returns d_w·d_x per row, the main lanes'
/// factor.
inline __m256 q4_K_half_mins(const uint8_t* g, int half, const __m256i* mn, const block_q8_K& xb,
                             __m256* acc_m) {
  const __m256 dw =
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * half)));
  const __m256 dminw =
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 32 + 16 * half)));
  // −d_x·d_min: the scalar −x.d · dmin, the same float (negation is exact).
  const __m256 dmin = _mm256_mul_ps(dminw, _mm256_set1_ps(-xb.d));
  for (int k = 0; k < 4; ++k) {
    const int s0 = xb.bsums[4 * k] + xb.bsums[4 * k + 1];
    const int s1 = xb.bsums[4 * k + 2] + xb.bsums[4 * k + 3];
    const __m256i spair =
        _mm256_set1_epi32(int32_t((uint32_t(s0) & 0xFFFF) | (uint32_t(s1) << 16)));
    // lane: m_2k·s0 + m_2k+1·s1 (m_2k in the low int16 half, m_2k+1 in the high one)
    const __m256i mpair = _mm256_blend_epi16(mn[2 * k], mn[2 * k + 1], 0xAA);
    acc_m[k] = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(_mm256_madd_epi16(mpair, spair)), acc_m[k]);
  }
  return _mm256_mul_ps(dw, _mm256_set1_ps(xb.d));
}

/// The end of a q4_K half: fold8(main) + ((m0 + m2) + (m1 + m3)) per row.
inline __m256 q4_K_half_result(const __m256* acc, const __m256* acc_m) {
  const __m256 main = fold8_lanes(acc);
  const __m256 mins =
      _mm256_add_ps(_mm256_add_ps(acc_m[0], acc_m[2]), _mm256_add_ps(acc_m[1], acc_m[3]));
  return _mm256_add_ps(main, mins);
}

/// Decode form of the q4_K kernel (one activation row x, block b; prefill: exact_q4_K_half in
/// packed_prefill_avx2.inl): the same integer lane sums and the same fma per lane, with the
/// sub-block pairs outer and the 8 lanes inner, so the 8 lane sums stay in registers and each scale
/// vector is read once per pair (from the stack, as the memory operand of VPMADDWD) instead of
/// every scale being live across the lanes: the lanes first order spilled (522 of its ~1390
/// instructions a super-block addressed the stack) and streamed 15.8 / 18.4 GB/s from cache where
/// this form streams 22.5 / 23.5 (kvrun_bench q4_K avx2-packed attn_q / ffn_up n1 t1). Integer sums
/// are exact, so the order of their additions does not change a bit.
inline void q4_K_half_block_decode(const uint8_t* g, int half, const block_q8_K& xb, __m256* acc,
                                   __m256* acc_m) {
  const __m256i m15 = _mm256_set1_epi8(0x0F);
  __m256i sc[8], mn[8];
  q4_K_half_scales(g, half, sc, mn);
  const __m256 d = q4_K_half_mins(g, half, mn, xb, acc_m);
  __m256i lane[8];
  for (int i = 0; i < 8; ++i) lane[i] = _mm256_setzero_si256();
  for (int j2 = 0; j2 < 4; ++j2) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      const __m256i q = load256(g + 256 + 64 * (8 * j2 + i) + 32 * half);
      const __m256i lo = _mm256_and_si256(q, m15);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m15);
      const int8_t* xq = xb.qs + 64 * j2 + 4 * i;
      const __m256i x0 = _mm256_broadcastd_epi32(_mm_loadu_si32(xq));
      const __m256i x1 = _mm256_broadcastd_epi32(_mm_loadu_si32(xq + 32));
      const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), sc[2 * j2]);
      const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), sc[2 * j2 + 1]);
      lane[i] = _mm256_add_epi32(lane[i], _mm256_add_epi32(p0, p1));
    }
  }
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lane[i]), acc[i]);
}

/// The avx2 packed q4_K decode kernel: the 16 rows of one packed q4_K group against one q8_K
/// activation row x: y[0..15]. One pass over the super-blocks, both halves of each back to back
/// (q4_K_half_block_decode), so every weight byte is read once while the stream is prefetched
/// kPrefetchAhead ahead without pauses (a pass per half, the second from cache, left memory idle
/// during the second: 1.4× the speed from DRAM, kvrun_bench dram_65536x2048, though ~15% slower
/// on cache-resident weights); the same fma sequence per row and lane as the scalar order. (q6_K
/// keeps the pass per half: the one-pass form of it measured no faster from DRAM and 5-10%
/// slower from cache.)
inline void packed_q4_K_group_decode(int64_t nb, const uint8_t* g, const uint8_t* x, float* y) {
  __m256 acc[2][8], acc_m[2][4];
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 8; ++l) acc[h][l] = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) acc_m[h][k] = _mm256_setzero_ps();
  }
  const block_q8_K* xb = reinterpret_cast<const block_q8_K*>(x);
  for (int64_t b = 0; b < nb; ++b, g += 2304) {
    for (int l = 0; l < 2304; l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(g) + kPrefetchAhead + l, _MM_HINT_T0);
    q4_K_half_block_decode(g, 0, xb[b], acc[0], acc_m[0]);
    q4_K_half_block_decode(g, 1, xb[b], acc[1], acc_m[1]);
  }
  for (int h = 0; h < 2; ++h) _mm256_storeu_ps(y + 8 * h, q4_K_half_result(acc[h], acc_m[h]));
}

}  // namespace
