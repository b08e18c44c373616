// bench_kernels.cpp — Google Benchmark: the CPU matmul kernels per SIMD level (scalar, avx2,
// avx512; levels this CPU lacks are skipped) at the shapes of llama3.2-1b (n_embd 2048, n_ff
// 8192, 8 KV heads of 64: K/V 512×2048), for one activation row (decode) and 512 rows
// (prefill), with 1 and 2 threads. Bytes/s is the weight bytes streamed per matmul (compare with
// the machine's STREAM bandwidth); items/s is multiply-adds. Also: the single-row dots and the
// activation quantizers on a 4096-value row, and the thread pool's cost per job.
//
// Run: ./build/kvrun_bench --benchmark_filter=matmul  (see docs/benchmarks.md)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "cpu/cpu_level.h"
#include "cpu/cpu_traits.h"
#include "cpu/matmul.h"
#include "cpu/pack.h"
#include "cpu/thread_pool.h"
#include "dtype.h"
#include "quants.h"

namespace {

using kvrun::DType;
using kvrun::cpu::CpuLevel;

using kvrun::bench::random_floats;

/// `rows` rows of `k` values of type t: 64 rows encoded from random floats, repeated (the
/// kernels' speed does not depend on the values; encoding 16M K-quant values would take long).
const std::vector<uint8_t>& weights(DType t, int64_t rows, int64_t k) {
  static std::map<std::string, std::vector<uint8_t>> cache;
  const std::string key =
      std::string(kvrun::traits(t).name) + "/" + std::to_string(rows) + "x" + std::to_string(k);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const size_t rb = size_t(*kvrun::row_bytes(t, k));
  const int64_t seed_rows = std::min<int64_t>(rows, 64);
  const std::vector<float> f = random_floats(size_t(seed_rows * k), 1);
  std::vector<uint8_t> seed(rb * size_t(seed_rows));
  for (int64_t r = 0; r < seed_rows; ++r) {
    if (kvrun::traits(t).from_float)
      kvrun::traits(t).from_float(f.data() + r * k, seed.data() + size_t(r) * rb, k);
    else  // the grid i-quants have no quantizer: random valid blocks
      kvrun::fill_random_iq_blocks(t, 0.01f, uint32_t(r), seed.data() + size_t(r) * rb, k);
  }
  std::vector<uint8_t> out(rb * size_t(rows));
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data() + size_t(r) * rb, seed.data() + size_t(r % seed_rows) * rb, rb);
  return cache.emplace(key, std::move(out)).first->second;
}

kvrun::cpu::ThreadPool& pool_of(int threads) {
  static kvrun::cpu::ThreadPool one(1), two(2);
  return threads == 1 ? one : two;
}

void run_matmul(benchmark::State& state, DType t, CpuLevel level, int64_t m, int64_t k, int64_t n,
                int threads, bool packed, kvrun::cpu::KernelOrder order, bool huge_pages = true) {
  const std::vector<uint8_t>& w = weights(t, m, k);
  kvrun::Tensor wt = kvrun::Tensor::contiguous(t, const_cast<uint8_t*>(w.data()), k, m);
  kvrun::Buffer pw;
  if (packed) {  // as the model loader does (the packed copy is the same size)
    const bool was = kvrun::huge_pages();
    kvrun::set_huge_pages(huge_pages);  // --thp (tensor.h)
    pw = kvrun::cpu::pack_weight(wt, level);
    kvrun::set_huge_pages(was);
    wt.packed = pw.data();
  }
  const std::vector<float> x = random_floats(size_t(n * k), 2);
  std::vector<float> y(size_t(n * m));
  kvrun::cpu::ThreadPool& pool = pool_of(threads);
  kvrun::cpu::set_kernel_order(order);  // --kernels (the default exact for every other row)
  for (auto _ : state) {
    kvrun::cpu::matmul(pool, wt, x.data(), n, y.data(), level);
    benchmark::DoNotOptimize(y.data());
  }
  kvrun::cpu::set_kernel_order(kvrun::cpu::KernelOrder::exact);
  state.SetBytesProcessed(state.iterations() * int64_t(w.size()));
  state.SetItemsProcessed(state.iterations() * m * k * n);
}

void BM_Matmul(benchmark::State& state, DType t, CpuLevel level, int64_t m, int64_t k, int64_t n,
               int threads, bool packed) {
  run_matmul(state, t, level, m, k, n, threads, packed, kvrun::cpu::KernelOrder::exact);
}

/// Packed weights on 4 KiB pages (--thp off), for an A/B of the transparent huge pages.
void BM_MatmulSmallPages(benchmark::State& state, DType t, CpuLevel level, int64_t m, int64_t k,
                         int64_t n, int threads) {
  run_matmul(state, t, level, m, k, n, threads, true, kvrun::cpu::KernelOrder::exact, false);
}

/// Packed weights with --kernels fast (the fast-order prefill kernels).
void BM_MatmulFast(benchmark::State& state, DType t, CpuLevel level, int64_t m, int64_t k,
                   int64_t n, int threads) {
  run_matmul(state, t, level, m, k, n, threads, true, kvrun::cpu::KernelOrder::fast);
}

/// The experts' decode matmul (matmul_id) of qwen3-30b-a3b's shapes: 128 experts of m × k
/// (gate/up 768 × 2048, down 2048 × 768), packed as the loader packs them (the experts' rows as
/// one 2-D matrix), one activation row choosing 8 experts per call, a different 8 each call (a
/// fixed random sequence), so the ~113 MB of experts stream from DRAM as in a model's decode.
/// Bytes/s counts the 8 chosen experts' bytes.
void BM_MatmulId(benchmark::State& state, DType t, CpuLevel level, int64_t m, int64_t k,
                 int threads) {
  constexpr int64_t n_exp = 128, n_used = 8;
  const std::vector<uint8_t>& w = weights(t, m * n_exp, k);
  kvrun::Tensor flat = kvrun::Tensor::contiguous(t, const_cast<uint8_t*>(w.data()), k, m * n_exp);
  kvrun::Buffer pw = kvrun::cpu::pack_weight(flat, level);
  kvrun::Tensor wt = kvrun::Tensor::contiguous(t, const_cast<uint8_t*>(w.data()), k, m, n_exp);
  wt.packed = pw.data();
  std::mt19937 rng(7);
  std::vector<int32_t> ids(size_t(n_used * 997));  // 997 calls' choices, cycled
  std::vector<int32_t> all(static_cast<size_t>(n_exp));
  for (size_t i = 0; i < all.size(); ++i) all[i] = int32_t(i);
  for (size_t c = 0; c < ids.size() / size_t(n_used); ++c) {
    std::shuffle(all.begin(), all.end(), rng);
    std::copy_n(all.begin(), n_used, ids.begin() + std::ptrdiff_t(c * size_t(n_used)));
  }
  const std::vector<float> x = random_floats(size_t(k), 2);
  std::vector<float> y(size_t(n_used * m));
  kvrun::cpu::ThreadPool& pool = pool_of(threads);
  size_t call = 0;
  for (auto _ : state) {
    const int32_t* id = ids.data() + (call++ % 997) * size_t(n_used);
    kvrun::cpu::matmul_id(pool, wt, x.data(), false, id, 1, n_used, y.data(), level);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * int64_t(w.size()) / n_exp * n_used);
  state.SetItemsProcessed(state.iterations() * m * k * n_used);
}

void BM_Dot(benchmark::State& state, DType t, CpuLevel level) {
  const int64_t k = 4096;
  const kvrun::cpu::CpuTypeTraits* ct = kvrun::cpu::cpu_traits(t, level);
  const std::vector<uint8_t>& w = weights(t, 1, k);
  const std::vector<float> xf = random_floats(size_t(k), 3);
  std::vector<uint8_t> x(size_t(*kvrun::row_bytes(ct->act_type, k)));
  ct->act_from_float(xf.data(), x.data(), k);
  kvrun::cpu::VecDotFn dot = ct->repack_dot ? ct->repack_dot : ct->vec_dot;
  for (auto _ : state) benchmark::DoNotOptimize(dot(k, w.data(), x.data()));
  state.SetBytesProcessed(state.iterations() * int64_t(w.size()));
  state.SetItemsProcessed(state.iterations() * k);
}

void BM_Quantize(benchmark::State& state, DType t, CpuLevel level) {
  const int64_t k = 4096;
  const kvrun::cpu::CpuTypeTraits* ct = kvrun::cpu::cpu_traits(t, level);
  const std::vector<float> xf = random_floats(size_t(k), 4);
  std::vector<uint8_t> x(size_t(*kvrun::row_bytes(ct->act_type, k)));
  for (auto _ : state) {
    ct->act_from_float(xf.data(), x.data(), k);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetItemsProcessed(state.iterations() * k);
}

void BM_PoolJob(benchmark::State& state) {
  static kvrun::cpu::ThreadPool pool(2);
  std::vector<int64_t> sink(2);
  const kvrun::cpu::ThreadPool::Job job = [&](int64_t b, int64_t e) { sink[size_t(b)] = e; };
  for (auto _ : state) pool.run(2, job);
  benchmark::DoNotOptimize(sink.data());
}

struct Shape {
  const char* name;
  int64_t m, k;
};

void register_all() {
  const DType types[] = {DType::Q4_0, DType::Q8_0, DType::Q4_K,
                         DType::Q5_K, DType::Q6_K, DType::F16};
  const Shape shapes[] = {{"attn_q_2048x2048", 2048, 2048},
                          {"attn_kv_512x2048", 512, 2048},
                          {"ffn_up_8192x2048", 8192, 2048},
                          {"ffn_down_2048x8192", 2048, 8192}};
  for (CpuLevel level : kvrun::cpu::kAllCpuLevels) {
    if (!kvrun::cpu::cpu_level_supported(level)) continue;
    const std::string lv = kvrun::cpu::cpu_level_name(level);
    // The i-quants, q4_1 and q5_1: the single-row dot only.
    for (DType t : {DType::IQ4_XS, DType::IQ3_S, DType::IQ2_S, DType::IQ3_XXS, DType::IQ2_XXS,
                    DType::IQ2_XS, DType::IQ1_S, DType::IQ1_M, DType::Q4_1, DType::Q5_1}) {
      const std::string tn = kvrun::traits(t).name;
      benchmark::RegisterBenchmark(("dot/" + tn + "/" + lv).c_str(), BM_Dot, t, level);
    }
    for (DType t : types) {
      const std::string tn = kvrun::traits(t).name;
      benchmark::RegisterBenchmark(("dot/" + tn + "/" + lv).c_str(), BM_Dot, t, level);
      // One thread: rates from the CPU time of that thread (robust on a shared machine);
      // two threads: from wall-clock time.
      for (int threads : {1, 2}) {
        const std::string th = "/t" + std::to_string(threads);
        for (const Shape& s : shapes) {
          auto* b = benchmark::RegisterBenchmark(
              ("matmul/" + tn + "/" + lv + "/" + s.name + "/n1" + th).c_str(), BM_Matmul, t, level,
              s.m, s.k, int64_t(1), threads, false);
          if (threads == 2) b->UseRealTime();
        }
        // Weights packed at load (pack.h), where this level has a packed kernel for the type.
        const kvrun::cpu::CpuTypeTraits* ct = kvrun::cpu::cpu_traits(t, level);
        if (ct && ct->packed_tile)
          for (const Shape& s : shapes) {
            auto* b = benchmark::RegisterBenchmark(
                ("matmul/" + tn + "/" + lv + "-packed/" + s.name + "/n1" + th).c_str(), BM_Matmul,
                t, level, s.m, s.k, int64_t(1), threads, true);
            if (threads == 2) b->UseRealTime();
          }
        // Decode from memory: 65536×2048 weights (32 of them, 34-138 MB, are larger than the L3
        // caches of the machines measured), so they stream from DRAM as in a model's decode.
        // The same from the unpacked rows (the tile kernels), for an A/B of the packed form.
        if (ct && ct->packed_tile)
          for (bool packed : {true, false}) {
            auto* b = benchmark::RegisterBenchmark(
                ("matmul/" + tn + "/" + lv + (packed ? "-packed" : "") + "/dram_65536x2048/n1" + th)
                    .c_str(),
                BM_Matmul, t, level, int64_t(65536), int64_t(2048), int64_t(1), threads, packed);
            if (threads == 2) b->UseRealTime();
          }
        // Decode from memory with short rows: 196608×768, the rows of qwen3-30b-a3b's expert
        // down projections (k = 768: 3 K-quant super-blocks a row), for the per-row overhead of
        // the packed kernels against dram_65536x2048 (k = 2048).
        if (ct && ct->packed_tile) {
          auto* b = benchmark::RegisterBenchmark(
              ("matmul/" + tn + "/" + lv + "-packed/dram_196608x768/n1" + th).c_str(), BM_Matmul, t,
              level, int64_t(196608), int64_t(768), int64_t(1), threads, true);
          if (threads == 2) b->UseRealTime();
        }
        if (ct && ct->packed_tile && (t == DType::Q4_K || t == DType::Q5_K))
          for (const Shape& s :
               {Shape{"moe_gate_768x2048", 768, 2048}, Shape{"moe_down_2048x768", 2048, 768}}) {
            auto* b = benchmark::RegisterBenchmark(
                ("matmul_id/" + tn + "/" + lv + "-packed/" + s.name + "/e128u8" + th).c_str(),
                BM_MatmulId, t, level, s.m, s.k, threads);
            if (threads == 2) b->UseRealTime();
          }
        if (ct && ct->packed_tile) {  // the packed decode from DRAM with --thp off
          auto* b = benchmark::RegisterBenchmark(
              ("matmul/" + tn + "/" + lv + "-packed-4k/dram_65536x2048/n1" + th).c_str(),
              BM_MatmulSmallPages, t, level, int64_t(65536), int64_t(2048), int64_t(1), threads);
          if (threads == 2) b->UseRealTime();
        }
        if (ct && ct->packed_tile) {
          auto* b = benchmark::RegisterBenchmark(
              ("matmul/" + tn + "/" + lv + "-packed/attn_q_2048x2048/n512" + th).c_str(), BM_Matmul,
              t, level, int64_t(2048), int64_t(2048), int64_t(512), threads, true);
          b->Unit(benchmark::kMillisecond)->Iterations(3);
          if (threads == 2) b->UseRealTime();
        }
        if (ct && ct->packed_fast_tile) {  // the same prefill in the fast order (--kernels fast)
          auto* b = benchmark::RegisterBenchmark(
              ("matmul/" + tn + "/" + lv + "-packed-fast/attn_q_2048x2048/n512" + th).c_str(),
              BM_MatmulFast, t, level, int64_t(2048), int64_t(2048), int64_t(512), threads);
          b->Unit(benchmark::kMillisecond)->Iterations(3);
          if (threads == 2) b->UseRealTime();
        }
        // Prefill: 512 rows at the square shape (the scalar level once, as a reference point).
        auto* b = benchmark::RegisterBenchmark(
            ("matmul/" + tn + "/" + lv + "/attn_q_2048x2048/n512" + th).c_str(), BM_Matmul, t,
            level, int64_t(2048), int64_t(2048), int64_t(512), threads, false);
        b->Unit(benchmark::kMillisecond)->Iterations(level == CpuLevel::scalar ? 1 : 3);
        if (threads == 2) b->UseRealTime();
      }
    }
    for (DType t : {DType::Q8_0, DType::Q4_K})
      benchmark::RegisterBenchmark(
          ("quantize/" +
           std::string(kvrun::traits(kvrun::cpu::cpu_traits(t, level)->act_type).name) + "/" + lv)
              .c_str(),
          BM_Quantize, t, level);
  }
  benchmark::RegisterBenchmark("pool/job_2_threads", BM_PoolJob)->UseRealTime();
}

const int kRegistered = (register_all(), 0);

}  // namespace
