// flash_decode.cpp — the decode block kernel of paged attention (see flash_decode.h), compiled
// once per kernel level from flash_decode.inl. The AVX2 and AVX-512 copies are compiled with
// GCC's `#pragma GCC target` in this one translation unit (the rest of it, and of kvrun, stays
// baseline x86-64) and are only called when cpu_level() says the CPU has the features, so one
// binary runs on any x86-64. Other compilers and architectures get the portable copy only (GCC
// vector extensions, 4 lanes).
#include "cpu/flash_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "blocks.h"
#include "cpu/kv_row_ops.h"
#include "fp16.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KVRUN_FLASH_DECODE_X86 1
#include <immintrin.h>
#endif

// The lane helpers are always inlined; GCC's note about the AVX-512 calling convention for
// vector arguments does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
#if KVRUN_FLASH_DECODE_X86
// GCC 12 warns inside its own AVX-512 intrinsics (_mm512_undefined_ps used as the pass-through
// of unmasked conversions) when they are compiled under `#pragma GCC target` (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvrun::cpu {

namespace {

// ---- baseline: 4 lanes, plain C++ conversions ----
namespace level_scalar {

using vf = float __attribute__((vector_size(16)));
using vi = int32_t __attribute__((vector_size(16)));
constexpr int W = 4;
constexpr int kAccRegs = 8;
#define KVRUN_FD_W 4

[[gnu::always_inline]] inline vf madd(vf a, vf b, vf c) {
  for (int i = 0; i < 4; ++i) c[i] = std::fma(a[i], b[i], c[i]);  // as the SIMD levels' FMA
  return c;
}
[[gnu::always_inline]] inline vf splat(float x) { return vf{x, x, x, x}; }
[[gnu::always_inline]] inline vf ld_f32(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void st_f32(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
[[gnu::always_inline]] inline vf ld_f16(const uint16_t* p) {
  return vf{fp16_to_f32(p[0]), fp16_to_f32(p[1]), fp16_to_f32(p[2]), fp16_to_f32(p[3])};
}
[[gnu::always_inline]] inline vf ld_bf16(const uint16_t* p) {
  return vf{bf16_to_f32(p[0]), bf16_to_f32(p[1]), bf16_to_f32(p[2]), bf16_to_f32(p[3])};
}
[[gnu::always_inline]] inline vf ld_i8(const int8_t* p) {
  return vf{float(p[0]), float(p[1]), float(p[2]), float(p[3])};
}
[[gnu::always_inline]] inline vf ld_q4(const uint8_t* qs, bool high) {
  vf v;
  for (int i = 0; i < 4; ++i) v[i] = float((high ? qs[i] >> 4 : qs[i] & 0x0F) - 8);
  return v;
}
[[gnu::always_inline]] inline float h2f(uint16_t h) { return fp16_to_f32(h); }
using f8s = float __attribute__((vector_size(32)));
struct kb_t {
  int8_t v[32];
};
[[gnu::always_inline]] inline kb_t kblock_q8(const block_q8_0* b) {
  kb_t k;
  std::memcpy(k.v, b->qs, 32);
  return k;
}
[[gnu::always_inline]] inline kb_t kblock_q4(const block_q4_0* b) {
  kb_t k;
  for (int i = 0; i < 16; ++i) {
    k.v[i] = int8_t((b->qs[i] & 0x0F) - 8);
    k.v[i + 16] = int8_t((b->qs[i] >> 4) - 8);
  }
  return k;
}
[[gnu::always_inline]] inline f8s madd8(f8s a, f8s b, f8s c) {
  for (int i = 0; i < 8; ++i) c[i] = std::fma(a[i], b[i], c[i]);
  return c;
}
[[gnu::always_inline]] inline f8s splat8(float x) { return f8s{x, x, x, x, x, x, x, x}; }
[[gnu::always_inline]] inline f8s block_dot(const kb_t& k, const int8_t* q, const int32_t*) {
  f8s r;
  for (int i = 0; i < 8; ++i) {
    int32_t t = 0;
    for (int m = 0; m < 4; ++m) t += int32_t(k.v[4 * i + m]) * q[4 * i + m];
    r[i] = float(t);
  }
  return r;
}

#include "cpu/flash_decode.inl"
#undef KVRUN_FD_W

}  // namespace level_scalar

#if KVRUN_FLASH_DECODE_X86

// ---- AVX2 + FMA + F16C: 8 lanes ----
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace level_avx2 {

using vf = __m256;
using vi = int32_t __attribute__((vector_size(32)));
constexpr int W = 8;
constexpr int kAccRegs = 8;
#define KVRUN_FD_W 8

[[gnu::always_inline]] inline vf madd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
[[gnu::always_inline]] inline vf splat(float x) { return _mm256_set1_ps(x); }
[[gnu::always_inline]] inline vf ld_f32(const float* p) { return _mm256_loadu_ps(p); }
[[gnu::always_inline]] inline void st_f32(float* p, vf v) { _mm256_storeu_ps(p, v); }
[[gnu::always_inline]] inline vf ld_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
[[gnu::always_inline]] inline vf ld_bf16(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
[[gnu::always_inline]] inline vf ld_i8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
[[gnu::always_inline]] inline vf ld_q4(const uint8_t* qs, bool high) {
  __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs));
  if (high) b = _mm_srli_epi16(b, 4);
  b = _mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(0x0F)), _mm_set1_epi8(8));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}
[[gnu::always_inline]] inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
using kb_t = __m256i;  // 32 signed K values
[[gnu::always_inline]] inline kb_t kblock_q8(const block_q8_0* b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs));
}
[[gnu::always_inline]] inline kb_t kblock_q4(const block_q4_0* b) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m), _mm_and_si128(x, m));
  return _mm256_sub_epi8(u, _mm256_set1_epi8(8));
}
[[gnu::always_inline]] inline __m256 madd8(__m256 a, __m256 b, __m256 c) {
  return _mm256_fmadd_ps(a, b, c);
}
[[gnu::always_inline]] inline __m256 splat8(float x) { return _mm256_set1_ps(x); }
/// Σ k·q per 4 values with llama.cpp's sign trick (|k| unsigned × q with k's sign, which
/// maddubs cannot overflow: 2 · 128 · 127 < 2^15).
[[gnu::always_inline]] inline __m256 block_dot(kb_t k, const int8_t* q, const int32_t*) {
  const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(k, k), _mm256_sign_epi8(qv, k));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

#include "cpu/flash_decode.inl"
#undef KVRUN_FD_W

}  // namespace level_avx2
#pragma GCC pop_options

// ---- AVX-512 (F/BW/VL, with AVX2/FMA/F16C): 16 lanes ----
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
namespace level_avx512 {

using vf = __m512;
using vi = int32_t __attribute__((vector_size(64)));
constexpr int W = 16;
constexpr int kAccRegs = 16;
#define KVRUN_FD_W 16

[[gnu::always_inline]] inline vf madd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
[[gnu::always_inline]] inline vf splat(float x) { return _mm512_set1_ps(x); }
[[gnu::always_inline]] inline vf ld_f32(const float* p) { return _mm512_loadu_ps(p); }
[[gnu::always_inline]] inline void st_f32(float* p, vf v) { _mm512_storeu_ps(p, v); }
[[gnu::always_inline]] inline vf ld_f16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
[[gnu::always_inline]] inline vf ld_bf16(const uint16_t* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
[[gnu::always_inline]] inline vf ld_i8(const int8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
[[gnu::always_inline]] inline vf ld_q4(const uint8_t* qs, bool high) {
  __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  if (high) b = _mm_srli_epi16(b, 4);
  b = _mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(0x0F)), _mm_set1_epi8(8));
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
}
[[gnu::always_inline]] inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
using kb_t = __m256i;  // 32 K values + o (128 for q8_0, 8 for q4_0), unsigned
[[gnu::always_inline]] inline kb_t kblock_q8(const block_q8_0* b) {
  return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs)),
                          _mm256_set1_epi8(char(0x80)));  // k + 128
}
[[gnu::always_inline]] inline kb_t kblock_q4(const block_q4_0* b) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m), _mm_and_si128(x, m));  // k + 8
}
[[gnu::always_inline]] inline __m256 madd8(__m256 a, __m256 b, __m256 c) {
  return _mm256_fmadd_ps(a, b, c);
}
[[gnu::always_inline]] inline __m256 splat8(float x) { return _mm256_set1_ps(x); }
/// Σ (k + o)·q per 4 values (VNNI dpbusd, K offset by o to be unsigned) started from
/// corr = −o · Σq of the lane's 4 values: the lane sums Σ k·q exactly.
[[gnu::always_inline]] inline __m256 block_dot(kb_t k, const int8_t* q, const int32_t* corr) {
  const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr));
  return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(c, k, qv));
}
using kb2_t = __m512i;  // kb_t of two positions: the first in the low half
[[gnu::always_inline]] inline kb2_t kblock2_q8(const block_q8_0* b0, const block_q8_0* b1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(kblock_q8(b0)), kblock_q8(b1), 1);
}
[[gnu::always_inline]] inline kb2_t kblock2_q4(const block_q4_0* b0, const block_q4_0* b1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(kblock_q4(b0)), kblock_q4(b1), 1);
}
/// x in lanes 0–7, y in lanes 8–15.
[[gnu::always_inline]] inline vf splat_pair(float x, float y) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(x)),
                                             _mm256_castps_pd(_mm256_set1_ps(y)), 1));
}
/// block_dot for the two positions of a kb2_t against the same Q block (both halves).
[[gnu::always_inline]] inline vf block_dot2(kb2_t k, const int8_t* q, const int32_t* corr) {
  const __m512i qv =
      _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
  const __m512i c =
      _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr)));
  return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(c, k, qv));
}

#include "cpu/flash_decode.inl"
#undef KVRUN_FD_W

}  // namespace level_avx512
#pragma GCC pop_options

#endif  // KVRUN_FLASH_DECODE_X86

}  // namespace

FlashDecodeFn flash_decode_kernel(CpuLevel level) {
#if KVRUN_FLASH_DECODE_X86
  if (level == CpuLevel::avx512) return level_avx512::flash_decode_block;
  if (level == CpuLevel::avx2) return level_avx2::flash_decode_block;
#else
  (void)level;
#endif
  return level_scalar::flash_decode_block;
}

bool flash_decode_in_place(DType t, int64_t head_dim) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::FP8_E4M3:
    case DType::FP8_E5M2:
      return true;
    case DType::Q8_0:
    case DType::Q4_0:
      return head_dim % 32 == 0;
    default:
      return false;
  }
}

}  // namespace kvrun::cpu
