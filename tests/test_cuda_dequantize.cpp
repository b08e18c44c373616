// test_cuda_dequantize.cpp — the CUDA dequantize op against the CPU scalar reference (bit-exact),
// on random data. Skipped (with the reason) when the build has no CUDA or the machine no GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dtype.h"
#include "test_util.h"
#ifdef KVRUN_HAVE_CUDA
#include "cuda/cuda_device.h"
#include "cuda/dequantize.h"
#endif

namespace kvrun {
namespace {

class CudaDequantize : public ::testing::TestWithParam<DType> {};

TEST_P(CudaDequantize, MatchesCpuReferenceBitExact) {
#ifndef KVRUN_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (configure with -DKVRUN_CUDA=ON)";
#else
  if (cuda::devices().empty()) GTEST_SKIP() << "no CUDA device on this machine";
  const DType type = GetParam();
  const DTypeTraits& tr = traits(type);
  const int64_t n = int64_t(tr.block_elems) * 1000;
  const std::vector<float> x = test::random_floats(size_t(n), 1234, 3.0f);
  std::vector<uint8_t> q(size_t(*row_bytes(type, n)));
  tr.from_float(x.data(), q.data(), n);
  std::vector<float> want(static_cast<size_t>(n));
  std::vector<float> got(static_cast<size_t>(n), -12345.0f);  // poisoned output
  tr.to_float(q.data(), want.data(), n);
  cuda::dequantize_to_f32(type, q.data(), got.data(), n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(std::memcmp(&want[size_t(i)], &got[size_t(i)], 4), 0)
        << tr.name << " element " << i << ": cpu " << want[size_t(i)] << " gpu " << got[size_t(i)];
#endif
}

INSTANTIATE_TEST_SUITE_P(Types, CudaDequantize,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                                           DType::Q4_0, DType::FP8_E4M3, DType::FP8_E5M2),
                         [](const auto& info) { return std::string(traits(info.param).name); });

}  // namespace
}  // namespace kvrun
