// bench_codecs.cpp — Google Benchmark: throughput of the scalar reference codecs per dtype
// (values/s decoded and encoded over a 1M-value row). These are the oracles, not the fast
// kernels; the numbers are the baseline the SIMD kernels are measured against.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "dtype.h"

namespace {

constexpr int64_t kN = 1 << 20;

std::vector<float> random_row() {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(kN);
  for (auto& v : x) v = dist(rng);
  return x;
}

void BM_ToFloat(benchmark::State& state, kvrun::DType type) {
  const kvrun::DTypeTraits& tr = kvrun::traits(type);
  const std::vector<float> x = random_row();
  std::vector<uint8_t> q(size_t(*kvrun::row_bytes(type, kN)));
  if (tr.from_float) {
    tr.from_float(x.data(), q.data(), kN);
  } else {  // decode-only grid i-quants: blocks of arbitrary bytes are valid (blocks.h)
    for (size_t i = 0; i < q.size(); ++i) q[i] = uint8_t(i * 37 + 11);
  }
  std::vector<float> y(kN);
  for (auto _ : state) {
    tr.to_float(q.data(), y.data(), kN);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * kN);
  state.SetBytesProcessed(state.iterations() * int64_t(q.size()));
}

void BM_FromFloat(benchmark::State& state, kvrun::DType type) {
  const kvrun::DTypeTraits& tr = kvrun::traits(type);
  const std::vector<float> x = random_row();
  std::vector<uint8_t> q(size_t(*kvrun::row_bytes(type, kN)));
  for (auto _ : state) {
    tr.from_float(x.data(), q.data(), kN);
    benchmark::DoNotOptimize(q.data());
  }
  state.SetItemsProcessed(state.iterations() * kN);
}

void register_all() {
  size_t n = 0;
  const kvrun::DType* types = kvrun::all_dtypes(&n);
  for (size_t i = 0; i < n; ++i) {
    const kvrun::DTypeTraits& tr = kvrun::traits(types[i]);
    if (!tr.to_float) continue;
    benchmark::RegisterBenchmark((std::string("to_float/") + tr.name).c_str(), BM_ToFloat,
                                 types[i]);
    if (tr.from_float)  // null for the decode-only grid i-quants
      benchmark::RegisterBenchmark((std::string("from_float/") + tr.name).c_str(), BM_FromFloat,
                                   types[i]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
