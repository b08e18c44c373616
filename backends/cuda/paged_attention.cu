// paged_attention.cu — the split online-softmax kernel and the log-sum-exp merge (see
// paged_attention.h).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "cuda/cuda_check.cuh"
#include "cuda/cuda_context_impl.cuh"
#include "cuda/hadamard.h"
#include "cuda/kv_format.cuh"
#include "cuda/kv_store.h"
#include "cuda/paged_attention.h"
#include "kv_layout.h"

namespace kvrun::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kG = int(kAttnMaxGroup);

/// What every block of one call reads.
struct AttnArgs {
  KvFormat kf, vf;
  const uint8_t* k;
  const uint8_t* v;
  int64_t k_row_bytes, v_row_bytes;
  int block_size;
  const int32_t* pos;      ///< [n_rows]
  const int32_t* row_tab;  ///< [n_rows]
  const int32_t* tables;
  const float* q;   ///< [n_rows][n_head · head_dim]
  float* partials;  ///< [n_rows][n_head][n_seg][2 + head_dim_v]: m, l, acc
  int n_head, group, hd, hdv, seg_len, n_seg;
  int window;  ///< sliding window (0: none)
  float scale;
  float softcap;  ///< 0: off
};

/// Block (row, KV head, segment); DPL = head dims per lane (head_dim, head_dim_v ≤ 32·DPL),
/// GM ≥ the GQA group (query heads per KV head), U = positions a warp takes per iteration: their
/// K and V rows are loaded together and their score reductions interleaved, so U loads and U
/// shuffle chains are in flight at once instead of one (the loop was latency-bound: 121 GB/s
/// over an f16 context on an H200).
template <int DPL, int GM>
__global__ void __launch_bounds__(kWarps * 32) k_attn(AttnArgs a) {
  constexpr int U = DPL >= 8 ? 2 : 4;
  const int r = blockIdx.x, hk = blockIdx.y, z = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int G = a.group;
  const int n_vis = a.pos[r] + 1;
  const int p_lo = a.window > 0 ? max(0, n_vis - a.window) : 0;
  const int p_begin = max(z * a.seg_len, p_lo), p_end = min(n_vis, z * a.seg_len + a.seg_len);
  const int32_t* table = a.tables + a.row_tab[r];

  float qv[GM][DPL], acc[GM][DPL], m[GM], l[GM];
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const int d = lane + 32 * i;
      acc[g][i] = 0.0f;
      qv[g][i] =
          g < G && d < a.hd ? a.q[(int64_t(r) * a.n_head + hk * G + g) * a.hd + d] * a.scale : 0.0f;
    }
  }
  for (int p0 = p_begin + warp * U; p0 < p_end; p0 += kWarps * U) {
    float kx[U][DPL], vx[U][DPL];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int p = p0 + u;
      const bool ok = p < p_end;
      const int64_t cell =
          ok ? int64_t(table[p / a.block_size]) * a.block_size + p % a.block_size : 0;
      const uint8_t* krow = a.k + cell * a.k_row_bytes;
      const uint8_t* vrow = a.v + cell * a.v_row_bytes;
#pragma unroll
      for (int i = 0; i < DPL; ++i) {
        const int d = lane + 32 * i;
        kx[u][i] = ok && d < a.hd ? kv_value(a.kf, krow, hk, hk * a.hd + d) : 0.0f;
        vx[u][i] = ok && d < a.hdv ? kv_value(a.vf, vrow, hk, hk * a.hdv + d) : 0.0f;
      }
    }
#pragma unroll
    for (int g = 0; g < GM; ++g) {
      if (g >= G) break;
      float s[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        s[u] = 0.0f;
#pragma unroll
        for (int i = 0; i < DPL; ++i) s[u] += qv[g][i] * kx[u][i];
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2)
#pragma unroll
        for (int u = 0; u < U; ++u) s[u] += __shfl_xor_sync(0xffffffffu, s[u], off);
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (a.softcap > 0.0f) s[u] = a.softcap * tanhf(s[u] / a.softcap);
        if (p0 + u >= p_end) s[u] = -INFINITY;
        mx = fmaxf(mx, s[u]);
      }
      // mx is finite (position p0 is valid); e^(−inf − mx) = 0 the first time.
      const float corr = expf(m[g] - mx);
      l[g] *= corr;
#pragma unroll
      for (int i = 0; i < DPL; ++i) acc[g][i] *= corr;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float e = expf(s[u] - mx);
        l[g] += e;
#pragma unroll
        for (int i = 0; i < DPL; ++i) acc[g][i] += e * vx[u][i];
      }
      m[g] = mx;
    }
  }
  // Combine the warps' states in shared memory, then write this segment's (m, l, acc).
  __shared__ float sm_m[kWarps][GM], sm_l[kWarps][GM], sm_acc[kWarps][GM][32 * DPL];
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    if (lane == 0) {
      sm_m[warp][g] = m[g];
      sm_l[warp][g] = l[g];
    }
#pragma unroll
    for (int i = 0; i < DPL; ++i) sm_acc[warp][g][lane + 32 * i] = acc[g][i];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * a.hdv; idx += kWarps * 32) {
    const int g = idx / a.hdv, d = idx % a.hdv;
    float M = -INFINITY;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm_m[w][g]);
    float num = 0.0f, den = 0.0f;
    if (M != -INFINITY) {
      for (int w = 0; w < kWarps; ++w) {
        if (sm_m[w][g] == -INFINITY) continue;
        const float f = expf(sm_m[w][g] - M);
        num += f * sm_acc[w][g][d];
        den += f * sm_l[w][g];
      }
    }
    float* out = a.partials + ((int64_t(r) * a.n_head + hk * G + g) * a.n_seg + z) * (a.hdv + 2);
    if (d == 0) {
      out[0] = M;
      out[1] = den;
    }
    out[2 + d] = num;
  }
}

/// out[row][h] = Σ_z e^(m_z − M) acc_z / Σ_z e^(m_z − M) l_z over the segments with m_z > −inf
/// (cpu::attn_merge_partials). One block per (row, query head).
__global__ void k_merge(const float* partials, int n_seg, int hdv, float* out) {
  const float* p = partials + int64_t(blockIdx.x) * n_seg * (hdv + 2);
  float M = -INFINITY;
  for (int z = 0; z < n_seg; ++z) M = fmaxf(M, p[z * (hdv + 2)]);
  float den = 0.0f;
  for (int z = 0; z < n_seg; ++z) {
    const float mz = p[z * (hdv + 2)];
    if (mz != -INFINITY) den += expf(mz - M) * p[z * (hdv + 2) + 1];
  }
  const float inv = 1.0f / den;
  for (int d = threadIdx.x; d < hdv; d += blockDim.x) {
    float num = 0.0f;
    for (int z = 0; z < n_seg; ++z) {
      const float mz = p[z * (hdv + 2)];
      if (mz != -INFINITY) num += expf(mz - M) * p[z * (hdv + 2) + 2 + d];
    }
    out[int64_t(blockIdx.x) * hdv + d] = num * inv;
  }
}

template <int DPL>
void launch(cudaStream_t s, dim3 grid, const AttnArgs& a) {
  if (a.group <= 1)
    k_attn<DPL, 1><<<grid, kWarps * 32, 0, s>>>(a);
  else if (a.group <= 4)
    k_attn<DPL, 4><<<grid, kWarps * 32, 0, s>>>(a);
  else
    k_attn<DPL, kG><<<grid, kWarps * 32, 0, s>>>(a);
}

}  // namespace

bool paged_attention_supported(DType k_type, DType v_type, const AttnShape& s) {
  return kv_type_supported(k_type) && kv_type_supported(v_type) && s.n_head > 0 &&
         s.n_head_kv > 0 && s.n_head % s.n_head_kv == 0 &&
         s.n_head / s.n_head_kv <= kAttnMaxGroup && s.head_dim > 0 &&
         s.head_dim <= kAttnMaxHeadDim && s.head_dim_v > 0 && s.head_dim_v <= kAttnMaxHeadDim &&
         (!s.rotate || (s.head_dim & (s.head_dim - 1)) == 0);
}

void paged_attention(Context& ctx, const PagedKvLayer& kv, const AttnShape& shape,
                     const AttnBatch& batch, const float* q, float* out) {
  if (!paged_attention_supported(kv.k_type, kv.v_type, shape))
    throw std::invalid_argument(
        std::string("cuda paged_attention: unsupported K/V types (") + traits(kv.k_type).name +
        ", " + traits(kv.v_type).name + ") or shape (at most " + std::to_string(kAttnMaxGroup) +
        " query heads per KV head, head sizes up to " + std::to_string(kAttnMaxHeadDim) + ")");
  if (kv.k_row_bytes != kv_row_bytes(kv.k_type, shape.n_head_kv, shape.head_dim) ||
      kv.v_row_bytes != kv_row_bytes(kv.v_type, shape.n_head_kv, shape.head_dim_v))
    throw std::invalid_argument("cuda paged_attention: row bytes do not match the KV types");
  if (batch.block_size() != kv.block_size)
    throw std::invalid_argument("cuda paged_attention: batch and layer block sizes differ");
  const int64_t rows = batch.n_rows();
  if (rows == 0) return;
  Context::Impl& c = ctx.impl();
  c.activate();
  // Segments: enough blocks to give every multiprocessor 16 (each warp walks its positions one
  // dependent load after another, so the memory system needs many warps in flight: with 2 per
  // multiprocessor an H200 read an f16 context at 121 GB/s), none shorter than 128 positions.
  const int64_t base = rows * shape.n_head_kv, target = 16 * int64_t(c.sm_count);
  const int64_t max_ctx = batch.max_ctx();
  // The partials are sized for the most segments these rows can get at any context length, so
  // a growing context never grows the scratch (which a graph capture could not do).
  const int64_t seg_cap = std::max<int64_t>(1, (target + base - 1) / base);
  const int64_t n_seg_first = std::min(seg_cap, (max_ctx + 127) / 128);
  int64_t n_seg = std::max<int64_t>(1, base < target ? n_seg_first : 1);
  const int64_t seg_len = ((max_ctx + n_seg - 1) / n_seg + 31) / 32 * 32;
  n_seg = (max_ctx + seg_len - 1) / seg_len;

  AttnArgs a{};
  a.kf = make_kv_format(kv.k_type, shape.n_head_kv, shape.head_dim);
  a.vf = make_kv_format(kv.v_type, shape.n_head_kv, shape.head_dim_v);
  a.k = kv.k;
  a.v = kv.v;
  a.k_row_bytes = kv.k_row_bytes;
  a.v_row_bytes = kv.v_row_bytes;
  a.block_size = int(kv.block_size);
  a.pos = batch.positions();
  a.row_tab = batch.row_tables();
  a.tables = batch.tables();
  if (shape.rotate) {  // Q rotated like the stored K (cpu::paged_attention)
    const int64_t n = rows * shape.n_head * shape.head_dim;
    auto* rq = static_cast<float*>(c.rotated.get(c.stream, size_t(n) * 4));
    hadamard_rotate(ctx, q, rq, rows, shape.n_head, shape.head_dim);
    q = rq;
  }
  a.q = q;
  a.n_head = int(shape.n_head);
  a.group = int(shape.n_head / shape.n_head_kv);
  a.hd = int(shape.head_dim);
  a.hdv = int(shape.head_dim_v);
  a.seg_len = int(seg_len);
  a.n_seg = int(n_seg);
  a.scale = shape.scale;
  a.window = int(std::min<int64_t>(shape.window, INT32_MAX));
  a.softcap = shape.softcap;
  const size_t part_bytes = size_t(rows * shape.n_head * seg_cap * (shape.head_dim_v + 2)) * 4;
  a.partials = static_cast<float*>(c.partials.get(c.stream, part_bytes));

  const dim3 grid(unsigned(rows), unsigned(shape.n_head_kv), unsigned(n_seg));
  const int64_t hmax = std::max(shape.head_dim, shape.head_dim_v);
  if (hmax <= 32)
    launch<1>(c.stream, grid, a);
  else if (hmax <= 64)
    launch<2>(c.stream, grid, a);
  else if (hmax <= 128)
    launch<4>(c.stream, grid, a);
  else
    launch<8>(c.stream, grid, a);
  check_launch("paged_attention");
  k_merge<<<unsigned(rows * shape.n_head), 128, 0, c.stream>>>(a.partials, a.n_seg, a.hdv, out);
  check_launch("paged_attention: merge");
}

}  // namespace kvrun::cuda
