// bench_attention.cpp — Google Benchmark: one paged_attention call (one layer) for one decode
// query row per sequence at depth, over random K/V, at the llama3.2-1b attention shape (32 query
// heads, 8 KV heads, GQA group 4) and head_dim 64 or 128, block size 16, 2 threads, flash
// scheme. Time per call is what a decode token spends in attention per layer.
//
// Run: ./build/kvrun_bench --benchmark_filter=PagedAttnDecode  (see docs/benchmarks.md)
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "cpu/paged_attention.h"
#include "cpu/thread_pool.h"
#include "kv_layout.h"

namespace {

using namespace kvrun;

using kvrun::bench::random_floats;

/// K/V type pairs benchmarked.
struct KvPair {
  DType k, v;
};
constexpr KvPair kPairs[] = {{DType::F16, DType::F16},
                             {DType::Q8_0, DType::Q8_0},
                             {DType::Q4_0, DType::Q4_0},
                             {DType::FP8_E4M3, DType::F16}};

/// range(0): index into kPairs; range(1): head_dim; range(2): depth (positions in the cache
/// before the query, which sits at position depth); range(3): 0 = one layer, the same cache every
/// call (warm: at these sizes it stays in L2/L3); 1 = cold: 16 layers of cache, and before each
/// pass over them 512 MiB are written elsewhere, as a decode step streams the weights between two
/// layers' attention, so the K/V rows come from memory. Time is per layer either way.
void BM_PagedAttnDecode(benchmark::State& state) {
  const KvPair kp = kPairs[state.range(0)];
  const int64_t hd = state.range(1), depth = state.range(2);
  const bool cold = state.range(3) != 0;
  const int64_t n_layers = cold ? 16 : 1;
  const int64_t n_head = 32, n_head_kv = 8, bs = 16, len = depth + 1;
  cpu::PagedAttnParams p;
  p.attn = {n_head, n_head_kv, hd, hd, float(1.0 / std::sqrt(double(hd)))};
  cpu::PagedKvLayer kv;
  kv.k_type = kp.k;
  kv.v_type = kp.v;
  kv.k_row_bytes = kv_row_bytes(kp.k, n_head_kv, hd);
  kv.v_row_bytes = kv_row_bytes(kp.v, n_head_kv, hd);
  kv.block_size = bs;
  const int64_t n_blocks = (len + bs - 1) / bs;
  std::vector<std::vector<uint8_t>> kbuf(static_cast<size_t>(n_layers)),
      vbuf(static_cast<size_t>(n_layers));
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  const int64_t row = n_head_kv * hd;
  for (int64_t l = 0; l < n_layers; ++l) {
    kbuf[size_t(l)].resize(size_t(n_blocks * bs * kv.k_row_bytes));
    vbuf[size_t(l)].resize(size_t(n_blocks * bs * kv.v_row_bytes));
    kv.k = kbuf[size_t(l)].data();
    kv.v = vbuf[size_t(l)].data();
    // Write the context in chunks of 1024 positions (random rows, a fixed seed per chunk).
    for (int64_t pos = 0; pos < len; pos += 1024) {
      const int64_t n = std::min<int64_t>(1024, len - pos);
      const auto k = random_floats(size_t(n * row), uint32_t(pos + 1 + l));
      const auto v = random_floats(size_t(n * row), uint32_t(pos + 2 + l));
      const cpu::PagedSeq ps{table.data(), pos, 0, n};
      cpu::paged_kv_store(kv, p, &ps, 1, k.data(), v.data());
    }
  }
  std::vector<uint8_t> evict(cold ? size_t(512) << 20 : 0);
  cpu::ThreadPool pool(2);
  const auto q = random_floats(size_t(n_head * hd), 99);
  std::vector<float> out(size_t(n_head * hd));
  const cpu::PagedSeq ps{table.data(), depth, 0, 1};
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      std::memset(evict.data(), int(state.iterations() & 0xff), evict.size());
      benchmark::ClobberMemory();
      state.ResumeTiming();
    }
    for (int64_t l = 0; l < n_layers; ++l) {
      kv.k = kbuf[size_t(l)].data();
      kv.v = vbuf[size_t(l)].data();
      cpu::paged_attention(pool, kv, p, &ps, 1, q.data(), out.data());
      benchmark::DoNotOptimize(out.data());
    }
  }
  state.SetLabel(std::string(kv_type_name(kp.k)) + "/" + kv_type_name(kp.v) +
                 (cold ? " cold" : ""));
  state.SetItemsProcessed(state.iterations() * n_layers);  // layers
  state.counters["ms/layer"] =
      benchmark::Counter(double(state.iterations() * n_layers) / 1e3,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["KV_GB/s"] = benchmark::Counter(
      double(len * (kv.k_row_bytes + kv.v_row_bytes)) * double(state.iterations() * n_layers) / 1e9,
      benchmark::Counter::kIsRate);
}

BENCHMARK(BM_PagedAttnDecode)
    ->ArgsProduct({{0, 1, 2, 3}, {64, 128}, {512, 4096, 16384}, {0}})
    ->ArgsProduct({{0, 1}, {64}, {4096, 16384}, {1}})
    ->ArgNames({"kv", "hd", "depth", "cold"})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.3)
    ->UseRealTime();

}  // namespace
