// kernels_neon_float.cpp — the NEON f32 / f16 / bf16 dots and their tiles (kernels_neon.h).
// Not written from llama.cpp's code; the orders are those vec_dot_float.cpp documents: the
// scalar code's 16 lanes are four 128-bit registers (neon_lanes.h), with the same fused
// multiply-adds (an f16·f16 or bf16·bf16 product is exact in f32, so fusing changes nothing
// there) and the same folds and tails, bit for bit.
#include <arm_neon.h>

#include <cmath>

#include "cpu/arm/kernels_neon.h"
#include "cpu/arm/neon_lanes.h"
#include "fp16.h"

namespace kvrun::cpu::neon {

namespace {

inline F16Lanes load16(const float* p) {
  return {{vld1q_f32(p), vld1q_f32(p + 4), vld1q_f32(p + 8), vld1q_f32(p + 12)}};
}

/// 16 binary16 values as floats (exact).
inline F16Lanes load16(const uint16_t* p) {
  F16Lanes r;
  for (int i = 0; i < 4; ++i) r.v[i] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p + 4 * i)));
  return r;
}

/// 16 bfloat16 values as floats (exact: the bits shifted into the high half).
inline F16Lanes load16_bf16(const uint16_t* p) {
  F16Lanes r;
  for (int i = 0; i < 4; ++i) r.v[i] = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p + 4 * i), 16));
  return r;
}

/// ggml_vec_dot order over the first np (a multiple of 64) elements of a·b: 4 accumulators of
/// 16 lanes, acc0 + acc2 and acc1 + acc3, then their sum, folded.
template <typename T>
inline float vec_body(int64_t np, const T* a, const T* b) {
  F16Lanes acc[4] = {zero16(), zero16(), zero16(), zero16()};
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      acc[j] = fma16(acc[j], load16(a + i + 16 * j), load16(b + i + 16 * j));
  return fold16(add16(add16(acc[0], acc[2]), add16(acc[1], acc[3])));
}

/// tinyBLAS order for R weight rows × C activation rows: one 16-lane accumulator per output over
/// n (a multiple of 16), folded; y[c·ys + r].
template <int R, int C, typename T>
inline void gemm_tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y,
                      size_t ys) {
  F16Lanes acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = zero16();
  for (int64_t i = 0; i < n; i += 16) {
    F16Lanes b[C];
    for (int c = 0; c < C; ++c) b[c] = load16(reinterpret_cast<const T*>(x + size_t(c) * xs) + i);
    for (int r = 0; r < R; ++r) {
      const F16Lanes a = load16(reinterpret_cast<const T*>(w + size_t(r) * ws) + i);
      for (int c = 0; c < C; ++c) acc[r][c] = fma16(acc[r][c], a, b[c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[size_t(c) * ys + size_t(r)] = fold16(acc[r][c]);
}

constexpr int kGemmR = 2, kGemmC = 2;  // 16 accumulator registers of 32

template <typename T>
void gemm_tiles(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs,
                int64_t nx, float* y, size_t ys) {
  for_tiles<kGemmR, kGemmC>(w, ws, nrows, x, xs, nx, y, ys,
                            [&]<int R, int C>(const uint8_t* wr, const uint8_t* xr, float* yr) {
                              gemm_tile<R, C, T>(n, wr, ws, xr, xs, yr, ys);
                            });
}

template <typename T>
float gemm_dot(int64_t n, const void* w, const void* x) {
  float y;
  gemm_tile<1, 1, T>(n, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(x), 0, &y,
                     0);
  return y;
}

}  // namespace

void act_from_float_f16(const float* src, void* dst, int64_t n) {
  uint16_t* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    // FCVT rounds to nearest even with gradual underflow and overflow to inf, as f32_to_fp16;
    // a NaN keeps its payload's top bits there, where f32_to_fp16 gives sign | 0x7e00.
    const float32x4_t v = vld1q_f32(src + i);
    const uint16x4_t h = vreinterpret_u16_f16(vcvt_f16_f32(v));
    const uint16x4_t nan = vmovn_u32(vmvnq_u32(vceqq_f32(v, v)));
    const uint16x4_t canonical = vorr_u16(vand_u16(h, vdup_n_u16(0x8000)), vdup_n_u16(0x7e00));
    vst1_u16(y + i, vbsl_u16(nan, canonical, h));
  }
  for (; i < n; ++i) y[i] = f32_to_fp16(src[i]);
}

float vec_dot_f32(int64_t n, const void* w, const void* x) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(x);
  const int64_t np = n & ~int64_t(63);
  float sum = vec_body(np, a, b);
  // The tail as vec_dot_float.cpp: unfused up to unfused_end, fused after.
  const int64_t c = n - np;
  const int64_t unfused_end = np + c / 16 * 16 + (c % 16 >= 8 ? 8 : 0);
  for (int64_t i = np; i < n; ++i) {
    if (i < unfused_end) {
      const float p = a[i] * b[i];
      sum = sum + p;
    } else {
      sum = std::fma(a[i], b[i], sum);
    }
  }
  return sum;
}

float vec_dot_f16(int64_t n, const void* w, const void* x) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const uint16_t* b = static_cast<const uint16_t*>(x);
  const int64_t np = n & ~int64_t(63);
  double sum = vec_body(np, a, b);
  for (int64_t i = np; i < n; ++i) sum += double(fp16_to_f32(a[i]) * fp16_to_f32(b[i]));
  return float(sum);
}

float vec_dot_bf16(int64_t n, const void* w, const void* x) {
  // lane_dot: 16 lane sums, the tail into lane i % 16, then the lanes added in order from 0.
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const uint16_t* b = static_cast<const uint16_t*>(x);
  F16Lanes acc = zero16();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = fma16(acc, load16_bf16(a + i), load16_bf16(b + i));
  float lane[16];
  for (int k = 0; k < 4; ++k) vst1q_f32(lane + 4 * k, acc.v[k]);
  for (; i < n; ++i) {
    const float p = bf16_to_f32(a[i]) * bf16_to_f32(b[i]);
    lane[i % 16] = lane[i % 16] + p;
  }
  float sum = 0.0f;
  for (int l = 0; l < 16; ++l) sum = sum + lane[l];
  return sum;
}

float gemm_dot_f32(int64_t n, const void* w, const void* x) { return gemm_dot<float>(n, w, x); }

float gemm_dot_f16(int64_t n, const void* w, const void* x) { return gemm_dot<uint16_t>(n, w, x); }

void tile_gemm_f32(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs,
                   int64_t nx, float* y, size_t ys) {
  gemm_tiles<float>(n, w, ws, nrows, x, xs, nx, y, ys);
}

void tile_gemm_f16(int64_t n, const void* w, size_t ws, int64_t nrows, const void* x, size_t xs,
                   int64_t nx, float* y, size_t ys) {
  gemm_tiles<uint16_t>(n, w, ws, nrows, x, xs, nx, y, ys);
}

}  // namespace kvrun::cpu::neon
