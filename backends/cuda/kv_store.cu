// kv_store.cu — one thread per encoding unit of a row: an element (f32, f16, bf16), a block of
// 32 (q8_0, q4_0), a head (fp8) or an nvfp4 scale group (see kv_store.h, kv_encode.cuh).
#include <stdexcept>
#include <string>

#include "cuda/cuda_check.cuh"
#include "cuda/cuda_context_impl.cuh"
#include "cuda/hadamard.h"
#include "cuda/kv_encode.cuh"
#include "cuda/kv_format.cuh"
#include "cuda/kv_store.h"
#include "kv_layout.h"

namespace kvrun::cuda {
namespace {

/// Encoding units per row of format f (see the file comment).
int64_t units_per_row(const KvFormat& f) {
  const int64_t n = int64_t(f.n_head_kv) * f.head_dim;
  switch (f.type) {
    case DType::Q8_0:
    case DType::Q4_0:
      return (n + 31) / 32;
    case DType::FP8_E4M3:
    case DType::FP8_E5M2:
      return f.n_head_kv;
    case DType::NVFP4:
      return (n + f.nvfp4_group - 1) / f.nvfp4_group;
    default:
      return n;
  }
}

/// Largest nvfp4 scale group the kernel encodes in registers (lcm(head_dim, 16) ≤ this).
constexpr int kMaxGroup = 256;

__global__ void k_kv_store(KvFormat f, const float* src, const int64_t* cells, uint8_t* dst,
                           int64_t row_bytes, int64_t n_rows, int64_t units) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_rows * units) return;
  const int64_t r = i / units, u = i % units;
  const int n = f.n_head_kv * f.head_dim;
  const float* x = src + r * n;
  uint8_t* row = dst + cells[r] * row_bytes;
  switch (f.type) {
    case DType::F32:
      reinterpret_cast<float*>(row)[u] = x[u];
      return;
    case DType::F16:
      reinterpret_cast<uint16_t*>(row)[u] = enc_f16(x[u]);
      return;
    case DType::BF16:
      reinterpret_cast<uint16_t*>(row)[u] = enc_bf16(x[u]);
      return;
    case DType::Q8_0:
    case DType::Q4_0: {
      float tmp[32];
      for (int j = 0; j < 32; ++j) tmp[j] = u * 32 + j < n ? x[u * 32 + j] : 0.0f;
      if (f.type == DType::Q8_0)
        enc_q8_0(tmp, row + u * int64_t(sizeof(block_q8_0)));
      else
        enc_q4_0(tmp, row + u * int64_t(sizeof(block_q4_0)));
      return;
    }
    case DType::FP8_E4M3:
    case DType::FP8_E5M2:
      row[n + u] = enc_fp8_scaled(x + u * f.head_dim, row + u * f.head_dim, f.head_dim,
                                  f.type == DType::FP8_E4M3);
      return;
    default: {  // NVFP4: one scale group, zero-padded past the row's end
      const int g = f.nvfp4_group;
      float tmp[kMaxGroup];
      for (int j = 0; j < g; ++j) tmp[j] = u * g + j < n ? x[u * g + j] : 0.0f;
      const float s2 = nvfp4_s2(tmp, g);
      uint8_t* blocks = row + u * (g / QK_NVFP4) * int64_t(sizeof(block_nvfp4));
      for (int b = 0; b < g / QK_NVFP4; ++b)
        enc_nvfp4_block(tmp + b * QK_NVFP4, s2, blocks + b * int64_t(sizeof(block_nvfp4)));
      const uint32_t bits = __float_as_uint(s2);
      uint8_t* sp = row + f.nvfp4_scale_off + 4 * u;
      for (int j = 0; j < 4; ++j) sp[j] = uint8_t(bits >> (8 * j));
      return;
    }
  }
}

void store_one(Context::Impl& c, DType t, int64_t n_head_kv, int64_t head_dim, int64_t row_bytes,
               const AttnBatch& batch, const float* src, uint8_t* dst, const char* which) {
  if (!kv_type_supported(t))
    throw std::invalid_argument(std::string("cuda kv_store: ") + traits(t).name +
                                " is not a KV cache type");
  if (row_bytes != kv_row_bytes(t, n_head_kv, head_dim))
    throw std::invalid_argument(std::string("cuda kv_store: ") + which +
                                " row bytes do not match the type and shape");
  const KvFormat f = make_kv_format(t, n_head_kv, head_dim);
  if (t == DType::NVFP4 && f.nvfp4_group > kMaxGroup)
    throw std::invalid_argument(
        "cuda kv_store: nvfp4 with lcm(head_dim, 16) > 256 is not "
        "supported");
  const int64_t units = units_per_row(f), items = batch.n_rows() * units;
  const int threads =
      (t == DType::NVFP4 || t == DType::FP8_E4M3 || t == DType::FP8_E5M2) ? 64 : 256;
  k_kv_store<<<grid_for(items, threads), threads, 0, c.stream>>>(f, src, batch.cells(), dst,
                                                                 row_bytes, batch.n_rows(), units);
  check_launch("kv_store");
}

}  // namespace

bool kv_type_supported(DType t) {
  for (DType k : kKvCacheTypes)
    if (k == t) return true;
  return false;
}

void kv_store(Context& ctx, const PagedKvLayer& kv, const AttnShape& shape, const AttnBatch& batch,
              const float* k, const float* v) {
  if (batch.block_size() != kv.block_size)
    throw std::invalid_argument("cuda kv_store: batch and layer block sizes differ");
  if (batch.n_rows() == 0) return;
  Context::Impl& c = ctx.impl();
  c.activate();
  if (shape.rotate) {  // K rotated per head first, as cpu::paged_kv_store does
    const int64_t n = batch.n_rows() * shape.n_head_kv * shape.head_dim;
    auto* rk = static_cast<float*>(c.rotated.get(c.stream, size_t(n) * 4));
    hadamard_rotate(ctx, k, rk, batch.n_rows(), shape.n_head_kv, shape.head_dim);
    k = rk;
  }
  store_one(c, kv.k_type, shape.n_head_kv, shape.head_dim, kv.k_row_bytes, batch, k, kv.k, "K");
  store_one(c, kv.v_type, shape.n_head_kv, shape.head_dim_v, kv.v_row_bytes, batch, v, kv.v, "V");
}

}  // namespace kvrun::cuda
