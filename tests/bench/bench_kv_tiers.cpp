// bench_kv_tiers.cpp — Google Benchmark: the KV-cache side of a decode step at depth, with one
// tier (the whole context in RAM) against two (a 32 MiB fast tier, the rest in a
// --kv-offload-dir file), at the shape of the fixture model stories260K-pad (5 layers, 8 query
// heads, 4 KV heads of 32), fp8_e4m3 K and f16 V, 2 threads. A step is what a decode token costs
// the cache: reserve one position (which may move the oldest fast block out), write its K and V
// rows in every layer, commit, and attend over the whole context in every layer. Everything else
// in a decode step (the weight matmuls) does not depend on the tiers.
//
// Run: ./build/kvrun_bench --benchmark_filter=KvTiers  (see docs/benchmarks.md)
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "cpu/paged_attention.h"
#include "cpu/thread_pool.h"
#include "kv/kv_cache.h"
#include "kv_layout.h"

namespace {

using namespace kvrun;

Hparams pad_shape() {
  Hparams hp;
  hp.arch = "llama";
  hp.n_layer = 5;
  hp.n_embd = 256;
  hp.n_head = 8;
  hp.n_head_kv = 4;
  hp.head_dim = 32;
  hp.head_dim_v = 32;
  return hp;
}

cpu::PagedAttnParams attn_params() {
  const Hparams hp = pad_shape();
  cpu::PagedAttnParams p;
  p.attn = {hp.n_head, hp.n_head_kv, hp.head_dim, hp.head_dim_v,
            float(1.0 / std::sqrt(double(hp.head_dim)))};
  return p;
}

using kvrun::bench::random_floats;

/// Appends `n` positions to `seq` (rows from a fixed random pool, cycled) in every layer.
void append(KvCache& c, KvSequence& seq, int64_t n) {
  static const int64_t kPool = 4096;
  const int64_t row = pad_shape().n_head_kv * pad_shape().head_dim;
  static const std::vector<float> pool = random_floats(size_t(kPool * row), 7);
  const int64_t pos0 = seq.n_tokens();
  seq.reserve(n);
  std::vector<float> k(size_t(n * row)), v(size_t(n * row));
  for (int64_t i = 0; i < n; ++i) {
    const float* src = pool.data() + ((pos0 + i) % kPool) * row;
    std::copy_n(src, row, k.begin() + i * row);
    std::copy_n(pool.data() + ((pos0 + i + 17) % kPool) * row, row, v.begin() + i * row);
  }
  const cpu::PagedSeq ps{seq.block_table().data(), pos0, 0, n};
  for (int64_t il = 0; il < c.n_layer(); ++il)
    cpu::paged_kv_store(c.layer(il), attn_params(), &ps, 1, k.data(), v.data());
  seq.commit(std::vector<int32_t>(size_t(n), 1));
}

void BM_KvTiersDecodeStep(benchmark::State& state) {
  const int64_t depth = state.range(0);
  const bool tiered = state.range(1) != 0;
  const Hparams hp = pad_shape();
  KvCacheParams kp;
  kp.type_k = DType::FP8_E4M3;
  kp.type_v = DType::F16;
  kp.prefix_cache = false;
  const int64_t per_token = kv_bytes_per_token(kp.type_k, kp.type_v, hp.n_layer, hp.n_head_kv,
                                               hp.head_dim, hp.head_dim_v);
  const int64_t whole = (depth + 4096) * per_token;
  const std::string dir = std::filesystem::temp_directory_path().string();
  kp.mem_bytes = tiered ? int64_t(32) << 20 : whole;
  if (tiered) {
    kp.offload_dir = dir;
    kp.offload_max = whole;
  }
  KvCache cache(hp, kp);
  KvSequence seq(cache);
  for (int64_t done = 0; done < depth; done += 4096)
    append(cache, seq, std::min<int64_t>(4096, depth - done));
  cpu::ThreadPool pool(2);
  const std::vector<float> q = random_floats(size_t(hp.n_head * hp.head_dim), 11);
  std::vector<float> out(size_t(hp.n_head * hp.head_dim_v));
  const int64_t moves0 = cache.tier_stats().moves_out;
  for (auto _ : state) {
    append(cache, seq, 1);
    const cpu::PagedSeq ps{seq.block_table().data(), seq.n_tokens() - 1, 0, 1};
    for (int64_t il = 0; il < hp.n_layer; ++il)
      cpu::paged_attention(pool, cache.layer(il), attn_params(), &ps, 1, q.data(), out.data());
    benchmark::DoNotOptimize(out.data());
  }
  const KvTierStats ts = cache.tier_stats();
  state.counters["moves_out"] = double(ts.moves_out - moves0);
  state.counters["slow_blocks"] = double(ts.used_slow);
  state.counters["fast_blocks"] = double(ts.used_fast);
}

// 64 decode steps from each depth (tg64), one tier and two.
BENCHMARK(BM_KvTiersDecodeStep)
    ->ArgsProduct({{16384, 65536, 131072}, {0, 1}})
    ->ArgNames({"depth", "tiered"})
    ->Iterations(64)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
