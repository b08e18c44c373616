// vec_dot_float.cpp — f32 / f16 / bf16 row dots and the float activation converters.
//
// The f32/f16 dots follow llama.cpp's accumulation orders (see vec_dot.h) so that values
// rounded to f16 afterwards round the same way. f16·f16 products are exact in f32, so only the
// order of additions matters there; f32 dots use fused multiply-add as the SIMD code does.
#include <array>
#include <cmath>

#include "cpu/vec_dot.h"
#include "fp16.h"

namespace kvrun::cpu {

namespace {

constexpr int kLanes = 16;

/// The 65536 binary16 values as floats.
const std::array<float, 65536>& fp16_table() {
  static const std::array<float, 65536> table = [] {
    std::array<float, 65536> t{};
    for (uint32_t i = 0; i < 65536; ++i) t[i] = fp16_to_f32(uint16_t(i));
    return t;
  }();
  return table;
}

/// Σ a(i)·b(i) with kLanes partial sums; `get_a`/`get_b` decode element i.
template <typename A, typename B>
float lane_dot(int64_t n, A get_a, B get_b) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += get_a(i + l) * get_b(i + l);
  for (; i < n; ++i) acc[i % kLanes] += get_a(i) * get_b(i);
  float s = 0.0f;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

/// The 16-lane horizontal sum of a 512-bit register as GCC's _mm512_reduce_add_ps does it:
/// halves, quarters, then pairs.
inline float fold16(const float* v) {
  float s[8], t[4];
  for (int i = 0; i < 8; ++i) s[i] = v[i + 8] + v[i];
  for (int i = 0; i < 4; ++i) t[i] = s[i + 4] + s[i];
  const float u0 = t[0] + t[2], u1 = t[1] + t[3];
  return u0 + u1;
}

/// ggml_vec_dot order: 4 × 16 lanes over n & ~63, folded, plus the tail. `madd(i, c)` adds the
/// product of element i to lane value c (fused where the SIMD code is); `tail(i, s)` adds it to
/// the running sum s of the tail (of type `Tail`).
template <typename Tail, typename Fma, typename TailAdd>
float vec_order(int64_t n, Fma madd, TailAdd tail) {
  const int64_t np = n & ~int64_t(63);
  float acc[4][16] = {};
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 16; ++l) acc[j][l] = madd(i + 16 * j + l, acc[j][l]);
  for (int l = 0; l < 16; ++l) {
    acc[0][l] += acc[2][l];
    acc[1][l] += acc[3][l];
  }
  for (int l = 0; l < 16; ++l) acc[0][l] += acc[1][l];
  Tail sum = Tail(fold16(acc[0]));
  for (int64_t i = np; i < n; ++i) sum = tail(i, sum);
  return float(sum);
}

/// tinyBLAS order: one 16-lane accumulator over n (a multiple of 16), folded.
template <typename Fma>
float gemm_order(int64_t n, Fma madd) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] = madd(i + l, acc[l]);
  return fold16(acc);
}

}  // namespace

float fp16_lut(uint16_t h) { return fp16_table()[h]; }

void act_from_float_f32(const float* src, void* dst, int64_t n) {
  float* y = static_cast<float*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = src[i];
}

void act_from_float_f16(const float* src, void* dst, int64_t n) {
  uint16_t* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(src[i]);
}

void act_from_float_bf16(const float* src, void* dst, int64_t n) {
  uint16_t* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(src[i]);
}

float vec_dot_f32(int64_t n, const void* w, const void* x) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(x);
  // The tail is the loop `sumf += x[i]*y[i]` in f32 (ggml_vec_dot_f32 in ggml-cpu.c), which
  // GCC 12 (-O3 -march=native, C as gnu11 so -ffp-contract=fast) compiles into an in-order
  // vectorized reduction: the products of 16-element chunks, then of one 8-element chunk, come
  // from a vector multiply and are added one by one (unfused); the last < 8 elements are scalar
  // code where the multiply-add is contracted to an FMA (unfused_end marks the switch).
  // Checked bit for bit against ggml built with GCC 12 and the Zen 4 -march=native flags.
  const int64_t np = n & ~int64_t(63);
  const int64_t c = n - np;
  const int64_t unfused_end = np + c / 16 * 16 + (c % 16 >= 8 ? 8 : 0);
  return vec_order<float>(
      n, [a, b](int64_t i, float acc) { return std::fma(a[i], b[i], acc); },
      [a, b, unfused_end](int64_t i, float sum) {
        return i < unfused_end ? sum + a[i] * b[i] : std::fma(a[i], b[i], sum);
      });
}

float vec_dot_f16(int64_t n, const void* w, const void* x) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const uint16_t* b = static_cast<const uint16_t*>(x);
  const float* t = fp16_table().data();
  // Tail: the f32 product (exact for two f16 values) added in double; a product converted to
  // double before the add cannot be contracted.
  return vec_order<double>(
      n, [a, b, t](int64_t i, float c) { return c + t[a[i]] * t[b[i]]; },
      [a, b, t](int64_t i, double s) { return s + double(t[a[i]] * t[b[i]]); });
}

float gemm_dot_f32(int64_t n, const void* w, const void* x) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(x);
  return gemm_order(n, [a, b](int64_t i, float c) { return std::fma(a[i], b[i], c); });
}

float gemm_dot_f16(int64_t n, const void* w, const void* x) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const uint16_t* b = static_cast<const uint16_t*>(x);
  const float* t = fp16_table().data();
  return gemm_order(n, [a, b, t](int64_t i, float c) { return c + t[a[i]] * t[b[i]]; });
}

float vec_dot_bf16(int64_t n, const void* w, const void* x) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const uint16_t* b = static_cast<const uint16_t*>(x);
  return lane_dot(
      n, [a](int64_t i) { return bf16_to_f32(a[i]); },
      [b](int64_t i) { return bf16_to_f32(b[i]); });
}

}  // namespace kvrun::cpu
