// attention.cpp — causal GQA attention over a contiguous KV store, the test oracle of the paged
// kernel (see attention.h).
#include "cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/ops.h"
#include "cpu/vec_dot.h"
#include "fp16.h"

namespace kvrun::cpu {

namespace {

/// Cells llama.cpp's KV cache exposes to a batch ending at position `end`: a multiple of 32
/// (at least 32), capped at n_ctx. Cells past the causal limit weigh exactly 0, so they only
/// matter for the accumulation order of the weighted sum of V.
int64_t padded_cells(int64_t end, int64_t n_ctx) {
  return std::min(n_ctx, std::max<int64_t>(32, (end + 31) / 32 * 32));
}

/// Per-thread buffers of attend_one.
struct AttnScratch {
  std::vector<float> w;      // [n_kv] scores, then weights
  std::vector<uint16_t> h;   // [max(head_dim, n_kv)] f16 staging
  std::vector<uint16_t> h2;  // [n_kv] f16 V column
  std::vector<float> f;      // [max(head_dim, n_kv)] f32 staging
  std::vector<float> f2;     // [n_kv] f32 V column
};

/// One (token, head) pair: scores over positions 0..n_pos−1 of n_kv cells, softmax, weighted
/// sum of V. `batched` selects llama.cpp's gemm accumulation order (batches of ≥ 2 tokens).
void attend_one(const KvLayerView& kv, const AttnParams& p, const float* q, int64_t h,
                int64_t n_pos, int64_t n_kv, bool batched, float* out, AttnScratch& sc) {
  const bool f16 = kv.type == DType::F16;
  const int64_t hkv = h / (p.n_head / p.n_head_kv);
  const int64_t k_row = p.n_head_kv * p.head_dim, v_row = p.n_head_kv * p.head_dim_v;
  const size_t big = size_t(std::max(p.head_dim, n_kv));
  sc.w.resize(size_t(n_kv));
  sc.h.resize(big);
  sc.h2.resize(size_t(n_kv));
  sc.f.resize(big);
  sc.f2.resize(size_t(n_kv));
  const bool kq_gemm = batched && p.head_dim % 16 == 0;
  const VecDotFn kq_dot =
      f16 ? (kq_gemm ? gemm_dot_f16 : vec_dot_f16) : (kq_gemm ? gemm_dot_f32 : vec_dot_f32);
  const VecDotFn v_dot =
      f16 ? (batched ? gemm_dot_f16 : vec_dot_f16) : (batched ? gemm_dot_f32 : vec_dot_f32);
  const void* qx = sc.f.data();
  if (f16) {
    act_from_float_f16(q, sc.h.data(), p.head_dim);
    qx = sc.h.data();
  } else {
    act_from_float_f32(q, sc.f.data(), p.head_dim);
  }
  const size_t esize = f16 ? 2 : 4;
  const char* kbase = static_cast<const char*>(kv.k);
  const char* vbase = static_cast<const char*>(kv.v);
  for (int64_t j = 0; j < n_pos; ++j)
    sc.w[size_t(j)] = kq_dot(p.head_dim, kbase + size_t(j * k_row + hkv * p.head_dim) * esize, qx);
  masked_softmax(sc.w.data(), n_pos, n_kv, p.scale);
  const void* wx = sc.f.data();
  if (f16) {
    act_from_float_f16(sc.w.data(), sc.h.data(), n_kv);
    wx = sc.h.data();
  } else {
    act_from_float_f32(sc.w.data(), sc.f.data(), n_kv);
  }
  for (int64_t d = 0; d < p.head_dim_v; ++d) {
    const int64_t col = hkv * p.head_dim_v + d;
    if (f16) {
      const uint16_t* vv = reinterpret_cast<const uint16_t*>(vbase);
      for (int64_t j = 0; j < n_pos; ++j) sc.h2[size_t(j)] = vv[j * v_row + col];
      for (int64_t j = n_pos; j < n_kv; ++j) sc.h2[size_t(j)] = 0;
      out[d] = v_dot(n_kv, sc.h2.data(), wx);
    } else {
      const float* vv = reinterpret_cast<const float*>(vbase);
      for (int64_t j = 0; j < n_pos; ++j) sc.f2[size_t(j)] = vv[j * v_row + col];
      for (int64_t j = n_pos; j < n_kv; ++j) sc.f2[size_t(j)] = 0.0f;
      out[d] = v_dot(n_kv, sc.f2.data(), wx);
    }
  }
}

}  // namespace

void kv_store(const KvLayerView& kv, const AttnParams& p, const float* k, const float* v,
              int64_t pos0, int64_t n_tokens) {
  const int64_t nk = n_tokens * p.n_head_kv * p.head_dim;
  const int64_t nv = n_tokens * p.n_head_kv * p.head_dim_v;
  const int64_t k_off = pos0 * p.n_head_kv * p.head_dim;
  const int64_t v_off = pos0 * p.n_head_kv * p.head_dim_v;
  if (kv.type == DType::F16) {
    act_from_float_f16(k, static_cast<uint16_t*>(kv.k) + k_off, nk);
    act_from_float_f16(v, static_cast<uint16_t*>(kv.v) + v_off, nv);
  } else {
    act_from_float_f32(k, static_cast<float*>(kv.k) + k_off, nk);
    act_from_float_f32(v, static_cast<float*>(kv.v) + v_off, nv);
  }
}

void attention(ThreadPool& pool, const KvLayerView& kv, const AttnParams& p, const float* q,
               int64_t pos0, int64_t n_tokens, float* out) {
  const int64_t n_kv = padded_cells(pos0 + n_tokens, kv.n_ctx);
  pool.run(n_tokens * p.n_head, [&](int64_t begin, int64_t end) {
    thread_local AttnScratch sc;
    for (int64_t th = begin; th < end; ++th) {
      const int64_t t = th / p.n_head, h = th % p.n_head;
      attend_one(kv, p, q + (t * p.n_head + h) * p.head_dim, h, pos0 + t + 1, n_kv, n_tokens >= 2,
                 out + (t * p.n_head + h) * p.head_dim_v, sc);
    }
  });
}

void encoder_attention(ThreadPool& pool, const AttnParams& p, const PagedSeq* seqs, int64_t n_seqs,
                       const float* q, const float* k, const float* v, float* out) {
  int64_t n = 0;
  for (int64_t i = 0; i < n_seqs; ++i) n = std::max(n, seqs[i].q0 + seqs[i].n_q);
  const int64_t group = p.n_head / p.n_head_kv;
  const int64_t k_row = p.n_head_kv * p.head_dim, v_row = p.n_head_kv * p.head_dim_v;
  std::vector<int64_t> seq_of(size_t(n), 0);
  for (int64_t i = 0; i < n_seqs; ++i)
    for (int64_t r = seqs[i].q0; r < seqs[i].q0 + seqs[i].n_q; ++r) seq_of[size_t(r)] = i;
  pool.run(n * p.n_head, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> w, acc;
    for (int64_t rh = begin; rh < end; ++rh) {
      const int64_t r = rh / p.n_head, h = rh % p.n_head, hkv = h / group;
      const PagedSeq& s = seqs[seq_of[size_t(r)]];
      w.resize(size_t(s.n_q));
      const float* qr = q + (r * p.n_head + h) * p.head_dim;
      for (int64_t j = 0; j < s.n_q; ++j)
        w[size_t(j)] = vec_dot_f32(p.head_dim, k + (s.q0 + j) * k_row + hkv * p.head_dim, qr);
      masked_softmax(w.data(), s.n_q, s.n_q, p.scale);
      acc.assign(size_t(p.head_dim_v), 0.0f);
      for (int64_t j = 0; j < s.n_q; ++j) {
        const float* vr = v + (s.q0 + j) * v_row + hkv * p.head_dim_v;
        for (int64_t d = 0; d < p.head_dim_v; ++d) acc[size_t(d)] += w[size_t(j)] * vr[d];
      }
      std::copy(acc.begin(), acc.end(), out + (r * p.n_head + h) * p.head_dim_v);
    }
  });
}

}  // namespace kvrun::cpu
