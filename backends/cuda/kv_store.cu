// kv_store.cu — one thread per encoding unit of a row: an element (f32, f16, bf16) or a block of
// 32 (q8_0, q4_0); fp8 and nvfp4 rows one thread per 8 values of a head / 16-value block, each
// finding its head's or scale group's scale itself (see kv_store.h, kv_encode.cuh).
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

__global__ void k_kv_store(KvFormat f, const float* src, const int64_t* cells, KvRows dst,
                           int64_t n_rows, int64_t units) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_rows * units) return;
  const int64_t r = i / units;
  encode_kv_unit(f, src + r * f.n_head_kv * f.head_dim, dst.row(cells[r]), i % units);
}

/// nvfp4 rows with one thread per 16-value block instead of one per scale group (a decode step
/// has only n_head_kv · head_dim / group groups per row, each encoding up to 16 blocks with the
/// reference's double-precision scale search one after another): every thread of a group finds
/// the group's second-level scale from its values itself, encodes its block, and the group's
/// first thread writes the scale. The bytes equal encode_kv_unit's.
__global__ void k_kv_store_nvfp4(KvFormat f, const float* src, const int64_t* cells, KvRows dst,
                                 int64_t n_rows, int64_t units) {
  const int bpg = f.nvfp4_group / QK_NVFP4;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_rows * units * bpg) return;
  const int64_t r = i / (units * bpg), u = i / bpg % units;
  const int b = int(i % bpg), n = f.n_head_kv * f.head_dim;
  const int64_t g0 = u * f.nvfp4_group;
  const float* x = src + r * n;
  // Values past the row's end are the zeros encode_kv_unit pads with: they change no maximum.
  const float s2 =
      nvfp4_s2_of_absmax(finite_absmax(x + g0, int(min(int64_t(f.nvfp4_group), int64_t(n) - g0))));
  float tmp[QK_NVFP4];
  for (int j = 0; j < QK_NVFP4; ++j) {
    const int64_t e = g0 + b * QK_NVFP4 + j;
    tmp[j] = e < n ? x[e] : 0.0f;
  }
  uint8_t* row = dst.row(cells[r]);
  enc_nvfp4_block(tmp, s2, row + (u * bpg + b) * int64_t(sizeof(block_nvfp4)));
  if (b == 0) {
    const uint32_t bits = f32_as_bits(s2);
    for (int j = 0; j < 4; ++j) row[f.nvfp4_scale_off + 4 * u + j] = uint8_t(bits >> (8 * j));
  }
}

/// fp8 rows with one thread per 8 values of a head instead of one per head: every thread of a
/// head finds the head's scale from its values itself, encodes its 8 values, and the head's
/// first thread writes the scale byte. The bytes equal encode_kv_unit's.
__global__ void k_kv_store_fp8(KvFormat f, const float* src, const int64_t* cells, KvRows dst,
                               int64_t n_rows) {
  const int cph = (f.head_dim + 7) / 8, n = f.n_head_kv * f.head_dim;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_rows * f.n_head_kv * cph) return;
  const int64_t r = i / (int64_t(f.n_head_kv) * cph);
  const int h = int(i / cph % f.n_head_kv), c = int(i % cph);
  const bool e4m3 = f.type == DType::FP8_E4M3;
  const float* x = src + r * n + int64_t(h) * f.head_dim;
  const int e = fp8_scale_exp(finite_absmax(x, f.head_dim), e4m3);
  uint8_t* row = dst.row(cells[r]);
  for (int j = c * 8; j < min(c * 8 + 8, f.head_dim); ++j)
    row[h * f.head_dim + j] = enc_fp8(ldexpf(x[j], -e), e4m3);
  if (c == 0) row[n + h] = uint8_t(e + 127);
}

void store_one(Context::Impl& c, DType t, int64_t n_head_kv, int64_t head_dim,
               const AttnBatch& batch, const float* src, const KvRows& dst, const char* which) {
  const int64_t row_bytes = dst.row_bytes;
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
  if (t == DType::NVFP4) {
    const int64_t threads = items * (f.nvfp4_group / QK_NVFP4);
    k_kv_store_nvfp4<<<grid_for(threads, 64), 64, 0, c.stream>>>(f, src, batch.cells(), dst,
                                                                 batch.n_rows(), units);
    check_launch("kv_store: nvfp4");
    return;
  }
  if (t == DType::FP8_E4M3 || t == DType::FP8_E5M2) {
    const int64_t threads = batch.n_rows() * n_head_kv * ((head_dim + 7) / 8);
    k_kv_store_fp8<<<grid_for(threads, 128), 128, 0, c.stream>>>(f, src, batch.cells(), dst,
                                                                 batch.n_rows());
    check_launch("kv_store: fp8");
    return;
  }
  const int threads = 256;
  k_kv_store<<<grid_for(items, threads), threads, 0, c.stream>>>(f, src, batch.cells(), dst,
                                                                 batch.n_rows(), units);
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
  // Rows of host-tier slots (KvLayer::k_slow) are written in place in pinned host memory.
  store_one(c, kv.k_type, shape.n_head_kv, shape.head_dim, batch, k, kv_rows(kv, false), "K");
  store_one(c, kv.v_type, shape.n_head_kv, shape.head_dim_v, batch, v, kv_rows(kv, true), "V");
}

}  // namespace kvrun::cuda
