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

__global__ void k_kv_store(KvFormat f, const float* src, const int64_t* cells, uint8_t* dst,
                           int64_t row_bytes, int64_t n_rows, int64_t units) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_rows * units) return;
  const int64_t r = i / units;
  encode_kv_unit(f, src + r * f.n_head_kv * f.head_dim, dst + cells[r] * row_bytes, i % units);
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
  if (t == DType::NVFP4 && f.nvfp4_group > kMaxNvfp4Group)
    throw std::invalid_argument(
        "cuda kv_store: nvfp4 with lcm(head_dim, 16) > 256 is not "
        "supported");
  const int64_t units = kv_units_per_row(f), items = batch.n_rows() * units;
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
