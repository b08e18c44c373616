// ops.cpp — element-wise and row ops (see ops.h).
#include "cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/fast_exp.h"
#include "cpu/op_kernels.h"
#include "fp16.h"

namespace kvrun::cpu {

void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    double sum = 0.0;
    for (int64_t i = 0; i < cols; ++i) sum += double(xr[i] * xr[i]);
    const float mean = float(sum / double(cols));
    const float scale = 1.0f / std::sqrt(mean + eps);
    if (w) {
      for (int64_t i = 0; i < cols; ++i) yr[i] = (xr[i] * scale) * w[i];
    } else {
      for (int64_t i = 0; i < cols; ++i) yr[i] = xr[i] * scale;
    }
  }
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
          const RopeConfig& cfg) {
  const int64_t half = cfg.n_rot / 2;
  const float theta_scale = std::pow(cfg.freq_base, -2.0f / float(cfg.n_rot));
  std::vector<float> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half));
  const RopeRotateFn rotate = op_kernels().rope_rotate;
  for (int64_t t = 0; t < n_tokens; ++t) {
    float theta = float(pos[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float ff = cfg.freq_factors ? cfg.freq_factors[i] : 1.0f;
      const float th = cfg.freq_scale * (theta / ff);
      cos_t[size_t(i)] = std::cos(th) * cfg.mscale;
      sin_t[size_t(i)] = std::sin(th) * cfg.mscale;
      theta *= theta_scale;
    }
    // The rotation of each head (op_kernels.h: x0·cos − x1·sin and x0·sin + x1·cos with the x0
    // product fused, as GCC compiles llama.cpp's rope loop; SIMD where available).
    for (int64_t h = 0; h < n_heads; ++h)
      rotate(x + (t * n_heads + h) * head_dim, cos_t.data(), sin_t.data(), half, cfg.neox);
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t rows, int64_t cols) {
  const int64_t body = cols - cols % kExpBlock;
  const SiluMulFn silu_mul = op_kernels().silu_mul;  // silu_lane · up, SIMD where available
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * cols;
    const float* u = up + r * cols;
    float* o = out + r * cols;
    silu_mul(g, u, o, body);
    for (int64_t i = body; i < cols; ++i) o[i] = silu_tail(g[i]) * u[i];
  }
}

void swiglu_oai(const float* gate, const float* up, float* out, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float g = std::min(gate[i], kSwiGluOaiLimit);
    const float u = std::max(std::min(up[i], kSwiGluOaiLimit), -kSwiGluOaiLimit);
    out[i] = g / (1.0f + std::exp(kSwiGluOaiAlpha * (-g))) * (u + 1.0f);
  }
}

namespace {

/// ggml's gelu table: for every f16 bit pattern, gelu of its value rounded to f16.
const std::vector<uint16_t>& gelu_f16_table() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(size_t(1) << 16);
    constexpr float kCoefA = 0.044715f, kSqrt2OverPi = 0.79788456080286535587989211986876f;
    for (size_t i = 0; i < t.size(); ++i) {
      const float x = fp16_to_f32(uint16_t(i));
      t[i] = f32_to_fp16(0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x))));
    }
    return t;
  }();
  return table;
}

}  // namespace

void geglu(const float* gate, const float* up, float* out, int64_t rows, int64_t cols) {
  const std::vector<uint16_t>& table = gelu_f16_table();
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float x = gate[i];
    const float g = x <= -10.0f ? 0.0f : x >= 10.0f ? x : fp16_to_f32(table[f32_to_fp16(x)]);
    out[i] = g * up[i];
  }
}

void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t rows,
                int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    double sum = 0.0;
    for (int64_t i = 0; i < cols; ++i) sum += double(xr[i]);
    const float mean = float(sum / double(cols));
    double sum2 = 0.0;
    for (int64_t i = 0; i < cols; ++i) {
      const float v = xr[i] - mean;
      yr[i] = v;
      sum2 += double(v * v);
    }
    const float var = float(sum2 / double(cols));
    const float scale = 1.0f / std::sqrt(var + eps);
    for (int64_t i = 0; i < cols; ++i) {
      float t = yr[i] * scale;
      if (w) t = t * w[i];
      if (b) t = t + b[i];
      yr[i] = t;
    }
  }
}

void gelu(const float* x, float* y, int64_t n) {
  constexpr float kCoefA = 0.044715f, kSqrt2OverPi = 0.79788456080286535587989211986876f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = v <= -10.0f  ? 0.0f
           : v >= 10.0f ? v
                        : 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * v * (1.0f + kCoefA * v * v)));
  }
}

void scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void softcap(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] * inv) * cap;
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

double softmax_exp(const float* x, float* y, int64_t n, float max) {
  // The 16-lane blocks (op_kernels.h: SIMD where available), then the libm tail.
  double sum = op_kernels().exp_blocks(x, y, n, max);
  for (int64_t i = n - n % kExpBlock; i < n; ++i) {
    y[i] = std::exp(x[i] - max);
    sum += double(y[i]);
  }
  return sum;
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::fmax(max, x[i]);
  const float inv = float(1.0 / softmax_exp(x, x, n, max));
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void get_rows(const Tensor& table, const int32_t* ids, int64_t n_ids, float* out) {
  const int64_t cols = table.ne[0];
  for (int64_t i = 0; i < n_ids; ++i) {
    if (ids[i] < 0 || ids[i] >= table.ne[1])
      throw std::out_of_range("get_rows: id " + std::to_string(ids[i]) + " outside [0, " +
                              std::to_string(table.ne[1]) + ")");
    table.row_to_float(out + i * cols, ids[i]);
  }
}

void masked_softmax(float* x, int64_t n_pos, int64_t n_kv, float scale, const float* sink) {
  float max = -INFINITY;
  for (int64_t j = 0; j < n_pos; ++j) {
    x[j] *= scale;
    max = std::fmax(max, x[j]);
  }
  for (int64_t j = n_pos; j < n_kv; ++j) x[j] = -INFINITY;
  if (sink) max = std::fmax(max, *sink);
  double sum = softmax_exp(x, x, n_kv, max);
  if (sink) sum += double(std::exp(*sink - max));
  const float inv = float(1.0 / sum);
  for (int64_t j = 0; j < n_kv; ++j) x[j] *= inv;
}

}  // namespace kvrun::cpu
