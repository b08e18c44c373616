// bench_util.h — helpers shared by the Google Benchmark files (tests/bench/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace kvrun::bench {

/// `n` standard-normal floats from a fixed seed (benchmark inputs: never zeros).
inline std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

}  // namespace kvrun::bench
