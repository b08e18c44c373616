// test_quants_kv.cpp — FP8 E4M3 / E5M2, scaled FP8 (E8M0 per-vector scale) and NVFP4 codecs.
//
// The reference values here are computed independently of quants_kv.cpp: FP8 and E2M1 codes are
// decoded from their sign/exponent/mantissa fields with std::ldexp (OCP OFP8 v1.0; NVIDIA NVFP4),
// and nearest-level choices are made by brute force over all levels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <vector>

#include "dtype.h"
#include "quants.h"
#include "quants_kv.h"
#include "test_util.h"

namespace kvrun {
namespace {

/// An FP8 format described by its fields, for the independent reference decoder.
struct Fmt {
  const char* name;
  DType type;
  int ebits, mbits, bias;
  bool fn;  ///< E4M3FN: no inf, only S.1111.111 is NaN; else IEEE-like (E5M2)
  uint8_t (*enc)(float);
  float (*dec)(uint8_t);
  double max;
};

const Fmt kE4M3 = {"e4m3", DType::FP8_E4M3, 4, 3, 7, true, fp8_e4m3_from_f32, fp8_e4m3_to_f32,
                   448.0};
const Fmt kE5M2 = {"e5m2",          DType::FP8_E5M2, 5, 2, 15, false, fp8_e5m2_from_f32,
                   fp8_e5m2_to_f32, 57344.0};

/// Decodes `c` from its fields: (-1)^s * 2^(e-bias) * (1 + m/2^M), subnormal 2^(1-bias) * m/2^M.
double ref_decode(const Fmt& f, uint8_t c) {
  const int s = c >> 7;
  const int e = (c >> f.mbits) & ((1 << f.ebits) - 1);
  const int m = c & ((1 << f.mbits) - 1);
  const int emax_field = (1 << f.ebits) - 1;
  if (f.fn && e == emax_field && m == (1 << f.mbits) - 1) return std::nan("");
  if (!f.fn && e == emax_field)
    return m ? std::nan("") : (s ? -1.0 : 1.0) * std::numeric_limits<double>::infinity();
  const double v = e == 0 ? std::ldexp(double(m), 1 - f.bias - f.mbits)
                          : std::ldexp(double((1 << f.mbits) + m), e - f.bias - f.mbits);
  return s ? -v : v;
}

bool is_nan_code(const Fmt& f, uint8_t c) { return std::isnan(ref_decode(f, c)); }
bool is_inf_code(const Fmt& f, uint8_t c) { return std::isinf(ref_decode(f, c)); }

class Fp8Test : public ::testing::TestWithParam<Fmt> {};

TEST_P(Fp8Test, AllCodesDecodeToTheFieldFormula) {
  const Fmt& f = GetParam();
  for (int c = 0; c < 256; ++c) {
    const double want = ref_decode(f, uint8_t(c));
    const float got = f.dec(uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << f.name << " code " << c;
    } else {
      EXPECT_EQ(double(got), want) << f.name << " code " << c;
      EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << f.name << " code " << c;
    }
  }
  EXPECT_EQ(f.dec(f.type == DType::FP8_E4M3 ? 0x7E : 0x7B), f.max);
}

TEST_P(Fp8Test, EncodeOfDecodeIsIdentityForEveryNonNanCode) {
  const Fmt& f = GetParam();
  int checked = 0;
  for (int c = 0; c < 256; ++c) {
    if (is_nan_code(f, uint8_t(c)) || is_inf_code(f, uint8_t(c))) continue;
    EXPECT_EQ(f.enc(f.dec(uint8_t(c))), c) << f.name << " code " << c;
    ++checked;
  }
  EXPECT_EQ(checked, f.fn ? 254 : 248);  // E4M3: 2 NaN codes; E5M2: 6 NaN + 2 inf codes
  // NaN input gives a NaN code.
  EXPECT_TRUE(is_nan_code(f, f.enc(std::nanf(""))));
  EXPECT_TRUE(is_nan_code(f, f.enc(-std::nanf(""))));
}

// At the exact midpoint between two adjacent finite codes the even code wins; one float ulp
// either side of the midpoint goes to the nearer code. Covers subnormals, the subnormal/normal
// border and every binade, for both signs.
TEST_P(Fp8Test, RoundsToNearestTiesToEven) {
  const Fmt& f = GetParam();
  for (int c = 0; c < 0x7f; ++c) {
    const uint8_t lo = uint8_t(c), hi = uint8_t(c + 1);
    if (is_nan_code(f, hi) || is_inf_code(f, hi)) break;
    const double vlo = ref_decode(f, lo), vhi = ref_decode(f, hi);
    const float mid = float((vlo + vhi) / 2);  // exact: a few significant bits
    ASSERT_EQ(double(mid), (vlo + vhi) / 2);
    const uint8_t even = (lo % 2 == 0) ? lo : hi;
    for (const int sgn : {1, -1}) {
      const uint8_t sbit = sgn < 0 ? 0x80 : 0;
      EXPECT_EQ(f.enc(sgn * mid), even | sbit) << f.name << " midpoint above code " << c;
      EXPECT_EQ(f.enc(sgn * std::nextafter(mid, 0.0f)), lo | sbit) << f.name << " code " << c;
      EXPECT_EQ(f.enc(sgn * std::nextafter(mid, 1e30f)), hi | sbit) << f.name << " code " << c;
    }
  }
}

TEST_P(Fp8Test, SaturatesFiniteOverflowAndInfinity) {
  const Fmt& f = GetParam();
  const uint8_t max_code = f.fn ? 0x7E : 0x7B;
  const float m = float(f.max);
  // Spacing in the top binade; the "next" value would be max + step.
  const float step = m - float(ref_decode(f, uint8_t(max_code - 1)));
  for (const float v : {m, std::nextafter(m, 1e30f), m + step / 2, m + step, m * 4, 3e38f,
                        std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(f.enc(v), max_code) << f.name << " " << v;
    EXPECT_EQ(f.enc(-v), max_code | 0x80) << f.name << " " << -v;
  }
  EXPECT_EQ(f.dec(f.enc(std::numeric_limits<float>::infinity())), m);
  if (!f.fn) {
    EXPECT_EQ(f.dec(0x7C), std::numeric_limits<float>::infinity());
    EXPECT_EQ(f.dec(0xFC), -std::numeric_limits<float>::infinity());
  }
}

TEST_P(Fp8Test, SubnormalsAndZeros) {
  const Fmt& f = GetParam();
  const float tiny = std::ldexp(1.0f, 1 - f.bias - f.mbits);  // smallest subnormal
  EXPECT_EQ(f.enc(tiny), 0x01);
  EXPECT_EQ(f.enc(-tiny), 0x81);
  EXPECT_EQ(f.enc(tiny / 2), 0x00);                                 // tie → even (0)
  EXPECT_EQ(f.enc(std::nextafter(tiny / 2, 1.0f)), 0x01);           // just above half → 1
  EXPECT_EQ(f.enc(3 * tiny / 2), 0x02);                             // tie between 1 and 2 → 2
  EXPECT_EQ(f.enc(std::ldexp(1.0f, -f.bias)), 1 << (f.mbits - 1));  // 2^-bias = half the min normal
  EXPECT_EQ(f.enc(1e-30f), 0x00);
  EXPECT_EQ(f.enc(-1e-30f), 0x80);
  EXPECT_EQ(f.enc(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(f.enc(0.0f), 0x00);
  EXPECT_EQ(f.enc(-0.0f), 0x80);
  EXPECT_TRUE(std::signbit(f.dec(0x80)));
  EXPECT_EQ(f.dec(0x80), 0.0f);
}

// Unit-scale rows (the traits codecs) on random data within range: relative error of every
// normal-range value <= 2^-(M+1); absolute error of subnormal-range values <= half the
// subnormal quantum.
TEST_P(Fp8Test, RowRoundTripOnRandomData) {
  const Fmt& f = GetParam();
  const DTypeTraits& tr = traits(f.type);
  const double min_normal = std::ldexp(1.0, 1 - f.bias);
  const double half_sub = std::ldexp(1.0, -f.bias - f.mbits);
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    const auto x = test::random_floats(4096, seed, 10.0f);
    std::vector<uint8_t> q(x.size());
    std::vector<float> y(x.size());
    tr.from_float(x.data(), q.data(), int64_t(x.size()));
    tr.to_float(q.data(), y.data(), int64_t(x.size()));
    double se = 0, ss = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double err = std::fabs(double(y[i]) - x[i]);
      const double bound = std::fabs(x[i]) >= min_normal
                               ? std::ldexp(std::fabs(double(x[i])), -(f.mbits + 1))
                               : half_sub;
      ASSERT_LE(err, bound) << f.name << " x=" << x[i];
      se += err * err;
      ss += double(x[i]) * x[i];
    }
    if (seed == 1)
      std::cout << "[ metric ] " << f.name
                << " unit-scale rel RMSE (sd 10) = " << std::sqrt(se / ss) << "\n";
  }
}

// ---- scaled FP8 (E8M0 scale per vector) ----

/// `n` normal floats rescaled so that their absmax is exactly `amax`.
std::vector<float> with_absmax(size_t n, uint32_t seed, float amax) {
  auto x = test::random_floats(n, seed);
  float m = 0;
  for (float v : x) m = std::max(m, std::fabs(v));
  for (float& v : x) v = v / m * amax;
  return x;
}

// The rel-RMSE bound: rounding to M mantissa bits leaves an error uniform in ±half a quantum,
// i.e. RMS <= 2^-(M+1) / sqrt(3) relative to the value's binade floor (less relative to the
// value itself).
TEST_P(Fp8Test, ScaledRowNeverSaturatesAndBoundsTheError) {
  const Fmt& f = GetParam();
  const double rel_bound = std::ldexp(1.0, -(f.mbits + 1)) / std::sqrt(3.0);
  for (const float amax : {1e-4f, 3e-3f, 1.0f, 77.0f, 1e4f}) {
    double se = 0, ss = 0;
    for (uint32_t seed = 10; seed < 14; ++seed) {
      const auto x = with_absmax(1024, seed, amax);
      std::vector<uint8_t> q(x.size());
      std::vector<float> y(x.size());
      const uint8_t b = quantize_row_fp8_scaled(f.type, x.data(), q.data(), int64_t(x.size()));
      const int e = int(b) - 127;
      // The smallest e with amax / 2^e <= max.
      EXPECT_LE(std::ldexp(double(amax), -e), f.max) << f.name << " amax " << amax;
      EXPECT_GT(std::ldexp(double(amax), -(e - 1)), f.max) << f.name << " amax " << amax;
      dequantize_row_fp8_scaled(f.type, q.data(), b, y.data(), int64_t(x.size()));
      const double half_sub = std::ldexp(1.0, -f.bias - f.mbits + e);
      for (size_t i = 0; i < x.size(); ++i) {
        const double err = std::fabs(double(y[i]) - x[i]);
        const double bound =
            std::max(std::ldexp(std::fabs(double(x[i])), -(f.mbits + 1)), half_sub);
        ASSERT_LE(err, bound) << f.name << " amax " << amax << " x=" << x[i];
        se += err * err;
        ss += double(x[i]) * x[i];
      }
    }
    const double rel = std::sqrt(se / ss);
    EXPECT_LT(rel, rel_bound) << f.name << " amax " << amax;
    if (amax == 1.0f)
      std::cout << "[ metric ] " << f.name << " scaled rel RMSE = " << rel << " (bound "
                << rel_bound << ")\n";
  }
}

TEST_P(Fp8Test, ScaledRowEdgeCases) {
  const Fmt& f = GetParam();
  std::vector<float> zeros(64, 0.0f), y(64, 1.0f);
  std::vector<uint8_t> q(64, 0xAA);
  EXPECT_EQ(quantize_row_fp8_scaled(f.type, zeros.data(), q.data(), 64), 127);
  for (uint8_t c : q) EXPECT_EQ(c, 0);
  dequantize_row_fp8_scaled(f.type, q.data(), 127, y.data(), 64);
  for (float v : y) EXPECT_EQ(v, 0.0f);
  // An exact max times 2^5 uses b = 127 + 5 and the max code.
  const float big = float(std::ldexp(f.max, 5));
  float one[2] = {big, -big};
  uint8_t q2[2];
  EXPECT_EQ(quantize_row_fp8_scaled(f.type, one, q2, 2), 132);
  EXPECT_EQ(q2[0], f.fn ? 0x7E : 0x7B);
  EXPECT_EQ(q2[1], f.fn ? 0xFE : 0xFB);
  // Tiny vectors clamp at E8M0's smallest scale 2^-127 (b = 0) and still round-trip.
  float tiny[2] = {3e-37f, -1e-37f};
  float back[2];
  EXPECT_EQ(quantize_row_fp8_scaled(f.type, tiny, q2, 2), 0);
  dequantize_row_fp8_scaled(f.type, q2, 0, back, 2);
  for (int i = 0; i < 2; ++i)
    EXPECT_LE(std::fabs(back[i] - tiny[i]), std::ldexp(std::fabs(tiny[i]), -(f.mbits + 1)));
  // Non-finite inputs: left out of the scale; inf saturates, NaN stays NaN.
  float odd[3] = {1.0f, std::numeric_limits<float>::infinity(), std::nanf("")};
  uint8_t q3[3];
  float y3[3];
  const uint8_t b = quantize_row_fp8_scaled(f.type, odd, q3, 3);
  dequantize_row_fp8_scaled(f.type, q3, b, y3, 3);
  EXPECT_EQ(y3[0], 1.0f);
  EXPECT_EQ(double(y3[1]), std::ldexp(f.max, int(b) - 127));
  EXPECT_TRUE(std::isnan(y3[2]));
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Test, ::testing::Values(kE4M3, kE5M2),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- NVFP4 ----

/// E2M1 from its fields: 2 exponent bits (bias 1), 1 mantissa bit, sign in bit 3.
double ref_e2m1(int c) {
  const int e = (c >> 1) & 3, m = c & 1;
  const double v = e == 0 ? std::ldexp(double(m), -1) : std::ldexp(1.0 + m / 2.0, e - 1);
  return (c & 8) ? -v : v;
}

TEST(Nvfp4, AllSixteenE2M1CodesDecode) {
  const double mags[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(double(e2m1_to_f32(uint8_t(c))), ref_e2m1(c)) << c;
    EXPECT_EQ(std::fabs(ref_e2m1(c)), mags[c & 7]) << c;
    EXPECT_EQ(e2m1_from_f32(e2m1_to_f32(uint8_t(c))), c) << c;  // -0 keeps its sign bit
  }
}

TEST(Nvfp4, E2M1RoundsToNearestTiesToEvenAndSaturates) {
  for (int c = 0; c < 7; ++c) {
    const float lo = float(ref_e2m1(c)), hi = float(ref_e2m1(c + 1));
    const float mid = (lo + hi) / 2;
    const int even = c % 2 == 0 ? c : c + 1;
    EXPECT_EQ(e2m1_from_f32(mid), even) << "mid " << mid;
    EXPECT_EQ(e2m1_from_f32(-mid), even | 8) << "mid " << -mid;
    EXPECT_EQ(e2m1_from_f32(std::nextafter(mid, 0.0f)), c) << mid;
    EXPECT_EQ(e2m1_from_f32(std::nextafter(mid, 100.0f)), c + 1) << mid;
  }
  for (const float v : {6.0f, 6.5f, 100.0f, 1e30f, std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(e2m1_from_f32(v), 7) << v;
    EXPECT_EQ(e2m1_from_f32(-v), 15) << v;
  }
}

TEST(Nvfp4, HandBuiltBlockDecodesByTheFormula) {
  block_nvfp4 b[2];
  b[0].scale = 0x38;  // E4M3 0.0111.000 = 1.0
  b[1].scale = 0x2B;  // E4M3 0.0101.011 = 2^-2 * 1.375
  for (int j = 0; j < 8; ++j) {
    b[0].qs[j] = uint8_t(j | (15 - j) << 4);
    b[1].qs[j] = uint8_t((j + 8) | j << 4);
  }
  const float s2 = 0.75f;
  float y[32];
  dequantize_row_nvfp4_scaled(b, s2, y, 32);
  for (int blk = 0; blk < 2; ++blk) {
    const double scale = blk == 0 ? 1.0 : 0.25 * 1.375;
    for (int j = 0; j < 8; ++j) {
      // Element 2j is the low nibble of qs[j], element 2j+1 the high nibble.
      EXPECT_EQ(double(y[16 * blk + 2 * j]), s2 * scale * ref_e2m1(b[blk].qs[j] & 15));
      EXPECT_EQ(double(y[16 * blk + 2 * j + 1]), s2 * scale * ref_e2m1(b[blk].qs[j] >> 4));
    }
  }
  // The traits decoder is the same at s2 = 1.
  float z[32];
  traits(DType::NVFP4).to_float(b, z, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(z[i] * s2, y[i]);
}

/// Squared error of coding `x` (16 values) with block factor f, by brute-force nearest level.
double brute_block_sse(const float* x, double f) {
  double sse = 0;
  for (int i = 0; i < 16; ++i) {
    double best = 1e300;
    for (int c = 0; c < 16; ++c) best = std::min(best, std::fabs(x[i] - f * ref_e2m1(c)));
    sse += best * best;
  }
  return sse;
}

/// Checks one NVFP4 block against the documented rule: with t = absmax / 6 / s2 (in float, as
/// specified), the scale is lo = the largest E4M3 code with value <= t or hi = lo + 1, whichever
/// gives the smaller squared error (brute-force nearest levels), and every element error is
/// <= 0.1875 * block absmax. (hi: scale <= 1.125 * t in E4M3's normal range, level gaps <= 2 *
/// scale → err <= scale <= 1.125 * absmax / 6 = 0.1875 * absmax. lo: scale >= t / 1.125, the
/// largest element saturates by at most 0.75 * scale, others err <= scale <= absmax / 6.)
void check_nvfp4_block(const float* x, const block_nvfp4& b, const float* y, float s2) {
  float amax = 0;
  for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float target = amax / 6.0f / s2;
  int lo = 0;
  for (int c = 0; c <= 0x7E; ++c)
    if (ref_decode(kE4M3, uint8_t(c)) <= target) lo = c;
  const int hi = std::min(lo + 1, 0x7E);
  ASSERT_TRUE(b.scale == lo || b.scale == hi)
      << "scale " << int(b.scale) << " not in {" << lo << "," << hi << "}";
  const double f = double(s2) * ref_decode(kE4M3, b.scale);
  const double sse_lo = brute_block_sse(x, s2 * ref_decode(kE4M3, uint8_t(lo)));
  const double sse_hi = brute_block_sse(x, s2 * ref_decode(kE4M3, uint8_t(hi)));
  double sse = 0;
  for (int i = 0; i < 16; ++i) {
    const double err = std::fabs(double(y[i]) - x[i]);
    ASSERT_LE(err, 0.1875 * amax * (1 + 1e-6) + 1e-30);
    sse += err * err;
  }
  // Tolerances: y is computed in float (relative rounding ~1e-7 of each value).
  EXPECT_LE(sse, std::min(sse_lo, sse_hi) * (1 + 1e-5) + 1e-30);
  EXPECT_LE(std::fabs(sse - brute_block_sse(x, f)), 1e-5 * sse + 1e-30);  // nearest levels
}

TEST(Nvfp4, ScaledRowOnRandomDataAcrossMagnitudes) {
  double rel_at_1 = 0;
  for (const float amax : {1e-4f, 3e-3f, 1.0f, 77.0f, 1e4f}) {
    double se = 0, ss = 0;
    for (uint32_t seed = 20; seed < 24; ++seed) {
      const auto x = with_absmax(1024, seed, amax);
      std::vector<block_nvfp4> b(x.size() / 16);
      std::vector<float> y(x.size());
      const float s2 = quantize_row_nvfp4_scaled(x.data(), b.data(), int64_t(x.size()));
      EXPECT_GE(double(s2), double(amax) / 2688 * (1 - 1e-7));
      EXPECT_LE(double(s2), double(amax) / 2688 * (1 + 1e-6));
      EXPECT_LE(double(amax) / 6 / s2, 448.0);  // the block scale never has to saturate
      dequantize_row_nvfp4_scaled(b.data(), s2, y.data(), int64_t(x.size()));
      for (size_t ib = 0; ib < b.size(); ++ib)
        check_nvfp4_block(&x[16 * ib], b[ib], &y[16 * ib], s2);
      for (size_t i = 0; i < x.size(); ++i) {
        se += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
        ss += double(x[i]) * x[i];
      }
    }
    const double rel = std::sqrt(se / ss);
    // Bound: scale ≈ absmax_b / 6 (absmax_b ≈ 1.8 sd for 16 normal values). Most values lie
    // below 3 · scale where E2M1 steps are <= 1 · scale, uniform rounding noise scale/sqrt(12)
    // ≈ 0.05 · absmax_b ≈ 0.09 sd; the few larger ones (steps of 2 · scale) add a little.
    // Expected ≈ 0.09-0.10 relative; bound 0.12.
    EXPECT_LT(rel, 0.12) << "amax " << amax;
    if (amax == 1.0f) rel_at_1 = rel;
  }
  std::cout << "[ metric ] nvfp4 scaled rel RMSE = " << rel_at_1 << "\n";
}

TEST(Nvfp4, UnitScaleTraitsRowAndZeros) {
  const auto x = test::random_floats(2048, 31);
  std::vector<block_nvfp4> b(x.size() / 16);
  std::vector<float> y(x.size());
  traits(DType::NVFP4).from_float(x.data(), b.data(), int64_t(x.size()));
  traits(DType::NVFP4).to_float(b.data(), y.data(), int64_t(x.size()));
  double se = 0, ss = 0;
  for (size_t ib = 0; ib < b.size(); ++ib) check_nvfp4_block(&x[16 * ib], b[ib], &y[16 * ib], 1);
  for (size_t i = 0; i < x.size(); ++i) {
    se += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
    ss += double(x[i]) * x[i];
  }
  EXPECT_LT(std::sqrt(se / ss), 0.12);  // as in the scaled test
  std::cout << "[ metric ] nvfp4 unit-scale rel RMSE = " << std::sqrt(se / ss) << "\n";

  std::vector<float> zeros(64, 0.0f), z(64, 1.0f);
  std::vector<block_nvfp4> bz(4);
  EXPECT_EQ(quantize_row_nvfp4_scaled(zeros.data(), bz.data(), 64), 1.0f);
  for (const auto& blk : bz) {
    EXPECT_EQ(blk.scale, 0);
    for (uint8_t q : blk.qs) EXPECT_EQ(q, 0);
  }
  dequantize_row_nvfp4_scaled(bz.data(), 1.0f, z.data(), 64);
  for (float v : z) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace kvrun
