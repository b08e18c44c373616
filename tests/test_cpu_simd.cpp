// test_cpu_simd.cpp — every SIMD kernel level this CPU supports against the scalar reference
// kernels, on random data: activation quantizers byte for byte, dots and several-row dots float
// for float (memcmp: the SIMD kernels follow the scalar code's summation order exactly, see
// backends/cpu/x86/kernels_x86.inl), at odd sizes and tails, unaligned pointers and padded row
// strides; the matmul at the process's level against scalar dots; and the level selection
// (KVRUN_CPU parsing and capping).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/cpu_info.h"
#include "cpu/cpu_level.h"
#include "cpu/cpu_traits.h"
#include "cpu/fast_exp.h"
#include "cpu/matmul.h"
#include "cpu/op_kernels.h"
#include "cpu/pack.h"
#include "cpu/thread_pool.h"
#include "quants.h"
#include "test_util.h"

namespace kvrun::cpu {
namespace {

using test::random_floats;

/// Every SIMD level of every build (x86 and AArch64): the kernel tests are instantiated for each
/// and skip, by name, the levels this build or CPU cannot run, whatever KVRUN_CPU says.
constexpr CpuLevel kSimdLevels[] = {CpuLevel::avx2, CpuLevel::avx512, CpuLevel::neon};

/// Test names of a level parameter ("avx2", ...).
std::string level_param_name(const ::testing::TestParamInfo<CpuLevel>& info) {
  return cpu_level_name(info.param);
}

/// A kernel test run at one level (the parameter); skipped, naming the level, when this build
/// or CPU cannot run it.
class SimdLevel : public ::testing::TestWithParam<CpuLevel> {
 protected:
  void SetUp() override {
    if (!cpu_level_supported(GetParam()))
      GTEST_SKIP() << cpu_level_name(GetParam()) << ": not supported by this build or CPU";
  }
};

/// A matmul test run at one level, scalar included (same skipping as SimdLevel).
class MatmulLevel : public SimdLevel {};

/// Random values with a different magnitude per 32 (so block scales vary) and some outliers.
std::vector<float> varied_floats(size_t n, uint32_t seed) {
  std::vector<float> v = random_floats(n, seed);
  const std::vector<float> s = random_floats(n / 32 + 1, seed + 7);
  for (size_t i = 0; i < n; ++i) v[i] *= std::exp2(std::round(2 * s[i / 32]));
  for (size_t i = 5; i < n; i += 97) v[i] *= 9.0f;
  return v;
}

/// `rows` rows of `k` values encoded in `t`, each row `stride` bytes apart, starting `offset`
/// bytes into the returned buffer (to test unaligned rows). The decode-only grid i-quants (no
/// quantizer) get random valid blocks instead, seeded by x[0] and the row.
std::vector<uint8_t> encode_rows(DType t, const std::vector<float>& x, int64_t rows, int64_t k,
                                 size_t stride, size_t offset) {
  std::vector<uint8_t> out(offset + stride * size_t(rows), 0xA5);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* dst = out.data() + offset + size_t(r) * stride;
    if (traits(t).from_float) {
      traits(t).from_float(x.data() + r * k, dst, k);
    } else {
      uint32_t seed;
      std::memcpy(&seed, &x[size_t(r * k)], 4);
      EXPECT_TRUE(fill_random_iq_blocks(t, 0.01f, seed, dst, k)) << traits(t).name;
    }
  }
  return out;
}

bool same_float(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

/// Row lengths to test for type `t`: odd multiples of its block, tails for the float types.
std::vector<int64_t> lengths(DType t) {
  const int64_t blk = traits(cpu_traits(t, CpuLevel::scalar)->act_type).block_elems;
  if (blk == 1) return {1, 7, 8, 15, 16, 17, 31, 63, 64, 65, 72, 100, 129, 200, 1000, 2053};
  if (blk == 32) return {32, 64, 96, 160, 544, 2048};
  return {256, 512, 768, 2304};
}

/// A kernel test of one weight type at one SIMD level (skipped by name like SimdLevel).
class SimdTypes : public ::testing::TestWithParam<std::tuple<CpuLevel, DType>> {
 protected:
  void SetUp() override {
    if (!cpu_level_supported(std::get<0>(GetParam())))
      GTEST_SKIP() << cpu_level_name(std::get<0>(GetParam()))
                   << ": not supported by this build or CPU";
  }
};

TEST_P(SimdTypes, ActivationQuantizerMatchesScalarBytes) {
  const DType t = std::get<1>(GetParam());
  const CpuTypeTraits* ref = cpu_traits(t, CpuLevel::scalar);
  ASSERT_NE(ref, nullptr);
  const CpuLevel level = std::get<0>(GetParam());
  const CpuTypeTraits* ct = cpu_traits(t, level);
  for (int64_t k : lengths(t)) {
    for (uint32_t seed : {1u, 2u}) {
      std::vector<float> x = varied_floats(size_t(k) + 1, seed + uint32_t(k));
      if (seed == 2 && k >= 16) {
        // Ties for q8_K's "first largest |x|" rule and an all-zero block.
        x[3] = 50.0f;
        x[9] = -50.0f;
        if (k >= 64)
          for (int i = 32; i < 64; ++i) x[size_t(i)] = 0.0f;
      }
      const size_t ab = size_t(*row_bytes(ref->act_type, k));
      std::vector<uint8_t> want(ab), got(ab + 1);
      ref->act_from_float(x.data() + 1, want.data(), k);    // unaligned source
      ct->act_from_float(x.data() + 1, got.data() + 1, k);  // unaligned destination
      EXPECT_EQ(std::memcmp(want.data(), got.data() + 1, ab), 0)
          << cpu_level_name(level) << " k " << k << " seed " << seed;
    }
  }
}

// The SIMD levels' tables hold SIMD kernels where kernels_x86.h / kernels_neon.h have them (a
// wiring mistake would otherwise make the bit-exactness tests compare the scalar kernel with
// itself).
TEST_P(SimdLevel, SimdKernelsAreWired) {
  const CpuLevel level = GetParam();
  const char* lv = cpu_level_name(level);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q5_0, DType::Q8_0,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const CpuTypeTraits* ref = cpu_traits(t, CpuLevel::scalar);
    const CpuTypeTraits* ct = cpu_traits(t, level);
    EXPECT_NE(ct->vec_dot, ref->vec_dot) << lv << " " << traits(t).name;
    if (t != DType::F32 && t != DType::F16 && t != DType::BF16) {
      EXPECT_NE(ct->vec_dot_tile, nullptr) << lv << " " << traits(t).name;
    }
    if (t == DType::F16 || t == DType::Q8_0 || t == DType::Q4_K) {
      EXPECT_NE(ct->act_from_float, ref->act_from_float) << lv << " " << traits(t).name;
    }
  }
  for (DType t : {DType::F32, DType::F16}) {
    EXPECT_NE(cpu_traits(t, level)->gemm_dot, cpu_traits(t, CpuLevel::scalar)->gemm_dot);
    EXPECT_NE(cpu_traits(t, level)->gemm_dot_tile, nullptr) << lv << " " << traits(t).name;
  }
  EXPECT_NE(cpu_traits(DType::Q4_0, level)->repack_dot_tile, nullptr) << lv;
  // The packed kernels each level has (pack.h): q4_0, q8_0, q4_K, q5_K, q6_K and mxfp4 at avx2
  // and avx512 (q5_K's prefill is the avx2 kernel at both), and at neon (packed_neon.cpp).
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4}) {
    const bool want =
        level == CpuLevel::avx2 || level == CpuLevel::avx512 || level == CpuLevel::neon;
    EXPECT_EQ(cpu_traits(t, level)->packed_tile != nullptr, want) << lv << " " << traits(t).name;
  }
  // mxfp4, iq4_xs, the grid i-quants, q4_1 and q5_1 have x86 kernels only
  // (backends/cpu/x86/iq_x86.inl, iq_grid_x86.inl, kernels_x86.inl); NEON runs the scalar.
  for (DType t :
       {DType::MXFP4, DType::IQ4_XS, DType::IQ3_S, DType::IQ2_S, DType::IQ3_XXS, DType::IQ2_XXS,
        DType::IQ2_XS, DType::IQ1_S, DType::IQ1_M, DType::Q4_1, DType::Q5_1}) {
    const bool x86 = level == CpuLevel::avx2 || level == CpuLevel::avx512;
    EXPECT_EQ(cpu_traits(t, level)->vec_dot != cpu_traits(t, CpuLevel::scalar)->vec_dot, x86)
        << lv << " " << traits(t).name;
    EXPECT_EQ(cpu_traits(t, level)->vec_dot_tile != nullptr, x86) << lv << " " << traits(t).name;
  }
  EXPECT_NE(op_kernels(level).silu_mul, op_kernels(CpuLevel::scalar).silu_mul) << lv;
  EXPECT_NE(op_kernels(level).exp_blocks, op_kernels(CpuLevel::scalar).exp_blocks) << lv;
  EXPECT_NE(op_kernels(level).rope_rotate, op_kernels(CpuLevel::scalar).rope_rotate) << lv;
}

// f32 → f16 activations at every level on the values where conversions differ: NaNs with
// payloads, infinities, overflow, ties, subnormal results and underflow to zero.
TEST_P(SimdLevel, F16ActivationsMatchScalarOnEdgeValues) {
  std::vector<float> x = varied_floats(100, 31);
  const uint32_t bits[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fbfffffu, 0x7f800000u,
                           0xff800000u, 0x477ff000u, 0x477fefffu, 0x47800000u, 0x38800000u,
                           0x387fffffu, 0x33000000u, 0x33000001u, 0x32ffffffu, 0x80000001u,
                           0x3f801000u, 0x3f803000u, 0x00000000u, 0x80000000u, 0x37000000u};
  for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); ++i)
    std::memcpy(&x[3 * i + 2], &bits[i], 4);
  const CpuTypeTraits* ref = cpu_traits(DType::F16, CpuLevel::scalar);
  const CpuLevel level = GetParam();
  const CpuTypeTraits* ct = cpu_traits(DType::F16, level);
  for (int64_t n : {int64_t(5), int64_t(8), int64_t(67), int64_t(100)}) {
    std::vector<uint16_t> want(static_cast<size_t>(n)), got(static_cast<size_t>(n) + 1, 0xABCD);
    ref->act_from_float(x.data(), want.data(), n);
    ct->act_from_float(x.data(), got.data(), n);
    EXPECT_EQ(std::memcmp(want.data(), got.data(), size_t(n) * 2), 0)
        << cpu_level_name(level) << " n " << n;
    EXPECT_EQ(got[size_t(n)], 0xABCD) << "wrote past n";
  }
}

TEST_P(SimdTypes, DotsMatchScalarBitForBit) {
  const DType t = std::get<1>(GetParam());
  const CpuTypeTraits* ref = cpu_traits(t, CpuLevel::scalar);
  ASSERT_NE(ref, nullptr);
  const CpuLevel level = std::get<0>(GetParam());
  const CpuTypeTraits* ct = cpu_traits(t, level);
  for (int64_t k : lengths(t)) {
    const int64_t rows = 11;
    const size_t rb = size_t(*row_bytes(t, k)), stride = rb + 3;
    const auto wf = varied_floats(size_t(rows * k), 10 + uint32_t(k));
    const auto w = encode_rows(t, wf, rows, k, stride, 1);
    const uint8_t* w0 = w.data() + 1;  // unaligned rows
    // 5 activation rows, xs bytes apart (padded, unaligned).
    const int64_t nx = 5;
    const size_t ab = size_t(*row_bytes(ref->act_type, k)), xs = ab + 5;
    const auto xf = varied_floats(size_t(nx * k), 20 + uint32_t(k));
    std::vector<uint8_t> xbuf(xs * size_t(nx) + 1);
    uint8_t* x = xbuf.data() + 1;
    for (int64_t j = 0; j < nx; ++j) ref->act_from_float(xf.data() + j * k, x + size_t(j) * xs, k);

    struct Variant {
      const char* name;
      VecDotFn want, got;
      DotTileFn tile;
    };
    std::vector<Variant> variants = {{"vec", ref->vec_dot, ct->vec_dot, ct->vec_dot_tile}};
    if (ref->gemm_dot && k % 16 == 0)
      variants.push_back({"gemm", ref->gemm_dot, ct->gemm_dot, ct->gemm_dot_tile});
    if (ref->repack_dot)
      variants.push_back({"repack", ref->repack_dot, ct->repack_dot, ct->repack_dot_tile});
    for (const Variant& v : variants) {
      std::vector<float> want(size_t(rows * nx));  // [j][r]
      for (int64_t j = 0; j < nx; ++j)
        for (int64_t r = 0; r < rows; ++r) {
          const uint8_t* wr = w0 + size_t(r) * stride;
          const uint8_t* xj = x + size_t(j) * xs;
          const float ref_y = v.want(k, wr, xj);
          want[size_t(j * rows + r)] = ref_y;
          const float got = v.got(k, wr, xj);
          EXPECT_TRUE(same_float(got, ref_y))
              << cpu_level_name(level) << " " << v.name << " k " << k << " row " << r << " act "
              << j << ": " << got << " vs " << ref_y;
        }
      if (!v.tile) continue;
      for (int64_t nr : {int64_t(1), int64_t(3), int64_t(4), int64_t(8), int64_t(9), rows})
        for (int64_t nj : {int64_t(1), int64_t(2), int64_t(3), nx}) {
          const size_t ys = size_t(nr) + 2;
          std::vector<float> got(ys * size_t(nj), NAN);
          v.tile(k, w0, stride, nr, x, xs, nj, got.data(), ys);
          for (int64_t j = 0; j < nj; ++j) {
            for (int64_t r = 0; r < nr; ++r)
              EXPECT_TRUE(same_float(got[size_t(j) * ys + size_t(r)], want[size_t(j * rows + r)]))
                  << cpu_level_name(level) << " " << v.name << " tile " << nr << "x" << nj << " k "
                  << k << " row " << r << " act " << j;
            EXPECT_TRUE(std::isnan(got[size_t(j) * ys + size_t(nr)])) << "wrote past nrows";
          }
        }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllWeightTypes, SimdTypes,
    ::testing::Combine(::testing::ValuesIn(kSimdLevels),
                       ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q4_0,
                                         DType::Q5_0, DType::Q8_0, DType::IQ4_NL, DType::Q4_1,
                                         DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                                         DType::Q5_K, DType::Q6_K, DType::MXFP4, DType::IQ4_XS,
                                         DType::IQ3_S, DType::IQ2_S, DType::IQ3_XXS, DType::IQ2_XXS,
                                         DType::IQ2_XS, DType::IQ1_S, DType::IQ1_M)),
    [](const auto& info) {
      return std::string(cpu_level_name(std::get<0>(info.param))) + "_" +
             traits(std::get<1>(info.param)).name;
    });

// The matmul at every level (blocked rows, several-row kernels, threads) gives, for every
// output, the float of the scalar kernel that cpu_traits.h assigns to its shape.
TEST_P(MatmulLevel, EqualsScalarDots) {
  const CpuLevel level = GetParam();
  for (DType t : {DType::F16,    DType::F32,   DType::BF16,  DType::Q4_0,    DType::Q5_0,
                  DType::Q8_0,   DType::Q5_K,  DType::Q4_K,  DType::Q6_K,    DType::MXFP4,
                  DType::IQ4_XS, DType::IQ3_S, DType::IQ2_S, DType::IQ3_XXS, DType::IQ2_XXS,
                  DType::IQ2_XS, DType::IQ1_S, DType::IQ1_M, DType::Q4_1,    DType::Q5_1}) {
    const CpuTypeTraits* ref = cpu_traits(t, CpuLevel::scalar);
    const int64_t k = 512;
    for (int64_t m : {int64_t(40), int64_t(36), int64_t(21)}) {
      const auto wf = varied_floats(size_t(m * k), 3);
      const size_t rb = size_t(*row_bytes(t, k));
      auto wbytes = encode_rows(t, wf, m, k, rb, 0);
      const Tensor w = Tensor::contiguous(t, wbytes.data(), k, m);
      // n 9: a whole tile of the widest row kernel (iq4_xs: 8 activation rows) and a tail.
      for (int64_t n : {int64_t(1), int64_t(2), int64_t(7), int64_t(9)}) {
        const auto x = varied_floats(size_t(n * k), 4 + uint32_t(n));
        ThreadPool pool(3);
        std::vector<float> y(size_t(n * m));
        matmul(pool, w, x.data(), n, y.data(), level);
        VecDotFn dot = ref->vec_dot;
        if (ref->repack_dot && m % 8 == 0)
          dot = ref->repack_dot;
        else if (ref->gemm_dot && n >= 2 && k % 16 == 0 && m % 4 == 0)
          dot = ref->gemm_dot;
        const size_t ab = size_t(*row_bytes(ref->act_type, k));
        std::vector<uint8_t> act(ab);
        for (int64_t j = 0; j < n; ++j) {
          ref->act_from_float(x.data() + j * k, act.data(), k);
          for (int64_t i = 0; i < m; ++i) {
            const float want = dot(k, wbytes.data() + size_t(i) * rb, act.data());
            EXPECT_TRUE(same_float(y[size_t(j * m + i)], want))
                << cpu_level_name(level) << " " << traits(t).name << " m " << m << " n " << n
                << " (" << i << ", " << j << "): " << y[size_t(j * m + i)] << " vs " << want;
          }
        }
      }
    }
  }
}

// Weights packed at load (pack.h: 16 rows interleaved) give, at a level with a packed kernel for
// their type, the float of the scalar dot of the unpacked rows for every output (q4_0: the
// repacked order, q8_0, q4_K, q5_K, q6_K and mxfp4: their lane order): one group and several, one
// block and many, every activation-row tail of the kernels' passes (q4_0 at avx512: 8 rows per
// pass, then 2..7 in one pass or 1; at avx2 4, 3, 2 or 1 rows per pass of each 8-row half and the
// activation rows in chunks of 128 KiB), and more threads than groups. A level without a packed
// kernel for the type (scalar) must ignore Tensor::packed and read the rows: there w.packed points
// at junk. Every level this CPU has is checked whatever KVRUN_CPU says (pack_weight(w, level)).
TEST_P(MatmulLevel, PackedWeightsEqualScalarDots) {
  const CpuLevel level = GetParam();
  int checked = 0, zeros = 0;
  std::string unpacked;  // types this level has no packed kernel for
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4}) {
    const CpuTypeTraits* ref = cpu_traits(t, CpuLevel::scalar);
    const VecDotFn dot = t == DType::Q4_0 ? ref->repack_dot : ref->vec_dot;
    const bool k_quant = t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
    const std::vector<int64_t> ks =
        k_quant ? std::vector<int64_t>{256, 512, 2048} : std::vector<int64_t>{32, 96, 2048};
    for (int64_t k : ks)
      for (int64_t m : {int64_t(16), int64_t(48)}) {
        const auto wf = varied_floats(size_t(m * k), 11 + uint32_t(k + m));
        const size_t rb = size_t(*row_bytes(t, k));
        auto wbytes = encode_rows(t, wf, m, k, rb, 0);
        if (t == DType::MXFP4)  // the E8M0 scales 0 and 1 (subnormal halves) and 2 in block 0
          for (int64_t i = 0; i < m; ++i) wbytes[size_t(i) * rb] = uint8_t(i % 3);
        Tensor w = Tensor::contiguous(t, wbytes.data(), k, m);
        const bool has_kernel = cpu_traits(t, level)->packed_tile != nullptr;
        ASSERT_EQ(pack_supported(w, level), has_kernel) << cpu_level_name(level);
        Buffer packed(wbytes.size());
        if (has_kernel) {
          packed = pack_weight(w, level);
          ASSERT_EQ(packed.size(), wbytes.size());
        } else {
          std::memset(packed.data(), 0x5A, packed.size());  // junk the level must not read
          if (k == ks[0] && m == 16) unpacked += std::string(" ") + traits(t).name;
        }
        w.packed = packed.data();
        const size_t ab = size_t(*row_bytes(ref->act_type, k));
        std::vector<int64_t> ns{1, 2, 3, 4, 5, 8, 9, 15, 16};
        if (k == 2048) ns.push_back(67);  // avx2 q4_0 prefill: two activation chunks (60 + 7)
        for (int64_t n : ns) {
          const auto x = varied_floats(size_t(n * k), 40 + uint32_t(n));
          ThreadPool pool(4);
          std::vector<float> y(size_t(n * m), NAN);
          matmul(pool, w, x.data(), n, y.data(), level);
          std::vector<uint8_t> act(ab);
          for (int64_t j = 0; j < n; ++j) {
            ref->act_from_float(x.data() + j * k, act.data(), k);
            for (int64_t i = 0; i < m; ++i) {
              const float want = dot(k, wbytes.data() + size_t(i) * rb, act.data());
              zeros += want == 0.0f;
              EXPECT_TRUE(same_float(y[size_t(j * m + i)], want))
                  << cpu_level_name(level) << (has_kernel ? " packed " : " unpacked ")
                  << traits(t).name << " k " << k << " m " << m << " n " << n << " (" << i << ", "
                  << j << "): " << y[size_t(j * m + i)] << " vs " << want;
              ++checked;
            }
          }
        }
      }
  }
  EXPECT_GT(checked, 0);
  EXPECT_LT(zeros, checked / 20) << "the random rows should rarely dot to 0";
  if (!unpacked.empty())
    std::printf("[   INFO   ] %s has no packed kernel for:%s (checked that it reads the rows)\n",
                cpu_level_name(level), unpacked.c_str());
}

// matmul_many (weights sharing one input in one pool job) gives every output float of a
// separate matmul per weight: packed and unpacked weights of different types and row counts
// (tails of 16-row units) mixed in one call, at every level and several batch sizes; weights
// that do not pair with the same activations are refused.
TEST_P(MatmulLevel, ManyWeightsEqualSeparateMatmuls) {
  const CpuLevel level = GetParam();
  const int64_t k = 256;
  struct W {
    DType t;
    int64_t m;
    bool pack;
  };
  const W specs[] = {{DType::Q4_0, 48, true},
                     {DType::Q8_0, 32, true},
                     {DType::Q5_0, 21, false},
                     {DType::Q4_0, 40, false},
                     {DType::Q8_0, 16, false}};
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<Buffer> packs;
  std::vector<Tensor> ws;
  for (size_t i = 0; i < std::size(specs); ++i) {
    const auto wf = varied_floats(size_t(specs[i].m * k), 70 + uint32_t(i));
    const size_t rb = size_t(*row_bytes(specs[i].t, k));
    bytes.push_back(encode_rows(specs[i].t, wf, specs[i].m, k, rb, 0));
    ws.push_back(Tensor::contiguous(specs[i].t, bytes.back().data(), k, specs[i].m));
    if (specs[i].pack && pack_supported(ws.back(), level)) {
      packs.push_back(pack_weight(ws.back(), level));
      ws.back().packed = packs.back().data();
    }
  }
  for (int64_t n : {1, 3, 9}) {
    const auto x = varied_floats(size_t(n * k), 90 + uint32_t(n));
    ThreadPool pool(3);
    std::vector<std::vector<float>> many(ws.size()), one(ws.size());
    std::vector<MatmulOut> outs;
    for (size_t i = 0; i < ws.size(); ++i) {
      many[i].assign(size_t(n * ws[i].ne[1]), NAN);
      one[i].assign(size_t(n * ws[i].ne[1]), NAN);
      outs.push_back({&ws[i], many[i].data()});
      matmul(pool, ws[i], x.data(), n, one[i].data(), level);
    }
    matmul_many(pool, outs.data(), int(outs.size()), x.data(), n, level);
    for (size_t i = 0; i < ws.size(); ++i)
      EXPECT_EQ(std::memcmp(many[i].data(), one[i].data(), many[i].size() * 4), 0)
          << cpu_level_name(level) << " weight " << i << " n " << n;
  }
  std::vector<uint8_t> kbytes(size_t(*row_bytes(DType::Q4_K, k)) * 16, 0);
  const Tensor wk = Tensor::contiguous(DType::Q4_K, kbytes.data(), k, 16);
  std::vector<float> y(16 * 2), x(size_t(k), 1.0f);
  ThreadPool pool(2);
  const MatmulOut mixed[] = {{&ws[0], y.data()}, {&wk, y.data() + 16}};
  EXPECT_THROW(matmul_many(pool, mixed, 2, x.data(), 1), std::invalid_argument);
}

/// The packed copy does not depend on how many threads made it: one, two and three threads
/// (each range at least 4 MiB, so a 13 MiB matrix really is split) give the same bytes, for
/// every type this level packs. The blocks are random bytes (packing reads no value).
TEST_P(MatmulLevel, PackWithThreadsGivesTheSameBytes) {
  const CpuLevel level = GetParam();
  int packed_types = 0;
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::MXFP4, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const int64_t k = 4096, rb = *row_bytes(t, k), m = ((size_t(13) << 20) / rb + 15) / 16 * 16;
    std::vector<uint8_t> bytes(size_t(m * rb));
    uint64_t r = 0x9E3779B97F4A7C15ull + uint64_t(t);
    for (uint8_t& b : bytes)
      b = uint8_t((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 56);
    const Tensor w = Tensor::contiguous(t, bytes.data(), k, m);
    if (!pack_supported(w, level)) continue;
    ++packed_types;
    const Buffer one = pack_weight(w, level, 1);
    for (int n : {2, 3}) {
      const Buffer many = pack_weight(w, level, n);
      ASSERT_EQ(many.size(), one.size());
      EXPECT_EQ(std::memcmp(many.data(), one.data(), one.size()), 0)
          << traits(t).name << " at " << cpu_level_name(level) << ", " << n << " threads";
    }
  }
  if (packed_types == 0) GTEST_SKIP() << cpu_level_name(level) << " packs no weight type";
}

TEST_P(MatmulLevel, PackRefusesWhatItCannotPack) {
  const CpuLevel level = GetParam();
  std::vector<uint8_t> bytes(size_t(*row_bytes(DType::Q4_0, 64)) * 24, 1);
  const Tensor q4_24 = Tensor::contiguous(DType::Q4_0, bytes.data(), 64, 24);  // 24 rows
  EXPECT_FALSE(pack_supported(q4_24, level));
  EXPECT_THROW(pack_weight(q4_24, level), std::invalid_argument);
  const Tensor q4_16 = Tensor::contiguous(DType::Q4_0, bytes.data(), 64, 16);
  EXPECT_EQ(pack_supported(q4_16, level), cpu_traits(DType::Q4_0, level)->packed_tile != nullptr);
  if (!pack_supported(q4_16, level)) {
    EXPECT_THROW(pack_weight(q4_16, level), std::invalid_argument);
  }
  EXPECT_FALSE(pack_supported(Tensor::contiguous(DType::Q4_1, bytes.data(), 32, 16), level));
  std::vector<uint8_t> k_bytes(size_t(*row_bytes(DType::Q6_K, 256)) * 24, 1);
  EXPECT_FALSE(pack_supported(Tensor::contiguous(DType::Q6_K, k_bytes.data(), 256, 24), level));
  EXPECT_FALSE(pack_supported(Tensor::contiguous(DType::Q5_K, k_bytes.data(), 256, 24), level));
  EXPECT_FALSE(pack_supported(Tensor::contiguous(DType::Q3_K, k_bytes.data(), 256, 16), level));
  EXPECT_FALSE(pack_supported(Tensor{}, level));
}

// silu_mul at every level against silu_lane · up, element by element, on values that cover
// the polynomial's range, its overflow / underflow edges (|n| > 192), ±0, ±inf and NaN; at odd
// lengths (8-lane tails) and in place.
TEST_P(MatmulLevel, SiluMulMatchesScalarLanes) {
  std::vector<float> g = random_floats(1000, 5, 4.0f);
  const std::vector<float> u = random_floats(1000, 6);
  const float edges[] = {0.0f,  -0.0f,  1e-30f,   -1e-30f,   80.0f,  -80.0f,   87.5f,     -87.5f,
                         88.8f, -88.8f, 104.0f,   -104.0f,   133.0f, -133.0f,  140.0f,    -140.0f,
                         1e10f, -1e10f, INFINITY, -INFINITY, NAN,    3.0e-39f, -3.0e-39f, 20.0f};
  for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); ++i) g[3 * i + 1] = edges[i];
  const CpuLevel level = GetParam();
  const SiluMulFn f = op_kernels(level).silu_mul;
  for (int64_t n :
       {int64_t(1), int64_t(7), int64_t(8), int64_t(15), int64_t(16), int64_t(33), int64_t(1000)}) {
    std::vector<float> got(size_t(n) + 1, 123.0f);
    f(g.data(), u.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float want = silu_lane(g[size_t(i)]) * u[size_t(i)];
      const bool same =
          same_float(got[size_t(i)], want) || (std::isnan(want) && std::isnan(got[size_t(i)]));
      EXPECT_TRUE(same) << cpu_level_name(level) << " n " << n << " x " << g[size_t(i)] << ": "
                        << got[size_t(i)] << " vs " << want;
    }
    EXPECT_EQ(got[size_t(n)], 123.0f) << "wrote past n";
  }
  std::vector<float> inplace(g.begin(), g.begin() + 40), want(40);
  for (size_t i = 0; i < 40; ++i) want[i] = silu_lane(g[i]) * u[i];
  f(inplace.data(), u.data(), inplace.data(), 40);
  for (size_t i = 0; i < 40; ++i)
    EXPECT_TRUE(same_float(inplace[i], want[i]) || std::isnan(want[i])) << i;
}

// exp_blocks (softmax_exp's vector body) at every level against the scalar level: the same y
// bits and the same double sum, with masked (−inf) cells, large negative arguments
// (underflow) and in place.
TEST_P(SimdLevel, ExpBlocksMatchScalar) {
  std::vector<float> x = random_floats(1000, 9, 6.0f);
  for (size_t i = 0; i < x.size(); i += 7) x[i] = -INFINITY;
  for (size_t i = 3; i < x.size(); i += 50) x[i] = -95.0f - float(i % 20);
  const ExpBlocksFn ref = op_kernels(CpuLevel::scalar).exp_blocks;
  const CpuLevel level = GetParam();
  const ExpBlocksFn f = op_kernels(level).exp_blocks;
  for (int64_t n : {int64_t(0), int64_t(15), int64_t(16), int64_t(47), int64_t(1000)}) {
    for (float max : {0.0f, 3.5f}) {
      std::vector<float> want(size_t(n) + 1, 7.0f), got(size_t(n) + 1, 7.0f);
      const double ws = ref(x.data(), want.data(), n, max);
      const double gs = f(x.data(), got.data(), n, max);
      EXPECT_EQ(std::memcmp(&ws, &gs, sizeof ws), 0) << cpu_level_name(level) << " n " << n;
      EXPECT_EQ(std::memcmp(want.data(), got.data(), got.size() * 4), 0)
          << cpu_level_name(level) << " n " << n;
      std::vector<float> inplace(x.begin(), x.begin() + n);
      f(inplace.data(), inplace.data(), n, max);
      EXPECT_EQ(std::memcmp(want.data(), inplace.data(), size_t(n - n % 16) * 4), 0);
    }
  }
}

// rope_rotate at every level against the scalar level, both pair styles, half sizes with and
// without an 8-pair tail, unaligned heads.
// f16_to_f32 at every level gives fp16_lut's float for every one of the 65536 binary16 codes
// (NaNs stay NaN), at a length with a tail past the 16-wide body.
TEST_P(SimdLevel, F16ToF32IsExactForEveryCode) {
  std::vector<uint16_t> codes(65536 + 5);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint16_t(i * 40503u);  // odd: a permutation
  const CpuLevel level = GetParam();
  std::vector<float> out(codes.size(), 1.0f);
  op_kernels(level).f16_to_f32(codes.data(), out.data(), int64_t(codes.size()));
  for (size_t i = 0; i < codes.size(); ++i) {
    const float want = fp16_lut(codes[i]);
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(out[i])) << i;
    else
      ASSERT_TRUE(same_float(out[i], want)) << cpu_level_name(level) << " code " << codes[i];
  }
}

TEST_P(SimdLevel, RopeRotateMatchesScalar) {
  const std::vector<float> v = random_floats(401, 11, 3.0f);
  const std::vector<float> cs = random_floats(100, 12), sn = random_floats(100, 13);
  const RopeRotateFn ref = op_kernels(CpuLevel::scalar).rope_rotate;
  const CpuLevel level = GetParam();
  const RopeRotateFn f = op_kernels(level).rope_rotate;
  for (int64_t half :
       {int64_t(1), int64_t(4), int64_t(8), int64_t(13), int64_t(32), int64_t(64), int64_t(100)})
    for (bool neox : {false, true}) {
      std::vector<float> want(v.begin() + 1, v.begin() + 1 + 2 * half);
      std::vector<float> got(v.begin(), v.begin() + 1 + 2 * half);
      ref(want.data(), cs.data(), sn.data(), half, neox);
      f(got.data() + 1, cs.data(), sn.data(), half, neox);
      EXPECT_EQ(std::memcmp(want.data(), got.data() + 1, want.size() * 4), 0)
          << cpu_level_name(level) << " half " << half << " neox " << neox;
    }
}

INSTANTIATE_TEST_SUITE_P(SimdLevels, SimdLevel, ::testing::ValuesIn(kSimdLevels), level_param_name);
INSTANTIATE_TEST_SUITE_P(AllLevels, MatmulLevel, ::testing::ValuesIn(kAllCpuLevels),
                         level_param_name);

// The NEON packed kernels take their SDOT path when the CPU has FEAT_DotProd and the plain one
// otherwise (backends/cpu/arm/packed_neon.cpp). scripts/arm-check.sh runs the tests under
// qemu-aarch64 on a CPU with SDOT and again on one without (QEMU_CPU=cortex-a72), saying which in
// KVRUN_EXPECT_NEON_DOTPROD, so the packed tests are known to have run both paths.
TEST(CpuFeatures, NeonDotprodAsExpected) {
  const char* want = std::getenv("KVRUN_EXPECT_NEON_DOTPROD");
  if (!want) GTEST_SKIP() << "KVRUN_EXPECT_NEON_DOTPROD not set (scripts/arm-check.sh sets it)";
  EXPECT_EQ(cpu_features().neon_dotprod, std::string(want) == "1") << cpu_features_string();
}

TEST(CpuLevel, NamesParseBack) {
  for (CpuLevel l : kAllCpuLevels) EXPECT_EQ(parse_cpu_level(cpu_level_name(l)), l);
  EXPECT_FALSE(parse_cpu_level("sse9").has_value());
  EXPECT_FALSE(parse_cpu_level("").has_value());
}

TEST(CpuLevel, ResolveCapsToSupported) {
  EXPECT_EQ(resolve_cpu_level(nullptr), best_cpu_level());
  EXPECT_EQ(resolve_cpu_level(""), best_cpu_level());
  EXPECT_EQ(resolve_cpu_level("scalar"), CpuLevel::scalar);
  EXPECT_EQ(resolve_cpu_level("no-such-level"), best_cpu_level());
  for (CpuLevel l : kAllCpuLevels) {
    const CpuLevel got = resolve_cpu_level(cpu_level_name(l));
    EXPECT_TRUE(cpu_level_supported(got));
    EXPECT_EQ(got, cpu_level_supported(l) ? l : best_cpu_level());
  }
  EXPECT_TRUE(cpu_level_supported(cpu_level()));
}

}  // namespace
}  // namespace kvrun::cpu
