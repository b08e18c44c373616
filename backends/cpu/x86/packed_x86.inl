// packed_x86.inl — the exported packed-weight kernels (PackedTileFn, vec_dot.h; pack.h layouts)
// of both x86 levels: the per-level files (packed_avx2.inl, packed_q4k_avx512.inl, …) and the
// entry points that pick their prefill and decode forms. Included by kernels_x86.inl inside
// namespace kvrun::cpu::KVRUN_SIMD_NS (outside its anonymous namespace); same rules.
#ifndef KVRUN_SIMD_NS
#error "included by kernels_x86.inl only"
#endif

#ifndef KVRUN_X86_VNNI
// In this order: each uses the ones before it.
// clang-format off
#include "cpu/x86/packed_avx2.inl"
#include "cpu/x86/packed_q5k_avx2.inl"
#include "cpu/x86/packed_prefill_avx2.inl"  // the K-quants' prefill (exact order)
#include "cpu/x86/packed_fast_avx2.inl"    // --kernels fast
// clang-format on
#endif

#include "cpu/x86/packed_mxfp4.inl"  // both levels

#ifdef KVRUN_X86_VNNI
// With VNNI the unsigned × signed products need no int16 step ((q + 128)·x pair sums reach
// 2·255·127, past VPMADDUBSW's range; the avx2 form, packed_avx2.inl, flips the bytes back).
void packed_q8_0_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t* xoff, int64_t nx, float* y, size_t ys) {
#ifdef __AVX512F__
  constexpr int kC = 2;  // 8 lane accumulators per activation row
#else
  constexpr int kC = 1;
#endif
  const int64_t nb = n / 32;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  for (int64_t gi = 0; gi < ngroups; ++gi) {
    const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * size_t(nb) * 544;
    float* yg = y + gi * 16;
    int64_t j = 0;
    for (; j + kC <= nx; j += kC)
      packed_q8_0_group<kC>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 9, yg + size_t(j) * ys,
                            ys);
    for (; j < nx; ++j)
      packed_q8_0_group<1>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 9, yg + size_t(j) * ys,
                           ys);
  }
}

#ifdef __AVX512F__
// The AVX-512 form: the 16 int32 lanes of a q6_K pass are one zmm each (as ymm pairs, the 8 int
// lanes per activation row would not fit the avx2 level's 16 registers; packed_q6_K_half runs
// 8 rows and one lane at a time instead).
void packed_q6_K_q8_K(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t* xoff, int64_t nx, float* y, size_t ys) {
  constexpr int kC = 2;  // 16 int32 and 16 float lane accumulators per pass
  const int64_t nb = n / QK_K;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  for (int64_t gi = 0; gi < ngroups; ++gi) {
    const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * size_t(nb) * 3360;
    float* yg = y + gi * 16;
    int64_t j = 0;
    for (; j + kC <= nx; j += kC)
      packed_q6_K_group<kC>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 64, yg + size_t(j) * ys,
                            ys);
    for (; j < nx; ++j)
      packed_q6_K_group<1>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 64, yg + size_t(j) * ys,
                           ys);
  }
}
#endif

#ifdef __AVX512F__
#include "cpu/x86/packed_q4k_avx512.inl"  // q4_K, one zmm per 16-row group
// (after it: q4_K_scales16)
#include "cpu/x86/packed_fast_avx512.inl"  // --kernels fast: q8_0, mxfp4, q4_K
#endif

#endif

#ifndef __AVX512F__
namespace {

/// The avx2 prefill form of packed_q4_0_group: rows 8·half .. 8·half+7 of one packed q4_0 group
/// (pack.h layout) against C activation rows (q8_0, xs bytes apart; xoff as there), y[c·ys +
/// 8·half + r]. The same order per row: per block the whole integer dot (exact), then
/// acc = fma(float(isum), d_w·d_x, acc). The integer dot is summed differently but exactly: the
/// 8 VPMADDUBSW results of a block (pair sums u·x + u'·x', u ≤ 15, |x| ≤ 128, so ≤ 3840) are
/// added as int16 (≤ 8·3840 = 30720 < 2^15) and widened by one VPMADDWD, instead of one
/// VPMADDWD per 4 elements. Eight rows keep the C ≤ 4 accumulators, C int16 partial sums and a
/// 4-element slice of the weights in the 16 ymm registers (the 16-row form spilled). Not inlined:
/// inlined into prefill_walk's loop, llama3.2-1b Q4_0 pp512 at avx2 ran 0.87× (three rounds).
template <int C>
[[gnu::noinline]] inline void packed_q4_0_half(int64_t nb, const uint8_t* g, int half,
                                               const uint8_t* x, size_t xs, const int32_t* xoff,
                                               float* y, size_t ys) {
  static_assert(C >= 1 && C <= 4, "accumulators must fit the ymm registers");
  __m256 acc[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  const __m256i m = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b, g += 288) {
    __m256i p[C];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const __m256i w = load256(g + 32 + 64 * q + 32 * half);
      const __m256i lo = _mm256_and_si256(w, m), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const int8_t* xq = block_at<block_q8_0>(x, xs, c, b).qs;
        const __m256i a =
            _mm256_maddubs_epi16(lo, _mm256_broadcastd_epi32(_mm_loadu_si32(xq + 4 * q)));
        const __m256i e =
            _mm256_maddubs_epi16(hi, _mm256_broadcastd_epi32(_mm_loadu_si32(xq + 16 + 4 * q)));
        p[c] = q == 0 ? _mm256_add_epi16(a, e) : _mm256_add_epi16(p[c], _mm256_add_epi16(a, e));
        asm("" : "+x"(p[c]));  // keeps the chain: reassociated, every product is live (spills)
      }
    }
    const __m256 dw =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * half)));
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const int32_t* o = xoff + (size_t(c) * size_t(nb) + size_t(b)) * 2;
      const __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(p[c], ones), _mm256_set1_epi32(o[0]));
      float dx;
      std::memcpy(&dx, o + 1, sizeof dx);
      acc[c] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(dx)), acc[c]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + size_t(c) * ys + 8 * half, acc[c]);
}

/// packed_q4_0_q8_0 for nx ≥ 2 activation rows at the avx2 level: prefill_walk
/// (packed_prefill_avx2.inl: the activation rows in chunks that stay in L2, per chunk every
/// group), each half of a group (8 rows) against 4 activation rows at a time (then 3, 2 or 1).
/// Outputs as packed_q4_0_group's, float for float.
void packed_q4_0_prefill_avx2(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                              const int32_t* xoff, int64_t nx, float* y, size_t ys) {
  const int64_t nb = n / 32;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  prefill_walk<4>(wp, size_t(nb) * 288, ngroups, xs, nx,
                  [&](auto cc, const uint8_t* g, int64_t gi, int half, int64_t j) {
                    packed_q4_0_half<decltype(cc)::value>(nb, g, half, xb + size_t(j) * xs, xs,
                                                          xoff + j * nb * 2,
                                                          y + gi * 16 + size_t(j) * ys, ys);
                  });
}

}  // namespace
#endif

void packed_q4_0_q8_0(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,
                      const int32_t* xoff, int64_t nx, float* y, size_t ys) {
#ifndef __AVX512F__
  if (nx >= 2) return packed_q4_0_prefill_avx2(n, wp, ngroups, x, xs, xoff, nx, y, ys);
#else
  constexpr int kC = 8;  // activation rows per pass over a group's weights
#endif
  const int64_t nb = n / 32;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  for (int64_t gi = 0; gi < ngroups; ++gi) {
    const uint8_t* g = static_cast<const uint8_t*>(wp) + size_t(gi) * size_t(nb) * 288;
    float* yg = y + gi * 16;
    int64_t j = 0;
#ifdef __AVX512F__
    for (; j + kC <= nx; j += kC)
      packed_q4_0_rows<kC>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 2, yg + size_t(j) * ys,
                           ys);
    if (nx - j >= 2) {  // the last 2..7 rows in one pass (one row: the decode form below)
      packed_q4_0_rows_tail<kC - 1>(nx - j, nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 2,
                                    yg + size_t(j) * ys, ys);
      j = nx;
    }
#endif
    for (; j < nx; ++j)
      packed_q4_0_group<1>(nb, g, xb + size_t(j) * xs, xs, xoff + j * nb * 2, yg + size_t(j) * ys,
                           ys);
  }
}
