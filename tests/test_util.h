// test_util.h — shared helpers for the GoogleTest suites: where fixtures are, random data.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace kvrun::test {

/// The fixture directory: $KVRUN_FIXTURES, else the build's default (../shared/fixtures).
inline std::filesystem::path fixtures_dir() {
  if (const char* env = std::getenv("KVRUN_FIXTURES"); env && *env) return env;
  return KVRUN_FIXTURES_DEFAULT;
}

/// Path of a fixture file, e.g. fixture("models/stories260K-F32.gguf").
inline std::filesystem::path fixture(const std::string& rel) { return fixtures_dir() / rel; }

/// Project test data (tests/data).
inline std::filesystem::path test_data(const std::string& rel) {
  return std::filesystem::path(KVRUN_TEST_DATA) / rel;
}

/// Path of the kvrun binary built with the tests.
inline std::string kvrun_binary() { return KVRUN_BINARY; }

/// `n` normally distributed floats (mean 0, sd `sd`), never all zeros.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace kvrun::test

/// Skips the current test (with a clear message) when fixture file `rel` is missing.
#define KVRUN_REQUIRE_FIXTURE(rel)                                                           \
  do {                                                                                      \
    if (!std::filesystem::exists(::kvrun::test::fixture(rel)))                              \
      GTEST_SKIP() << "fixture " << ::kvrun::test::fixture(rel)                             \
                   << " not found (set KVRUN_FIXTURES to the fixtures directory)";          \
  } while (0)
