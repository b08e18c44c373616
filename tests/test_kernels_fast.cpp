// test_kernels_fast.cpp — the fast summation order (`kvrun --kernels fast`, cpu_level.h
// KernelOrder): every level's fast prefill kernel (CpuTypeTraits::packed_fast_tile) bit for bit
// against its scalar reference (fast_dot_* in vec_dot.h) on random non-zero data, through the
// kernel and through matmul with the switch set; the scalar reference against a float64 dot of
// the decoded rows; and the switch's names. Runs at every level the host has and names the ones
// it skips and the types a level has no fast kernel for.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "cpu/cpu_level.h"
#include "cpu/cpu_traits.h"
#include "cpu/matmul.h"
#include "cpu/pack.h"
#include "cpu/thread_pool.h"
#include "test_util.h"

namespace kvrun::cpu {
namespace {

constexpr DType kFastTypes[] = {DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4};

bool same_float(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

/// Random values with a different magnitude per 32 (so block scales vary), none zero.
std::vector<float> varied_floats(size_t n, uint32_t seed) {
  std::vector<float> v = test::random_floats(n, seed);
  const std::vector<float> s = test::random_floats(n / 32 + 1, seed + 7);
  for (size_t i = 0; i < n; ++i) {
    v[i] *= std::exp2(std::round(2 * s[i / 32]));
    if (v[i] == 0.0f) v[i] = 0.25f;
  }
  return v;
}

/// `rows` rows of `k` values of `wf` encoded in `t` (row_bytes apart).
std::vector<uint8_t> encode(DType t, const std::vector<float>& wf, int64_t rows, int64_t k) {
  const size_t rb = size_t(*row_bytes(t, k));
  std::vector<uint8_t> out(rb * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) traits(t).from_float(wf.data() + r * k, &out[r * rb], k);
  return out;
}

/// Restores the process's kernel order when a test ends.
struct OrderGuard {
  KernelOrder saved = kernel_order();
  ~OrderGuard() { set_kernel_order(saved); }
};

/// A fast-kernel test at one level (every level, scalar included); skipped, naming the level,
/// when this build or CPU cannot run it.
class FastLevel : public ::testing::TestWithParam<CpuLevel> {
 protected:
  void SetUp() override {
    if (!cpu_level_supported(GetParam()))
      GTEST_SKIP() << cpu_level_name(GetParam()) << ": not supported by this build or CPU";
  }
};

// The level's fast kernel on packed weights against the scalar fast_dot on the plain rows, for
// k of one (super-)block up to 2048, 16 and 48 weight rows (one and three groups), activation
// rows 2..9 and 13 (every tail of the 8- and 4-row passes) and 67 at k = 2048 (two activation
// chunks and a tail of 3), called directly and through matmul with the switch at fast (both halves
// of every group, several threads); decode (1 row) stays exact. Some outputs must differ from the
// exact dot, so a matmul that ignored the switch would fail.
TEST_P(FastLevel, PackedFastKernelEqualsScalarFastDot) {
  const CpuLevel level = GetParam();
  OrderGuard guard;
  std::string none;
  int checked = 0, differ = 0;
  for (DType t : kFastTypes) {
    const CpuTypeTraits* ref = cpu_traits(t, CpuLevel::scalar);
    const CpuTypeTraits* ct = cpu_traits(t, level);
    ASSERT_NE(ref->fast_dot, nullptr) << traits(t).name;
    if (!ct->packed_fast_tile) {
      none += std::string(" ") + traits(t).name;
      continue;
    }
    const bool k_quant = t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
    for (int64_t k :
         k_quant ? std::vector<int64_t>{256, 768, 2048} : std::vector<int64_t>{32, 96, 2048})
      for (int64_t m : {int64_t(16), int64_t(48)}) {
        const auto wf = varied_floats(size_t(m * k), 5 + uint32_t(k + m));
        auto wbytes = encode(t, wf, m, k);
        const size_t rb = wbytes.size() / size_t(m);
        Tensor w = Tensor::contiguous(t, wbytes.data(), k, m);
        ASSERT_TRUE(pack_supported(w, level));
        const Buffer packed = pack_weight(w, level);
        w.packed = packed.data();
        const size_t ab = size_t(*row_bytes(ref->act_type, k));
        std::vector<int64_t> ns{1, 2, 3, 4, 5, 6, 7, 9, 13};
        if (k == 2048) ns.push_back(67);
        for (int64_t n : ns) {
          const auto x = varied_floats(size_t(n * k), 90 + uint32_t(n + k));
          std::vector<uint8_t> act(ab * size_t(n));
          for (int64_t j = 0; j < n; ++j) ref->act_from_float(&x[j * k], &act[j * ab], k);
          std::vector<float> direct(size_t(n * m), NAN), viamm(size_t(n * m), NAN);
          ct->packed_fast_tile(k, packed.data(), m / kPackRows, act.data(), ab, nullptr, n,
                               direct.data(), size_t(m));
          set_kernel_order(KernelOrder::fast);
          ThreadPool pool(3);
          matmul(pool, w, x.data(), n, viamm.data(), level);
          set_kernel_order(KernelOrder::exact);
          for (int64_t j = 0; j < n; ++j)
            for (int64_t i = 0; i < m; ++i) {
              const uint8_t* wr = &wbytes[size_t(i) * rb];
              const float want = ref->fast_dot(k, wr, &act[j * ab]);
              const float exact = ref->vec_dot(k, wr, &act[j * ab]);
              const size_t at = size_t(j * m + i);
              EXPECT_TRUE(same_float(direct[at], want))
                  << cpu_level_name(level) << " " << traits(t).name << " k " << k << " m " << m
                  << " n " << n << " (" << i << ", " << j << "): " << direct[at] << " vs " << want;
              const float mm_want = n >= 2 ? want : exact;  // decode stays exact
              EXPECT_TRUE(same_float(viamm[at], mm_want))
                  << "matmul " << cpu_level_name(level) << " " << traits(t).name << " k " << k
                  << " n " << n << " (" << i << ", " << j << "): " << viamm[at] << " vs "
                  << mm_want;
              differ += n >= 2 && !same_float(want, exact);
              ++checked;
            }
        }
      }
  }
  if (!none.empty())
    std::printf("[   INFO   ] %s has no fast kernel for:%s (the exact kernels run)\n",
                cpu_level_name(level), none.c_str());
  if (checked > 0) {
    EXPECT_GT(differ, checked / 20) << "fast and exact orders should differ";
  }
}

// The scalar fast dots (and the exact ones) against a float64 dot of the decoded weight and
// activation rows: within 4·(k/32)·2^-24 of Σ|w·x| (one float rounding per block step, a few
// per block for the products of scales), on random rows of several lengths. Fails for a fast dot
// that drops a block, a scale, or the q4_K min term.
TEST(FastOrder, ScalarFastDotNearFloat64Dot) {
  int checked = 0;
  for (DType t : kFastTypes) {
    const CpuTypeTraits* ref = cpu_traits(t, CpuLevel::scalar);
    const DType at = ref->act_type;
    for (int64_t k : {int64_t(256), int64_t(1024), int64_t(4096)}) {
      const int64_t rows = 7;
      const auto wf = varied_floats(size_t(rows * k), 300 + uint32_t(k));
      const auto xf = varied_floats(size_t(rows * k), 400 + uint32_t(k));
      const auto wb = encode(t, wf, rows, k);
      std::vector<uint8_t> xb(size_t(*row_bytes(at, k)) * size_t(rows));
      const size_t rb = wb.size() / size_t(rows), ab = xb.size() / size_t(rows);
      std::vector<float> wd(static_cast<size_t>(k)), xd(static_cast<size_t>(k));
      for (int64_t r = 0; r < rows; ++r) {
        ref->act_from_float(&xf[r * k], &xb[r * ab], k);
        traits(t).to_float(&wb[r * rb], wd.data(), k);
        traits(at).to_float(&xb[r * ab], xd.data(), k);
        double dot = 0, mag = 0;
        for (int64_t e = 0; e < k; ++e) {
          dot += double(wd[e]) * double(xd[e]);
          mag += std::fabs(double(wd[e]) * double(xd[e]));
        }
        const double tol = 4.0 * double(k / 32) * std::ldexp(mag, -24);
        const float fast = ref->fast_dot(k, &wb[r * rb], &xb[r * ab]);
        const float exact = ref->vec_dot(k, &wb[r * rb], &xb[r * ab]);
        EXPECT_NEAR(fast, dot, tol) << traits(t).name << " k " << k << " row " << r;
        EXPECT_NEAR(exact, dot, tol) << traits(t).name << " k " << k << " row " << r;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, int(std::size(kFastTypes)) * 3 * 7);
}

// The switch: exact unless set; the names parse and print; anything else is refused.
TEST(FastOrder, SwitchNamesAndDefault) {
  EXPECT_EQ(kernel_order(), KernelOrder::exact);
  EXPECT_EQ(parse_kernel_order("fast"), KernelOrder::fast);
  EXPECT_EQ(parse_kernel_order("exact"), KernelOrder::exact);
  for (const char* bad : {"", "FAST", "quick", "exact "}) EXPECT_FALSE(parse_kernel_order(bad));
  EXPECT_STREQ(kernel_order_name(KernelOrder::fast), "fast");
  EXPECT_STREQ(kernel_order_name(KernelOrder::exact), "exact");
  OrderGuard guard;
  set_kernel_order(KernelOrder::fast);
  EXPECT_EQ(kernel_order(), KernelOrder::fast);
}

std::string level_name(const ::testing::TestParamInfo<CpuLevel>& info) {
  return cpu_level_name(info.param);
}

INSTANTIATE_TEST_SUITE_P(AllLevels, FastLevel, ::testing::ValuesIn(kAllCpuLevels), level_name);

}  // namespace
}  // namespace kvrun::cpu
