// prefill_attention.cu — paged attention tiled over query rows (see prefill_attention.cuh).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda/cuda_check.cuh"
#include "cuda/prefill_attention.cuh"

namespace kvrun::cuda {
namespace {

constexpr int kPW = 8;           // warps a block
constexpr int kPQ = 8;           // query vectors (row, query head) a warp
constexpr int kQv = kPW * kPQ;   // query vectors a tile: kQv / group rows
constexpr int kChunk = 32;       // positions decoded at a time (one a lane when scoring)
constexpr int kMinSeqRows = 8;   // prefill_tiles_wanted: rows of one sequence worth a tile
constexpr int kShortCtx = 1024;  // ... positions a tile may walk past twice a prefill's walk,
                                 // and contexts short enough for any number of blocks

/// What every block of one call reads: paged_attention's arguments and the tile geometry.
struct TileArgs {
  AttnArgs a;   ///< a.out: the output; a.partials, seg_len, n_seg unused
  int n_rows;   ///< query rows of the batch
  int rows;     ///< query rows a tile: kQv / group
  int n_tiles;  ///< ⌈n_rows / rows⌉
  int v_vec;    ///< k_values8's code for the V rows (AttnArgs::k_vec's rules for head_dim_v)
  int qs;       ///< q_s row stride in floats: head_dim rounded up to 4
  int ks;       ///< k_s row stride: head_dim rounded up to 32, plus 4 (see chunk_scores)
};

/// The first position a row at position p sees (window 0: none).
__host__ __device__ inline int window_lo(int window, int p) {
  return window > 0 && p >= window ? p + 1 - window : 0;
}

/// V dims per lane for head_dim_v (the accumulator's width, as k_attn's DPL).
int v_dpl(int hdv) { return hdv <= 32 ? 1 : hdv <= 64 ? 2 : hdv <= 128 ? 4 : 8; }

/// Dynamic shared memory of a block, bytes: q_s [kQv][qs], k_s [kChunk][ks],
/// v_s [kChunk][32·dpl], p_s [kPW][kPQ][kChunk] (each warp's softmax weights), all f32.
size_t smem_bytes(int qs, int ks, int dpl) {
  return size_t(kQv * qs + kChunk * ks + kChunk * 32 * dpl + kQv * kChunk) * sizeof(float);
}

int round_up(int x, int m) { return (x + m - 1) / m * m; }

/// Lane `lane`'s i-th V dim: DPL ≤ 4, lane·DPL + i (contiguous); DPL 8, two float4 groups
/// 128 apart (lane·4 + i % 4 + 128·(i / 4)) so that a warp's 16-byte reads are conflict-free.
template <int DPL>
__device__ __forceinline__ int v_dim(int lane, int i) {
  return DPL <= 4 ? lane * DPL + i : (i / 4) * 128 + lane * 4 + i % 4;
}

/// Lane `lane`'s DPL values (v_dim) of one decoded V row in shared memory.
template <int DPL>
__device__ __forceinline__ void load_v(const float* row, int lane, float* x) {
  if constexpr (DPL == 1) {
    x[0] = row[lane];
  } else if constexpr (DPL == 2) {
    const float2 u = reinterpret_cast<const float2*>(row)[lane];
    x[0] = u.x, x[1] = u.y;
  } else {
#pragma unroll
    for (int h = 0; h < DPL / 4; ++h) {
      const float4 u = reinterpret_cast<const float4*>(row + 128 * h)[lane];
      x[4 * h] = u.x, x[4 * h + 1] = u.y, x[4 * h + 2] = u.z, x[4 * h + 3] = u.w;
    }
  }
}

/// q_s[qv][d] = Q of query vector qv (row r0 + qv / group, head hk·group + qv % group) · scale,
/// 0 past head_dim and past the tile's rows.
__device__ __forceinline__ void load_tile_q(const AttnArgs& a, int r0, int r1, int hk, int qs,
                                            float* q_s) {
  const int G = a.group, n_qv = (r1 - r0) * G;
  for (int i = threadIdx.x; i < kQv * qs; i += kPW * 32) {
    const int qv = i / qs, d = i % qs;
    float x = 0.0f;
    if (qv < n_qv && d < a.hd)
      x = a.q[(int64_t(r0 + qv / G) * a.n_head + hk * G + qv % G) * a.hd + d] * a.scale;
    q_s[i] = x;
  }
}

/// K and V rows of head hk at positions c0 … c0 + n − 1 of the sequence whose slot table is
/// `table`, decoded to f32 into k_s[j][·] and v_s[j][·] (j = position − c0) by the whole block,
/// 8 values a thread at a time (k_values8; 0 past the head). Rows j ≥ n, and any in a block
/// given back (slot −1; a window's start never lies there), are written as 0.
template <int DPL>
__device__ __forceinline__ void decode_chunk(const TileArgs& t, int hk, const int32_t* table,
                                             int c0, int n, float* k_s, float* v_s) {
  const AttnArgs& a = t.a;
  const int hd8 = (a.hd + 7) / 8, hdv8 = (a.hdv + 7) / 8, nk = kChunk * hd8;
#pragma unroll 1
  for (int idx = threadIdx.x; idx < nk + kChunk * hdv8; idx += kPW * 32) {
    const bool is_k = idx < nk;
    const int w = is_k ? hd8 : hdv8, i = is_k ? idx : idx - nk, j = i / w, u = i % w;
    const int p = c0 + j;
    const int slot = j < n ? table[p / a.block_size] : -1;
    float x[8];
    if (slot >= 0) {
      const long long cell = (long long)slot * a.block_size + p % a.block_size;
      if (is_k)
        k_values8(a.kf, a.k_vec, a.k.row(cell), hk, hk * a.hd + 8 * u, (hk + 1) * a.hd, x);
      else
        k_values8(a.vf, t.v_vec, a.v.row(cell), hk, hk * a.hdv + 8 * u, (hk + 1) * a.hdv, x);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = 0.0f;
    }
    float4* dst =
        reinterpret_cast<float4*>(is_k ? k_s + j * t.ks + 8 * u : v_s + j * 32 * DPL + 8 * u);
    dst[0] = make_float4(x[0], x[1], x[2], x[3]);
    dst[1] = make_float4(x[4], x[5], x[6], x[7]);
  }
}

/// One chunk's scores and online-softmax step for the warp's kPQ query vectors (q_w: their
/// rows of q_s): lane j scores position c0 + j (its K row read from k_s as float4s; the row
/// stride ks ≡ 4 mod 32 floats keeps each quarter-warp's 16-byte reads on distinct banks; the Q
/// reads are broadcasts). Positions a vector's row does not see (past its position, before its
/// window, j ≥ n) weigh 0; a vector that sees none of the chunk keeps its state. Active vectors
/// (bit i of act) get their max m, per-lane sums l and accumulators rescaled and their weights
/// written to p_w[i][j]; the others get weights 0.
template <int DPL>
__device__ __forceinline__ void chunk_scores(const TileArgs& t, const float* q_w, const float* k_s,
                                             int c0, int n, const int (&pos)[kPQ], unsigned act,
                                             float (&m)[kPQ], float (&l)[kPQ],
                                             float (&acc)[kPQ][DPL], float* p_w) {
  const AttnArgs& a = t.a;
  const int lane = threadIdx.x % 32, p = c0 + lane;
  float s[kPQ];
#pragma unroll
  for (int i = 0; i < kPQ; ++i) s[i] = 0.0f;
  const float* kr = k_s + lane * t.ks;
#pragma unroll 2
  for (int d = 0; d < t.qs; d += 4) {
    const float4 k4 = *reinterpret_cast<const float4*>(kr + d);
#pragma unroll
    for (int i = 0; i < kPQ; ++i) {
      const float4 q4 = *reinterpret_cast<const float4*>(q_w + i * t.qs + d);
      s[i] += q4.x * k4.x;
      s[i] += q4.y * k4.y;
      s[i] += q4.z * k4.z;
      s[i] += q4.w * k4.w;
    }
  }
#pragma unroll
  for (int i = 0; i < kPQ; ++i) {
    float w = 0.0f;
    if (act >> i & 1) {  // warp-uniform
      float sc = s[i];
      if (a.softcap > 0.0f) sc = a.softcap * tanhf(sc / a.softcap);
      const bool vis = lane < n && p <= pos[i] && p >= window_lo(a.window, pos[i]);
      if (!vis) sc = -INFINITY;
      float tmax = sc;
      for (int off = 16; off > 0; off /= 2)
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, off));
      if (tmax != -INFINITY) {
        const float mnew = fmaxf(m[i], tmax);
        const float corr = expf(m[i] - mnew);  // e^(−inf) = 0 the first time
        w = vis ? expf(sc - mnew) : 0.0f;
        l[i] = l[i] * corr + w;
#pragma unroll
        for (int e = 0; e < DPL; ++e) acc[i][e] *= corr;
        m[i] = mnew;
      }
    }
    p_w[i * kChunk + lane] = w;
  }
  __syncwarp();
}

/// acc[i] += Σ_j p_w[i][j] · V row j (lane's dims, v_dim) for the active vectors (bit i of act),
/// positions in order, four V rows and one float4 of weights a step (rows past n are 0, weigh 0).
template <int DPL>
__device__ __forceinline__ void chunk_pv(const float* v_s, const float* p_w, int n, unsigned act,
                                         float (&acc)[kPQ][DPL]) {
  const int lane = threadIdx.x % 32;
#pragma unroll 2
  for (int j = 0; j < n; j += 4) {
    float vx[4][DPL];
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) load_v<DPL>(v_s + (j + jj) * 32 * DPL, lane, vx[jj]);
#pragma unroll
    for (int i = 0; i < kPQ; ++i) {
      if (!(act >> i & 1)) continue;  // warp-uniform
      const float4 w4 = *reinterpret_cast<const float4*>(p_w + i * kChunk + j);
#pragma unroll
      for (int e = 0; e < DPL; ++e) {
        acc[i][e] += w4.x * vx[0][e];
        acc[i][e] += w4.y * vx[1][e];
        acc[i][e] += w4.z * vx[2][e];
        acc[i][e] += w4.w * vx[3][e];
      }
    }
  }
}

/// Block (tile, KV head hk): kPW warps of kPQ query vectors each (vector qv = warp·kPQ + i:
/// row r0 + qv / group, query head hk·group + qv % group). For each run of the tile's rows of
/// one sequence, the positions its rows see (the lowest window start … the highest position)
/// in chunks of kChunk: decode_chunk by the block, then chunk_scores and chunk_pv by each warp
/// with vectors in the run. Tiles are taken last first (blockIdx.x 0 is the last tile): in a
/// prefill the later rows see the most positions, so the longest blocks start first.
template <int DPL>
__global__ void __launch_bounds__(kPW * 32) k_prefill_attn(const __grid_constant__ TileArgs t) {
  const AttnArgs& a = t.a;
  extern __shared__ float4 smem4[];
  float* q_s = reinterpret_cast<float*>(smem4);
  float* k_s = q_s + kQv * t.qs;
  float* v_s = k_s + kChunk * t.ks;
  float* p_w = v_s + kChunk * 32 * DPL + (threadIdx.x / 32) * kPQ * kChunk;
  const int hk = blockIdx.y, G = a.group, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int r0 = (t.n_tiles - 1 - int(blockIdx.x)) * t.rows, r1 = min(t.n_rows, r0 + t.rows);
  load_tile_q(a, r0, r1, hk, t.qs, q_s);
  // decode_chunk writes V dims up to head_dim_v rounded up to 8; the rest stays 0.
  for (int i = threadIdx.x; i < kChunk * 32 * DPL; i += kPW * 32) v_s[i] = 0.0f;
  // Vector i's row: r0 + (warp·kPQ + i) / G, where below r1 (bit i of `valid`).
  const int qv0 = warp * kPQ;
  unsigned valid = 0;
  int pos[kPQ];
  float m[kPQ], l[kPQ], acc[kPQ][DPL];
#pragma unroll
  for (int i = 0; i < kPQ; ++i) {
    const int row = r0 + (qv0 + i) / G;
    if (qv0 + i < (r1 - r0) * G) valid |= 1u << i;
    pos[i] = valid >> i & 1 ? a.pos[row] : 0;
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < DPL; ++e) acc[i][e] = 0.0f;
  }
  for (int s0 = r0; s0 < r1;) {  // runs of rows of one sequence (one slot table)
    const int tab = a.row_tab[s0];
    int s1 = s0, lo = INT_MAX, hi = -1;
    for (; s1 < r1 && a.row_tab[s1] == tab; ++s1) {
      lo = min(lo, window_lo(a.window, a.pos[s1]));
      hi = max(hi, a.pos[s1]);
    }
    unsigned act = 0;  // bit i: vector i's row is in the run
#pragma unroll
    for (int i = 0; i < kPQ; ++i) {
      const int row = r0 + (qv0 + i) / G;
      if ((valid >> i & 1) && row >= s0 && row < s1) act |= 1u << i;
    }
    for (int c0 = lo; c0 <= hi; c0 += kChunk) {
      const int n = min(kChunk, hi + 1 - c0);
      __syncthreads();  // q_s and v_s written; the previous chunk's K, V and weights consumed
      decode_chunk<DPL>(t, hk, a.tables + tab, c0, n, k_s, v_s);
      __syncthreads();
      if (!act) continue;
      chunk_scores<DPL>(t, q_s + warp * kPQ * t.qs, k_s, c0, n, pos, act, m, l, acc, p_w);
      chunk_pv<DPL>(v_s, p_w, n, act, acc);
    }
    s0 = s1;
  }
#pragma unroll
  for (int i = 0; i < kPQ; ++i) {
    if (!(valid >> i & 1)) continue;  // warp-uniform
    float den = l[i];
    for (int off = 16; off > 0; off /= 2) den += __shfl_xor_sync(0xffffffffu, den, off);
    const int row = r0 + (qv0 + i) / G, g = (qv0 + i) % G;
    float* o = a.out + (int64_t(row) * a.n_head + hk * G + g) * a.hdv;
    const float inv = 1.0f / den;  // > 0: every row sees its own position
#pragma unroll
    for (int e = 0; e < DPL; ++e) {
      const int d = v_dim<DPL>(lane, e);
      if (d < a.hdv) o[d] = acc[i][e] * inv;
    }
  }
}

/// k_values8's vector code for rows of `type` with heads of head_dim values (AttnArgs::k_vec's
/// rules, as paged_attention sets them for K): f16 / bf16 rows 16-byte aligned, fp8 rows
/// 8-byte aligned, q8_0 heads of whole blocks, nvfp4; 0 (value by value) otherwise.
int vec8_code(DType type, int head_dim, int64_t row_bytes, uintptr_t bases) {
  const bool aligned16 = row_bytes % 16 == 0 && bases % 16 == 0;
  const bool aligned8 = row_bytes % 8 == 0 && bases % 8 == 0;
  if (head_dim % 8 == 0 && type == DType::F16 && aligned16) return 1;
  if (head_dim % 8 == 0 && type == DType::BF16 && aligned16) return 2;
  if (head_dim % 8 == 0 && (type == DType::FP8_E4M3 || type == DType::FP8_E5M2) && aligned8)
    return 3;
  if (head_dim % QK8_0 == 0 && type == DType::Q8_0) return 4;
  if (head_dim % 8 == 0 && type == DType::NVFP4) return 5;
  return 0;
}

TileArgs tile_args(const AttnArgs& a, int64_t n_rows) {
  TileArgs t{};
  t.a = a;
  t.n_rows = int(n_rows);
  t.rows = kQv / a.group;
  t.n_tiles = int((n_rows + t.rows - 1) / t.rows);
  t.v_vec =
      vec8_code(a.vf.type, a.hdv, a.v.row_bytes,
                reinterpret_cast<uintptr_t>(a.v.fast) | reinterpret_cast<uintptr_t>(a.v.slow));
  t.qs = round_up(a.hd, 4);
  t.ks = round_up(a.hd, 32) + 4;
  return t;
}

template <int DPL>
void launch_tiles(cudaStream_t s, const TileArgs& t, size_t smem) {
  if (smem > 48 * 1024)
    check(cudaFuncSetAttribute(k_prefill_attn<DPL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(smem)),
          "paged_attention: prefill tiles' shared memory");
  const dim3 grid(unsigned(t.n_tiles), unsigned(t.a.kf.n_head_kv));
  k_prefill_attn<DPL><<<grid, kPW * 32, smem, s>>>(t);
}

}  // namespace

bool prefill_tiles_wanted(const Context::Impl& c, const AttnArgs& a, const AttnBatch& batch) {
  const int64_t n = batch.n_rows();
  if (n < kMinSeqRows || n > INT_MAX) return false;
  const TileArgs t = tile_args(a, n);
  int optin = 0;
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, c.device),
        "cudaDeviceGetAttribute");
  if (smem_bytes(t.qs, t.ks, v_dpl(a.hdv)) > size_t(optin)) return false;
  const int32_t* pos = batch.host_positions();
  const int32_t* tab = batch.host_row_tables();
  // The positions rows s0 … s1 − 1 (one run: rows of one sequence from s0, below r1) see.
  auto walk_run = [&](int64_t s0, int64_t r1, int64_t* s1) {
    int64_t lo = INT64_MAX, hi = -1, s = s0;
    for (; s < r1 && tab[s] == tab[s0]; ++s) {
      lo = std::min<int64_t>(lo, window_lo(a.window, pos[s]));
      hi = std::max<int64_t>(hi, pos[s]);
    }
    *s1 = s;
    return hi + 1 - lo;
  };
  int64_t longest = 0, prefill_walk = 0, worst_walk = 0;
  for (int64_t s0 = 0, s1; s0 < n; s0 = s1) {  // sequences (their rows are consecutive)
    const int64_t walk = walk_run(s0, n, &s1);
    longest = std::max(longest, s1 - s0);
    if (s1 - s0 >= kMinSeqRows) prefill_walk = std::max(prefill_walk, walk);
  }
  for (int64_t r0 = 0; r0 < n; r0 += t.rows) {  // tiles: the kernel's runs (k_prefill_attn)
    int64_t walk = 0;
    for (int64_t s0 = r0, s1; s0 < std::min<int64_t>(n, r0 + t.rows); s0 = s1)
      walk += walk_run(s0, std::min<int64_t>(n, r0 + t.rows), &s1);
    worst_walk = std::max(worst_walk, walk);
  }
  const int64_t blocks = int64_t(t.n_tiles) * a.kf.n_head_kv;
  return longest >= kMinSeqRows && worst_walk <= 2 * prefill_walk + kShortCtx &&
         (blocks >= c.sm_count || batch.max_ctx() <= kShortCtx);
}

void prefill_attention(Context::Impl& c, const AttnArgs& a, const AttnBatch& batch, float* out) {
  TileArgs t = tile_args(a, batch.n_rows());
  t.a.out = out;
  const int dpl = v_dpl(a.hdv);
  const size_t smem = smem_bytes(t.qs, t.ks, dpl);
  if (dpl == 1)
    launch_tiles<1>(c.stream, t, smem);
  else if (dpl == 2)
    launch_tiles<2>(c.stream, t, smem);
  else if (dpl == 4)
    launch_tiles<4>(c.stream, t, smem);
  else
    launch_tiles<8>(c.stream, t, smem);
  check_launch("paged_attention: prefill tiles");
}

}  // namespace kvrun::cuda
