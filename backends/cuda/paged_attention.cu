// paged_attention.cu — the split online-softmax kernel and the log-sum-exp merge (see
// paged_attention.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/attn_common.cuh"
#include "cuda/cuda_check.cuh"
#include "cuda/cuda_context_impl.cuh"
#include "cuda/hadamard.h"
#include "cuda/kv_format.cuh"
#include "cuda/kv_store.h"
#include "cuda/paged_attention.h"
#include "cuda/prefill_attention.cuh"
#include "kv_layout.h"

namespace kvrun::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kG = int(kAttnMaxGroup);

/// The N (≤ 8) bytes at p, which is N-byte aligned, by one load (N = 1, 2, 4, 8).
template <int N>
__device__ __forceinline__ void load_aligned(const uint8_t* p, uint8_t* out) {
  uint32_t w[2] = {0, 0};
  if constexpr (N == 8) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    w[0] = u.x, w[1] = u.y;
  } else if constexpr (N == 4) {
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  } else if constexpr (N == 2) {
    w[0] = *reinterpret_cast<const uint16_t*>(p);
  } else {
    w[0] = *p;
  }
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = uint8_t(w[i / 4] >> (8 * (i % 4)));
}

/// V values e0 … e0+DPL−1 (e0 = hk·head_dim_v + lane·DPL; n of them in the head) of one encoded
/// row, 0 past the head: one load of 2·DPL bytes for f16 / bf16 rows and DPL bytes for fp8 rows
/// (AttnArgs::v_vec 1–3: rows and heads so aligned), one scale and DPL bytes in 2-byte (q8_0,
/// 4) or byte loads (nvfp4, 5), the per-element decoder otherwise or where n < DPL. The first
/// kernel read every V value by kv_value (two to six loads per value for the quantized types).
/// Values equal kv_value's.
template <int DPL>
__device__ __forceinline__ void v_values(const KvFormat& f, int vec, const uint8_t* row, int hk,
                                         int e0, int n, float* x) {
  if (n == DPL && (vec == 1 || vec == 2)) {
    if constexpr (DPL == 8) {
      const uint4 u = *reinterpret_cast<const uint4*>(row + 2 * e0);
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint16_t h = uint16_t(w[j / 2] >> (16 * (j % 2)));
        x[j] = vec == 1 ? f16_to_f32(h) : bf16_to_f32(h);
      }
    } else {
      uint8_t b[2 * DPL];
      load_aligned<2 * DPL>(row + 2 * e0, b);
#pragma unroll
      for (int j = 0; j < DPL; ++j) {
        const uint16_t h = uint16_t(b[2 * j] | (b[2 * j + 1] << 8));
        x[j] = vec == 1 ? f16_to_f32(h) : bf16_to_f32(h);
      }
    }
  } else if (n == DPL && vec == 3) {
    uint8_t b[DPL];
    load_aligned<DPL>(row + e0, b);
    const uint8_t sb = row[f.n_head_kv * f.head_dim + hk];
    const bool e4m3 = f.type == DType::FP8_E4M3;
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      const float v = e4m3 ? fp8_e4m3_to_f32(b[j]) : fp8_e5m2_to_f32(b[j]);
      x[j] = sb == 255 ? bits_as_f32(0x7fc00000u) : ldexpf(v, int(sb) - 127);
    }
  } else if (n == DPL && vec == 4) {  // q8_0: DPL | 32, so the values lie in one block
    const uint8_t* b = row + (e0 / QK8_0) * int(sizeof(block_q8_0));
    const float d = load_f16(reinterpret_cast<const uint16_t*>(b));
    uint8_t q[DPL];
    load_aligned<DPL == 1 ? 1 : 2>(b + 2 + e0 % QK8_0, q);  // 2-byte aligned (34-byte blocks)
#pragma unroll
    for (int j = 2; j < DPL; j += 2) load_aligned<2>(b + 2 + e0 % QK8_0 + j, q + j);
#pragma unroll
    for (int j = 0; j < DPL; ++j) x[j] = d * float(int8_t(q[j]));
  } else if (n == DPL && vec == 5) {  // nvfp4: DPL | 16, so the values lie in one block
    float fac;
    const uint8_t* qs = nvfp4_block(f, row, e0, &fac) + 1 + e0 % QK_NVFP4 / 2;
    if constexpr (DPL == 1) {
      const uint8_t byte = qs[0];
      x[0] = fac * e2m1_to_f32(uint8_t(e0 % 2 ? byte >> 4 : byte & 0x0f));
    } else {
#pragma unroll
      for (int j = 0; j < DPL / 2; ++j) {
        const uint8_t byte = qs[j];
        x[2 * j] = fac * e2m1_to_f32(uint8_t(byte & 0x0f));
        x[2 * j + 1] = fac * e2m1_to_f32(uint8_t(byte >> 4));
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < DPL; ++j) x[j] = j < n ? kv_value(f, row, hk, e0 + j) : 0.0f;
  }
}

/// K/V formats fixed at compile time (KVRUN_CUDA_ATTN_TYPED=1): a pair of one type, K read with
/// the vector code k_values8 names for it, V value by value (the default V path). The kernel's
/// decoders then carry one type's code instead of branches over every type (kv_value's switch
/// per V value, k_values8's per 8 K values). kAnyTypes: the run-time formats (every pair).
enum TypedPair : int { kAnyTypes = 0, kF16Pair, kQ8Pair, kFp8Pair, kNvfp4Pair };

__host__ __device__ constexpr DType typed_type(int t) {
  return t == kF16Pair   ? DType::F16
         : t == kQ8Pair  ? DType::Q8_0
         : t == kFp8Pair ? DType::FP8_E4M3
                         : DType::NVFP4;
}

/// k_values8's vector code for pair t (AttnArgs::k_vec).
__host__ __device__ constexpr int typed_k_vec(int t) {
  return t == kF16Pair ? 1 : t == kQ8Pair ? 4 : t == kFp8Pair ? 3 : 5;
}

/// The V rows of one tile by half-warps (AttnArgs::v_pair): lanes 0–15 take rows 0, 2, 4, …
/// and lanes 16–31 rows 1, 3, 5, …, each lane 2·DPL dims ((lane % 16)·2·DPL on) of its row: one
/// wider read per lane and half the row iterations of the one-row-per-warp loop. cell: this
/// lane's position's cell (lane j holds row j's), pj: its softmax weights, n_t: rows in the tile.
template <int DPL, int GM>
__device__ __forceinline__ void v_accumulate_pairs(const AttnArgs& a, int hk, long long cell,
                                                   const float* pj, int n_t,
                                                   float (*acc)[2 * DPL]) {
  constexpr int D2 = 2 * DPL;
  const int lane = threadIdx.x % 32, half = lane / 16, hl = lane % 16;
  const int v_n = max(0, min(D2, a.hdv - hl * D2));
#pragma unroll 2
  for (int j0 = 0; j0 < n_t; j0 += 2) {
    const int j = j0 + half;  // ≤ 32; rows past n_t weigh 0 and are not read
    const long long cj = __shfl_sync(0xffffffffu, cell, j & 31);
    float vx[D2];
    if (j < n_t && cj >= 0) {  // (−1: a cell of the other tier, paged_attention_part)
      v_values<D2>(a.vf, a.v_vec, a.v.row(cj), hk, hk * a.hdv + hl * D2, v_n, vx);
    } else {
#pragma unroll
      for (int i = 0; i < D2; ++i) vx[i] = 0.0f;
    }
#pragma unroll
    for (int g = 0; g < GM; ++g) {
      const float w = __shfl_sync(0xffffffffu, pj[g], j & 31);
#pragma unroll
      for (int i = 0; i < D2; ++i) acc[g][i] += w * vx[i];
    }
  }
}

/// v_accumulate_pairs' accumulators in the one-row-per-warp layout: the two halves' sums added
/// (each half summed its own rows), then lane i takes dims i·DPL … i·DPL + DPL − 1 (held by lane
/// i / 2, at (i % 2)·DPL) into acc[g][0 … DPL − 1].
template <int DPL, int GM>
__device__ __forceinline__ void vpair_to_lanes(float (*acc)[2 * DPL]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int g = 0; g < GM; ++g) {
#pragma unroll
    for (int i = 0; i < 2 * DPL; ++i) acc[g][i] += __shfl_xor_sync(0xffffffffu, acc[g][i], 16);
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const float lo = __shfl_sync(0xffffffffu, acc[g][i], lane / 2);
      const float hi = __shfl_sync(0xffffffffu, acc[g][DPL + i], lane / 2);
      acc[g][i] = lane % 2 ? hi : lo;
    }
  }
}

/// Block (row, KV head, segment); DPL = head dims per lane (head_dim, head_dim_v ≤ 32·DPL),
/// GM ≥ the GQA group (query heads per KV head). The 4 warps take tiles of 32 positions in
/// turn. In a tile each lane scores one position against every query head of the group (its K
/// row read with vector loads, Q from shared memory), the tile's softmax step is one warp
/// reduction per head, and then the 32 V rows are accumulated with the lanes over head_dim. (The
/// first kernel had the lanes over head_dim for K too: a warp reduction per position and head,
/// latency-bound at 121 GB/s over an f16 context on an H200.) PAIR: the V rows by half-warps
/// (v_accumulate_pairs). TYPED: a TypedPair whose formats are compile-time constants. SPLIT (a
/// short context, one segment): every warp walks every tile, warp w for the query heads g with
/// g % 4 = w only — a quarter of the products and shuffles on each warp's chain, where the
/// default leaves warps 1–3 idle below 33 positions.
template <int DPL, int GM, bool PAIR, int TYPED, bool SPLIT = false>
__global__ void __launch_bounds__(kWarps * 32) k_attn(AttnArgs a) {
  static_assert(!(PAIR && SPLIT), "the half-warp V rows accumulate every head");
  constexpr int HD = 32 * DPL;
  KvFormat kf = a.kf, vf = a.vf;  // TYPED: the types and codes constants (branches fold)
  int k_vec = a.k_vec, v_vec = a.v_vec;
  if constexpr (TYPED != kAnyTypes) {
    kf.type = vf.type = typed_type(TYPED);
    k_vec = typed_k_vec(TYPED);
    v_vec = 0;
  }
  const int r = blockIdx.x, hk = blockIdx.y, z = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int G = a.group;
  const int n_vis = a.pos[r] + 1;
  const int p_lo = a.window > 0 ? max(0, n_vis - a.window) : 0;
  const int p_begin = max(z * a.seg_len, p_lo), p_end = min(n_vis, z * a.seg_len + a.seg_len);
  const int32_t* table = a.tables + a.row_tab[r];

  __shared__ float q_s[GM][HD];  // the group's query heads, scaled; 0 past head_dim
  for (int i = threadIdx.x; i < GM * HD; i += kWarps * 32) {
    const int g = i / HD, d = i % HD;
    q_s[g][d] =
        g < G && d < a.hd ? a.q[(int64_t(r) * a.n_head + hk * G + g) * a.hd + d] * a.scale : 0.0f;
  }
  __syncthreads();

  // acc: lane i's dims i·DPL … of each head; PAIR: lane i's dims (i % 16)·2·DPL … of its half's
  // rows (vpair_to_lanes gives them the first layout at the end).
  constexpr int NA = PAIR ? 2 * DPL : DPL;
  float acc[GM][NA], m[GM], l[GM];  // l: this lane's share of the sum (reduced at the end)
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < NA; ++i) acc[g][i] = 0.0f;
  }
  const int e_end = (hk + 1) * a.hd;
  auto owned = [&](int g) { return !SPLIT || g % kWarps == warp; };  // warp-uniform
  for (int t0 = p_begin + (SPLIT ? 0 : warp * 32); t0 < p_end; t0 += SPLIT ? 32 : kWarps * 32) {
    const int p = t0 + lane;
    long long cell =
        p < p_end ? (long long)(table[p / a.block_size]) * a.block_size + p % a.block_size : -1;
    // A part by tier (paged_attention_part) skips the other tier's cells: −1, never read.
    if (a.tier != 0 && cell >= 0 && (cell < a.k.n_fast_cells) != (a.tier == 1)) cell = -1;
    const bool ok = cell >= 0;
    float s[GM];
#pragma unroll
    for (int g = 0; g < GM; ++g) s[g] = 0.0f;
    if (ok) {
      // 32 values of the lane's K row per iteration: four independent loads in flight before
      // their products (one at a time left the kernel waiting on memory latency).
      const uint8_t* krow = a.k.row(cell);
      for (int d0 = 0; d0 < a.hd; d0 += 32) {
        float kx[4][8];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          if (d0 + 8 * u < a.hd) {
            k_values8(kf, k_vec, krow, hk, hk * a.hd + d0 + 8 * u, e_end, kx[u]);
          } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) kx[u][j] = 0.0f;
          }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int g = 0; g < GM; ++g) {
            if (!owned(g)) continue;
#pragma unroll
            for (int j = 0; j < 8; ++j) s[g] += q_s[g][d0 + 8 * u + j] * kx[u][j];
          }
      }
    }
    float pj[GM];
#pragma unroll
    for (int g = 0; g < GM; ++g) {
      pj[g] = 0.0f;
      if (!owned(g)) continue;  // (m −inf, l and acc 0: the warps' merge below skips it)
      if (a.softcap > 0.0f) s[g] = a.softcap * tanhf(s[g] / a.softcap);
      if (!ok) s[g] = -INFINITY;
      float tmax = s[g];
      for (int off = 16; off > 0; off /= 2)
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, off));
      // −inf while no position was seen (a part by tier may skip whole tiles): no rescale
      const float mnew = fmaxf(m[g], tmax);
      const float corr = mnew == -INFINITY ? 1.0f : expf(m[g] - mnew);  // 0 the first time
      pj[g] = ok ? expf(s[g] - mnew) : 0.0f;
      l[g] = l[g] * corr + pj[g];
#pragma unroll
      for (int i = 0; i < NA; ++i) acc[g][i] *= corr;
      m[g] = mnew;
    }
    const int n_t = min(32, p_end - t0);
    if constexpr (PAIR) {
      v_accumulate_pairs<DPL, GM>(a, hk, cell, pj, n_t, acc);
    } else {
      // Lane i accumulates dims i·DPL … i·DPL + DPL − 1 of each V row (v_values).
      const int v_n = max(0, min(DPL, a.hdv - lane * DPL));
#pragma unroll 4
      for (int j = 0; j < n_t; ++j) {
        const long long cj = __shfl_sync(0xffffffffu, cell, j);
        if (cj < 0) continue;  // a cell of the other tier (warp-uniform)
        float vx[DPL];
        v_values<DPL>(vf, v_vec, a.v.row(cj), hk, hk * a.hdv + lane * DPL, v_n, vx);
#pragma unroll
        for (int g = 0; g < GM; ++g) {
          if (!owned(g)) continue;
          const float w = __shfl_sync(0xffffffffu, pj[g], j);
#pragma unroll
          for (int i = 0; i < DPL; ++i) acc[g][i] += w * vx[i];
        }
      }
    }
  }
  if constexpr (PAIR) vpair_to_lanes<DPL, GM>(acc);
#pragma unroll
  for (int g = 0; g < GM; ++g)
    for (int off = 16; off > 0; off /= 2) l[g] += __shfl_xor_sync(0xffffffffu, l[g], off);
  // Combine the warps' states in shared memory, then write this segment's (m, l, acc).
  __shared__ float sm_m[kWarps][GM], sm_l[kWarps][GM], sm_acc[kWarps][GM][32 * DPL];
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    if (lane == 0) {
      sm_m[warp][g] = m[g];
      sm_l[warp][g] = l[g];
    }
#pragma unroll
    for (int i = 0; i < DPL; ++i) sm_acc[warp][g][lane * DPL + i] = acc[g][i];
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
    if (a.out) {  // one segment: acc / l as k_merge would compute it (e^0 = 1, one term)
      a.out[(int64_t(r) * a.n_head + hk * G + g) * a.hdv + d] = num * (1.0f / den);
      continue;
    }
    float* out = a.partials + ((int64_t(r) * a.n_head + hk * G + g) * a.n_seg + z) * (a.hdv + 2);
    if (d == 0) {
      out[0] = M;
      out[1] = den;
    }
    out[2 + d] = num;
  }
}

constexpr int kMergeWarps = 4;

/// The block's maximum (max true) or sum of v, in every thread (blockDim.x = kMergeWarps · 32).
__device__ float merge_reduce(float v, bool max) {
  __shared__ float red[kMergeWarps];
  for (int off = 16; off > 0; off /= 2) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = max ? fmaxf(v, o) : v + o;
  }
  __syncthreads();  // red is reused by the next call
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = red[0];
  for (int w = 1; w < kMergeWarps; ++w) v = max ? fmaxf(v, red[w]) : v + red[w];
  return v;
}

/// out[row][h] = Σ_z e^(m_z − M) acc_z / Σ_z e^(m_z − M) l_z over the segments with m_z > −inf
/// (cpu::attn_merge_partials); with `states`, the merged state (M, the denominator, the
/// numerators: cpu::attn_merge_states) goes to states[row][h] instead ([2 + hdv] floats). Block
/// (row · n_head + h, 32 dims of head_dim_v): M and the denominator by block reductions, the
/// numerators of its 32 dims with the 4 warps taking every fourth segment, summed in shared memory.
/// (One block per head walking every segment per dim took 33 µs a layer at 32K on an H200, 129
/// segments: 1 ms of a 13 ms llama3.1-8b token.)
__global__ void __launch_bounds__(kMergeWarps * 32)
    k_merge(const float* partials, int n_seg, int hdv, float* out, float* states) {
  const int stride = hdv + 2, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float* p = partials + int64_t(blockIdx.x) * n_seg * stride;
  float M = -INFINITY;
  for (int z = threadIdx.x; z < n_seg; z += kMergeWarps * 32) M = fmaxf(M, p[z * stride]);
  M = merge_reduce(M, true);
  float den = 0.0f;
  for (int z = threadIdx.x; z < n_seg; z += kMergeWarps * 32) {
    const float mz = p[z * stride];
    if (mz != -INFINITY) den += expf(mz - M) * p[z * stride + 1];
  }
  den = merge_reduce(den, false);
  const int d = int(blockIdx.y) * 32 + lane;
  float num = 0.0f;
  if (d < hdv) {
#pragma unroll 8
    for (int z = warp; z < n_seg; z += kMergeWarps) {
      const float mz = p[z * stride];
      if (mz != -INFINITY) num += expf(mz - M) * p[z * stride + 2 + d];
    }
  }
  __shared__ float part[kMergeWarps][32];
  part[warp][lane] = num;
  __syncthreads();
  if (warp == 0 && d < hdv) {
    float t = part[0][lane];
    for (int w = 1; w < kMergeWarps; ++w) t += part[w][lane];
    if (!states) {
      out[int64_t(blockIdx.x) * hdv + d] = t * (1.0f / den);
      return;
    }
    float* st = states + int64_t(blockIdx.x) * (hdv + 2);
    if (d == 0) st[0] = M, st[1] = den;
    st[2 + d] = t;
  }
}

/// Most parts attn_merge takes.
constexpr int kMaxMergeParts = 4;

/// The parts of one attn_merge call.
struct MergeParts {
  const float* p[kMaxMergeParts];  ///< each [rows][n_head][2 + hdv]
  int n;
};

/// out[i] = the log-sum-exp merge of the parts' states i (i = row · n_head + head): one block of
/// 32 threads per i, each thread dims d, d + 32, … (cpu::attn_merge_partials' formula).
__global__ void k_merge_parts(MergeParts parts, int hdv, float* out) {
  const int64_t i = blockIdx.x, sf = hdv + 2;
  float M = -INFINITY;
  for (int k = 0; k < parts.n; ++k) M = fmaxf(M, parts.p[k][i * sf]);
  float den = 0.0f, w[kMaxMergeParts];
  for (int k = 0; k < parts.n; ++k) {
    const float mk = parts.p[k][i * sf];
    w[k] = mk == -INFINITY ? 0.0f : expf(mk - M);
    den += w[k] * parts.p[k][i * sf + 1];
  }
  for (int d = threadIdx.x; d < hdv; d += 32) {
    float num = 0.0f;
    for (int k = 0; k < parts.n; ++k)
      if (w[k] != 0.0f) num += w[k] * parts.p[k][i * sf + 2 + d];
    out[i * hdv + d] = num * (1.0f / den);
  }
}

template <int DPL, bool PAIR, int TYPED = kAnyTypes>
void launch_group(cudaStream_t s, dim3 grid, const AttnArgs& a) {
  if (a.group <= 1)
    k_attn<DPL, 1, PAIR, TYPED><<<grid, kWarps * 32, 0, s>>>(a);
  else if (a.group <= 4)
    k_attn<DPL, 4, PAIR, TYPED><<<grid, kWarps * 32, 0, s>>>(a);
  else
    k_attn<DPL, kG, PAIR, TYPED><<<grid, kWarps * 32, 0, s>>>(a);
}

/// k_attn with the query heads split over the warps (SPLIT), for groups of more than 1.
template <int DPL>
void launch_split(cudaStream_t s, dim3 grid, const AttnArgs& a) {
  if (a.group <= 4)
    k_attn<DPL, 4, false, kAnyTypes, true><<<grid, kWarps * 32, 0, s>>>(a);
  else
    k_attn<DPL, kG, false, kAnyTypes, true><<<grid, kWarps * 32, 0, s>>>(a);
}

/// k_attn for DPL dims a lane, with V read by half-warps where `pair` (DPL ≤ 4: 2·DPL values a
/// lane, at most 8), else with the formats of TypedPair `typed` compiled in (head sizes 33–128,
/// DPL 2 and 4; kAnyTypes or other sizes: the run-time formats), or with the heads split over the
/// warps where `split` (DPL 2 and 4, groups over 1).
template <int DPL>
void launch(cudaStream_t s, dim3 grid, const AttnArgs& a, bool pair, int typed, bool split) {
  if constexpr (DPL <= 4) {
    if (pair) return launch_group<DPL, true>(s, grid, a);
  }
  if constexpr (DPL == 2 || DPL == 4) {
    if (split && a.group > 1) return launch_split<DPL>(s, grid, a);
    switch (typed) {
      case kF16Pair:
        return launch_group<DPL, false, kF16Pair>(s, grid, a);
      case kQ8Pair:
        return launch_group<DPL, false, kQ8Pair>(s, grid, a);
      case kFp8Pair:
        return launch_group<DPL, false, kFp8Pair>(s, grid, a);
      case kNvfp4Pair:
        return launch_group<DPL, false, kNvfp4Pair>(s, grid, a);
      default:
        break;
    }
  }
  launch_group<DPL, false>(s, grid, a);
}

}  // namespace

int64_t attn_segment_ctx(int64_t max_ctx) {
  return (std::max<int64_t>(max_ctx, 1) + 255) / 256 * 256;
}

bool paged_attention_supported(DType k_type, DType v_type, const AttnShape& s) {
  return kv_type_supported(k_type) && kv_type_supported(v_type) && s.n_head > 0 &&
         s.n_head_kv > 0 && s.n_head % s.n_head_kv == 0 &&
         s.n_head / s.n_head_kv <= kAttnMaxGroup && s.head_dim > 0 &&
         s.head_dim <= kAttnMaxHeadDim && s.head_dim_v > 0 && s.head_dim_v <= kAttnMaxHeadDim &&
         (!s.rotate || (s.head_dim & (s.head_dim - 1)) == 0);
}

namespace {

/// paged_attention (states null) or paged_attention_part (tier, into states).
void attend(Context& ctx, const PagedKvLayer& kv, const AttnShape& shape, const AttnBatch& batch,
            const float* q, float* out, KvTier tier, float* states) {
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
  // Segments: enough blocks to give every multiprocessor 8, none shorter than 256 positions
  // (two tiles per warp); their partial states are merged by k_merge.
  const int64_t base = rows * shape.n_head_kv, target = 8 * int64_t(c.sm_count);
  const int64_t max_ctx = attn_segment_ctx(batch.max_ctx());
  // The partials are sized for the most segments these rows can get at any context length, so
  // a growing context never grows the scratch (which a graph capture could not do).
  const int64_t seg_cap = std::max<int64_t>(1, (target + base - 1) / base);
  const int64_t n_seg_first = std::min(seg_cap, (max_ctx + 255) / 256);
  int64_t n_seg = std::max<int64_t>(1, base < target ? n_seg_first : 1);
  const int64_t seg_len = ((max_ctx + n_seg - 1) / n_seg + 31) / 32 * 32;
  n_seg = (max_ctx + seg_len - 1) / seg_len;

  AttnArgs a{};
  a.kf = make_kv_format(kv.k_type, shape.n_head_kv, shape.head_dim);
  a.vf = make_kv_format(kv.v_type, shape.n_head_kv, shape.head_dim_v);
  a.k = kv_rows(kv, false);  // host-tier blocks are read in place (zero-copy)
  a.v = kv_rows(kv, true);
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
  // Vector loads of K: head starts 16-byte (f16 / bf16) or 8-byte (fp8) aligned in every row.
  // (both tiers' bases: a host-tier buffer is page-aligned, its V rows after whole K blocks)
  const uintptr_t k_bases =
      reinterpret_cast<uintptr_t>(kv.k) | reinterpret_cast<uintptr_t>(kv.k_slow);
  const bool k_aligned16 = kv.k_row_bytes % 16 == 0 && k_bases % 16 == 0;
  const bool k_aligned8 = kv.k_row_bytes % 8 == 0 && k_bases % 8 == 0;
  if (shape.head_dim % 8 == 0 && kv.k_type == DType::F16 && k_aligned16)
    a.k_vec = 1;
  else if (shape.head_dim % 8 == 0 && kv.k_type == DType::BF16 && k_aligned16)
    a.k_vec = 2;
  else if (shape.head_dim % 8 == 0 &&
           (kv.k_type == DType::FP8_E4M3 || kv.k_type == DType::FP8_E5M2) && k_aligned8)
    a.k_vec = 3;
  else if (shape.head_dim % QK8_0 == 0 && kv.k_type == DType::Q8_0)
    a.k_vec = 4;
  else if (shape.head_dim % 8 == 0 && kv.k_type == DType::NVFP4)
    a.k_vec = 5;
  // V: DPL values a lane (the kernel's dims per lane, below), vector loads where every head's
  // DPL-value pieces are aligned in both tiers' rows.
  const int64_t hmax = std::max(shape.head_dim, shape.head_dim_v);
  const int dpl = hmax <= 32 ? 1 : hmax <= 64 ? 2 : hmax <= 128 ? 4 : 8;
  // KVRUN_CUDA_ATTN_V=pair / pair-elem: V rows by half-warps (v_accumulate_pairs), 2·dpl values
  // a lane, with vector loads / value by value.
  using AttnV = Context::Impl::AttnV;
  const bool pair = dpl <= 4 && (c.attn_v == AttnV::kPair || c.attn_v == AttnV::kPairElem);
  const int v_dpl = pair ? 2 * dpl : dpl;  // V values a lane reads from a row
  const uintptr_t v_bases =
      reinterpret_cast<uintptr_t>(kv.v) | reinterpret_cast<uintptr_t>(kv.v_slow);
  const int64_t v_bytes = kv.v_type == DType::F16 || kv.v_type == DType::BF16 ? 2 * v_dpl : v_dpl;
  const bool v_aligned = kv.v_row_bytes % v_bytes == 0 && int64_t(v_bases % 16) % v_bytes == 0;
  // Value by value unless KVRUN_CUDA_ATTN_V=vec: on an H200 the vector path was slower for
  // every type (attention alone at 32K, f16 222 vs 175 us, q8_0 267 vs 213, fp8 273 vs 216,
  // nvfp4 457 vs 368; the pp512 attention of nvfp4 2.12 vs 1.67 ms a layer). docs/cuda.md.
  const bool fp8_v = kv.v_type == DType::FP8_E4M3 || kv.v_type == DType::FP8_E5M2;
  const bool v_elem = c.attn_v != AttnV::kVec && c.attn_v != AttnV::kPair;
  if (!v_elem && shape.head_dim_v % v_dpl == 0) {
    if (kv.v_type == DType::F16 && v_aligned)
      a.v_vec = 1;
    else if (kv.v_type == DType::BF16 && v_aligned)
      a.v_vec = 2;
    else if (fp8_v && v_aligned)
      a.v_vec = 3;
    else if (kv.v_type == DType::Q8_0 && shape.head_dim_v % QK8_0 == 0)
      a.v_vec = 4;
    else if (kv.v_type == DType::NVFP4)
      a.v_vec = 5;
  }
  a.softcap = shape.softcap;
  // KVRUN_CUDA_ATTN_PREFILL=tiled: prefill batches by tiles of query rows (prefill_attention.cuh;
  // the whole context only: a part by tier takes k_attn).
  if (c.attn_prefill_tiled && tier == KvTier::kAll && !states && prefill_tiles_wanted(c, a, batch))
    return prefill_attention(c, a, batch, out);
  const size_t part_bytes = size_t(rows * shape.n_head * seg_cap * (shape.head_dim_v + 2)) * 4;
  a.partials = static_cast<float*>(c.partials.get(c.stream, part_bytes));

  a.tier = tier == KvTier::kAll ? 0 : tier == KvTier::kFast ? 1 : 2;
  a.out = n_seg == 1 && !states ? out : nullptr;
  // KVRUN_CUDA_ATTN_TYPED=1: a pair of one type read the default way gets its formats compiled in.
  int typed = kAnyTypes;
  if (c.attn_typed && !pair && a.v_vec == 0 && kv.k_type == kv.v_type) {
    for (const int t : {int(kF16Pair), int(kQ8Pair), int(kFp8Pair), int(kNvfp4Pair)})
      if (kv.k_type == typed_type(t) && a.k_vec == typed_k_vec(t)) typed = t;
  }
  // KVRUN_CUDA_ATTN_SPLIT_HEADS=1: a short context (one segment, fewer blocks than the target)
  // gives each warp its share of the group's query heads instead of its share of the tiles.
  const bool split = c.attn_split_heads && !pair && n_seg == 1 && base < target;
  const dim3 grid(unsigned(rows), unsigned(shape.n_head_kv), unsigned(n_seg));
  if (dpl == 1)
    launch<1>(c.stream, grid, a, pair, typed, split);
  else if (dpl == 2)
    launch<2>(c.stream, grid, a, pair, typed, split);
  else if (dpl == 4)
    launch<4>(c.stream, grid, a, pair, typed, split);
  else
    launch<8>(c.stream, grid, a, pair, typed, split);
  check_launch("paged_attention");
  if (a.out) return;
  const dim3 merge_grid(unsigned(rows * shape.n_head), unsigned((shape.head_dim_v + 31) / 32));
  k_merge<<<merge_grid, kMergeWarps * 32, 0, c.stream>>>(a.partials, a.n_seg, a.hdv, out, states);
  check_launch("paged_attention: merge");
}

}  // namespace

void paged_attention(Context& ctx, const PagedKvLayer& kv, const AttnShape& shape,
                     const AttnBatch& batch, const float* q, float* out) {
  attend(ctx, kv, shape, batch, q, out, KvTier::kAll, nullptr);
}

void paged_attention_part(Context& ctx, const PagedKvLayer& kv, const AttnShape& shape,
                          const AttnBatch& batch, KvTier tier, const float* q, float* part) {
  attend(ctx, kv, shape, batch, q, nullptr, tier, part);
}

void attn_merge(Context& ctx, const float* const* parts, int n_parts, int64_t n_rows,
                int64_t n_head, int64_t head_dim_v, float* out) {
  if (n_parts < 1 || n_parts > kMaxMergeParts)
    throw std::invalid_argument("cuda attn_merge: 1 to " + std::to_string(kMaxMergeParts) +
                                " parts");
  if (n_rows * n_head == 0) return;
  MergeParts mp{};
  for (int k = 0; k < n_parts; ++k) mp.p[k] = parts[k];
  mp.n = n_parts;
  Context::Impl& c = ctx.impl();
  c.activate();
  k_merge_parts<<<unsigned(n_rows * n_head), 32, 0, c.stream>>>(mp, int(head_dim_v), out);
  check_launch("attn_merge");
}

}  // namespace kvrun::cuda
