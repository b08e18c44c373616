// quantize_ops_x86.inl — the activation quantizers (f32 → q8_0 / q8_K / q8_1, rules in vec_dot.h)
// and the element-wise kernels of op_kernels.h (SiLU · up and softmax's e^x with fast_exp.h's
// polynomial, RoPE's rotation) of both x86 levels. Included by kernels_x86.inl inside namespace
// kvrun::cpu::KVRUN_SIMD_NS; same rules: lane for lane the scalar reference's floats.
#ifndef KVRUN_SIMD_NS
#error "included by kernels_x86.inl only"
#endif

// ---------------------------------------------------------------------------------------------
// Activation quantizers (rules in vec_dot.h)
// ---------------------------------------------------------------------------------------------

namespace {

/// 32 int32 lanes (4 vectors, in element order) packed to 32 int8 in element order.
inline __m256i pack_32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  const __m256i abcd = _mm256_packs_epi16(ab, cd);
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline __m256i round_to_i32(__m256 v) {
  return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

}  // namespace

void act_from_float_f16(const float* src, void* dst, int64_t n) {
  // VCVTPS2PH rounds to nearest even as f32_to_fp16 does (overflow → ±inf, gradual underflow);
  // only NaNs differ (the instruction keeps payload bits), so they become sign | 0x7e00 as in
  // f32_to_fp16.
  uint16_t* y = static_cast<uint16_t*>(dst);
  auto convert8 = [](const float* x, uint16_t* out) {
    const __m256 v = _mm256_loadu_ps(x);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const int nan = _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    for (int l = 0; l < 8; ++l)
      if (nan >> l & 1) {
        uint32_t bits;
        std::memcpy(&bits, x + l, 4);
        out[l] = uint16_t(((bits >> 16) & 0x8000u) | 0x7e00u);
      }
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) convert8(src + i, y + i);
  if (i < n) {
    float x[8] = {};
    uint16_t out[8];
    std::memcpy(x, src + i, size_t(n - i) * sizeof(float));
    convert8(x, out);
    std::memcpy(y + i, out, size_t(n - i) * sizeof(uint16_t));
  }
}

void act_from_float_q8_0(const float* src, void* dst, int64_t n) {
  block_q8_0* y = static_cast<block_q8_0*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* x = src + 32 * b;
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
    const float amax = hmax8(_mm256_max_ps(_mm256_max_ps(abs8(v[0]), abs8(v[1])),
                                           _mm256_max_ps(abs8(v[2]), abs8(v[3]))));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = round_to_i32(_mm256_mul_ps(v[i], vid));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), pack_32(q[0], q[1], q[2], q[3]));
    y[b].d = uint16_t(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
  }
}

void act_from_float_q8_K(const float* src, void* dst, int64_t n) {
  block_q8_K* y = static_cast<block_q8_K*>(dst);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float* x = src + b * QK_K;
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < QK_K; i += 8) m = _mm256_max_ps(m, abs8(_mm256_loadu_ps(x + i)));
    const float amax = hmax8(m);
    if (amax == 0.0f) {
      std::memset(&y[b], 0, sizeof(block_q8_K));
      continue;
    }
    // The first element whose |x| is the maximum (the scalar code keeps the first on ties).
    float max = 0.0f;
    const __m256 va = _mm256_set1_ps(amax);
    for (int i = 0; i < QK_K; i += 8) {
      const int hit =
          _mm256_movemask_ps(_mm256_cmp_ps(abs8(_mm256_loadu_ps(x + i)), va, _CMP_EQ_OQ));
      if (hit) {
        max = x[i + __builtin_ctz(unsigned(hit))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i lim = _mm256_set1_epi32(127);
    for (int g = 0; g < QK_K; g += 32) {
      __m256i q[4];
      for (int i = 0; i < 4; ++i)
        q[i] =
            _mm256_min_epi32(lim, round_to_i32(_mm256_mul_ps(_mm256_loadu_ps(x + g + 8 * i), vs)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs + g), pack_32(q[0], q[1], q[2], q[3]));
    }
    for (int s = 0; s < QK_K / 16; ++s) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y[b].qs + 16 * s));
      const __m256i w = _mm256_cvtepi8_epi16(q);
      y[b].bsums[s] = int16_t(hsum_i32(_mm256_madd_epi16(w, _mm256_set1_epi16(1))));
    }
    y[b].d = 1.0f / iscale;
  }
}

// ---------------------------------------------------------------------------------------------
// SiLU · up with the polynomial e^x of fast_exp.h (expf_lane, silu_lane), lane for lane
// ---------------------------------------------------------------------------------------------

namespace {

constexpr float kExpShift = 0x1.8p23f, kExpInvLn2 = 0x1.715476p+0f, kExpLn2Hi = 0x1.62e4p-1f,
                kExpLn2Lo = 0x1.7f7d1cp-20f, kExpC0 = 0x1.ffffecp-1f, kExpC1 = 0x1.fffdb6p-2f,
                kExpC2 = 0x1.555e66p-3f, kExpC3 = 0x1.573e2ep-5f, kExpC4 = 0x1.0e4020p-7f;

#ifdef __AVX512F__
/// expf_lane on 16 lanes: the same fused and unfused operations; VSCALEFPS is the scaling that
/// scale_pow2 emulates.
inline __m512 expf16(__m512 x) {
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(kExpInvLn2), _mm512_set1_ps(kExpShift));
  const __m512 n = _mm512_sub_ps(z, _mm512_set1_ps(kExpShift));
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Lo),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Hi), x));
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 hi =
      _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(kExpC4), b, _mm512_set1_ps(kExpC3)), u,
                      _mm512_fmadd_ps(_mm512_set1_ps(kExpC2), b, _mm512_set1_ps(kExpC1)));
  const __m512 j =
      _mm512_fmadd_ps(hi, u, _mm512_fmadd_ps(_mm512_set1_ps(kExpC0), b, _mm512_set1_ps(1.0f)));
  const __m512 res = _mm512_maskz_scalef_ps(0xFFFF, j, n);
  const __m512 an = _mm512_castsi512_ps(
      _mm512_maskz_and_epi32(0xFFFF, _mm512_castps_si512(n), _mm512_set1_epi32(0x7FFFFFFF)));
  const __mmask16 out = _mm512_cmp_ps_mask(an, _mm512_set1_ps(192.0f), _CMP_GT_OQ);
  const __mmask16 pos = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_GT_OQ);
  const __m512 big = _mm512_maskz_mov_ps(pos, _mm512_set1_ps(__builtin_inff()));
  return _mm512_mask_mov_ps(res, out, big);
}
#endif

/// expf_lane on 8 lanes; j·2^n is formed in double (exact) and rounded once, as scale_pow2.
inline __m256 expf8(__m256 x) {
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(kExpInvLn2), _mm256_set1_ps(kExpShift));
  const __m256 n = _mm256_sub_ps(z, _mm256_set1_ps(kExpShift));
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Lo),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Hi), x));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 hi =
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(kExpC4), b, _mm256_set1_ps(kExpC3)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(kExpC2), b, _mm256_set1_ps(kExpC1)));
  const __m256 j =
      _mm256_fmadd_ps(hi, u, _mm256_fmadd_ps(_mm256_set1_ps(kExpC0), b, _mm256_set1_ps(1.0f)));
  // scale_pow2: n clamped to ±192 (fmin/fmax order as there; n is never NaN unless j is),
  // 2^n as double bits, one product in double, one rounding to float.
  const __m256 nc =
      _mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-192.0f)), _mm256_set1_ps(192.0f));
  const __m256i ni = _mm256_cvttps_epi32(nc);
  auto scale4 = [](__m128 j4, __m128i n4) {
    const __m256i e = _mm256_slli_epi64(
        _mm256_add_epi64(_mm256_cvtepi32_epi64(n4), _mm256_set1_epi64x(1023)), 52);
    return _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(j4), _mm256_castsi256_pd(e)));
  };
  const __m256 res =
      _mm256_set_m128(scale4(_mm256_extractf128_ps(j, 1), _mm256_extracti128_si256(ni, 1)),
                      scale4(_mm256_castps256_ps128(j), _mm256_castsi256_si128(ni)));
  const __m256 an = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
  const __m256 out = _mm256_cmp_ps(an, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
  const __m256 pos = _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_GT_OQ);
  const __m256 big = _mm256_and_ps(pos, _mm256_set1_ps(__builtin_inff()));
  return _mm256_blendv_ps(res, big, out);
}

}  // namespace

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) store16(dst + i, load16_f16(src + i));
  for (; i < n; ++i) dst[i] = h2f(src[i]);
}

void rope_rotate(float* v, const float* cs, const float* sn, int64_t half, bool neox) {
  // Per pair (x0, x1): x0·cos − x1·sin and x0·sin + x1·cos, the x0 product fused (ops.cpp).
  int64_t i = 0;
  if (neox) {
    for (; i + 8 <= half; i += 8) {
      const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + half + i);
      const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
      _mm256_storeu_ps(v + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
      _mm256_storeu_ps(v + half + i, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
    }
  } else {
    // 8 adjacent pairs: x0 / x1 hold pairs in the order 0 1 4 5 2 3 6 7 (in-lane shuffles);
    // cos and sin are permuted to match, and unpack restores the element order.
    const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    for (; i + 8 <= half; i += 8) {
      const __m256 a = _mm256_loadu_ps(v + 2 * i), b = _mm256_loadu_ps(v + 2 * i + 8);
      const __m256 x0 = _mm256_shuffle_ps(a, b, 0x88), x1 = _mm256_shuffle_ps(a, b, 0xDD);
      const __m256 c = _mm256_permutevar8x32_ps(_mm256_loadu_ps(cs + i), order);
      const __m256 s = _mm256_permutevar8x32_ps(_mm256_loadu_ps(sn + i), order);
      const __m256 y0 = _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s));
      const __m256 y1 = _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c));
      _mm256_storeu_ps(v + 2 * i, _mm256_unpacklo_ps(y0, y1));
      _mm256_storeu_ps(v + 2 * i + 8, _mm256_unpackhi_ps(y0, y1));
    }
  }
  for (; i < half; ++i) {
    float* p0 = neox ? v + i : v + 2 * i;
    float* p1 = neox ? v + i + half : v + 2 * i + 1;
    const float x0 = *p0, x1 = *p1;
    const float x1s = x1 * sn[i], x1c = x1 * cs[i];
    *p0 = __builtin_fmaf(x0, cs[i], -x1s);
    *p1 = __builtin_fmaf(x0, sn[i], x1c);
  }
}

double exp_blocks(const float* x, float* y, int64_t n, float max) {
  double sum = 0.0;
  for (int64_t i = 0; i + 16 <= n; i += 16) {
#ifdef __AVX512F__
    const V16 v = {expf16(_mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(max)))};
#else
    const __m256 m = _mm256_set1_ps(max);
    const V16 v = {expf8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m)),
                   expf8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m))};
#endif
    store16(y + i, v);
    sum += double(fold16(v));
  }
  return sum;
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = expf16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
  }
#endif
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = expf8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  if (i < n) {  // the last < 8 lanes through a padded register
    float g[8] = {}, u[8] = {}, o[8];
    std::memcpy(g, gate + i, size_t(n - i) * sizeof(float));
    std::memcpy(u, up + i, size_t(n - i) * sizeof(float));
    const __m256 gv = _mm256_loadu_ps(g);
    const __m256 e = expf8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
    const __m256 sv = _mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    _mm256_storeu_ps(o, _mm256_mul_ps(sv, _mm256_loadu_ps(u)));
    std::memcpy(out + i, o, size_t(n - i) * sizeof(float));
  }
}
