// get_rows.cu — one block per id, each thread decoding chunks of the row (see get_rows.h).
#include <stdexcept>
#include <string>

#include "cuda/cuda_check.cuh"
#include "cuda/cuda_context_impl.cuh"
#include "cuda/get_rows.h"
#include "cuda/weight_decode.cuh"

namespace kvrun::cuda {
namespace {

template <typename R>
__global__ void k_get_rows(R rd, int64_t n_rows, int64_t cols, const int32_t* ids, float* out) {
  constexpr int V = R::kValues;
  const int32_t id = ids[blockIdx.x];
  float* o = out + int64_t(blockIdx.x) * cols;
  const bool valid = id >= 0 && id < n_rows;
  for (int64_t c = threadIdx.x; c < cols / V; c += blockDim.x) {
    float v[V];
    if (valid) {
      rd.decode(id, c, v);
    } else {
      for (int j = 0; j < V; ++j) v[j] = __uint_as_float(0x7fc00000u);
    }
    for (int j = 0; j < V; ++j) o[c * V + j] = v[j];
  }
}

}  // namespace

bool get_rows_supported(DType t, int64_t cols) {
  const int chunk = weight_chunk_values(t);
  return chunk > 0 && cols > 0 && cols % chunk == 0 && cols % traits(t).block_elems == 0;
}

void get_rows(Context& ctx, const Tensor& table, const int32_t* ids, int64_t n_ids, float* out) {
  if (!get_rows_supported(table.type, table.ne[0]))
    throw std::invalid_argument(std::string("cuda get_rows: unsupported table type ") +
                                traits(table.type).name);
  if (n_ids <= 0) return;
  Context::Impl& c = ctx.impl();
  c.activate();
  with_reader(table, [&](auto rd) {
    k_get_rows<<<unsigned(n_ids), 128, 0, c.stream>>>(rd, table.ne[1], table.ne[0], ids, out);
  });
  check_launch("get_rows");
}

}  // namespace kvrun::cuda
