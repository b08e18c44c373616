// test_cuda_host_codecs.cu — the CUDA backend's element codecs (decode.cuh, weight_decode.cuh,
// split_rows.cuh, kv_format.cuh, kv_encode.cuh), compiled for the host by nvcc, against the scalar
// reference codecs of ggml-like, bit for bit. These are the functions the kernels call per element,
// so this checks their index arithmetic and their ports of the reference on any machine, GPU or
// not. (On the device the same source runs with the hardware FP8 conversion on sm_89+ and the
// _rn intrinsics; test_cuda_ops checks the kernels there.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/decode.cuh"
#include "cuda/kv_encode.cuh"
#include "cuda/kv_format.cuh"
#include "cuda/weight_decode.cuh"
#include "dtype.h"
#include "fp16.h"
#include "kv_layout.h"
#include "quants_kv.h"
#include "test_util.h"

namespace kvrun {
namespace {

/// Bit equality, any NaN equal to any NaN.
bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, 4) == 0;
}

TEST(CudaHostCodecs, Fp8AndE2m1DecodeEveryCode) {
  for (int c = 0; c < 256; ++c) {
    EXPECT_TRUE(same(cuda::fp8_e4m3_to_f32(uint8_t(c)), fp8_e4m3_to_f32(uint8_t(c)))) << c;
    EXPECT_TRUE(same(cuda::fp8_e5m2_to_f32(uint8_t(c)), fp8_e5m2_to_f32(uint8_t(c)))) << c;
    EXPECT_TRUE(same(cuda::e8m0_to_f32(uint8_t(c)), e8m0_to_f32(uint8_t(c)))) << c;
  }
  for (int c = 0; c < 16; ++c)
    EXPECT_TRUE(same(cuda::e2m1_to_f32(uint8_t(c)), e2m1_to_f32(uint8_t(c))));
}

TEST(CudaHostCodecs, ScalarEncodersMatchReference) {
  std::vector<float> x = test::random_floats(200000, 3, 50.0f);
  x.insert(x.end(), {0.0f, -0.0f, 448.0f, 449.0f, 464.0f, 57344.0f, 1e-9f, -1e-7f, 65504.0f,
                     65520.0f, 1e30f, INFINITY, -INFINITY, 2.5f, 0.25f, 0.75f, 5.0f, 3.5f});
  for (float v : x) {
    for (float s : {v, v * 1e-3f, v * 1e-6f}) {
      ASSERT_EQ(cuda::enc_fp8(s, true), fp8_e4m3_from_f32(s)) << s;
      ASSERT_EQ(cuda::enc_fp8(s, false), fp8_e5m2_from_f32(s)) << s;
      ASSERT_EQ(cuda::enc_e2m1(s / 10.0f), e2m1_from_f32(s / 10.0f)) << s;
      ASSERT_EQ(cuda::enc_f16(s), f32_to_fp16(s)) << s;
      ASSERT_EQ(cuda::enc_bf16(s), f32_to_bf16(s)) << s;
    }
  }
}

/// Rows of n values with a spread of magnitudes, plus an all-zero row and a tiny one.
std::vector<float> kv_rows(int64_t rows, int64_t n, uint32_t seed) {
  std::vector<float> x = test::random_floats(size_t(rows * n), seed);
  for (int64_t i = 0; i < rows * n; ++i) x[size_t(i)] *= std::ldexp(1.0f, int(i / 7 % 23) - 11);
  for (int64_t i = 0; i < n; ++i) {
    x[size_t(i)] = 0.0f;                                  // row 0: zeros
    x[size_t(n + i)] = 1e-30f * float(i % 5 - 2) / 3.0f;  // row 1: tiny
  }
  return x;
}

class CudaHostKv : public ::testing::TestWithParam<DType> {};

TEST_P(CudaHostKv, UnitEncoderAndElementDecoderMatchRowCodec) {
  const DType t = GetParam();
  const std::pair<int64_t, int64_t> shapes[] = {{2, 64},  {3, 8},  {2, 40},
                                                {1, 128}, {4, 16}, {1, 256}};
  for (const auto& [hkv, hd] : shapes) {
    const int64_t n = hkv * hd, rows = 40, rb = kv_row_bytes(t, hkv, hd);
    const std::vector<float> x = kv_rows(rows, n, uint32_t(hkv * 1000 + hd));
    const cuda::KvFormat f = cuda::make_kv_format(t, hkv, hd);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<uint8_t> want(size_t(rb), 0xAB), got(size_t(rb), 0xAB);
      kv_encode_row(t, hkv, hd, x.data() + r * n, want.data());
      for (int64_t u = 0; u < cuda::kv_units_per_row(f); ++u)
        cuda::encode_kv_unit(f, x.data() + r * n, got.data(), u);
      ASSERT_EQ(got, want) << traits(t).name << " hkv " << hkv << " hd " << hd << " row " << r;
      std::vector<float> dec(static_cast<size_t>(n));
      kv_decode_row(t, hkv, hd, want.data(), dec.data());
      for (int64_t e = 0; e < n; ++e)
        ASSERT_TRUE(same(cuda::kv_value(f, want.data(), int(e / hd), int(e)), dec[size_t(e)]))
            << traits(t).name << " hkv " << hkv << " hd " << hd << " row " << r << " e " << e;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaHostKv, ::testing::ValuesIn(kKvCacheTypes),
                         [](const auto& info) { return std::string(traits(info.param).name); });

class CudaHostWeights : public ::testing::TestWithParam<DType> {};

TEST_P(CudaHostWeights, ChunkDecoderMatchesToFloat) {
  const DType t = GetParam();
  const int64_t k = 1024, rows = 12;
  const std::vector<float> x = test::random_floats(size_t(rows * k), 77, 0.5f);
  const int64_t rb = *row_bytes(t, k);
  // 16-byte aligned storage, as cudaMalloc gives.
  std::vector<uint4> store(size_t((rows * rb + 15) / 16));
  auto* q = reinterpret_cast<uint8_t*>(store.data());
  traits(t).from_float(x.data(), q, rows * k);
  std::vector<float> want(size_t(rows * k));
  traits(t).to_float(q, want.data(), rows * k);
  const bool known = cuda::dispatch_weight_type(t, [&](auto tag) {
    using W = cuda::WeightChunk<decltype(tag)::value>;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < k / W::kValues; ++c) {
        float v[W::kValues];
        W::decode(q + r * rb, c, v);
        for (int j = 0; j < W::kValues; ++j)
          ASSERT_TRUE(same(v[j], want[size_t(r * k + c * W::kValues + j)]))
              << traits(t).name << " row " << r << " value " << c * W::kValues + j;
      }
  });
  EXPECT_TRUE(known);
}

INSTANTIATE_TEST_SUITE_P(Types, CudaHostWeights,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                                           DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                                           DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K,
                                           DType::Q3_K, DType::IQ4_NL, DType::IQ4_XS),
                         [](const auto& info) { return std::string(traits(info.param).name); });

/// The split q4_0 / q8_0 / q6_K / q4_K / q5_K readers over split_weight's bytes: decode() equals
/// the stored blocks' decoder bit for bit (the layout keeps every value), and the integer dot
/// product (the decode matmul's k_matvec_q8) equals decode()'s values dotted in double with the
/// int8 activation block's values (the nibble / byte / 2-bit pairing of weights with activations,
/// the folded −8 / −32 offsets, q6_K's two scales per 32 values).
class CudaHostSplitDot : public ::testing::TestWithParam<DType> {};

TEST_P(CudaHostSplitDot, DotQ8MatchesDecodedValues) {
  const DType t = GetParam();
  const int64_t k = 512, rows = 6, nb = k / 32;
  const std::vector<float> x = test::random_floats(size_t(rows * k), 91, 2.0f);
  std::vector<uint8_t> stored(size_t(rows * k / traits(t).block_elems * traits(t).block_bytes));
  traits(t).from_float(x.data(), stored.data(), rows * k);
  const Tensor host = Tensor::contiguous(t, stored.data(), k, rows);
  // 16-byte aligned, as cudaMalloc'ed memory is (the readers load uint4); split_weight's bytes.
  ASSERT_GT(cuda::split_quant_bytes(t), 0);
  std::vector<uint4> split((stored.size() + 15) / 16);
  cuda::split_bytes(t, stored.data(), k, rows, reinterpret_cast<uint8_t*>(split.data()));
  const std::vector<float> act = test::random_floats(size_t(k), 92, 3.0f);
  int checked = 0;
  auto check = [&](auto rd) {
    using R = decltype(rd);
    bool same_type = false;
    cuda::dispatch_weight_type(t, [&](auto tag) {
      constexpr DType T = decltype(tag)::value;
      if constexpr (T == DType::Q4_0 || T == DType::Q8_0 || T == DType::Q6_K || T == DType::Q4_K ||
                    T == DType::Q5_K) {
        same_type = true;
        const cuda::StoredRows<T> st{stored.data(), size_t(host.nb[1])};
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < nb; ++c) {
            float a[32], b[32];
            st.decode(r, c, a);
            rd.decode(r, c, b);
            for (int j = 0; j < 32; ++j)
              ASSERT_EQ(a[j], b[j])
                  << traits(t).name << " row " << r << " chunk " << c << " value " << j;
          }
      }
    });
    ASSERT_TRUE(same_type);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < nb; ++c) {
        // The activation block as the CPU quantizes it (q8_0: f16 scale, 32 int8).
        uint8_t blk[34];
        traits(DType::Q8_0).from_float(act.data() + c * 32, blk, 32);
        cuda::ActQ8 a{};
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        a.d = fp16_to_f32(dh);
        const auto* xq = reinterpret_cast<const int8_t*>(blk + 2);
        std::memcpy(a.xq, xq, 32);
        for (int j = 0; j < 32; ++j) a.sum += xq[j];
        float v[32];
        rd.decode(r, c, v);
        double want = 0, mag = 0;
        for (int j = 0; j < 32; ++j) {
          want += double(v[j]) * double(a.d) * xq[j];
          mag += std::fabs(double(v[j]) * double(a.d) * xq[j]);
        }
        ASSERT_GT(mag, 0.0);
        const float got = R::dot_q8(rd.load(r, c), a);
        ASSERT_NEAR(got, want, 1e-5 * mag + 1e-30)
            << traits(t).name << " row " << r << " block " << c;
        ++checked;
      }
  };
  ASSERT_TRUE(
      cuda::with_split_bytes(t, reinterpret_cast<const uint8_t*>(split.data()), k, rows, check));
  EXPECT_EQ(checked, rows * nb);
}

INSTANTIATE_TEST_SUITE_P(Types, CudaHostSplitDot,
                         ::testing::Values(DType::Q8_0, DType::Q4_0, DType::Q6_K, DType::Q4_K,
                                           DType::Q5_K),
                         [](const auto& info) { return std::string(traits(info.param).name); });

}  // namespace
}  // namespace kvrun
