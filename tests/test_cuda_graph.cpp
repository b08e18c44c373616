// test_cuda_graph.cpp — decode steps replayed from a CUDA graph (cuda_graph.h) compute exactly
// what the same ops compute launched one by one, across steps whose context grows past a
// segment boundary of the attention split (kernel parameters change, the graph is updated).
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dtype.h"
#include "kv_layout.h"
#include "tensor.h"
#include "test_util.h"
#ifdef KVRUN_HAVE_CUDA
#include "backend.h"
#include "cuda/add.h"
#include "cuda/attn_batch.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_context.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_graph.h"
#include "cuda/device_tensor.h"
#include "cuda/kv_store.h"
#include "cuda/matmul.h"
#include "cuda/paged_attention.h"
#include "cuda/rms_norm.h"
#include "cuda/rope.h"
#endif

namespace kvrun {
namespace {

TEST(CudaGraph, ReplayEqualsEagerAcrossSteps) {
#ifndef KVRUN_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (configure with -DKVRUN_CUDA=ON)";
#else
  if (cuda::devices().empty()) GTEST_SKIP() << "no CUDA device on this machine";
  cuda::Context ctx(0);
  constexpr int64_t d = 256, n_head = 4, n_kv = 2, hd = 64, bs = 16, first = 250, steps = 20;
  const DType kv_type = DType::FP8_E4M3;
  const int64_t kr = kv_row_bytes(kv_type, n_kv, hd), n_pos = first + steps;
  // Weights (f16) and the two paths' state: eager (0) and graph (1), identical at the start.
  auto weight = [&](int64_t m, int64_t k, uint32_t seed) {
    std::vector<float> x = test::random_floats(size_t(m * k), seed, 0.05f);
    std::vector<uint8_t> q(size_t(m * k * 2));
    traits(DType::F16).from_float(x.data(), q.data(), m * k);
    return cuda::upload_tensor(ctx, Tensor::contiguous(DType::F16, q.data(), k, m));
  };
  const cuda::DeviceTensor wq = weight(n_head * hd, d, 1), wk = weight(n_kv * hd, d, 2),
                           wv = weight(n_kv * hd, d, 3), wo = weight(d, n_head * hd, 4);
  auto floats = [&](const std::vector<float>& v) {
    cuda::DeviceBuffer b(ctx, v.size() * 4);
    b.upload(ctx, v.data(), v.size() * 4);
    return b;
  };
  const std::vector<float> x0 = test::random_floats(size_t(d), 5);
  cuda::DeviceBuffer x[2] = {floats(x0), floats(x0)}, kc[2], vc[2];
  std::vector<int32_t> table(size_t((n_pos + bs - 1) / bs));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(table.size() - 1 - i);
  const cuda::AttnShape shape{n_head, n_kv, hd, hd, 0.125f};
  {  // the history: positions 0 … first−1, in both caches
    cuda::AttnBatch fill;
    const cuda::SeqRows rows{table.data(), 0, 0, first};
    fill.set(ctx, &rows, 1, bs);
    const cuda::DeviceBuffer kvx = floats(test::random_floats(size_t(first * n_kv * hd), 6));
    for (int p = 0; p < 2; ++p) {
      kc[p] = cuda::DeviceBuffer(ctx, size_t(table.size() * bs * kr));
      vc[p] = cuda::DeviceBuffer(ctx, size_t(table.size() * bs * kr));
      const cuda::PagedKvLayer kv{
          kv_type, kv_type, kr, kr, bs, kc[p].as<uint8_t>(), vc[p].as<uint8_t>()};
      cuda::kv_store(ctx, kv, shape, fill, kvx.as<float>(), kvx.as<float>());
    }
  }
  cuda::DeviceBuffer xn(ctx, d * 4), q(ctx, n_head * hd * 4), k(ctx, n_kv * hd * 4),
      v(ctx, n_kv * hd * 4), att(ctx, n_head * hd * 4), proj(ctx, d * 4);
  const cuda::RopeParams rp{hd, 10000.0f, 1.0f, nullptr, false};
  cuda::AttnBatch step;
  auto ops = [&](int p) {
    const cuda::PagedKvLayer kv{
        kv_type, kv_type, kr, kr, bs, kc[p].as<uint8_t>(), vc[p].as<uint8_t>()};
    float* xp = x[p].as<float>();
    cuda::rms_norm(ctx, xp, nullptr, xn.as<float>(), 1, d, 1e-5f);
    cuda::matmul(ctx, wq.view, xn.as<float>(), 1, q.as<float>());
    cuda::matmul(ctx, wk.view, xn.as<float>(), 1, k.as<float>());
    cuda::matmul(ctx, wv.view, xn.as<float>(), 1, v.as<float>());
    cuda::rope(ctx, q.as<float>(), 1, n_head, hd, step.positions(), rp);
    cuda::rope(ctx, k.as<float>(), 1, n_kv, hd, step.positions(), rp);
    cuda::kv_store(ctx, kv, shape, step, k.as<float>(), v.as<float>());
    cuda::paged_attention(ctx, kv, shape, step, q.as<float>(), att.as<float>());
    cuda::matmul(ctx, wo.view, att.as<float>(), 1, proj.as<float>());
    cuda::add(ctx, xp, proj.as<float>(), d);
  };
  cuda::StepGraph graph;
  for (int64_t s = 0; s < steps; ++s) {
    const cuda::SeqRows row{table.data(), first + s, 0, 1};
    step.set(ctx, &row, 1, bs);
    ops(0);  // eager (also grows every scratch before the first capture)
    graph.capture(ctx, [&] { ops(1); });
    graph.launch(ctx);
    ctx.synchronize();
  }
  std::vector<float> a(static_cast<size_t>(d)), b(static_cast<size_t>(d));
  x[0].download(ctx, a.data(), a.size() * 4);
  x[1].download(ctx, b.data(), b.size() * 4);
  for (float f : a) ASSERT_TRUE(std::isfinite(f));
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "graph replay differs";
  std::vector<uint8_t> ka(kc[0].size()), kb(kc[1].size());
  kc[0].download(ctx, ka.data(), ka.size());
  kc[1].download(ctx, kb.data(), kb.size());
  EXPECT_TRUE(ka == kb) << "the graph wrote other K bytes";
  EXPECT_GE(graph.instantiations(), 1);
  RecordProperty("instantiations", graph.instantiations());
#endif
}

/// Backend::run_graph of the CUDA backend through the seam: a first direct step, recorded and
/// replayed steps, and a step whose ops upload from the host (recording refused: it must run
/// directly, once) all leave what the same ops computed on the host.
TEST(CudaGraph, SeamRunGraphEqualsDirectAndFallsBack) {
#ifndef KVRUN_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (configure with -DKVRUN_CUDA=ON)";
#else
  const std::vector<Device*> devs = cuda::seam_devices();
  if (devs.empty()) GTEST_SKIP() << "no CUDA device on this machine";
  Device& dev = *devs.front();
  std::unique_ptr<Backend> be = dev.make_backend(1);
  const int32_t seq_indptr[2] = {0, 1}, block_indptr[2] = {0, 1}, block_ids[1] = {0};
  const int32_t last_block_len[1] = {1}, pos[1] = {0};
  const int64_t write_slot[1] = {0};
  PageTable pt;
  pt.n_seqs = 1;
  pt.n_tokens = 1;
  pt.block_size = 16;
  pt.seq_indptr = seq_indptr;
  pt.block_indptr = block_indptr;
  pt.block_ids = block_ids;
  pt.last_block_len = last_block_len;
  pt.pos = pos;
  pt.write_slot = write_slot;
  constexpr int64_t n = 1000;
  std::unique_ptr<DeviceBuffer> buf = dev.alloc(n * sizeof(float), BufferUse::kActivations);
  auto* x = static_cast<float*>(buf->data());
  std::vector<float> want = test::random_floats(size_t(n), 11);
  const std::vector<float> fresh = test::random_floats(size_t(n), 12);
  be->upload(x, want.data(), n * sizeof(float));
  for (int step = 0; step < 6; ++step) {
    be->begin_step(pt);
    const bool upload = step == 3;
    int calls = 0;
    be->run_graph([&] {
      ++calls;
      if (upload) be->upload(x, fresh.data(), n * sizeof(float));
      be->scale(x, n, 1.5f);
      be->add(x, x, n);
    });
    if (upload) want = fresh;
    for (float& v : want) v = (v * 1.5f) + (v * 1.5f);
    EXPECT_GE(calls, 1) << "step " << step;
  }
  std::vector<float> got(static_cast<size_t>(n));
  be->download(got.data(), x, n * sizeof(float));
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
      << "run_graph steps differ from the same ops on the host";
#endif
}

#ifdef KVRUN_HAVE_CUDA
/// One decode layer through the seam (no weights): x → RMSNorm → q (RoPE'd), k, v (columns of
/// the normed row), K/V stored, paged attention, x += att, x *= s. Its state: x and the cache.
struct SeamLayer {
  static constexpr int64_t kHead = 4, kHeadKv = 2, kHd = 64, kD = kHead * kHd, kBs = 16;
  std::unique_ptr<DeviceBuffer> x, xn, k, v, att, kc, vc;
  KvLayer kv;
  PagedAttnParams p;
  SeamLayer(Device& dev, Backend& be, int64_t n_blocks, const std::vector<float>& x0) {
    auto buf = [&](int64_t bytes, BufferUse use) { return dev.alloc(size_t(bytes), use); };
    x = buf(kD * 4, BufferUse::kActivations), xn = buf(kD * 4, BufferUse::kActivations);
    k = buf(kHeadKv * kHd * 4, BufferUse::kActivations);
    v = buf(kHeadKv * kHd * 4, BufferUse::kActivations);
    att = buf(kD * 4, BufferUse::kActivations);
    const int64_t rb = kv_row_bytes(DType::F16, kHeadKv, kHd);
    kc = buf(n_blocks * kBs * rb, BufferUse::kKv);
    vc = buf(n_blocks * kBs * rb, BufferUse::kKv);
    kc->commit(0, kc->size());  // KV buffers are backed where committed (DeviceBuffer::commit)
    vc->commit(0, vc->size());
    kv.k_row_bytes = kv.v_row_bytes = rb;
    kv.block_size = kBs;
    kv.k = static_cast<uint8_t*>(kc->data());
    kv.v = static_cast<uint8_t*>(vc->data());
    p.attn = {kHead, kHeadKv, kHd, kHd, 0.125f};
    be.upload(x->data(), x0.data(), x0.size() * 4);
  }
  void ops(Backend& be, float s) {
    auto* xp = static_cast<float*>(x->data());
    auto* xnp = static_cast<float*>(xn->data());
    be.rms_norm(xp, nullptr, xnp, 1, kD, 1e-5f);
    be.copy_cols(xnp, 1, kD, 0, kHeadKv * kHd, static_cast<float*>(k->data()));
    be.copy_cols(xnp, 1, kD, kHeadKv * kHd, kHeadKv * kHd, static_cast<float*>(v->data()));
    RopeConfig rc;
    rc.n_rot = kHd;
    be.rope(xnp, 1, kHead, kHd, rc);
    be.rope(static_cast<float*>(k->data()), 1, kHeadKv, kHd, rc);
    be.kv_store(kv, p, static_cast<float*>(k->data()), static_cast<float*>(v->data()));
    be.paged_attention(kv, p, xnp, static_cast<float*>(att->data()));
    be.add(xp, static_cast<float*>(att->data()), kD);
    be.scale(xp, kD, s);
  }
};
#endif

/// Decode steps through the seam with graphs (replayed while the step key is unchanged) and
/// without (KVRUN_CUDA_GRAPHS=0) give bit-equal rows and caches at every step, across a context
/// that crosses the 256-position boundary of attn_segment_ctx, a step whose scale parameter
/// changes and one whose activation buffer moves. The graph backend must have replayed steps
/// without recording them (its key unchanged) and recorded anew at each change.
TEST(CudaGraph, SeamReplaysUnchangedStepsAndRecordsChangedOnes) {
#ifndef KVRUN_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (configure with -DKVRUN_CUDA=ON)";
#else
  const std::vector<Device*> devs = cuda::seam_devices();
  if (devs.empty()) GTEST_SKIP() << "no CUDA device on this machine";
  Device& dev = *devs.front();
  setenv("KVRUN_CUDA_GRAPHS", "0", 1);
  std::unique_ptr<Backend> eager = dev.make_backend(1);
  unsetenv("KVRUN_CUDA_GRAPHS");
  std::unique_ptr<Backend> graphs = dev.make_backend(1);
  constexpr int64_t first = 240, steps = 40, bs = SeamLayer::kBs;
  const int64_t n_blocks = (first + steps + bs - 1) / bs;
  const std::vector<float> x0 = test::random_floats(size_t(SeamLayer::kD), 21);
  SeamLayer L[2] = {SeamLayer(dev, *eager, n_blocks, x0), SeamLayer(dev, *graphs, n_blocks, x0)};
  std::unique_ptr<DeviceBuffer> moved = dev.alloc(SeamLayer::kD * 4, BufferUse::kActivations);
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(ids.size() - 1 - i);
  // The history, positions 0 … first−1: one direct prefill step of random K/V rows.
  {
    std::vector<int32_t> pos(static_cast<size_t>(first));
    std::vector<int64_t> slot(static_cast<size_t>(first));
    for (int64_t i = 0; i < first; ++i)
      pos[size_t(i)] = int32_t(i), slot[size_t(i)] = ids[size_t(i / bs)] * bs + i % bs;
    const int32_t seq_indptr[2] = {0, int32_t(first)}, block_indptr[2] = {0, int32_t(n_blocks)};
    const int32_t last[1] = {int32_t((first - 1) % bs + 1)};
    PageTable pt{1, first, bs, seq_indptr, block_indptr, ids.data(), last, pos.data(), slot.data()};
    const std::vector<float> kv =
        test::random_floats(size_t(first * SeamLayer::kHeadKv * SeamLayer::kHd), 22);
    for (int b = 0; b < 2; ++b) {
      Backend& be = b ? *graphs : *eager;
      std::unique_ptr<DeviceBuffer> rows = dev.alloc(kv.size() * 4, BufferUse::kActivations);
      be.upload(rows->data(), kv.data(), kv.size() * 4);
      be.begin_step(pt);
      be.kv_store(L[b].kv, L[b].p, static_cast<float*>(rows->data()),
                  static_cast<float*>(rows->data()));
      be.synchronize();
    }
  }
  for (int64_t s = 0; s < steps; ++s) {
    const int32_t pos[1] = {int32_t(first + s)}, seq_indptr[2] = {0, 1};
    const int32_t block_indptr[2] = {0, int32_t(n_blocks)};
    const int32_t last[1] = {int32_t((first + s) % bs + 1)};
    const int64_t slot[1] = {ids[size_t((first + s) / bs)] * bs + (first + s) % bs};
    const PageTable pt{1, 1, bs, seq_indptr, block_indptr, ids.data(), last, pos, slot};
    const float scale = s == 20 ? 0.5f : 1.0f;  // a parameter change for one step
    if (s == 30)  // the activation row moves (the step's pointers change from here on)
      for (SeamLayer& l : L) std::swap(l.att, moved);
    for (int b = 0; b < 2; ++b) {
      Backend& be = b ? *graphs : *eager;
      be.begin_step(pt);
      be.run_graph([&] { L[b].ops(be, scale); });
      std::vector<float> got(size_t(SeamLayer::kD));
      be.download(got.data(), L[b].x->data(), got.size() * 4);
      if (b == 0) {
        for (float f : got) ASSERT_TRUE(std::isfinite(f)) << "step " << s;
        continue;
      }
      std::vector<float> want(got.size());
      eager->download(want.data(), L[0].x->data(), want.size() * 4);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "step " << s;
    }
  }
  std::vector<uint8_t> ka(L[0].kc->size()), kb(L[1].kc->size());
  eager->download(ka.data(), L[0].kc->data(), ka.size());
  graphs->download(kb.data(), L[1].kc->data(), kb.size());
  EXPECT_TRUE(ka == kb) << "the graph steps wrote other K bytes";
  // The first step runs directly; recordings: step 1, position 256 (the segment context
  // grows), step 20 (scale 0.5), step 21 (scale 1 again), step 30 (att moved); the rest replay.
  const cuda::GraphStats st = cuda::graph_stats(*graphs);
  RecordProperty("recorded", int(st.recorded));
  RecordProperty("replayed", int(st.replayed));
  EXPECT_EQ(st.recorded, 5);
  EXPECT_EQ(st.recorded + st.replayed, steps - 1);
  EXPECT_EQ(cuda::graph_stats(*eager).recorded + cuda::graph_stats(*eager).replayed, 0);
#endif
}

/// StepTimer (KVRUN_CUDA_STEP_TIMES=1) around three launched steps (two recorded) reports them;
/// without the variable it stays off and reports nothing.
TEST(CudaGraph, StepTimerReportsReplayedSteps) {
#ifndef KVRUN_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (configure with -DKVRUN_CUDA=ON)";
#else
  if (cuda::devices().empty()) GTEST_SKIP() << "no CUDA device on this machine";
  cuda::Context ctx(0);
  const std::vector<float> ones(4096, 1.0f);
  cuda::DeviceBuffer a(ctx, ones.size() * 4), b(ctx, ones.size() * 4);
  b.upload(ctx, ones.data(), ones.size() * 4);
  for (const bool on : {false, true}) {
    a.upload(ctx, ones.data(), ones.size() * 4);
    if (on)
      setenv("KVRUN_CUDA_STEP_TIMES", "1", 1);
    else
      unsetenv("KVRUN_CUDA_STEP_TIMES");
    cuda::StepTimer timer;
    cuda::StepGraph graph;
    EXPECT_EQ(timer.enabled(), on);
    for (int i = 0; i < 3; ++i) {
      timer.begin_host();
      if (i < 2) graph.capture(ctx, [&] { cuda::add(ctx, a.as<float>(), b.as<float>(), 4096); });
      timer.end_host(i < 2);
      timer.before_launch(ctx);
      graph.launch(ctx);
      timer.after_launch(ctx);
      ctx.synchronize();
    }
    std::vector<float> out(ones.size());
    a.download(ctx, out.data(), out.size() * 4);
    EXPECT_EQ(out[0], 4.0f) << "three replays of a += b";  // 1 + 3 · 1
    if (on)
      EXPECT_NE(timer.report().find("3 steps (2 recorded): launch to launch"), std::string::npos)
          << timer.report();
    else
      EXPECT_EQ(timer.report(), "");
  }
  unsetenv("KVRUN_CUDA_STEP_TIMES");
#endif
}

}  // namespace
}  // namespace kvrun
