// vulkan_test_util.h — what the Vulkan test binaries (test_vulkan_ops, test_vulkan_paged)
// share: the device under test (the first Vulkan device, software ones included: CI has
// lavapipe), a backend on it, device buffers from host vectors, NaN-poisoned outputs, NMSE.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "dtype.h"
#include "quants.h"
#include "tensor.h"
#include "test_util.h"
#include "vulkan/vulkan_backend.h"

namespace kvrun::vktest {

// ---- the device under test ----

/// The first Vulkan device (software ones included), or null.
inline Device* vk_device() {
  static Device* dev = [] {
    setenv("KVRUN_VULKAN_SOFTWARE", "1", 0);  // lavapipe is what CI has
    const std::vector<Device*> d = vulkan::devices();
    return d.empty() ? nullptr : d.front();
  }();
  return dev;
}

/// Why there is no device, for the skip message.
inline std::string no_device_reason() {
  std::string s = "no usable Vulkan device";
  for (const std::string& why : vulkan::skipped_devices()) s += "; " + why;
  return s + " (install mesa-vulkan-drivers for lavapipe)";
}

/// A backend on the device under test made with the environment variable `var` set to "1"
/// (`set`) or unset; the variable is restored afterwards (backends read it once, when made).
inline std::unique_ptr<Backend> backend_with(const char* var, bool set) {
  const char* was = std::getenv(var);
  const std::string old = was ? was : "";
  if (set)
    setenv(var, "1", 1);
  else
    unsetenv(var);
  std::unique_ptr<Backend> be = vk_device()->make_backend(0);
  if (was)
    setenv(var, old.c_str(), 1);
  else
    unsetenv(var);
  return be;
}

/// The backend most cases use: the portable f32 shaders (made with KVRUN_VULKAN_NO_FP16=1), so
/// their bounds against float64 hold on every device.
inline Backend& vk() {
  static std::unique_ptr<Backend> be = backend_with("KVRUN_VULKAN_NO_FP16", true);
  return *be;
}

/// A backend on the fp16-arithmetic shaders where the device reports shaderFloat16 (made with
/// KVRUN_VULKAN_NO_FP16 unset); on other devices the same shaders as vk().
inline Backend& vk_fp16() {
  static std::unique_ptr<Backend> be = backend_with("KVRUN_VULKAN_NO_FP16", false);
  return *be;
}

/// Whether the device under test reports the int8 dot product (its description says so), which
/// the q8_0 / q4_0 decode matvec then uses (docs/vulkan.md).
inline bool has_int8_dot() {
  return vk_device()->description().find("int8 dot") != std::string::npos;
}

/// Whether the device under test reports shaderFloat16 (its description says ", fp16"), which
/// vk_fp16()'s tiled matmul and f16 matvec then use (docs/vulkan.md).
inline bool has_fp16() { return vk_device()->description().find(", fp16") != std::string::npos; }

#define REQUIRE_VULKAN() \
  if (!::kvrun::vktest::vk_device()) GTEST_SKIP() << ::kvrun::vktest::no_device_reason()

/// A device buffer holding `v`.
template <typename T>
std::unique_ptr<DeviceBuffer> to_dev(const std::vector<T>& v) {
  auto b = vk_device()->alloc(v.size() * sizeof(T), BufferUse::kActivations);
  vk().upload(b->data(), v.data(), v.size() * sizeof(T));
  return b;
}

/// A device output of `n` floats, every one NaN until the op writes it.
inline std::unique_ptr<DeviceBuffer> poisoned(size_t n) {
  return to_dev(std::vector<float>(n, std::nanf("")));
}

inline std::vector<float> from_dev(const DeviceBuffer& b, size_t n) {
  std::vector<float> v(n);
  vk().download(v.data(), b.data(), n * sizeof(float));
  return v;
}

inline float* fp(const std::unique_ptr<DeviceBuffer>& b) { return static_cast<float*>(b->data()); }

using test::nmse;

/// y = x · wᵀ in float64: w [m][k] (dequantized weights), x [n][k]; returns [n][m].
inline std::vector<double> matmul_f64(const std::vector<float>& w, const std::vector<float>& x,
                                      int64_t n, int64_t m, int64_t k) {
  std::vector<double> y(size_t(n * m));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      double s = 0;
      for (int64_t e = 0; e < k; ++e) s += double(w[size_t(i * k + e)]) * x[size_t(j * k + e)];
      y[size_t(j * m + i)] = s;
    }
  return y;
}

/// Row-quantized bytes of `rows` × `cols` random values in `t` (the reference encoder); for the
/// grid i-quants, which have no encoder, random valid blocks (quants.h fill_random_iq_blocks:
/// random grid indices, signs and scales, d of magnitude ~0.01), a different draw per row.
inline std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const size_t rb = size_t(*row_bytes(t, cols));
  std::vector<uint8_t> q(rb * size_t(rows));
  if (!traits(t).from_float) {
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_TRUE(
          fill_random_iq_blocks(t, 0.01f, seed * 7919u + uint32_t(r), q.data() + r * rb, cols))
          << traits(t).name;
    return q;
  }
  const std::vector<float> x = test::random_floats(size_t(rows * cols), seed);
  traits(t).from_float(x.data(), q.data(), rows * cols);
  return q;
}

/// A weight on the device: a copy of `bytes` uploaded through Device::upload_weight.
struct DevWeight {
  std::vector<uint8_t> host;
  Tensor t;
  std::unique_ptr<DeviceBuffer> buf;
  DevWeight(DType type, std::vector<uint8_t> bytes, int64_t ne0, int64_t ne1)
      : host(std::move(bytes)) {
    t = Tensor::contiguous(type, host.data(), ne0, ne1);
    buf = vk_device()->upload_weight(t, false);
  }
};

inline void record(const char* key, double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  testing::Test::RecordProperty(key, buf);
  std::printf("    %s = %s\n", key, buf);
}

/// The weight types of get_rows and matmul.
inline const DType kWeightTypes[] = {
    DType::F32,   DType::F16,     DType::BF16,   DType::Q8_0,  DType::Q4_0,    DType::Q4_1,
    DType::Q5_0,  DType::Q5_1,    DType::Q2_K,   DType::Q3_K,  DType::Q4_K,    DType::Q5_K,
    DType::Q6_K,  DType::IQ4_NL,  DType::IQ4_XS, DType::MXFP4, DType::IQ2_XXS, DType::IQ2_XS,
    DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S,  DType::IQ1_S, DType::IQ1_M};

}  // namespace kvrun::vktest
