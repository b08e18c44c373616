// matmul.cu — the CUDA matmul (see matmul.h): matrix-vector kernel for decode, cuBLAS on
// dequantized tiles for prefill.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/cuda_check.cuh"
#include "cuda/cuda_context_impl.cuh"
#include "cuda/matmul.h"
#include "cuda/weight_decode.cuh"

namespace kvrun::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;  // weight rows per block of the matrix-vector kernel

/// Dot products of weight rows (read through R: StoredRows or SplitRows) with up to NR
/// activation rows: warp w of block b takes weight row b·kWarpsPerBlock + w; its lanes walk the
/// row's chunks lane, lane + 32, … and keep one f32 partial per activation row, summed over the
/// warp at the end.
template <typename R, int NR>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    k_matvec(R rd, int64_t m, int64_t k, const float* x, int n, float* y) {
  constexpr int V = R::kValues;
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= m) return;
  float acc[NR] = {};
  const int64_t nc = k / V;
  for (int64_t c = lane; c < nc; c += 32) {
    float v[V];
    rd.decode(row, c, v);
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      if (r >= n) break;
      const float4* xr = reinterpret_cast<const float4*>(x + r * k + c * V);
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < V / 4; ++i) {
        const float4 xv = xr[i];
        s += v[4 * i] * xv.x + v[4 * i + 1] * xv.y + v[4 * i + 2] * xv.z + v[4 * i + 3] * xv.w;
      }
      acc[r] += s;
    }
  }
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    float s = acc[r];
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0 && r < n) y[r * m + row] = s;
  }
}

/// One activation row (the decode of one sequence) against RW consecutive weight rows per warp:
/// each lane loads its chunk of x once and dots it with the RW rows' chunks, so x costs 1/RW of
/// the loads it costs in k_matvec (the decode kernel was load-instruction bound: an H200 read
/// q4_0 rows at 470 GB/s there, f16 ones, with fewer loads per byte, at 3.4 TB/s).
template <typename R, int RW>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    k_matvec1(R rd, int64_t m, int64_t k, const float* x, float* y) {
  constexpr int V = R::kValues;
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32) * RW;
  if (row0 >= m) return;
  float acc[RW] = {};
  const int64_t nc = k / V;
  for (int64_t c = lane; c < nc; c += 32) {
    float xv[V];
    const float4* xr = reinterpret_cast<const float4*>(x + c * V);
#pragma unroll
    for (int i = 0; i < V / 4; ++i) {
      const float4 t = xr[i];
      xv[4 * i] = t.x, xv[4 * i + 1] = t.y, xv[4 * i + 2] = t.z, xv[4 * i + 3] = t.w;
    }
#pragma unroll
    for (int j = 0; j < RW; ++j) {
      if (row0 + j >= m) break;
      float v[V];
      rd.decode(row0 + j, c, v);
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < V / 4; ++i)
        s += v[4 * i] * xv[4 * i] + v[4 * i + 1] * xv[4 * i + 1] + v[4 * i + 2] * xv[4 * i + 2] +
             v[4 * i + 3] * xv[4 * i + 3];
      acc[j] += s;
    }
  }
#pragma unroll
  for (int j = 0; j < RW; ++j) {
    float s = acc[j];
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0 && row0 + j < m) y[row0 + j] = s;
  }
}

/// x [n_blocks · 32] f32 (n rows of k, k a multiple of 32) quantized per block of 32 for the
/// integer dot products exactly as the CPU backend quantizes activations for q4_0 / q8_0
/// weights (backends/cpu act_from_float_q8_0: q = round-half-even(x · 127 / absmax), d =
/// f16(absmax / 127)): xq the int8 values, ds [n_blocks] (d, Σ xq as an exact float). One warp
/// per block, lane i quantizes value i.
__global__ void k_quantize_act_q8(const float* x, int64_t n_blocks, int8_t* xq, float2* ds) {
  const int64_t blk = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (blk >= n_blocks) return;  // whole warps: blockDim is a multiple of 32
  const float v = x[blk * 32 + lane];
  float amax = fabsf(v);
  for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const float d = __half2float(__float2half_rn(amax / 127.0f));
  const int q = __float2int_rn(v * id);
  xq[blk * 32 + lane] = int8_t(q);
  int sum = q;
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) ds[blk] = make_float2(d, float(sum));
}

/// The decode matmul of split q4_0 / q8_0 / q6_K / q4_K / q5_K weights (R: SplitRows) against
/// activations quantized by k_quantize_act_q8: integer dot products (dp4a) per 32-value block
/// instead of 32 int → f32 conversions and FMAs. RW weight rows per warp, up to NR activation rows
/// (n at run time); lanes walk the blocks lane, lane + 32, … and each weight block is loaded once
/// for all n.
template <typename R, int RW, int NR>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    k_matvec_q8(R rd, int64_t m, int64_t k, const int8_t* xq, const float2* ds, int n, float* y) {
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32) * RW;
  if (row0 >= m) return;
  const int64_t nb = k / 32;
  float acc[NR][RW] = {};
  for (int64_t c = lane; c < nb; c += 32) {
    ActQ8 a[NR];
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      if (r >= n) break;
      a[r] = load_act_q8(xq, ds, r * nb + c);
    }
#pragma unroll
    for (int j = 0; j < RW; ++j) {
      if (row0 + j >= m) break;
      const typename R::Block wb = rd.load(row0 + j, c);
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        if (r >= n) break;
        acc[r][j] += R::dot_q8(wb, a[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < NR; ++r)
#pragma unroll
    for (int j = 0; j < RW; ++j) {
      float s = acc[r][j];
      for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == 0 && r < n && row0 + j < m) y[r * m + row0 + j] = s;
    }
}

/// Weight rows row0 … row0 + RW − 1 of one activation row by one warp, each lane loading U of its
/// blocks (for all RW rows) before it multiplies any: U · RW weight blocks in flight per lane
/// instead of RW. A decode matrix of k = 4096 is 128 blocks a row, four per lane, so the rolled
/// loop waited on four rounds of loads one after the other (an H200 read 4096 × 4096 q4_0 at
/// 1.4 TB/s, 1024 × 4096 at 0.4 TB/s). Every lane still adds its blocks in the order lane,
/// lane + 32, …: the sums equal k_matvec_q8's bit for bit, whatever RW and U.
template <typename R, int RW, int U>
__device__ __forceinline__ void matvec_q8_1_rows(const R& rd, int64_t m, int64_t k,
                                                 const int8_t* xq, const float2* ds, float* y,
                                                 int64_t row0) {
  const int lane = threadIdx.x % 32;
  const int64_t nb = k / 32;
  float acc[RW] = {};
  for (int64_t c0 = lane; c0 < nb; c0 += 32 * U) {
    ActQ8 a[U];
    typename R::Block wb[U][RW];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + 32 * u;
      if (c >= nb) break;
      a[u] = load_act_q8(xq, ds, c);
#pragma unroll
      for (int j = 0; j < RW; ++j)
        if (row0 + j < m) wb[u][j] = rd.load(row0 + j, c);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c0 + 32 * u >= nb) break;
#pragma unroll
      for (int j = 0; j < RW; ++j)
        if (row0 + j < m) acc[j] += R::dot_q8(wb[u][j], a[u]);
    }
  }
#pragma unroll
  for (int j = 0; j < RW; ++j) {
    float s = acc[j];
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0 && row0 + j < m) y[row0 + j] = s;
  }
}

/// k_matvec_q8 for one activation row (matvec_q8_1_rows): warp w of block b takes rows
/// (b · kWarpsPerBlock + w) · RW on.
template <typename R, int RW, int U>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    k_matvec_q8_1(R rd, int64_t m, int64_t k, const int8_t* xq, const float2* ds, float* y) {
  const int64_t row0 = (int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32) * RW;
  if (row0 < m) matvec_q8_1_rows<R, RW, U>(rd, m, k, xq, ds, y, row0);
}

/// Outputs of one fused launch (k_matvec_q8_1_fused): at most kMaxFused weights of one type and
/// k reading the same quantized activation row.
constexpr int kMaxFused = 3;
template <typename R>
struct FusedOuts {
  R rd[kMaxFused];
  int64_t m[kMaxFused];
  float* y[kMaxFused];
  unsigned first_block[kMaxFused];  ///< the grid's blocks of output i start here
  int n;
};

/// k_matvec_q8_1 over up to kMaxFused outputs in one launch: a llama layer's q, k and v (or gate
/// and up) are 3 (2) launches otherwise, and its k and v, 1024 rows each at 8B shapes, are too
/// small alone to keep an H200's memory busy (3.8 µs for 2.4 MB, 0.6 TB/s). Each block works on
/// one output; the rows and sums are k_matvec_q8_1's.
template <typename R, int RW, int U>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    k_matvec_q8_1_fused(FusedOuts<R> f, int64_t k, const int8_t* xq, const float2* ds) {
  const unsigned b = blockIdx.x;
  const int i = f.n > 2 && b >= f.first_block[2] ? 2 : f.n > 1 && b >= f.first_block[1] ? 1 : 0;
  const R rd = i == 0 ? f.rd[0] : i == 1 ? f.rd[1] : f.rd[2];
  const int64_t m = i == 0 ? f.m[0] : i == 1 ? f.m[1] : f.m[2];
  float* y = i == 0 ? f.y[0] : i == 1 ? f.y[1] : f.y[2];
  const int64_t row0 = (int64_t(b - f.first_block[i]) * kWarpsPerBlock + threadIdx.x / 32) * RW;
  if (row0 < m) matvec_q8_1_rows<R, RW, U>(rd, m, k, xq, ds, y, row0);
}

/// x [n][k] quantized to int8 blocks (k_quantize_act_q8) into the context's act_q8 scratch:
/// the quants, then the blocks' (scale, sum) pairs.
struct ActQ8Rows {
  const int8_t* q;
  const float2* ds;
};
ActQ8Rows quantize_act_q8(Context::Impl& c, const float* x, int64_t n, int64_t k) {
  const int64_t blocks = n * k / 32;
  auto* xq = static_cast<int8_t*>(c.act_q8.get(c.stream, size_t(blocks) * 40));
  auto* ds = reinterpret_cast<float2*>(xq + blocks * 32);
  k_quantize_act_q8<<<grid_for(blocks * 32, 256), 256, 0, c.stream>>>(x, blocks, xq, ds);
  return {xq, ds};
}

/// Calls f(RW, U) (std::integral_constant values) with the weight rows per warp of the one-row
/// decode kernels over m rows (k_matvec1, k_matvec_q8_1) — more rows a warp where there are rows
/// enough to keep every multiprocessor busy with fewer warps — and the blocks in flight per lane
/// of k_matvec_q8_1.
template <typename F>
void with_rows_per_warp(int64_t m, F&& f) {
  using I = std::integral_constant<int, 1>;
  using II = std::integral_constant<int, 2>;
  using IV = std::integral_constant<int, 4>;
  if (m >= 8192)
    f(IV{}, II{});
  else if (m >= 2048)
    f(II{}, IV{});
  else
    f(I{}, IV{});
}

/// The split-layout decode matmul over activations quantized by quantize_act_q8:
/// k_matvec_q8 with rows per warp chosen as k_matvec1's.
template <typename R>
void matvec_q8(Context::Impl& c, R rd, int64_t m, int64_t k, ActQ8Rows a, int64_t n, float* y) {
  constexpr int T = kWarpsPerBlock * 32;
  if (n == 1)
    with_rows_per_warp(m, [&](auto rw, auto u) {
      constexpr int RW = decltype(rw)::value, U = decltype(u)::value;
      k_matvec_q8_1<R, RW, U>
          <<<grid_for(m, kWarpsPerBlock * RW), T, 0, c.stream>>>(rd, m, k, a.q, a.ds, y);
    });
  else
    k_matvec_q8<R, 1, kMatvecMaxRows>
        <<<grid_for(m, kWarpsPerBlock), T, 0, c.stream>>>(rd, m, k, a.q, a.ds, int(n), y);
}

/// One k_matvec_q8_1_fused launch for outs (one activation row, quantized in a) when they are
/// at most kMaxFused weights of one split type; false (nothing launched) otherwise. Rows per warp
/// by with_rows_per_warp over the outputs' rows together.
bool matvec_q8_fused(Context::Impl& c, const MatmulOut* outs, int n_outs, int64_t k, ActQ8Rows a) {
  if (n_outs < 2 || n_outs > kMaxFused) return false;
  int64_t total = 0;
  for (int i = 0; i < n_outs; ++i) {
    if (outs[i].w->type != outs[0].w->type) return false;
    total += outs[i].w->ne[1];
  }
  return with_split_reader(*outs[0].w, [&](auto rd0) {
    using R = decltype(rd0);
    FusedOuts<R> f{};
    f.n = n_outs;
    for (int i = 0; i < n_outs; ++i)
      with_split_reader(*outs[i].w, [&](auto rd) {
        if constexpr (std::is_same_v<decltype(rd), R>) f.rd[i] = rd;
      });
    constexpr int T = kWarpsPerBlock * 32;
    with_rows_per_warp(total, [&](auto rw, auto u) {
      constexpr int RW = decltype(rw)::value, U = decltype(u)::value;
      unsigned blocks = 0;
      for (int i = 0; i < n_outs; ++i) {
        f.m[i] = outs[i].w->ne[1];
        f.y[i] = outs[i].y;
        f.first_block[i] = blocks;
        blocks += unsigned(grid_for(f.m[i], kWarpsPerBlock * RW));
      }
      k_matvec_q8_1_fused<R, RW, U><<<blocks, T, 0, c.stream>>>(f, k, a.q, a.ds);
    });
  });
}

/// Decodes rows [r0, r0 + rows) of a weight to f16, row-major [rows][k].
template <typename R>
__global__ void k_dequant_f16(R rd, int64_t r0, int64_t rows, int64_t k, __half* out) {
  constexpr int V = R::kValues;
  const int64_t nc = k / V;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * nc) return;
  const int64_t r = i / nc, c = i % nc;
  float v[V];
  rd.decode(r0 + r, c, v);
  __half* o = out + r * k + c * V;
#pragma unroll
  for (int j = 0; j < V; ++j) o[j] = __float2half_rn(v[j]);
}

__global__ void k_to_f16(const float* x, __half* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2half_rn(x[i]);
}

__global__ void k_to_bf16(const float* x, __nv_bfloat16* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2bfloat16_rn(x[i]);
}

void check_blas(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw CudaError(std::string(what) + ": cuBLAS status " + std::to_string(int(st)));
}

/// y = x · wᵀ for a row-major w [m][k] of cuBLAS type `wt` and x [n][k] of type `xt`
/// (column-major: y[m×n] = wᵀ[m×k] · x[k×n]); f32 output and accumulation.
void gemm(Context::Impl& c, const void* w, cudaDataType wt, const void* x, cudaDataType xt,
          int64_t m, int64_t n, int64_t k, float* y, int64_t ldy) {
  const float alpha = 1.0f, beta = 0.0f;
  check_blas(cublasGemmEx(c.blas(), CUBLAS_OP_T, CUBLAS_OP_N, int(m), int(n), int(k), &alpha, w, wt,
                          int(k), x, xt, int(k), &beta, y, CUDA_R_32F, int(ldy), CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT),
             "cublasGemmEx");
}

/// Bytes of one dequantized weight tile at most.
constexpr int64_t kTileBytes = int64_t(64) << 20;

void prefill(Context::Impl& c, const Tensor& w, const float* x, int64_t n, float* y) {
  const int64_t k = w.ne[0], m = w.ne[1];
  const auto* wd = static_cast<const uint8_t*>(w.data);
  if (w.type == DType::F32) {
    gemm(c, wd, CUDA_R_32F, x, CUDA_R_32F, m, n, k, y, m);
    return;
  }
  const bool bf = w.type == DType::BF16;
  void* xs = c.acts.get(c.stream, size_t(n * k) * 2);
  if (bf)
    k_to_bf16<<<grid_for(n * k, 256), 256, 0, c.stream>>>(x, static_cast<__nv_bfloat16*>(xs),
                                                          n * k);
  else
    k_to_f16<<<grid_for(n * k, 256), 256, 0, c.stream>>>(x, static_cast<__half*>(xs), n * k);
  check_launch("matmul: activation conversion");
  if (w.type == DType::F16 || bf) {
    const cudaDataType t = bf ? CUDA_R_16BF : CUDA_R_16F;
    gemm(c, wd, t, xs, t, m, n, k, y, m);
    return;
  }
  const int64_t tile_rows = std::max<int64_t>(1, std::min(m, kTileBytes / (k * 2)));
  auto* tile = static_cast<__half*>(c.weights.get(c.stream, size_t(tile_rows * k) * 2));
  for (int64_t m0 = 0; m0 < m; m0 += tile_rows) {
    const int64_t rows = std::min(tile_rows, m - m0);
    with_reader(w, [&](auto rd) {
      const int64_t items = rows * (k / decltype(rd)::kValues);
      k_dequant_f16<<<grid_for(items, 256), 256, 0, c.stream>>>(rd, m0, rows, k, tile);
    });
    check_launch("matmul: weight tile dequantization");
    gemm(c, tile, CUDA_R_16F, xs, CUDA_R_16F, rows, n, k, y + m0, m);
  }
}

}  // namespace

bool split_layout_supported(DType t) { return split_quant_bytes(t) > 0; }

std::vector<uint8_t> split_weight(const Tensor& host) {
  const int64_t be = traits(host.type).block_elems;
  if (!split_layout_supported(host.type) || !host.is_contiguous() || host.ne[0] % be != 0)
    throw std::invalid_argument(
        std::string("split_weight: ") + traits(host.type).name +
        " has no split layout (q4_0, q8_0, q6_K, q4_K, q5_K; contiguous rows)");
  std::vector<uint8_t> out(size_t(host.ne[0] / be * host.n_rows()) *
                           size_t(traits(host.type).block_bytes));
  split_bytes(host.type, static_cast<const uint8_t*>(host.data), host.ne[0], host.n_rows(),
              out.data());
  return out;
}

bool matmul_supported(DType t, int64_t k) {
  // Whole chunks per row, and rows of x that start 16-byte aligned (its float4 loads).
  const int chunk = weight_chunk_values(t);
  return chunk > 0 && k > 0 && k % chunk == 0 && k % 4 == 0 && k % traits(t).block_elems == 0;
}

void matmul(Context& ctx, const Tensor& w, const float* x, int64_t n, float* y) {
  const int64_t k = w.ne[0], m = w.ne[1];
  if (!matmul_supported(w.type, k))
    throw std::invalid_argument(std::string("cuda matmul: unsupported weight type ") +
                                traits(w.type).name + " with rows of " + std::to_string(k));
  if (w.ne[2] != 1 || w.ne[3] != 1) throw std::invalid_argument("cuda matmul: weight must be 2-D");
  if (n <= 0 || m <= 0) return;
  Context::Impl& c = ctx.impl();
  c.activate();
  if (n > kMatvecMaxRows) {
    prefill(c, w, x, n, y);
    return;
  }
  if (c.act_q8_matvec && with_split_reader(w, [&](auto rd) {
        matvec_q8(c, rd, m, k, quantize_act_q8(c, x, n, k), n, y);
      })) {
    check_launch("matmul: matvec_q8");
    return;
  }
  with_reader(w, [&](auto rd) {
    using R = decltype(rd);
    constexpr int T = kWarpsPerBlock * 32;
    if (n == 1)  // (U, the q8 kernels' blocks in flight, unused here)
      with_rows_per_warp(m, [&](auto rw, auto) {
        constexpr int RW = decltype(rw)::value;
        k_matvec1<R, RW><<<grid_for(m, kWarpsPerBlock * RW), T, 0, c.stream>>>(rd, m, k, x, y);
      });
    else
      k_matvec<R, kMatvecMaxRows>
          <<<grid_for(m, kWarpsPerBlock), T, 0, c.stream>>>(rd, m, k, x, int(n), y);
  });
  check_launch("matmul: matvec");
}

void matmul_many(Context& ctx, const MatmulOut* outs, int n_outs, const float* x, int64_t n) {
  Context::Impl& c = ctx.impl();
  bool shared = n_outs > 1 && n >= 1 && n <= kMatvecMaxRows && c.act_q8_matvec;
  const int64_t k = n_outs > 0 ? outs[0].w->ne[0] : 0;
  for (int i = 0; i < n_outs && shared; ++i) {
    const Tensor& w = *outs[i].w;
    shared = w.ne[0] == k && matmul_supported(w.type, k) && w.ne[2] == 1 && w.ne[3] == 1 &&
             w.ne[1] > 0 && w.packed && split_layout_supported(w.type);  // with_split_reader's test
  }
  if (!shared) {
    for (int i = 0; i < n_outs; ++i) matmul(ctx, *outs[i].w, x, n, outs[i].y);
    return;
  }
  c.activate();
  const ActQ8Rows a = quantize_act_q8(c, x, n, k);
  if (n == 1 && c.fused_matvec && matvec_q8_fused(c, outs, n_outs, k, a)) {
    check_launch("matmul_many: fused matvec_q8");
    return;
  }
  for (int i = 0; i < n_outs; ++i)
    with_split_reader(*outs[i].w,
                      [&](auto rd) { matvec_q8(c, rd, outs[i].w->ne[1], k, a, n, outs[i].y); });
  check_launch("matmul_many: matvec_q8");
}

}  // namespace kvrun::cuda
