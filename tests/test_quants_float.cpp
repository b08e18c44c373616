// test_quants_float.cpp — the plain float row codecs: f32, f16, bf16, f64.
//
// Reference values are computed here from the IEEE fields with std::ldexp (binary16: 5-bit
// exponent, bias 15, 10-bit mantissa; bfloat16: 8-bit exponent, bias 127, 7-bit mantissa), and
// rounding is checked against the two neighbouring representable values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <vector>

#include "dtype.h"
#include "quants.h"
#include "test_util.h"

namespace kvrun {
namespace {

/// Decodes a 16-bit float with `ebits` exponent bits (bias 2^(ebits-1) - 1) from its fields.
double ref_decode16(uint16_t h, int ebits) {
  const int mbits = 15 - ebits;
  const int bias = (1 << (ebits - 1)) - 1;
  const int s = h >> 15, e = (h >> mbits) & ((1 << ebits) - 1), m = h & ((1 << mbits) - 1);
  double v;
  if (e == (1 << ebits) - 1)
    v = m ? std::nan("") : std::numeric_limits<double>::infinity();
  else if (e == 0)
    v = std::ldexp(double(m), 1 - bias - mbits);
  else
    v = std::ldexp(double((1 << mbits) + m), e - bias - mbits);
  return s ? -v : v;
}

struct Half {
  const char* name;
  DType type;
  int ebits;
};

class Float16Test : public ::testing::TestWithParam<Half> {};

TEST_P(Float16Test, EveryBitPatternDecodesAndReencodes) {
  const Half& p = GetParam();
  const DTypeTraits& tr = traits(p.type);
  std::vector<uint16_t> all(65536), back(65536);
  for (int i = 0; i < 65536; ++i) all[i] = uint16_t(i);
  std::vector<float> f(65536);
  tr.to_float(all.data(), f.data(), 65536);
  tr.from_float(f.data(), back.data(), 65536);
  for (int i = 0; i < 65536; ++i) {
    const double want = ref_decode16(uint16_t(i), p.ebits);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f[i])) << p.name << " " << i;
      ASSERT_TRUE(std::isnan(ref_decode16(back[i], p.ebits))) << p.name << " " << i;
    } else {
      ASSERT_EQ(double(f[i]), want) << p.name << " " << i;
      ASSERT_EQ(std::signbit(f[i]), i >= 0x8000) << p.name << " " << i;
      ASSERT_EQ(back[i], i) << p.name << " " << i;
    }
  }
}

// Midpoints between adjacent finite values round to the even pattern; one float ulp either side
// goes to the nearer one. Every binade and the subnormals, both signs.
TEST_P(Float16Test, RoundsToNearestTiesToEven) {
  const Half& p = GetParam();
  const DTypeTraits& tr = traits(p.type);
  const int inf_bits = ((1 << p.ebits) - 1) << (15 - p.ebits);
  const float kInf = std::numeric_limits<float>::infinity();
  for (int c = 0; c + 1 < inf_bits; c += 7) {  // a spread sample: 7 is odd, so both parities
    for (const int cc : {c, c + 1 < inf_bits - 1 ? c + 1 : c}) {
      const double lo = ref_decode16(uint16_t(cc), p.ebits);
      const double hi = ref_decode16(uint16_t(cc + 1), p.ebits);
      const float mid = float((lo + hi) / 2);
      if (double(mid) != (lo + hi) / 2) continue;  // bf16 midpoints below FLT_MIN: not exact
      const int even = cc % 2 == 0 ? cc : cc + 1;
      for (const int sgn : {1, -1}) {
        const int sb = sgn < 0 ? 0x8000 : 0;
        float v[3] = {sgn * mid, sgn * std::nextafter(mid, 0.0f), sgn * std::nextafter(mid, kInf)};
        uint16_t out[3];
        tr.from_float(v, out, 3);
        EXPECT_EQ(out[0], even | sb) << p.name << " midpoint above " << cc;
        EXPECT_EQ(out[1], cc | sb) << p.name << " below midpoint above " << cc;
        EXPECT_EQ(out[2], (cc + 1) | sb) << p.name << " above midpoint above " << cc;
      }
    }
  }
}

TEST_P(Float16Test, RandomRoundTripRelativeError) {
  const Half& p = GetParam();
  const DTypeTraits& tr = traits(p.type);
  const int mbits = 15 - p.ebits;
  const double rel = std::ldexp(1.0, -(mbits + 1));  // half an ulp, relative
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    const auto x = test::random_floats(4096, seed, 3.0f);
    std::vector<uint16_t> q(x.size());
    std::vector<float> y(x.size());
    tr.from_float(x.data(), q.data(), int64_t(x.size()));
    tr.to_float(q.data(), y.data(), int64_t(x.size()));
    double se = 0, ss = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double err = std::fabs(double(y[i]) - x[i]);
      // Normal range: <= half an ulp; f16 subnormals (< 2^-14): <= 2^-25 absolute.
      ASSERT_LE(err, std::max(rel * std::fabs(x[i]), std::ldexp(1.0, -25))) << x[i];
      se += err * err;
      ss += double(x[i]) * x[i];
    }
    if (seed == 1)
      std::cout << "[ metric ] " << p.name << " rel RMSE = " << std::sqrt(se / ss) << "\n";
    EXPECT_LT(std::sqrt(se / ss), rel);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Float16Test,
                         ::testing::Values(Half{"f16", DType::F16, 5},
                                           Half{"bf16", DType::BF16, 8}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FloatFormats, F16OverflowUnderflowAndNan) {
  const float in[] = {65504.0f,
                      65519.99f,
                      65520.0f,
                      1e6f,
                      -1e6f,
                      std::numeric_limits<float>::infinity(),
                      std::ldexp(1.0f, -25),
                      std::nextafter(std::ldexp(1.0f, -25), 1.0f),
                      1e-10f,
                      -0.0f,
                      std::nanf("")};
  const uint16_t want[] = {0x7BFF, 0x7BFF, 0x7C00, 0x7C00, 0xFC00,
                           0x7C00, 0x0000, 0x0001, 0x0000, 0x8000};
  uint16_t out[11];
  quantize_row_f16(in, out, 11);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(out[i], want[i]) << in[i];
  EXPECT_EQ(out[10] & 0x7C00, 0x7C00);
  EXPECT_NE(out[10] & 0x03FF, 0);
}

TEST(FloatFormats, F32IsABitExactCopy) {
  auto x = test::random_floats(1000, 5);
  x[3] = std::nanf("");
  x[4] = -0.0f;
  x[5] = std::numeric_limits<float>::denorm_min();
  std::vector<float> q(x.size()), y(x.size());
  traits(DType::F32).from_float(x.data(), q.data(), int64_t(x.size()));
  traits(DType::F32).to_float(q.data(), y.data(), int64_t(x.size()));
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0);
}

TEST(FloatFormats, F64RoundTripAndDecodeRounding) {
  const auto x = test::random_floats(1000, 6, 1e3f);
  std::vector<double> d(x.size());
  std::vector<float> y(x.size());
  quantize_row_f64(x.data(), d.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(d[i], double(x[i]));  // exact widening
  dequantize_row_f64(d.data(), y.data(), int64_t(x.size()));
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0);
  // Narrowing rounds to nearest even: 1 + 2^-24 is the midpoint of 1 and 1 + 2^-23.
  const double in[] = {1.0 + std::ldexp(1.0, -24), 1.0 + 3 * std::ldexp(1.0, -24),
                       1.0 + std::ldexp(1.0, -24) + std::ldexp(1.0, -40), 1e300};
  float out[4];
  dequantize_row_f64(in, out, 4);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 1.0f + 2 * std::ldexp(1.0f, -23));
  EXPECT_EQ(out[2], 1.0f + std::ldexp(1.0f, -23));
  EXPECT_EQ(out[3], std::numeric_limits<float>::infinity());
}

// The row codecs take byte pointers: rows at odd addresses (as in a packed file) work.
TEST(FloatFormats, UnalignedRows) {
  const auto x = test::random_floats(64, 7);
  for (const DType t : {DType::F16, DType::BF16, DType::F64, DType::F32}) {
    const DTypeTraits& tr = traits(t);
    std::vector<uint8_t> buf(64 * 8 + 1);
    std::vector<float> a(64), b(64);
    tr.from_float(x.data(), buf.data(), 64);
    tr.to_float(buf.data(), a.data(), 64);
    tr.from_float(x.data(), buf.data() + 1, 64);
    tr.to_float(buf.data() + 1, b.data(), 64);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 64 * 4), 0) << tr.name;
  }
}

}  // namespace
}  // namespace kvrun
