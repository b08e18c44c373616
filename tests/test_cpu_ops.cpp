// test_cpu_ops.cpp — CPU backend ops against naive double-precision references on random data:
// the matmul for every supported weight type (weights decoded with traits().to_float,
// activations quantized to the paired type and decoded the same way), RMSNorm, RoPE (normal and
// NeoX), SwiGLU and gpt-oss's clamped SwiGLU, add, softmax (also with an attention sink),
// get_rows, causal GQA attention, and the thread pool. Threaded results must be bit-identical to
// single-threaded ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "backend.h"
#include "blocks.h"
#include "cpu/attention.h"
#include "cpu/cpu_traits.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "fp16.h"
#include "quants.h"
#include "test_util.h"

namespace kvrun::cpu {
namespace {

using test::random_floats;

/// Row-major bytes of `rows` rows of `k` floats encoded in `t`; for the decode-only grid
/// i-quants (no quantizer) random valid blocks instead, of magnitude like x's.
std::vector<uint8_t> encode(DType t, const std::vector<float>& x, int64_t rows, int64_t k) {
  const size_t rb = size_t(*row_bytes(t, k));
  std::vector<uint8_t> out(rb * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    if (traits(t).from_float)
      traits(t).from_float(x.data() + r * k, out.data() + r * rb, k);
    else
      EXPECT_TRUE(fill_random_iq_blocks(t, 0.01f, uint32_t(r), out.data() + r * rb, k));
  }
  return out;
}

class MatmulTypes : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTypes, MatchesDequantizedReference) {
  const DType t = GetParam();
  const int64_t m = 12, k = 512, n = 5;
  const CpuTypeTraits* ct = cpu_traits(t);
  ASSERT_NE(ct, nullptr);
  const auto wf = random_floats(size_t(m * k), 1 + uint32_t(t));
  const auto x = random_floats(size_t(n * k), 100 + uint32_t(t));
  auto wbytes = encode(t, wf, m, k);
  const Tensor w = Tensor::contiguous(t, wbytes.data(), k, m);

  // Reference inputs: decoded weights, activations through the paired type and back.
  std::vector<float> wd(size_t(m * k)), xd(size_t(n * k));
  for (int64_t r = 0; r < m; ++r) w.row_to_float(wd.data() + r * k, r);
  const size_t ab = size_t(*row_bytes(ct->act_type, k));
  std::vector<uint8_t> act(ab);
  for (int64_t j = 0; j < n; ++j) {
    ct->act_from_float(x.data() + j * k, act.data(), k);
    traits(ct->act_type).to_float(act.data(), xd.data() + j * k, k);
  }

  for (int64_t rows : {int64_t(1), n}) {  // decode and batch paths
    ThreadPool p1(1), p4(4);
    std::vector<float> y1(size_t(rows * m)), y4(size_t(rows * m));
    matmul(p1, w, x.data(), rows, y1.data());
    matmul(p4, w, x.data(), rows, y4.data());
    EXPECT_EQ(std::memcmp(y1.data(), y4.data(), y1.size() * 4), 0) << "threads 1 vs 4";
    for (int64_t j = 0; j < rows; ++j)
      for (int64_t i = 0; i < m; ++i) {
        double ref = 0, mag = 0;
        for (int64_t e = 0; e < k; ++e) {
          ref += double(wd[size_t(i * k + e)]) * double(xd[size_t(j * k + e)]);
          mag += std::fabs(double(wd[size_t(i * k + e)]) * double(xd[size_t(j * k + e)]));
        }
        // q8_1 stores s = d·Σq as f16 (relative error ≤ 2^-11), and offset formats multiply it
        // by their block minimum |m| ≤ max |w| of the block: allow for that rounding.
        double s_err = 0;
        if (ct->act_type == DType::Q8_1)
          for (int64_t b = 0; b < k; b += 32) {
            double wmax = 0, xs = 0;
            for (int64_t e = b; e < b + 32; ++e) {
              wmax = std::max(wmax, std::fabs(double(wd[size_t(i * k + e)])));
              xs += xd[size_t(j * k + e)];
            }
            s_err += 1e-3 * wmax * std::fabs(xs);
          }
        EXPECT_NEAR(y1[size_t(j * m + i)], ref, 2e-6 * mag + 1e-6 + s_err)
            << traits(t).name << " row " << i << " token " << j;
      }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, MatmulTypes,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q4_0,
                                           DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                                           DType::IQ4_NL, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                                           DType::Q5_K, DType::Q6_K, DType::MXFP4, DType::IQ4_XS,
                                           DType::IQ3_S, DType::IQ2_S, DType::IQ3_XXS,
                                           DType::IQ2_XXS, DType::IQ2_XS, DType::IQ1_S,
                                           DType::IQ1_M),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(traits(info.param).name);
                         });

// llama.cpp repacks q4_0 weights with a multiple of 8 rows (q4_0_8x8 on x86 with AVX2); its
// gemm/gemv then compute, per block, the whole integer dot and acc = fma(float(isum), d_w·d_x,
// acc). Other row counts keep ggml_vec_dot_q4_0_q8_0's order (vec_dot).
TEST(Matmul, Q4_0RepackedOrderForMultipleOf8Rows) {
  const int64_t k = 96, n = 5;
  const CpuTypeTraits* ct = cpu_traits(DType::Q4_0);
  ASSERT_NE(ct, nullptr);
  ASSERT_NE(ct->repack_dot, nullptr);
  for (int64_t m : {int64_t(16), int64_t(12)}) {
    const auto wf = random_floats(size_t(m * k), 7);
    const auto x = random_floats(size_t(n * k), 8);
    auto wbytes = encode(DType::Q4_0, wf, m, k);
    const Tensor w = Tensor::contiguous(DType::Q4_0, wbytes.data(), k, m);
    const size_t wrow = size_t(*row_bytes(DType::Q4_0, k)),
                 arow = size_t(*row_bytes(DType::Q8_0, k));
    std::vector<uint8_t> act(arow * size_t(n));
    for (int64_t j = 0; j < n; ++j) ct->act_from_float(x.data() + j * k, act.data() + j * arow, k);
    for (int64_t rows : {int64_t(1), int64_t(3), n}) {
      ThreadPool pool(2);
      std::vector<float> y(size_t(rows * m));
      matmul(pool, w, x.data(), rows, y.data());
      for (int64_t j = 0; j < rows; ++j)
        for (int64_t i = 0; i < m; ++i) {
          const auto* bw = reinterpret_cast<const block_q4_0*>(wbytes.data() + size_t(i) * wrow);
          const auto* bx = reinterpret_cast<const block_q8_0*>(act.data() + size_t(j) * arow);
          float want = 0.0f;
          if (m % 8 == 0) {
            for (int64_t b = 0; b < k / 32; ++b) {
              int32_t isum = 0;
              for (int e = 0; e < 16; ++e) {
                isum += ((bw[b].qs[e] & 0x0F) - 8) * bx[b].qs[e];
                isum += ((bw[b].qs[e] >> 4) - 8) * bx[b].qs[e + 16];
              }
              want = std::fma(float(isum), fp16_lut(bw[b].d) * fp16_lut(bx[b].d), want);
            }
          } else {
            want = ct->vec_dot(k, bw, bx);
          }
          const float got = y[size_t(j * m + i)];
          EXPECT_EQ(std::memcmp(&got, &want, 4), 0)
              << "m " << m << " rows " << rows << " row " << i << " token " << j << ": " << got
              << " vs " << want;
        }
    }
  }
}

TEST(Matmul, RejectsUnsupportedShapes) {
  std::vector<uint8_t> buf(34 * 4);
  const Tensor w = Tensor::contiguous(DType::Q8_0, buf.data(), 32, 4);
  EXPECT_TRUE(matmul_supports(DType::Q8_0, 32));
  EXPECT_FALSE(matmul_supports(DType::Q8_0, 48));
  EXPECT_FALSE(matmul_supports(DType::Q8_K, 256));  // an activation type, not a weight type
  EXPECT_FALSE(matmul_supports(DType::Q4_K, 32));   // a K-quant row needs 256 elements
  (void)w;
}

TEST(Ops, RmsNormMatchesReference) {
  const int64_t rows = 3, cols = 96;
  const auto x = random_floats(size_t(rows * cols), 7, 3.0f);
  const auto w = random_floats(size_t(cols), 8);
  std::vector<float> y(x.size());
  rms_norm(x.data(), w.data(), y.data(), rows, cols, 1e-5f);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < cols; ++i)
      ss += double(x[size_t(r * cols + i)]) * x[size_t(r * cols + i)];
    const double scale = 1.0 / std::sqrt(ss / double(cols) + 1e-5);
    for (int64_t i = 0; i < cols; ++i)
      EXPECT_NEAR(y[size_t(r * cols + i)], x[size_t(r * cols + i)] * scale * w[size_t(i)], 1e-5);
  }
}

/// Naive RoPE in double with θ_i = pos · base^(−2i/n_rot).
void rope_ref(std::vector<double>& v, int64_t n_rot, double base, int32_t pos, bool neox) {
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double th = pos * std::pow(base, -2.0 * double(i) / double(n_rot));
    const size_t i0 = size_t(neox ? i : 2 * i), i1 = size_t(neox ? i + n_rot / 2 : 2 * i + 1);
    const double a = v[i0], b = v[i1];
    v[i0] = a * std::cos(th) - b * std::sin(th);
    v[i1] = a * std::sin(th) + b * std::cos(th);
  }
}

TEST(Ops, RopeMatchesReferenceBothStyles) {
  const int64_t n_tok = 3, n_head = 2, hd = 16;
  const int32_t pos[n_tok] = {0, 5, 37};
  for (bool neox : {false, true}) {
    auto x = random_floats(size_t(n_tok * n_head * hd), 11);
    const auto orig = x;
    RopeConfig rc;
    rc.n_rot = 12;  // partial rotation: the last 4 dims pass through
    rc.freq_base = 10000.0f;
    rc.neox = neox;
    rope(x.data(), n_tok, n_head, hd, pos, rc);
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t h = 0; h < n_head; ++h) {
        const size_t off = size_t((t * n_head + h) * hd);
        std::vector<double> v(orig.begin() + off, orig.begin() + off + hd);
        rope_ref(v, rc.n_rot, 10000.0, pos[t], neox);
        for (int64_t d = 0; d < hd; ++d) EXPECT_NEAR(x[off + size_t(d)], v[size_t(d)], 2e-5);
      }
  }
}

TEST(Ops, SwigluAddSoftmax) {
  const auto g = random_floats(64, 21, 3.0f), u = random_floats(64, 22);
  std::vector<float> out(64);
  swiglu(g.data(), u.data(), out.data(), 64);
  for (size_t i = 0; i < 64; ++i)
    EXPECT_NEAR(out[i], g[i] / (1.0 + std::exp(-double(g[i]))) * u[i], 1e-6);

  auto y = random_floats(64, 23);
  const auto y0 = y;
  add(y.data(), u.data(), 64);
  for (size_t i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(y[i], y0[i] + u[i]);

  auto s = random_floats(50, 24, 4.0f);
  const auto s0 = s;
  softmax(s.data(), 50);
  double den = 0;
  for (float v : s0) den += std::exp(double(v));
  for (size_t i = 0; i < 50; ++i) EXPECT_NEAR(s[i], std::exp(double(s0[i])) / den, 1e-7);
}

// gpt-oss's clamped SwiGLU against the plain formula in double (OpenAI's model card; ggml's
// swiglu_oai): g = min(gate, 7), u = clamp(up, −7, 7), out = g · sigmoid(1.702 g) · (u + 1).
// Inputs of sd 6 so both clamps are hit, plus the exact edges ±7; through the backend's glu too.
TEST(Ops, SwigluOaiMatchesDoubleFormula) {
  auto g = random_floats(200, 31, 6.0f), u = random_floats(200, 32, 6.0f);
  g[0] = 7.0f, g[1] = -7.0f, u[2] = 7.0f, u[3] = -7.0f, g[4] = 0.0f;
  auto formula = [](double gate, double up) {
    const double x = std::min(gate, 7.0), y = std::clamp(up, -7.0, 7.0);
    return x / (1.0 + std::exp(-1.702 * x)) * (y + 1.0);
  };
  int clamped = 0;
  for (size_t i = 0; i < g.size(); ++i) clamped += g[i] > 7.0f || std::fabs(u[i]) > 7.0f;
  EXPECT_GT(clamped, 20) << "the inputs must exercise the clamps";
  std::vector<float> out(g.size());
  swiglu_oai(g.data(), u.data(), out.data(), 10, 20);
  for (size_t i = 0; i < g.size(); ++i) {
    const double ref = formula(g[i], u[i]);
    EXPECT_NEAR(out[i], ref, 2e-6 * (1 + std::fabs(ref))) << "gate " << g[i] << " up " << u[i];
  }
  // (That the CPU backend's glu runs it for GluKind::kSwiGluOai: test_moe_ops.cpp. This file is
  // also cross-built for AArch64 without the backend registry, cmake/cpu_tests_only.cmake.)
}

// Softmax with an attention sink (gpt-oss; llama.cpp's soft_max with sinks) against the formula
// in double: w_j = e^(scale·x_j) / (e^sink + Σ_p e^(scale·x_p)) over the n_pos visible cells, 0 for
// the masked rest; for sinks far below, at and far above the scores. Without a sink the result
// is bit for bit the sink-less call's, and a −inf sink changes nothing.
TEST(Ops, MaskedSoftmaxWithSinkMatchesDoubleFormula) {
  const int64_t n_pos = 37, n_kv = 64;
  const float scale = 0.125f;
  const auto x0 = random_floats(size_t(n_kv), 33, 8.0f);
  for (float sink : {-30.0f, -1.0f, 0.0f, 0.5f, 3.0f, 40.0f}) {
    auto x = x0;
    masked_softmax(x.data(), n_pos, n_kv, scale, &sink);
    double mx = sink, den = 0;
    for (int64_t j = 0; j < n_pos; ++j) mx = std::max(mx, double(scale) * x0[size_t(j)]);
    for (int64_t j = 0; j < n_pos; ++j) den += std::exp(double(scale) * x0[size_t(j)] - mx);
    den += std::exp(double(sink) - mx);
    double total = 0;
    for (int64_t j = 0; j < n_kv; ++j) {
      const double ref = j < n_pos ? std::exp(double(scale) * x0[size_t(j)] - mx) / den : 0.0;
      EXPECT_NEAR(x[size_t(j)], ref, 1e-7 + 1e-6 * ref) << "sink " << sink << " cell " << j;
      total += x[size_t(j)];
    }
    EXPECT_NEAR(total, 1.0 - std::exp(double(sink) - mx) / den, 1e-6) << "sink " << sink;
  }
  auto plain = x0, none = x0;
  masked_softmax(plain.data(), n_pos, n_kv, scale);
  const float minus_inf = -INFINITY;
  masked_softmax(none.data(), n_pos, n_kv, scale, &minus_inf);
  EXPECT_EQ(0, std::memcmp(plain.data(), none.data(), plain.size() * sizeof(float)));
}

TEST(Ops, GetRowsDecodesAnyType) {
  for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_K}) {
    const int64_t rows = 6, cols = 256;
    const auto x = random_floats(size_t(rows * cols), 31);
    auto bytes = encode(t, x, rows, cols);
    const Tensor table = Tensor::contiguous(t, bytes.data(), cols, rows);
    const int32_t ids[3] = {4, 0, 4};
    std::vector<float> out(3 * cols), ref(cols);
    get_rows(table, ids, 3, out.data());
    for (int i = 0; i < 3; ++i) {
      table.row_to_float(ref.data(), ids[i]);
      EXPECT_EQ(std::memcmp(out.data() + i * cols, ref.data(), size_t(cols) * 4), 0);
    }
    const int32_t bad = int32_t(rows);
    EXPECT_THROW(get_rows(table, &bad, 1, out.data()), std::out_of_range);
  }
}

/// Naive causal GQA attention in double over f32 K/V rows.
std::vector<double> attention_ref(const AttnParams& p, const std::vector<float>& q,
                                  const std::vector<float>& k, const std::vector<float>& v,
                                  int64_t pos0, int64_t n_tok) {
  std::vector<double> out(size_t(n_tok * p.n_head * p.head_dim_v));
  const int64_t group = p.n_head / p.n_head_kv;
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t h = 0; h < p.n_head; ++h) {
      const int64_t n_pos = pos0 + t + 1, hk = h / group;
      std::vector<double> s(static_cast<size_t>(n_pos));
      double mx = -INFINITY, den = 0;
      for (int64_t j = 0; j < n_pos; ++j) {
        double d = 0;
        for (int64_t e = 0; e < p.head_dim; ++e)
          d += double(q[size_t((t * p.n_head + h) * p.head_dim + e)]) *
               k[size_t((j * p.n_head_kv + hk) * p.head_dim + e)];
        s[size_t(j)] = d * p.scale;
        mx = std::max(mx, s[size_t(j)]);
      }
      for (auto& x : s) den += (x = std::exp(x - mx));
      for (int64_t e = 0; e < p.head_dim_v; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < n_pos; ++j)
          acc += s[size_t(j)] / den * v[size_t((j * p.n_head_kv + hk) * p.head_dim_v + e)];
        out[size_t((t * p.n_head + h) * p.head_dim_v + e)] = acc;
      }
    }
  return out;
}

TEST(Attention, CausalGqaMatchesReference) {
  const AttnParams p{8, 2, 16, 16, 0.25f};
  const int64_t n_ctx = 40, pos0 = 9, n_tok = 6, total = pos0 + n_tok;
  const int64_t kw = p.n_head_kv * p.head_dim;
  const auto k = random_floats(size_t(total * kw), 41), v = random_floats(size_t(total * kw), 42);
  const auto q = random_floats(size_t(n_tok * p.n_head * p.head_dim), 43);
  const auto ref = attention_ref(p, q, k, v, pos0, n_tok);
  for (DType kv_type : {DType::F32, DType::F16}) {
    const size_t es = kv_type == DType::F16 ? 2 : 4;
    std::vector<uint8_t> kb(size_t(n_ctx * kw) * es), vb(size_t(n_ctx * kw) * es);
    const KvLayerView kv{kv_type, kb.data(), vb.data(), n_ctx};
    kv_store(kv, p, k.data(), v.data(), 0, pos0);  // earlier tokens, then this batch
    kv_store(kv, p, k.data() + pos0 * kw, v.data() + pos0 * kw, pos0, n_tok);
    ThreadPool p1(1), p4(4);
    std::vector<float> o1(ref.size()), o4(ref.size());
    attention(p1, kv, p, q.data(), pos0, n_tok, o1.data());
    attention(p4, kv, p, q.data(), pos0, n_tok, o4.data());
    EXPECT_EQ(std::memcmp(o1.data(), o4.data(), o1.size() * 4), 0) << "threads 1 vs 4";
    const double tol = kv_type == DType::F16 ? 1e-2 : 1e-5;  // f16 rounds Q, K, V and weights
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(o1[i], ref[i], tol) << i;
  }
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  for (int64_t n : {1, 3, 4, 17, 1000}) {
    std::vector<int> hits(size_t(n), 0);
    pool.run(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
    });
    for (int h : hits) EXPECT_EQ(h, 1);
  }
}

// Back-to-back jobs (workers catch them while spinning), jobs after a pause longer than the spin
// (workers asleep on the condition variable), and destruction in both states: every index is
// run exactly once per job and every job's writes are visible when run() returns.
TEST(ThreadPool, SpinningAndSleepingWorkersRunEveryJobOnce) {
  for (int threads : {2, 3, 8}) {
    auto pool = std::make_unique<ThreadPool>(threads);
    std::vector<int> hits(64, 0);
    for (int job = 0; job < 5000; ++job) {
      pool->run(int64_t(hits.size()), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
      });
      ASSERT_EQ(hits[size_t(job % 64)], job + 1) << "job " << job;
    }
    for (int job = 0; job < 4; ++job) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin: asleep
      pool->run(int64_t(hits.size()), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
      });
    }
    for (int h : hits) EXPECT_EQ(h, 5004);
    pool.reset();  // workers asleep
    ThreadPool spinning(threads);
    spinning.run(8, [](int64_t, int64_t) {});  // destroyed while its workers still spin
  }
}

// Chunks are taken from a shared counter: while the calling thread is held up in its first
// chunk, the worker takes all the others (with one fixed chunk per thread the worker would have
// run half the range and then waited). Every index still runs once.
TEST(ThreadPool, ASlowThreadTakesFewerChunks) {
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  std::vector<int> hits(64, 0);
  std::atomic<int> caller_chunks{0}, chunks{0};
  pool.run(int64_t(hits.size()), [&](int64_t b, int64_t e) {
    ++chunks;
    if (std::this_thread::get_id() == caller && caller_chunks++ == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
  });
  for (int h : hits) EXPECT_EQ(h, 1);
  EXPECT_GT(chunks.load(), 2) << "more chunks than threads";
  EXPECT_EQ(caller_chunks.load(), 1) << "the worker should have taken every other chunk";
}

}  // namespace
}  // namespace kvrun::cpu
