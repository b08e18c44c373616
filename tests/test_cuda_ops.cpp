// test_cuda_ops.cpp — every backend op of the llama forward pass, on each backend (the CPU
// backend at the process's kernel level, and CUDA), against the CPU scalar reference, in one
// parameterized suite (ggml's test-backend-ops as a GoogleTest TEST_P).
//
// Each case draws random inputs (never zeros), poisons the output (NaN, or 0xFF bytes on the GPU)
// before the op runs, and compares with the normalized mean squared error
// NMSE = Σ(out − ref)² / Σ ref² against a threshold per op and type; any NaN fails. The
// reference is the CPU backend's scalar code (matmul at CpuLevel::scalar; the other CPU ops are
// bit-identical at every level, tests/test_cpu_simd.cpp). matmul and attention are also compared
// with a float64 evaluation of the same decoded weights / cache, which bounds the backend's own
// arithmetic error much tighter than its distance to the CPU (the CPU quantizes activations and
// Q as llama.cpp does; CUDA keeps them f32). The KV write must equal the CPU encoder byte for
// byte. CUDA cases skip with the reason when the build has no CUDA or the machine no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "cpu/paged_attention.h"
#include "cpu/thread_pool.h"
#include "cpu/vec_dot.h"
#include "cuda_ops_util.h"
#include "dtype.h"
#include "kv_layout.h"
#include "tensor.h"
#include "test_util.h"
#ifdef KVRUN_HAVE_CUDA
#include "cuda/add.h"
#include "cuda/attn_batch.h"
#include "cuda/cuda_context.h"
#include "cuda/cuda_device.h"
#include "cuda/device_tensor.h"
#include "cuda/eltwise.h"
#include "cuda/get_rows.h"
#include "cuda/kv_store.h"
#include "cuda/matmul.h"
#include "cuda/paged_attention.h"
#include "cuda/rms_norm.h"
#include "cuda/rope.h"
#include "cuda/swiglu.h"
#endif

namespace kvrun {
namespace {

// ---- element-wise and row ops ----

Result run_get_rows(const Case& c) {
  const int64_t cols = 512, n_rows = 50;
  std::vector<uint8_t> table = random_rows(c.t1, n_rows, cols, 11);
  const Tensor t = Tensor::contiguous(c.t1, table.data(), cols, n_rows);
  const std::vector<int32_t> ids = {0, 49, 7, 7, 23, 1, 48};
  const int64_t n = int64_t(ids.size());
  Result r;
  std::vector<float> ref(size_t(n * cols));
  cpu::get_rows(t, ids.data(), n, ref.data());
  r.ref = to_double(ref);
  r.out = poisoned(ref.size());
  if (c.backend == Backend::cpu) {
    cpu::get_rows(t, ids.data(), n, r.out.data());
  } else {
    // Variant 1: the table uploaded in the split layout (q4_0, q8_0, q6_K).
    KVRUN_GPU(cuda::DeviceTensor dt = c.variant == 1 ? cuda::upload_tensor_split(gpu(), t)
                                                     : cuda::upload_tensor(gpu(), t);
              cuda::DeviceBuffer d_ids = to_gpu(ids);
              cuda::DeviceBuffer d_out = gpu_poisoned(ref.size());
              cuda::get_rows(gpu(), dt.view, d_ids.as<int32_t>(), n, d_out.as<float>());
              r.out = from_gpu(d_out, ref.size()));
  }
  return r;
}

/// Variants: 0 scaled, 1 no scale (cols 1000: the float4 path), 2 scaled with cols 1001 (the
/// scalar path), 3 no scale with cols 8200 (several float4 loads per thread).
Result run_rms_norm(const Case& c) {
  const int64_t rows = 5, cols = c.variant == 2 ? 1001 : c.variant == 3 ? 8200 : 1000;
  const std::vector<float> x = test::random_floats(size_t(rows * cols), 21, 2.0f);
  const std::vector<float> w = test::random_floats(size_t(cols), 22);
  const float* wp = c.variant % 2 == 1 ? nullptr : w.data();
  Result r;
  std::vector<float> ref(x.size());
  cpu::rms_norm(x.data(), wp, ref.data(), rows, cols, 1e-5f);
  r.ref = to_double(ref);
  r.out = poisoned(x.size());
  if (c.backend == Backend::cpu) {
    cpu::rms_norm(x.data(), wp, r.out.data(), rows, cols, 1e-5f);
  } else {
    KVRUN_GPU(cuda::DeviceBuffer dx = to_gpu(x); cuda::DeviceBuffer dw = to_gpu(w);
              cuda::DeviceBuffer dy = gpu_poisoned(x.size());
              cuda::rms_norm(gpu(), dx.as<float>(), wp ? dw.as<float>() : nullptr, dy.as<float>(),
                             rows, cols, 1e-5f);
              r.out = from_gpu(dy, x.size()));
  }
  return r;
}

/// Variants: 0 llama pairs, 1 neox pairs, 2 llama3 freq_factors and linear scaling,
/// 3 partial rotation (n_rot < head_dim), 4 neox with an attention factor (mscale ≠ 1).
Result run_rope(const Case& c) {
  const int64_t n_tok = 6, n_heads = 4, hd = 64;
  const std::vector<int32_t> pos = {0, 1, 7, 100, 4095, 131000};
  std::vector<float> x = test::random_floats(size_t(n_tok * n_heads * hd), 31);
  std::vector<float> ff(size_t(hd / 2));
  for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + 0.25f * float(i % 5);
  cpu::RopeConfig cfg{hd, 500000.0f, 1.0f, nullptr, 1.0f, c.variant == 1 || c.variant == 4};
  if (c.variant == 4) cfg.mscale = 1.1f;
  if (c.variant == 2) {
    cfg.freq_factors = ff.data();
    cfg.freq_scale = 0.25f;
  }
  if (c.variant == 3) cfg.n_rot = 32;
  Result r;
  std::vector<float> ref = x;
  cpu::rope(ref.data(), n_tok, n_heads, hd, pos.data(), cfg);
  r.ref = to_double(ref);
  if (c.backend == Backend::cpu) {
    r.out = x;
    cpu::rope(r.out.data(), n_tok, n_heads, hd, pos.data(), cfg);
  } else {
    KVRUN_GPU(cuda::DeviceBuffer dx = to_gpu(x); cuda::DeviceBuffer dp = to_gpu(pos);
              cuda::DeviceBuffer dff = to_gpu(ff); const cuda::RopeParams p{
                  cfg.n_rot, cfg.freq_base, cfg.freq_scale,
                  cfg.freq_factors ? dff.as<float>() : nullptr, cfg.neox, cfg.mscale};
              cuda::rope(gpu(), dx.as<float>(), n_tok, n_heads, hd, dp.as<int32_t>(), p);
              r.out = from_gpu(dx, x.size()));
  }
  return r;
}

Result run_swiglu(const Case& c) {
  const int64_t n = 3 * 1000 + 5;
  const std::vector<float> g = test::random_floats(size_t(n), 41, 3.0f);
  const std::vector<float> u = test::random_floats(size_t(n), 42);
  Result r;
  std::vector<float> ref(static_cast<size_t>(n));
  cpu::swiglu(g.data(), u.data(), ref.data(), 1, n);
  r.ref = to_double(ref);
  r.out = poisoned(size_t(n));
  if (c.backend == Backend::cpu) {
    cpu::swiglu(g.data(), u.data(), r.out.data(), 1, n);
  } else {
    KVRUN_GPU(cuda::DeviceBuffer dg = to_gpu(g); cuda::DeviceBuffer du = to_gpu(u);
              cuda::DeviceBuffer dy = gpu_poisoned(size_t(n));
              cuda::swiglu(gpu(), dg.as<float>(), du.as<float>(), dy.as<float>(), n);
              r.out = from_gpu(dy, size_t(n)));
  }
  return r;
}

/// Variants: 0 an odd length (scalar path), 1 a multiple of 4 (16-byte path).
Result run_add(const Case& c) {
  const int64_t n = c.variant == 0 ? 4099 : 4096;
  const std::vector<float> y = test::random_floats(size_t(n), 51);
  const std::vector<float> x = test::random_floats(size_t(n), 52);
  Result r;
  std::vector<float> ref = y;
  cpu::add(ref.data(), x.data(), n);
  r.ref = to_double(ref);
  r.out = y;
  if (c.backend == Backend::cpu) {
    cpu::add(r.out.data(), x.data(), n);
  } else {
    KVRUN_GPU(cuda::DeviceBuffer dy = to_gpu(y); cuda::DeviceBuffer dx = to_gpu(x);
              cuda::add(gpu(), dy.as<float>(), dx.as<float>(), n); r.out = from_gpu(dy, size_t(n)));
  }
  return r;
}

/// The seam's small ops. Variants: 0 scale, 1 softcap, 2 GeGLU, 3 add_row (a bias), 4 copy_cols
/// (a fused QKV split). The reference is the CPU backend's definition of each.
Result run_eltwise(const Case& c) {
  const int64_t rows = 7, cols = 515, n = rows * cols, c0 = 130, w = 257;
  const std::vector<float> a = test::random_floats(size_t(n), 61, 8.0f);
  const std::vector<float> b = test::random_floats(size_t(n), 62);
  const std::vector<float> bias = test::random_floats(size_t(cols), 63);
  const size_t n_out = c.variant == 4 ? size_t(rows * w) : size_t(n);
  auto cpu_op = [&](std::vector<float>& out) {
    switch (c.variant) {
      case 0:
        out = a;
        cpu::scale(out.data(), n, 0.37f);
        break;
      case 1:
        out = a;
        cpu::softcap(out.data(), n, 3.0f);
        break;
      case 2:
        cpu::geglu(a.data(), b.data(), out.data(), rows, cols);
        break;
      case 3:
        out = a;
        for (int64_t r = 0; r < rows; ++r) cpu::add(out.data() + r * cols, bias.data(), cols);
        break;
      default:
        for (int64_t r = 0; r < rows; ++r)
          std::copy_n(a.data() + r * cols + c0, w, out.data() + r * w);
    }
  };
  Result r;
  std::vector<float> ref(n_out);
  cpu_op(ref);
  r.ref = to_double(ref);
  r.out = poisoned(n_out);
  if (c.backend == Backend::cpu) {
    cpu_op(r.out);
  } else {
    KVRUN_GPU(cuda::DeviceBuffer da = to_gpu(a); cuda::DeviceBuffer db = to_gpu(b);
              cuda::DeviceBuffer dbias = to_gpu(bias); cuda::DeviceBuffer dy = gpu_poisoned(n_out);
              float* x = da.as<float>(); if (c.variant == 0) cuda::scale(gpu(), x, n, 0.37f);
              if (c.variant == 1) cuda::softcap(gpu(), x, n, 3.0f);
              if (c.variant == 2) cuda::geglu(gpu(), x, db.as<float>(), dy.as<float>(), n);
              if (c.variant == 3) cuda::add_row(gpu(), x, dbias.as<float>(), rows, cols);
              if (c.variant == 4) cuda::copy_cols(gpu(), x, rows, cols, c0, w, dy.as<float>());
              // scale, softcap and add_row work in place
              r.out = from_gpu(c.variant == 2 || c.variant == 4 ? dy : da, n_out));
  }
  return r;
}

// ---- matmul ----

/// Variant = activation rows n: 1 and 3 (decode kernels), 8 (their largest), 37 (prefill
/// GEMM), plus 100 for a weight uploaded in the split layout (q4_0, q8_0, q6_K) and 200 for a tall
/// matrix (8200 rows: the one-row kernel's 4 and 2 rows per warp, with a ragged tail); 501: split
/// with 2101 rows of 4608 (the split one-row kernel's 2 rows per warp with an odd last row, and
/// 144 blocks a row: lanes past their first 4 blocks, some with a fifth, some without).
Result run_matmul(const Case& c) {
  [[maybe_unused]] const bool split = c.variant / 100 % 2 == 1, tall = c.variant / 200 == 1;
  const bool long_k = c.variant / 400 == 1;
  const int64_t k = long_k ? 4608 : 512, m = tall ? 8200 : long_k ? 2101 : 96, n = c.variant % 100;
  std::vector<uint8_t> wq = random_rows(c.t1, m, k, 61);
  const Tensor w = Tensor::contiguous(c.t1, wq.data(), k, m);
  const std::vector<float> x = test::random_floats(size_t(n * k), 62);
  Result r;
  cpu::ThreadPool pool(1);
  std::vector<float> ref(size_t(n * m));
  cpu::matmul(pool, w, x.data(), n, ref.data(), cpu::CpuLevel::scalar);
  r.ref = to_double(ref);
  std::vector<float> wf(size_t(m * k));
  traits(c.t1).to_float(wq.data(), wf.data(), m * k);
  // The CUDA decode matmul of split-layout weights (n ≤ 8) takes x quantized as the
  // CPU's q8_0 activations: its float64 evaluation is over those values.
  std::vector<float> xe = x;
  if (c.backend == Backend::cuda && split && n <= 8) {
    std::vector<uint8_t> xq(size_t(n * k / 32 * 34));
    cpu::act_from_float_q8_0(x.data(), xq.data(), n * k);
    traits(DType::Q8_0).to_float(xq.data(), xe.data(), n * k);
  }
  r.exact.assign(size_t(n * m), 0.0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      double s = 0;
      for (int64_t e = 0; e < k; ++e) s += double(wf[size_t(i * k + e)]) * xe[size_t(j * k + e)];
      r.exact[size_t(j * m + i)] = s;
    }
  r.out = poisoned(ref.size());
  if (c.backend == Backend::cpu) {
    cpu::matmul(pool, w, x.data(), n, r.out.data());
  } else {
    KVRUN_GPU(cuda::DeviceTensor dw =
                  split ? cuda::upload_tensor_split(gpu(), w) : cuda::upload_tensor(gpu(), w);
              cuda::DeviceBuffer dx = to_gpu(x); cuda::DeviceBuffer dy = gpu_poisoned(ref.size());
              cuda::matmul(gpu(), dw.view, dx.as<float>(), n, dy.as<float>());
              r.out = from_gpu(dy, ref.size()));
  }
  return r;
}

// ---- paged KV: write and attention ----

/// A step over a paged cache: shapes, sequences (block tables over shuffled slots) and the
/// host cache bytes (poisoned with 0xAB where nothing was written).
struct PagedSetup {
  cpu::PagedAttnParams p;
  int64_t block_size = 16;
  std::vector<std::vector<int32_t>> tables;
  std::vector<cpu::PagedSeq> seqs;  ///< the step's rows
  int64_t n_rows = 0, n_slots = 0;
  std::vector<uint8_t> k, v;  ///< [n_slots][block_size][row bytes]
  cpu::PagedKvLayer kv;

  /// Sequences given as (pos0, n_q); every one gets ceil((pos0 + n_q) / block_size) slots.
  PagedSetup(DType kt, DType vt, int64_t n_head, int64_t n_head_kv, int64_t hd, int64_t bs,
             const std::vector<std::pair<int64_t, int64_t>>& seq_shapes, uint32_t seed)
      : block_size(bs) {
    p.attn = {n_head, n_head_kv, hd, hd, 1.0f / std::sqrt(float(hd))};
    for (const auto& [pos0, n_q] : seq_shapes) n_slots += (pos0 + n_q + bs - 1) / bs;
    std::vector<int32_t> slots(static_cast<size_t>(n_slots));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), std::mt19937(seed));
    int64_t next = 0;
    for (const auto& [pos0, n_q] : seq_shapes) {
      const int64_t nb = (pos0 + n_q + bs - 1) / bs;
      tables.emplace_back(slots.begin() + next, slots.begin() + next + nb);
      next += nb;
    }
    for (size_t s = 0; s < seq_shapes.size(); ++s) {
      seqs.push_back({tables[s].data(), seq_shapes[s].first, n_rows, seq_shapes[s].second});
      n_rows += seq_shapes[s].second;
    }
    kv.k_type = kt;
    kv.v_type = vt;
    kv.k_row_bytes = kv_row_bytes(kt, n_head_kv, hd);
    kv.v_row_bytes = kv_row_bytes(vt, n_head_kv, hd);
    kv.block_size = bs;
    k.assign(size_t(n_slots * bs * kv.k_row_bytes), 0xAB);
    v.assign(size_t(n_slots * bs * kv.v_row_bytes), 0xAB);
    kv.k = k.data();
    kv.v = v.data();
  }

  int64_t kv_width() const { return p.attn.n_head_kv * p.attn.head_dim; }

#ifdef KVRUN_HAVE_CUDA
  /// The step's batch on the GPU.
  cuda::AttnBatch gpu_batch() const {
    std::vector<cuda::SeqRows> rows;
    for (const cpu::PagedSeq& s : seqs) rows.push_back({s.block_table, s.pos0, s.q0, s.n_q});
    cuda::AttnBatch b;
    b.set(gpu(), rows.data(), int64_t(rows.size()), block_size);
    return b;
  }
  cuda::AttnShape gpu_shape() const {
    const cpu::AttnParams& a = p.attn;
    cuda::AttnShape s{a.n_head, a.n_head_kv, a.head_dim, a.head_dim_v, a.scale, p.rotate};
    s.window = p.window;
    s.softcap = p.softcap;
    return s;
  }
#endif
};

/// K and V rows with a spread of magnitudes per head (so fp8 and nvfp4 pick different scales).
std::vector<float> kv_values(int64_t rows, int64_t width, uint32_t seed) {
  std::vector<float> x = test::random_floats(size_t(rows * width), seed);
  for (int64_t i = 0; i < rows * width; ++i) x[size_t(i)] *= std::ldexp(1.0f, int(i / 8 % 7) - 3);
  return x;
}

/// Variants (shapes): 0 n_head_kv 2 × head_dim 64; 1 n_head_kv 3 × head_dim 8 (q8_0 / q4_0
/// blocks and nvfp4 groups span heads, the row is padded); 2 n_head_kv 2 × head_dim 40;
/// 3 as 0 with --kv-rotate (K Hadamard-rotated before encoding).
Result run_kv_store(const Case& c) {
  const int64_t hkv = c.variant == 1 ? 3 : 2, hd = c.variant == 1 ? 8 : c.variant == 2 ? 40 : 64;
  PagedSetup ps(c.t1, c.t1, hkv, hkv, hd, 16, {{5, 20}, {0, 3}}, 71);
  ps.p.rotate = c.variant == 3;
  const std::vector<float> k = kv_values(ps.n_rows, ps.kv_width(), 72);
  const std::vector<float> v = kv_values(ps.n_rows, ps.kv_width(), 73);
  std::vector<uint8_t> ref_k = ps.k, ref_v = ps.v;
  cpu::PagedKvLayer ref_kv = ps.kv;
  ref_kv.k = ref_k.data();
  ref_kv.v = ref_v.data();
  cpu::paged_kv_store(ref_kv, ps.p, ps.seqs.data(), int64_t(ps.seqs.size()), k.data(), v.data());
  if (c.backend == Backend::cpu) {
    cpu::paged_kv_store(ps.kv, ps.p, ps.seqs.data(), int64_t(ps.seqs.size()), k.data(), v.data());
  } else {
    KVRUN_GPU(cuda::DeviceBuffer dk = to_gpu(ps.k); cuda::DeviceBuffer dv = to_gpu(ps.v);
              cuda::DeviceBuffer xk = to_gpu(k); cuda::DeviceBuffer xv = to_gpu(v);
              const cuda::AttnBatch b = ps.gpu_batch();
              const cuda::PagedKvLayer layer{c.t1, c.t1, ps.kv.k_row_bytes, ps.kv.v_row_bytes,
                                             ps.block_size, dk.as<uint8_t>(), dv.as<uint8_t>()};
              cuda::kv_store(gpu(), layer, ps.gpu_shape(), b, xk.as<float>(), xv.as<float>());
              dk.download(gpu(), ps.k.data(), ps.k.size());
              dv.download(gpu(), ps.v.data(), ps.v.size()));
  }
  // The bytes must be equal: report the first difference, and give NMSE 0 / inf.
  Result r;
  for (int pass = 0; pass < 2; ++pass) {
    const std::vector<uint8_t>& got = pass ? ps.v : ps.k;
    const std::vector<uint8_t>& want = pass ? ref_v : ref_k;
    const auto mis = std::mismatch(got.begin(), got.end(), want.begin());
    EXPECT_TRUE(mis.first == got.end())
        << (pass ? "V" : "K") << " byte " << (mis.first - got.begin())
        << " differs: " << int(*mis.first) << " vs " << int(*mis.second);
    if (mis.first != got.end()) r.out.push_back(std::nanf(""));
  }
  r.out.push_back(1.0f);
  r.ref.assign(r.out.size(), 1.0);
  return r;
}

/// Variants: 0 one long decode (context 3000: split into segments and merged), 1 a batch of a
/// 37-token prefill and a 2-token continuation with head_dim 128 and blocks of 32, 2 head_dim 8
/// without GQA (the fixture models' shape), 3 a 700-token decode with --kv-rotate, 4 a sliding
/// window of 300 with soft-capped scores (Gemma 2) over a 1000-token decode whose blocks before
/// the window were given back (−1 in its block table) and a 40-token prefill, 5 eight KV heads
/// of 64 (rows whose heads start 8- / 16-byte aligned for fp8, f16 and bf16: the kernel's
/// vector loads of K) with a 300-token decode and a 20-token prefill, 6 head_dim 256 (Gemma's:
/// 8 dims a lane, the widest V loads) with a 200-token decode and a 12-token prefill, 7 a group
/// of 8 query heads per KV head (llama 70B's) with head_dim 128 over a short context, a 20-token
/// decode and a 9-token prefill (one segment: KVRUN_CUDA_ATTN_SPLIT_HEADS's path), 8 a 70-token
/// prefill and a 29-token continuation of a 13-token history (group 4, head_dim 128) under a
/// sliding window of 24: with KVRUN_CUDA_ATTN_PREFILL=tiled, tiles of 16 rows, one of them
/// straddling the two sequences, windows starting inside a tile (variants 1 and 4–7 take the
/// tiled kernel too; 1 and 4 have a tile across two sequences).
Result run_attention(const Case& c) {
  struct Shape {
    int64_t n_head, n_head_kv, hd, bs;
    std::vector<std::pair<int64_t, int64_t>> seqs;
  };
  const Shape shapes[] = {{8, 2, 64, 16, {{2999, 1}}},
                          {6, 3, 128, 32, {{0, 37}, {50, 2}}},
                          {4, 4, 8, 16, {{10, 5}}},
                          {8, 2, 64, 16, {{699, 1}}},
                          {8, 2, 64, 16, {{999, 1}, {0, 40}}},
                          {16, 8, 64, 16, {{300, 1}, {0, 20}}},
                          {4, 2, 256, 16, {{200, 1}, {0, 12}}},
                          {32, 4, 128, 16, {{20, 1}, {0, 9}}},
                          {8, 2, 128, 16, {{0, 70}, {13, 29}}}};
  const Shape& sh = shapes[c.variant];
  PagedSetup ps(c.t1, c.t2, sh.n_head, sh.n_head_kv, sh.hd, sh.bs, sh.seqs, 81);
  ps.p.rotate = c.variant == 3;
  ps.p.window = c.variant == 4 ? 300 : c.variant == 8 ? 24 : 0;
  ps.p.softcap = c.variant == 4 ? 1.5f : 0.0f;  // scores are O(1): the cap bends them
  // Write every position of every sequence (history and step) with the CPU encoder.
  for (size_t s = 0; s < ps.seqs.size(); ++s) {
    const int64_t n_pos = ps.seqs[s].pos0 + ps.seqs[s].n_q;
    const cpu::PagedSeq all{ps.tables[s].data(), 0, 0, n_pos};
    const std::vector<float> k = test::random_floats(size_t(n_pos * ps.kv_width()), 82 + s);
    const std::vector<float> v = test::random_floats(size_t(n_pos * ps.kv_width()), 92 + s);
    cpu::paged_kv_store(ps.kv, ps.p, &all, 1, k.data(), v.data());
  }
  // Blocks wholly before the first row's window are given back: nobody may read them.
  if (ps.p.window > 0)
    for (size_t s = 0; s < ps.seqs.size(); ++s)
      for (int64_t b = 0; (b + 1) * ps.block_size <= ps.seqs[s].pos0 + 1 - ps.p.window; ++b)
        ps.tables[s][size_t(b)] = -1;
  const cpu::AttnParams& a = ps.p.attn;
  const std::vector<float> q = test::random_floats(size_t(ps.n_rows * a.n_head * a.head_dim), 99);
  std::vector<float> q_ref = q;  // Q as the stored K sees it: rotated per head with --kv-rotate
  if (ps.p.rotate)
    for (int64_t h = 0; h < ps.n_rows * a.n_head; ++h)
      cpu::hadamard_rotate(q_ref.data() + h * a.head_dim, a.head_dim);
  const size_t n_out = size_t(ps.n_rows * a.n_head * a.head_dim_v);
  cpu::ThreadPool pool(2);
  Result r;
  std::vector<float> ref(n_out);
  cpu::paged_attention(pool, ps.kv, ps.p, ps.seqs.data(), int64_t(ps.seqs.size()), q.data(),
                       ref.data());
  r.ref = to_double(ref);
  // float64 attention over the decoded cache.
  r.exact.assign(n_out, 0.0);
  const int64_t G = a.n_head / a.n_head_kv, w = ps.kv_width();
  std::vector<float> krow(static_cast<size_t>(w)), vrow(static_cast<size_t>(w));
  for (const cpu::PagedSeq& s : ps.seqs)
    for (int64_t i = 0; i < s.n_q; ++i) {
      const int64_t n_vis = s.pos0 + i + 1, row = s.q0 + i;
      const int64_t p_lo = ps.p.window > 0 ? std::max<int64_t>(0, n_vis - ps.p.window) : 0;
      std::vector<std::vector<double>> sc(size_t(a.n_head),
                                          std::vector<double>(size_t(n_vis), -INFINITY));
      std::vector<std::vector<float>> vals(static_cast<size_t>(n_vis));
      for (int64_t p = p_lo; p < n_vis; ++p) {
        const int32_t id = s.block_table[p / ps.block_size];
        const int64_t j = p % ps.block_size;
        kv_decode_row(ps.kv.k_type, a.n_head_kv, a.head_dim,
                      ps.kv.k_block(id) + j * ps.kv.k_row_bytes, krow.data());
        kv_decode_row(ps.kv.v_type, a.n_head_kv, a.head_dim_v,
                      ps.kv.v_block(id) + j * ps.kv.v_row_bytes, vrow.data());
        vals[size_t(p)] = vrow;
        for (int64_t h = 0; h < a.n_head; ++h) {
          double d = 0;
          for (int64_t e = 0; e < a.head_dim; ++e)
            d += double(q_ref[size_t((row * a.n_head + h) * a.head_dim + e)]) *
                 krow[size_t(h / G * a.head_dim + e)];
          d *= a.scale;
          if (ps.p.softcap > 0) d = ps.p.softcap * std::tanh(d / ps.p.softcap);
          sc[size_t(h)][size_t(p)] = d;
        }
      }
      for (int64_t h = 0; h < a.n_head; ++h) {
        const double mx = *std::max_element(sc[size_t(h)].begin(), sc[size_t(h)].end());
        double den = 0;
        for (double& x : sc[size_t(h)]) den += (x = std::exp(x - mx));
        for (int64_t p = p_lo; p < n_vis; ++p)
          for (int64_t e = 0; e < a.head_dim_v; ++e)
            r.exact[size_t((row * a.n_head + h) * a.head_dim_v + e)] +=
                sc[size_t(h)][size_t(p)] / den * vals[size_t(p)][size_t(h / G * a.head_dim_v + e)];
      }
    }
  r.out = poisoned(n_out);
  if (c.backend == Backend::cpu) {
    cpu::paged_attention(pool, ps.kv, ps.p, ps.seqs.data(), int64_t(ps.seqs.size()), q.data(),
                         r.out.data());
  } else {
    KVRUN_GPU(
        cuda::DeviceBuffer dk = to_gpu(ps.k); cuda::DeviceBuffer dv = to_gpu(ps.v);
        cuda::DeviceBuffer dq = to_gpu(q); cuda::DeviceBuffer dout = gpu_poisoned(n_out);
        const cuda::AttnBatch b = ps.gpu_batch();
        const cuda::PagedKvLayer layer{c.t1, c.t2, ps.kv.k_row_bytes, ps.kv.v_row_bytes,
                                       ps.block_size, dk.as<uint8_t>(), dv.as<uint8_t>()};
        cuda::paged_attention(gpu(), layer, ps.gpu_shape(), b, dq.as<float>(), dout.as<float>());
        r.out = from_gpu(dout, n_out));
  }
  return r;
}

// ---- thresholds ----

/// NMSE allowed against the CPU scalar reference.
double threshold_ref(const Case& c) {
  const bool gpu_side = c.backend == Backend::cuda;
  switch (c.op) {
    case Op::add:
    case Op::kv_store:
      return 0.0;      // exact
    case Op::eltwise:  // scale, add_row, copy_cols exact; softcap and GeGLU through tanhf
      return gpu_side && (c.variant == 1 || c.variant == 2) ? 1e-8 : 0.0;
    case Op::get_rows:
    case Op::rms_norm:
      return gpu_side ? 1e-12 : 0.0;
    case Op::rope:
    case Op::swiglu:
      return gpu_side ? 1e-10 : 0.0;
    case Op::matmul:
      if (!gpu_side) return 1e-12;  // every CPU level: the scalar reference's floats
      if (c.variant / 100 % 2 == 1 && c.variant % 100 <= 8) {  // split decode: the GPU's q8_0
        const bool cpu_q8_0 = c.t1 == DType::Q4_0 || c.t1 == DType::Q8_0;  // x, the CPU's too
        return cpu_q8_0 ? 1e-10 : 5e-4;  // (for the K quants the CPU's x is q8_K)
      }
      switch (c.t1) {
        case DType::F32:
          return 1e-10;
        case DType::F16:
          return 1e-5;  // the CPU rounds x to f16
        case DType::BF16:
          return 1e-4;  // ... to bf16
        default:
          return 5e-4;  // ... quantizes x to q8_0 / q8_K
      }
    case Op::attention:
      if (!gpu_side) return 0.0;
      if (c.t1 == DType::Q8_0 || c.t1 == DType::Q4_0) return 1e-3;  // the CPU's q8_0 Q
      if (c.t1 == DType::F16) return 1e-5;                          // the CPU's f16 Q
      return 1e-8;
  }
  return 0.0;
}

/// NMSE allowed against the float64 evaluation (matmul, attention): the backend's own error.
double threshold_exact(const Case& c) {
  if (c.backend == Backend::cpu) return threshold_ref(Case{Backend::cuda, c.op, c.t1, c.t2, 0});
  if (c.op == Op::attention) return 1e-9;
  // The decode kernels (f32 x, or the CPU's q8_0 x for the split layout) or SGEMM.
  if (c.variant % 100 <= 8 || c.t1 == DType::F32) return 1e-10;
  return c.t1 == DType::BF16 ? 5e-5 : 2e-6;  // f16 / bf16 GEMM operands
}

// ---- the suite ----

class BackendOps : public ::testing::TestWithParam<Case> {};

TEST_P(BackendOps, MatchesCpuScalarReference) {
  const Case& c = GetParam();
  if (c.backend == Backend::cuda) {
#ifndef KVRUN_HAVE_CUDA
    GTEST_SKIP() << "built without CUDA (configure with -DKVRUN_CUDA=ON)";
#else
    if (cuda::devices().empty()) GTEST_SKIP() << "no CUDA device on this machine";
#endif
  }
  Result r;
  switch (c.op) {
    case Op::get_rows:
      r = run_get_rows(c);
      break;
    case Op::rms_norm:
      r = run_rms_norm(c);
      break;
    case Op::rope:
      r = run_rope(c);
      break;
    case Op::swiglu:
      r = run_swiglu(c);
      break;
    case Op::add:
      r = run_add(c);
      break;
    case Op::matmul:
      r = run_matmul(c);
      break;
    case Op::kv_store:
      r = run_kv_store(c);
      break;
    case Op::attention:
      r = run_attention(c);
      break;
    case Op::eltwise:
      r = run_eltwise(c);
      break;
  }
  const double e_ref = nmse(r.out, r.ref);
  EXPECT_LE(e_ref, threshold_ref(c)) << case_name(c) << ": NMSE against the CPU scalar reference";
  if (!r.exact.empty()) {
    const double e_exact = nmse(r.out, r.exact);
    EXPECT_LE(e_exact, threshold_exact(c)) << case_name(c) << ": NMSE against float64";
    RecordProperty("nmse_exact", sci(e_exact));
  }
  RecordProperty("nmse_ref", sci(e_ref));
}

constexpr DType kWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                                  DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
/// The other GGUF weight types the CUDA backend decodes (byte loads, f32 activations): the
/// kernels are the ones above, so one decode width, one multi-row width and the GEMM suffice.
constexpr DType kMoreWeightTypes[] = {DType::Q4_1, DType::Q5_0,   DType::Q5_1,  DType::Q2_K,
                                      DType::Q3_K, DType::IQ4_NL, DType::IQ4_XS};

/// The weight types the CUDA backend also reads in the split layout (matmul.h).
constexpr bool cuda_split(DType t) {
  return t == DType::Q4_0 || t == DType::Q8_0 || t == DType::Q6_K || t == DType::Q4_K ||
         t == DType::Q5_K;
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (Backend b : {Backend::cpu, Backend::cuda}) {
    for (DType t : kWeightTypes) {
      out.push_back({b, Op::get_rows, t});
      for (int n : {1, 3, 8, 37, 201}) out.push_back({b, Op::matmul, t, t, n});
      if (b == Backend::cuda && cuda_split(t)) {  // the split layout
        out.push_back({b, Op::get_rows, t, t, 1});
        for (int n : {101, 103, 137, 301, 501}) out.push_back({b, Op::matmul, t, t, n});
      }
    }
    for (DType t : kMoreWeightTypes) {
      out.push_back({b, Op::get_rows, t});
      for (int n : {1, 3, 37}) out.push_back({b, Op::matmul, t, t, n});
    }
    for (int v : {0, 1, 2, 3}) out.push_back({b, Op::rms_norm, DType::F32, DType::F32, v});
    for (int v : {0, 1, 2, 3, 4}) out.push_back({b, Op::rope, DType::F32, DType::F32, v});
    out.push_back({b, Op::swiglu});
    for (int v : {0, 1, 2, 3, 4}) out.push_back({b, Op::eltwise, DType::F32, DType::F32, v});
    for (int v : {0, 1}) out.push_back({b, Op::add, DType::F32, DType::F32, v});
    for (DType t : kKvCacheTypes)
      for (int v : {0, 1, 2, 3}) out.push_back({b, Op::kv_store, t, t, v});
    // Every K × V pair on CUDA; on the CPU (where the case checks the harness and the float64
    // reference, the CPU's own paged attention being tested in test_paged_attention) every type
    // as K and as V: the pairs K = V and V = f16.
    for (DType kt : kKvCacheTypes)
      for (DType vt : kKvCacheTypes)
        if (b == Backend::cuda || kt == vt || vt == DType::F16)
          for (int v : {0, 1, 2, 3, 4, 5, 6, 7, 8}) out.push_back({b, Op::attention, kt, vt, v});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, BackendOps, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return case_name(info.param); });

#ifdef KVRUN_HAVE_CUDA
// What the CUDA backend refuses must be known before a model runs (no GPU needed).
TEST(CudaSupport, TypesAndShapesAreCheckedUpFront) {
  for (const auto& types :
       {std::span<const DType>(kWeightTypes), std::span<const DType>(kMoreWeightTypes)})
    for (DType t : types) {
      EXPECT_TRUE(cuda::matmul_supported(t, 512)) << traits(t).name;
      EXPECT_TRUE(cuda::get_rows_supported(t, 512)) << traits(t).name;
    }
  for (DType t : {DType::MXFP4, DType::IQ3_S, DType::IQ2_S, DType::IQ3_XXS, DType::IQ2_XXS,
                  DType::IQ2_XS, DType::IQ1_S, DType::IQ1_M}) {
    EXPECT_FALSE(cuda::matmul_supported(t, 512)) << traits(t).name;
    EXPECT_FALSE(cuda::get_rows_supported(t, 512)) << traits(t).name;
  }
  EXPECT_FALSE(cuda::matmul_supported(DType::Q4_K, 128));  // not a whole super-block
  EXPECT_FALSE(cuda::matmul_supported(DType::IQ4_XS, 128));
  EXPECT_TRUE(cuda::matmul_supported(DType::IQ4_NL, 96));  // blocks of 32
  // stories260K's ffn_down rows have 172 values: whole f32 chunks (4), not f16 ones (8).
  EXPECT_TRUE(cuda::matmul_supported(DType::F32, 172));
  EXPECT_FALSE(cuda::matmul_supported(DType::F16, 172));
  EXPECT_FALSE(cuda::matmul_supported(DType::F32, 170));
  for (DType t : kKvCacheTypes) EXPECT_TRUE(cuda::kv_type_supported(t)) << traits(t).name;
  EXPECT_FALSE(cuda::kv_type_supported(DType::Q4_K));
  const cuda::AttnShape ok{32, 8, 128, 128, 0.1f}, wide_group{32, 2, 128, 128, 0.1f},
      big_head{8, 8, 512, 512, 0.1f};
  EXPECT_TRUE(cuda::paged_attention_supported(DType::FP8_E4M3, DType::NVFP4, ok));
  EXPECT_FALSE(cuda::paged_attention_supported(DType::F16, DType::F16, wide_group));
  EXPECT_FALSE(cuda::paged_attention_supported(DType::F16, DType::F16, big_head));
  EXPECT_FALSE(cuda::paged_attention_supported(DType::Q4_K, DType::F16, ok));
  const cuda::AttnShape rotated{8, 8, 64, 64, 0.1f, true}, rotated_odd{8, 8, 40, 40, 0.1f, true};
  EXPECT_TRUE(cuda::paged_attention_supported(DType::Q4_0, DType::F16, rotated));
  EXPECT_FALSE(cuda::paged_attention_supported(DType::Q4_0, DType::F16, rotated_odd));
}

/// matmul_many over weights reading the same x equals one matmul per weight, bit for bit: with
/// x quantized once for split-layout weights (decode rows), one fused launch for
/// one row over weights of one type (k_matvec_q8_1_fused, each of its rows-per-warp choices),
/// and per weight where one of them is not split (f16) or for prefill rows.
TEST(CudaMatmulMany, EqualsOneMatmulPerWeight) {
  if (cuda::devices().empty()) GTEST_SKIP() << "no CUDA device on this machine";
  constexpr int64_t k = 512;
  struct Case {
    std::vector<DType> types;
    std::vector<int64_t> rows;
  };
  const Case cases[] = {
      {{DType::Q4_0, DType::Q6_K, DType::Q8_0}, {96, 2100, 8200}},    // mixed: one launch each
      {{DType::Q4_0, DType::Q4_0, DType::Q4_0}, {4100, 1030, 1030}},  // fused, 4 rows a warp
      {{DType::Q8_0, DType::Q8_0}, {96, 2100}},                       // fused, 2 rows a warp
      {{DType::Q6_K, DType::Q6_K, DType::Q6_K}, {96, 200, 40}},       // fused, 1 row a warp
  };
  uint32_t seed = 70;
  for (const Case& cs : cases) {
    const int n_w = int(cs.types.size());
    for (const bool with_f16 : {false, true}) {
      std::vector<cuda::DeviceTensor> ws;
      for (int i = 0; i < n_w; ++i) {
        const DType t = with_f16 && i == 1 ? DType::F16 : cs.types[size_t(i)];
        std::vector<uint8_t> wq = random_rows(t, cs.rows[size_t(i)], k, seed++);
        const Tensor w = Tensor::contiguous(t, wq.data(), k, cs.rows[size_t(i)]);
        ws.push_back(t == DType::F16 ? cuda::upload_tensor(gpu(), w)
                                     : cuda::upload_tensor_split(gpu(), w));
      }
      for (const int64_t n : {int64_t(1), int64_t(3), int64_t(8), int64_t(12)}) {
        const cuda::DeviceBuffer dx = to_gpu(test::random_floats(size_t(n * k), seed++));
        std::vector<cuda::DeviceBuffer> many, one;
        std::vector<MatmulOut> outs;
        for (int i = 0; i < n_w; ++i) {
          const size_t len = size_t(n * cs.rows[size_t(i)]);
          many.push_back(gpu_poisoned(len));
          one.push_back(gpu_poisoned(len));
          outs.push_back({&ws[size_t(i)].view, many.back().as<float>()});
          cuda::matmul(gpu(), ws[size_t(i)].view, dx.as<float>(), n, one.back().as<float>());
        }
        cuda::matmul_many(gpu(), outs.data(), n_w, dx.as<float>(), n);
        for (int i = 0; i < n_w; ++i) {
          const size_t len = size_t(n * cs.rows[size_t(i)]);
          const std::vector<float> a = from_gpu(many[size_t(i)], len);
          const std::vector<float> b = from_gpu(one[size_t(i)], len);
          for (float f : a) ASSERT_TRUE(std::isfinite(f)) << "output " << i << ", n " << n;
          EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
              << "output " << i << " of " << n_w << " (" << traits(ws[size_t(i)].view.type).name
              << ", " << cs.rows[size_t(i)] << " rows), n " << n
              << (with_f16 ? ", with an f16 weight" : "");
        }
      }
    }
  }
}

TEST(CudaSupport, UnsupportedWeightIsAClearError) {
  if (cuda::devices().empty()) GTEST_SKIP() << "no CUDA device on this machine";
  // mxfp4 has no CUDA kernel (q5_0, the type this test named first, has had one since 2026-11-27).
  std::vector<uint8_t> w = random_rows(DType::MXFP4, 4, 64, 5);
  const cuda::DeviceTensor dw =
      cuda::upload_tensor(gpu(), Tensor::contiguous(DType::MXFP4, w.data(), 64, 4));
  cuda::DeviceBuffer x(gpu(), 64 * 4), y(gpu(), 4 * 4);
  try {
    cuda::matmul(gpu(), dw.view, x.as<float>(), 1, y.as<float>());
    FAIL() << "mxfp4 weights were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("mxfp4"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
}  // namespace kvrun
