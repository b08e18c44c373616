// kv_layout.cpp — KV row sizes per cache type and the scalar reference row codec (see
// kv_layout.h for the layout).
//
// q8_0 and q4_0 rows are quantized the way llama.cpp writes its own quantized KV cache (ggml's
// CPY op into a q8_0/q4_0 cache row calls the CPU backend's `from_float` of that type; facts
// checked at llama.cpp commit c392e509, Feb 2025), so that a kvrun cache holds the same bytes as
// llama.cpp's and attention over it can match llama.cpp's -fa outputs:
//   q8_0: amax = max|x|, d = amax / 127 stored as f16, q = round-half-even(x · (127 / amax))
//         (the unrounded scale; ggml-cpu's AVX quantize_row_q8_0);
//   q4_0: m = the value of largest magnitude with its sign (first on ties), d = m / −8,
//         id = 1 / d (unrounded), q = min(15, trunc(x · id + 8.5)) with the multiply-add fused
//         (quantize_row_q4_0_ref as GCC contracts it), d stored as f16.
// These differ from quants.h's reference quantizers (which quantize against the f16-rounded
// scale) only in the last rounding of a few values; the block format is the same.
#include "kv_layout.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "blocks.h"
#include "fp16.h"
#include "quants.h"
#include "quants_kv.h"

namespace kvrun {

namespace {

/// Checks that `type` is a KV cache type and the shape is positive (throws otherwise).
void check_kv_row(DType type, int64_t n_head_kv, int64_t head_dim) {
  (void)kv_row_bytes(type, n_head_kv, head_dim);
}

/// One q8_0 block of 32 values as llama.cpp's CPU from_float (see the file comment).
void encode_block_q8_0(const float* x, block_q8_0* b) {
  float amax = 0.0f;
  for (int i = 0; i < QK8_0; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  b->d = f32_to_fp16_sat(amax / 127.0f);
  for (int i = 0; i < QK8_0; ++i) b->qs[i] = int8_t(std::nearbyint(x[i] * id));
}

/// One q4_0 block of 32 values as llama.cpp's quantize_row_q4_0_ref (see the file comment).
void encode_block_q4_0(const float* x, block_q4_0* b) {
  float amax = 0.0f, m = 0.0f;
  for (int i = 0; i < QK4_0; ++i) {
    if (amax < std::fabs(x[i])) {
      amax = std::fabs(x[i]);
      m = x[i];
    }
  }
  const float d = m / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = f32_to_fp16_sat(d);
  auto code = [id](float v) {
    const float t = std::fma(v, id, 8.5f);
    return uint8_t(std::clamp(t >= 0.0f ? int(t) : 0, 0, 15));
  };
  for (int j = 0; j < QK4_0 / 2; ++j)
    b->qs[j] = uint8_t(code(x[j]) | (code(x[j + QK4_0 / 2]) << 4));
}

/// q8_0 / q4_0 rows: blocks of 32 along the row, the last one zero-padded.
void encode_blocks32(DType type, const float* x, int64_t n, uint8_t* row) {
  const size_t bytes = type == DType::Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
  for (int64_t b = 0; b * 32 < n; ++b) {
    float tmp[32] = {};
    std::copy_n(x + b * 32, std::min<int64_t>(32, n - b * 32), tmp);
    if (type == DType::Q8_0)
      encode_block_q8_0(tmp, reinterpret_cast<block_q8_0*>(row + b * bytes));
    else
      encode_block_q4_0(tmp, reinterpret_cast<block_q4_0*>(row + b * bytes));
  }
}

void decode_blocks32(DType type, const uint8_t* row, int64_t n, float* x) {
  const size_t bytes = type == DType::Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
  for (int64_t b = 0; b * 32 < n; ++b) {
    float tmp[32];
    if (type == DType::Q8_0)
      dequantize_row_q8_0(row + b * bytes, tmp, 32);
    else
      dequantize_row_q4_0(row + b * bytes, tmp, 32);
    std::copy_n(tmp, std::min<int64_t>(32, n - b * 32), x + b * 32);
  }
}

/// nvfp4 geometry of a row: values per scale group, blocks per group, groups.
struct Nvfp4Groups {
  int64_t group, blocks, count;
};

Nvfp4Groups nvfp4_groups(int64_t n_head_kv, int64_t head_dim) {
  const int64_t g = std::lcm(head_dim, int64_t(QK_NVFP4));
  return {g, g / QK_NVFP4, (n_head_kv * head_dim + g - 1) / g};
}

void encode_nvfp4(const float* x, int64_t n, const Nvfp4Groups& gr, uint8_t* row) {
  auto* blocks = reinterpret_cast<block_nvfp4*>(row);
  uint8_t* scales = row + gr.count * gr.blocks * int64_t(sizeof(block_nvfp4));
  std::vector<float> pad;
  for (int64_t g = 0; g < gr.count; ++g) {
    const float* src = x + g * gr.group;
    if ((g + 1) * gr.group > n) {  // last group, zero-padded
      pad.assign(size_t(gr.group), 0.0f);
      std::copy_n(src, n - g * gr.group, pad.begin());
      src = pad.data();
    }
    const uint32_t s2 = f32_bits(quantize_row_nvfp4_scaled(src, blocks + g * gr.blocks, gr.group));
    for (int i = 0; i < 4; ++i) scales[4 * g + i] = uint8_t(s2 >> (8 * i));
  }
}

void decode_nvfp4(const uint8_t* row, int64_t n, const Nvfp4Groups& gr, float* x) {
  const auto* blocks = reinterpret_cast<const block_nvfp4*>(row);
  const uint8_t* scales = row + gr.count * gr.blocks * int64_t(sizeof(block_nvfp4));
  std::vector<float> pad;
  for (int64_t g = 0; g < gr.count; ++g) {
    uint32_t bits = 0;
    for (int i = 0; i < 4; ++i) bits |= uint32_t(scales[4 * g + i]) << (8 * i);
    const int64_t valid = std::min(gr.group, n - g * gr.group);
    float* dst = x + g * gr.group;
    if (valid < gr.group) {
      pad.resize(size_t(gr.group));
      dst = pad.data();
    }
    dequantize_row_nvfp4_scaled(blocks + g * gr.blocks, f32_from_bits(bits), dst, gr.group);
    if (dst != x + g * gr.group) std::copy_n(dst, valid, x + g * gr.group);
  }
}

}  // namespace

std::optional<DType> kv_type_from_name(std::string_view name) {
  if (name == "fp8") return DType::FP8_E4M3;
  auto t = dtype_from_name(name);
  if (!t) return std::nullopt;
  for (DType k : kKvCacheTypes)
    if (k == *t) return t;
  return std::nullopt;
}

const char* kv_type_name(DType t) { return traits(t).name; }

int64_t kv_row_bytes(DType type, int64_t n_head_kv, int64_t head_dim) {
  if (n_head_kv <= 0 || head_dim <= 0)
    throw std::invalid_argument("KV row needs n_head_kv > 0 and head_dim > 0");
  const int64_t n = n_head_kv * head_dim;
  auto blocks = [](int64_t values, int64_t per_block) {
    return (values + per_block - 1) / per_block;
  };
  switch (type) {
    case DType::F32:
      return n * 4;
    case DType::F16:
    case DType::BF16:
      return n * 2;
    case DType::Q8_0:
      return blocks(n, QK8_0) * int64_t(sizeof(block_q8_0));
    case DType::Q4_0:
      return blocks(n, QK4_0) * int64_t(sizeof(block_q4_0));
    case DType::FP8_E4M3:
    case DType::FP8_E5M2:
      return n + n_head_kv;  // one E8M0 scale byte per head
    case DType::NVFP4: {
      const int64_t group = std::lcm(head_dim, int64_t(QK_NVFP4));
      const int64_t n_groups = blocks(n, group);
      return n_groups * (group / QK_NVFP4) * int64_t(sizeof(block_nvfp4)) + n_groups * 4;
    }
    default:
      throw std::invalid_argument(std::string(traits(type).name) + " is not a KV cache type");
  }
}

bool kv_type_holds_mla(DType type, int64_t offset) {
  switch (type) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      return offset >= 0;
    case DType::Q8_0:
    case DType::Q4_0:
      return offset >= 0 && offset % 32 == 0;
    default:
      return false;
  }
}

int64_t kv_bytes_per_token(DType type_k, DType type_v, int64_t n_layer, int64_t n_head_kv,
                           int64_t head_dim_k, int64_t head_dim_v) {
  return n_layer * (kv_row_bytes(type_k, n_head_kv, head_dim_k) +
                    (head_dim_v == 0 ? 0 : kv_row_bytes(type_v, n_head_kv, head_dim_v)));
}

void kv_encode_row(DType type, int64_t n_head_kv, int64_t head_dim, const float* x, void* row) {
  check_kv_row(type, n_head_kv, head_dim);
  const int64_t n = n_head_kv * head_dim;
  auto* out = static_cast<uint8_t*>(row);
  switch (type) {
    case DType::F32:
      std::memcpy(out, x, size_t(n) * 4);
      return;
    case DType::F16:
      quantize_row_f16(x, out, n);
      return;
    case DType::BF16:
      quantize_row_bf16(x, out, n);
      return;
    case DType::Q8_0:
    case DType::Q4_0:
      encode_blocks32(type, x, n, out);
      return;
    case DType::FP8_E4M3:
    case DType::FP8_E5M2:
      for (int64_t h = 0; h < n_head_kv; ++h)
        out[n + h] = quantize_row_fp8_scaled(type, x + h * head_dim, out + h * head_dim, head_dim);
      return;
    default:  // NVFP4 (check_kv_row rejected everything else)
      encode_nvfp4(x, n, nvfp4_groups(n_head_kv, head_dim), out);
      return;
  }
}

void kv_decode_row(DType type, int64_t n_head_kv, int64_t head_dim, const void* row, float* x) {
  check_kv_row(type, n_head_kv, head_dim);
  const int64_t n = n_head_kv * head_dim;
  const auto* in = static_cast<const uint8_t*>(row);
  switch (type) {
    case DType::F32:
      std::memcpy(x, in, size_t(n) * 4);
      return;
    case DType::F16:
      dequantize_row_f16(in, x, n);
      return;
    case DType::BF16:
      dequantize_row_bf16(in, x, n);
      return;
    case DType::Q8_0:
    case DType::Q4_0:
      decode_blocks32(type, in, n, x);
      return;
    case DType::FP8_E4M3:
    case DType::FP8_E5M2:
      for (int64_t h = 0; h < n_head_kv; ++h)
        dequantize_row_fp8_scaled(type, in + h * head_dim, in[n + h], x + h * head_dim, head_dim);
      return;
    default:  // NVFP4
      decode_nvfp4(in, n, nvfp4_groups(n_head_kv, head_dim), x);
      return;
  }
}

}  // namespace kvrun
