// test_util.h — shared helpers for the GoogleTest suites: where fixtures are, random data.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
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
/// The kvrun binary the tests run: $KVRUN_BINARY when set (a build carried to another machine,
/// scripts/gpu-check.sh e2e), else the one this build made.
inline std::string kvrun_binary() {
  const char* e = std::getenv("KVRUN_BINARY");
  return e && *e ? std::string(e) : std::string(KVRUN_BINARY);
}

/// `n` normally distributed floats (mean 0, sd `sd`), never all zeros.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

/// `s` quoted for /bin/sh: in single quotes, each ' written as '\''.
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// What a command printed and how it exited.
struct CommandResult {
  int exit_code = -1;  ///< exit status, or 128 + signal when killed by one
  std::string out;     ///< stdout
  std::string err;     ///< stderr
};

/// Runs `cmd` through /bin/sh with stdout and stderr captured (stderr via a temp file).
inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  const std::filesystem::path err_path =
      std::filesystem::temp_directory_path() /
      ("kvrun_test_err_" + std::to_string(::getpid()) + "_" + std::to_string(std::rand()));
  FILE* p = ::popen((cmd + " 2>" + err_path.string()).c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream ef(err_path);
  std::stringstream ss;
  ss << ef.rdbuf();
  r.err = ss.str();
  std::filesystem::remove(err_path);
  return r;
}

/// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("kvrun_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::filesystem::path path_;
};

/// Σ(got − want)² / Σ want² (the normalized mean squared error of got against want); +inf
/// when got has a NaN (an unwritten, poisoned element) or the sizes differ.
inline double nmse(const std::vector<float>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += want[i] * want[i];
  }
  return den > 0 ? num / den : num;
}
/// nmse against a float reference.
inline double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  return nmse(got, std::vector<double>(want.begin(), want.end()));
}

}  // namespace kvrun::test

/// Skips the current test (with a clear message) when fixture file `rel` is missing.
#define KVRUN_REQUIRE_FIXTURE(rel)                                                 \
  do {                                                                             \
    if (!std::filesystem::exists(::kvrun::test::fixture(rel)))                     \
      GTEST_SKIP() << "fixture " << ::kvrun::test::fixture(rel)                    \
                   << " not found (set KVRUN_FIXTURES to the fixtures directory)"; \
  } while (0)
