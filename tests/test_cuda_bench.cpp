// test_cuda_bench.cpp — timings of the CUDA ops at llama3.1-8B decode shapes (d 4096, n_ff 14336,
// 32 heads, 8 KV heads, head_dim 128), printed and recorded as test properties, and a synthetic
// decode step: the op chain of one layer (models/llama.cpp's order) on 32 layers of distinct
// random weights plus the output head, giving an op-level decode t/s — not the model's, which
// needs the -ngl integration. Each timing also checks its result (a matvec against a float64
// dot, attention output finite), so the cases can fail. Skipped without a GPU.
//
// Timing: warm-up first, then many launches between two Context::synchronize calls, host clock;
// weights rotate among copies that together exceed the GPU's L2, so HBM is what is measured.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cpu/vec_dot.h"
#include "dtype.h"
#include "kv_layout.h"
#include "tensor.h"
#include "test_util.h"
#ifdef KVRUN_HAVE_CUDA
#include "cuda/add.h"
#include "cuda/attn_batch.h"
#include "cuda/cuda_context.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_graph.h"
#include "cuda/device_tensor.h"
#include "cuda/kv_store.h"
#include "cuda/matmul.h"
#include "cuda/paged_attention.h"
#include "cuda/rms_norm.h"
#include "cuda/rope.h"
#include "cuda/swiglu.h"
#endif

namespace kvrun {
namespace {

#ifdef KVRUN_HAVE_CUDA
constexpr int64_t kD = 4096, kFF = 14336, kHead = 32, kHeadKv = 8, kHd = 128, kVocab = 128256;

/// A host weight [m, k] of type t: 64 distinct random rows quantized once, repeated (quantizing
/// billions of values on the host would take minutes; the GPU reads every byte either way).
struct HostWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> row0;  ///< row 0 decoded
  Tensor view;
};

HostWeight host_weight(DType t, int64_t m, int64_t k, uint32_t seed) {
  const int64_t distinct = 64, rb = *row_bytes(t, k);
  const std::vector<float> x = test::random_floats(size_t(distinct * k), seed, 0.02f);
  std::vector<uint8_t> q(size_t(distinct * rb));
  traits(t).from_float(x.data(), q.data(), distinct * k);
  HostWeight w;
  w.bytes.resize(size_t(m * rb));
  for (int64_t r = 0; r < m; ++r)
    std::copy_n(q.data() + (r % distinct) * rb, rb, w.bytes.data() + r * rb);
  w.row0.resize(size_t(k));
  traits(t).to_float(q.data(), w.row0.data(), k);
  w.view = Tensor::contiguous(t, w.bytes.data(), k, m);
  return w;
}

cuda::DeviceBuffer upload_floats(cuda::Context& ctx, const std::vector<float>& v) {
  cuda::DeviceBuffer b(ctx, v.size() * 4);
  b.upload(ctx, v.data(), v.size() * 4);
  return b;
}

/// Seconds per call of f, over `reps` calls after `warm` warm-up calls.
template <typename F>
double time_per_call(cuda::Context& ctx, int warm, int reps, F&& f) {
  for (int i = 0; i < warm; ++i) f(i);
  ctx.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f(i);
  ctx.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

bool have_gpu() { return !cuda::devices().empty(); }
#endif

class CudaBenchMatvec : public ::testing::TestWithParam<DType> {};

TEST_P(CudaBenchMatvec, FfnUpShapeBandwidth) {
#ifndef KVRUN_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (configure with -DKVRUN_CUDA=ON)";
#else
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
  cuda::Context ctx(0);
  const DType t = GetParam();
  const HostWeight hw = host_weight(t, kFF, kD, 7);
  const std::vector<float> x = test::random_floats(size_t(kD), 8);
  // The stored layout, and for q4_0 / q8_0 the split layout the backend uploads them in, whose
  // decode matmul takes x quantized as the CPU's q8_0 activations.
  for (const bool split : {false, true}) {
    if (split && !cuda::split_layout_supported(t)) continue;
    std::vector<cuda::DeviceTensor> copies;  // 4 copies: ≥ 95 MB for q4_0, above the L2
    for (int i = 0; i < 4; ++i)
      copies.push_back(split ? cuda::upload_tensor_split(ctx, hw.view)
                             : cuda::upload_tensor(ctx, hw.view));
    cuda::DeviceBuffer dx = upload_floats(ctx, x), dy(ctx, size_t(kFF) * 4);
    dy.fill_bytes(ctx, 0xFF);
    const double s = time_per_call(ctx, 10, 200, [&](int i) {
      cuda::matmul(ctx, copies[size_t(i % 4)].view, dx.as<float>(), 1, dy.as<float>());
    });
    std::vector<float> y(static_cast<size_t>(kFF));
    dy.download(ctx, y.data(), y.size() * 4);
    std::vector<float> xe = x;
    if (split) {
      std::vector<uint8_t> xq(size_t(kD / 32 * 34));
      cpu::act_from_float_q8_0(x.data(), xq.data(), kD);
      traits(DType::Q8_0).to_float(xq.data(), xe.data(), kD);
    }
    double want = 0;
    for (int64_t e = 0; e < kD; ++e) want += double(hw.row0[size_t(e)]) * xe[size_t(e)];
    EXPECT_NEAR(y[0], want, 1e-4 * std::fabs(want) + 1e-6);
    EXPECT_NEAR(y[64], want, 1e-4 * std::fabs(want) + 1e-6);  // row 64 repeats row 0
    const double gbs = double(hw.bytes.size()) / s / 1e9;
    std::printf("matvec %-5s 14336x4096%s: %8.1f us  %7.1f GB/s\n", traits(t).name,
                split ? " split, q8_0 x" : "", s * 1e6, gbs);
    RecordProperty(split ? "split_us" : "us", std::to_string(s * 1e6));
    RecordProperty(split ? "split_GBps" : "GBps", std::to_string(gbs));
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(Types, CudaBenchMatvec,
                         ::testing::Values(DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0,
                                           DType::Q4_K, DType::Q5_K, DType::Q6_K),
                         [](const auto& info) { return std::string(traits(info.param).name); });

class CudaBenchDecode : public ::testing::TestWithParam<DType> {};

/// One decode step of llama3.1-8B shapes at context 32768 with KV type GetParam() (K and V) and
/// q4_0 weights (q6_K head): the op chain of models/llama.cpp for 32 layers.
TEST_P(CudaBenchDecode, Llama8BShapesAt32k) {
#ifndef KVRUN_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (configure with -DKVRUN_CUDA=ON)";
#else
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
  cuda::Context ctx(0);
  const DType kv_type = GetParam();
  const int64_t n_layer = 32, ctx_len = 32768, bs = 16, nq = kHead * kHd, nkv = kHeadKv * kHd;
  const DType wt = DType::Q4_0;
  const HostWeight wq = host_weight(wt, nq, kD, 1), wk = host_weight(wt, nkv, kD, 2),
                   wo = host_weight(wt, kD, nq, 3), wg = host_weight(wt, kFF, kD, 4),
                   wd = host_weight(wt, kD, kFF, 5), head = host_weight(DType::Q6_K, kVocab, kD, 6);
  struct Layer {
    cuda::DeviceTensor q, k, v, o, gate, up, down;
    cuda::DeviceBuffer kc, vc;
  };
  const int64_t kr = kv_row_bytes(kv_type, kHeadKv, kHd);
  std::vector<Layer> layers;
  for (int64_t l = 0; l < n_layer; ++l) {
    // q4_0 in the split layout, as the backend uploads it.
    Layer L{
        cuda::upload_tensor_split(ctx, wq.view),      cuda::upload_tensor_split(ctx, wk.view),
        cuda::upload_tensor_split(ctx, wk.view),      cuda::upload_tensor_split(ctx, wo.view),
        cuda::upload_tensor_split(ctx, wg.view),      cuda::upload_tensor_split(ctx, wg.view),
        cuda::upload_tensor_split(ctx, wd.view),      cuda::DeviceBuffer(ctx, size_t(ctx_len * kr)),
        cuda::DeviceBuffer(ctx, size_t(ctx_len * kr))};
    layers.push_back(std::move(L));
  }
  const cuda::DeviceTensor dhead = cuda::upload_tensor_split(ctx, head.view);  // as the backend
  // Fill every layer's cache with ctx_len encoded random rows (kv_store over a prefill batch).
  std::vector<int32_t> table(size_t(ctx_len / bs));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  cuda::AttnBatch fill, step;
  const cuda::SeqRows all{table.data(), 0, 0, ctx_len - 1};
  fill.set(ctx, &all, 1, bs);
  const cuda::SeqRows one{table.data(), ctx_len - 1, 0, 1};
  step.set(ctx, &one, 1, bs);
  const cuda::AttnShape shape{kHead, kHeadKv, kHd, kHd, 1.0f / std::sqrt(float(kHd))};
  {
    const cuda::DeviceBuffer rows =
        upload_floats(ctx, test::random_floats(size_t((ctx_len - 1) * nkv), 9));
    for (Layer& L : layers) {
      const cuda::PagedKvLayer kv{kv_type,           kv_type, kr, kr, bs, L.kc.as<uint8_t>(),
                                  L.vc.as<uint8_t>()};
      cuda::kv_store(ctx, kv, shape, fill, rows.as<float>(), rows.as<float>());
    }
    ctx.synchronize();
  }
  auto buf = [&](int64_t n) { return cuda::DeviceBuffer(ctx, size_t(n) * 4); };
  cuda::DeviceBuffer x = upload_floats(ctx, test::random_floats(size_t(kD), 10)), xn = buf(kD),
                     q = buf(nq), k = buf(nkv), v = buf(nkv), att = buf(nq), proj = buf(kD),
                     gate = buf(kFF), up = buf(kFF), logits = buf(kVocab),
                     norm_w = upload_floats(ctx, std::vector<float>(size_t(kD), 1.0f));
  const cuda::RopeParams rp{kHd, 500000.0f, 1.0f, nullptr, false};
  auto f = [](cuda::DeviceBuffer& b) { return b.as<float>(); };
  auto step_fn = [&](int) {
    for (Layer& L : layers) {
      const cuda::PagedKvLayer kv{kv_type,           kv_type, kr, kr, bs, L.kc.as<uint8_t>(),
                                  L.vc.as<uint8_t>()};
      cuda::rms_norm(ctx, f(x), f(norm_w), f(xn), 1, kD, 1e-5f);
      const MatmulOut qkv[3] = {{&L.q.view, f(q)}, {&L.k.view, f(k)}, {&L.v.view, f(v)}};
      cuda::matmul_many(ctx, qkv, 3, f(xn), 1);  // as the model issues them (one fused launch)
      cuda::rope(ctx, f(q), 1, kHead, kHd, step.positions(), rp);
      cuda::rope(ctx, f(k), 1, kHeadKv, kHd, step.positions(), rp);
      cuda::kv_store(ctx, kv, shape, step, f(k), f(v));
      cuda::paged_attention(ctx, kv, shape, step, f(q), f(att));
      cuda::matmul(ctx, L.o.view, f(att), 1, f(proj));
      cuda::add(ctx, f(x), f(proj), kD);
      cuda::rms_norm(ctx, f(x), f(norm_w), f(xn), 1, kD, 1e-5f);
      const MatmulOut gate_up[2] = {{&L.gate.view, f(gate)}, {&L.up.view, f(up)}};
      cuda::matmul_many(ctx, gate_up, 2, f(xn), 1);
      cuda::swiglu(ctx, f(gate), f(up), f(gate), kFF);
      cuda::matmul(ctx, L.down.view, f(gate), 1, f(proj));
      cuda::add(ctx, f(x), f(proj), kD);
    }
    cuda::rms_norm(ctx, f(x), f(norm_w), f(xn), 1, kD, 1e-5f);
    cuda::matmul(ctx, dhead.view, f(xn), 1, f(logits));
  };
  const double s = time_per_call(ctx, 3, 20, step_fn);
  std::vector<float> out(static_cast<size_t>(kVocab));
  logits.download(ctx, out.data(), out.size() * 4);
  for (float o : out) ASSERT_TRUE(std::isfinite(o)) << "non-finite logit";
  // The same step replayed from a CUDA graph (one launch instead of ~550).
  cuda::StepGraph graph;
  graph.capture(ctx, [&] { step_fn(0); });
  const double sg = time_per_call(ctx, 3, 20, [&](int) { graph.launch(ctx); });
  // The attention op alone at this context, for the record.
  Layer& L0 = layers[0];
  const cuda::PagedKvLayer kv0{
      kv_type, kv_type, kr, kr, bs, L0.kc.as<uint8_t>(), L0.vc.as<uint8_t>()};
  const double sa = time_per_call(
      ctx, 5, 100, [&](int) { cuda::paged_attention(ctx, kv0, shape, step, f(q), f(att)); });
  // ... and over the first 16 positions (a depth-0 decode: one segment, one block per KV head).
  cuda::AttnBatch near;
  const cuda::SeqRows at16{table.data(), 15, 0, 1};
  near.set(ctx, &at16, 1, bs);
  const double s16 = time_per_call(
      ctx, 5, 100, [&](int) { cuda::paged_attention(ctx, kv0, shape, near, f(q), f(att)); });
  std::printf(
      "decode step, 8B shapes, q4_0 weights, KV %-8s ctx %lld: eager %7.2f ms "
      "(%6.1f t/s), graph %7.2f ms (%6.1f t/s) (op chain, no integration); attention "
      "alone %7.1f us  %6.1f GB/s, at ctx 16 %5.1f us\n",
      traits(kv_type).name, (long long)ctx_len, s * 1e3, 1.0 / s, sg * 1e3, 1.0 / sg, sa * 1e6,
      2.0 * double(ctx_len * kr) / sa / 1e9, s16 * 1e6);
  std::vector<float> a16(static_cast<size_t>(nq));
  att.download(ctx, a16.data(), a16.size() * 4);
  for (float o : a16) ASSERT_TRUE(std::isfinite(o)) << "non-finite attention output at ctx 16";
  RecordProperty("graph_step_ms", std::to_string(sg * 1e3));
  RecordProperty("step_ms", std::to_string(s * 1e3));
  RecordProperty("attention_us", std::to_string(sa * 1e6));
  RecordProperty("attention_ctx16_us", std::to_string(s16 * 1e6));
#endif
}

INSTANTIATE_TEST_SUITE_P(KvTypes, CudaBenchDecode,
                         ::testing::Values(DType::F16, DType::Q8_0, DType::FP8_E4M3, DType::NVFP4),
                         [](const auto& info) { return std::string(traits(info.param).name); });

}  // namespace
}  // namespace kvrun
