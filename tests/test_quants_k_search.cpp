// test_quants_k_search.cpp — the K-quant scale searches (ggml-like/quants_k_search.h) against a
// plain reference written here: one candidate at a time, std::round, double sums, exactly the
// search the header describes. The optimized searches evaluate the candidates side by side
// (padded lanes, integer sums, branch-free rounding, an AVX2 clone on x86-64); they must pick
// bit-identical scales, offsets and errors on every input, including values on rounding ties.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "quants_k_search.h"

namespace kvrun {
namespace {

using kquants::Fit;

int ref_round_clamp(float v, int lo, int hi) {
  v = std::round(v);
  if (!(v >= float(lo))) return lo;
  if (v > float(hi)) return hi;
  return int(v);
}

float ref_fit_symmetric(const float* x, int n, int qlo, int qhi) {
  float amax = 0.0f;
  double sxx = 0.0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(amax)) amax = x[i];
    sxx += double(x[i]) * x[i];
  }
  if (amax == 0.0f) return 0.0f;
  float best_scale = 0.0f;
  double best_err = sxx;
  for (int side = 0; side < 2; ++side) {
    const float end = side == 0 ? float(qlo) : float(qhi);
    for (int t = -10; t <= 10; ++t) {
      const float target = end + (end < 0 ? -0.1f : 0.1f) * float(t);
      if (target == 0.0f || (target < 0) != (end < 0)) continue;
      const float iscale = target / amax;
      double sxq = 0.0, sqq = 0.0;
      for (int i = 0; i < n; ++i) {
        const int q = ref_round_clamp(iscale * x[i], qlo, qhi);
        sxq += double(x[i]) * q;
        sqq += double(q) * q;
      }
      if (sqq == 0.0) continue;
      const double err = sxx - sxq * sxq / sqq;
      if (err < best_err) {
        best_err = err;
        best_scale = float(sxq / sqq);
      }
    }
  }
  return best_scale;
}

double ref_affine_error(const float* x, int n, int qmax, float scale, float offset) {
  const float iscale = scale != 0.0f ? 1.0f / scale : 0.0f;
  double err = 0.0;
  for (int i = 0; i < n; ++i) {
    const int q = ref_round_clamp((x[i] - offset) * iscale, 0, qmax);
    const double e = double(x[i]) - (double(scale) * q + offset);
    err += e * e;
  }
  return err;
}

Fit ref_fit_affine(const float* x, int n, int qmax, int offset_sign) {
  double sx = 0.0, sxx = 0.0;
  float xmin = x[0], xmax = x[0];
  for (int i = 0; i < n; ++i) {
    sx += x[i];
    sxx += double(x[i]) * x[i];
    xmin = std::fmin(xmin, x[i]);
    xmax = std::fmax(xmax, x[i]);
  }
  Fit best;
  const double mean = sx / n;
  best.offset = (offset_sign > 0) == (mean > 0) ? float(mean) : 0.0f;
  best.err = sxx - 2.0 * best.offset * sx + double(best.offset) * best.offset * n;
  const float lo = offset_sign > 0 ? std::fmax(xmin, 0.0f) : std::fmin(xmin, 0.0f);
  if (!(xmax > lo)) return best;
  for (int t = -10; t <= 10; ++t) {
    const float iscale = (float(qmax) + 0.1f * float(t)) / (xmax - lo);
    double sq = 0.0, sqq = 0.0, sxq = 0.0;
    for (int i = 0; i < n; ++i) {
      const int q = ref_round_clamp((x[i] - lo) * iscale, 0, qmax);
      sq += q;
      sqq += double(q) * q;
      sxq += double(x[i]) * q;
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0.0) continue;
    double scale = (n * sxq - sq * sx) / det;
    double offset = (sqq * sx - sq * sxq) / det;
    if ((offset_sign > 0 && offset < 0) || (offset_sign <= 0 && offset > 0)) {
      offset = 0.0;
      scale = sxq / sqq;
    }
    if (scale <= 0.0) continue;
    const double err = ref_affine_error(x, n, qmax, float(scale), float(offset));
    if (err < best.err) best = {float(scale), float(offset), err};
  }
  return best;
}

uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

uint64_t bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

TEST(QuantsKSearch, RoundClampEqualsStdRoundOnTiesRangesAndNaN) {
  std::vector<float> vs = {0.0f,
                           -0.0f,
                           0.5f,
                           -0.5f,
                           1.5f,
                           -1.5f,
                           2.5f,
                           -2.5f,
                           14.5f,
                           15.5f,
                           -32.5f,
                           -33.5f,
                           31.5f,
                           32.5f,
                           1e30f,
                           -1e30f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           std::nextafter(0.5f, 0.0f),
                           std::nextafter(-0.5f, 0.0f),
                           std::nextafter(2.5f, 3.0f),
                           std::nextafter(15.5f, 15.0f)};
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-80.0f, 80.0f);
  for (int i = 0; i < 200000; ++i) vs.push_back(u(rng));
  for (int k = -70; k <= 70; ++k) vs.push_back(float(k) + 0.5f);
  const int ranges[][2] = {{0, 3}, {0, 15}, {0, 31}, {-4, 3}, {-32, 31}, {-128, 127}};
  for (const auto& r : ranges)
    for (float v : vs)
      ASSERT_EQ(kquants::round_clamp(v, r[0], r[1]), ref_round_clamp(v, r[0], r[1]))
          << "v=" << v << " range [" << r[0] << ", " << r[1] << "]";
}

/// Sub-blocks of the kinds the quantizers meet: normal, all-positive, tiny, heavy-tailed,
/// constant, zero, and values on the candidates' rounding ties (small integers and halves).
std::vector<std::vector<float>> sub_blocks(int n) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> pos(0.0f, 3.0f);
  std::cauchy_distribution<float> cauchy(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-8, 8);
  std::vector<std::vector<float>> out;
  for (int rep = 0; rep < 300; ++rep) {
    for (int kind = 0; kind < 6; ++kind) {
      std::vector<float> x(size_t(n), 0.0f);
      for (float& v : x) {
        switch (kind) {
          case 0:
            v = normal(rng);
            break;
          case 1:
            v = pos(rng);
            break;
          case 2:
            v = 1e-6f * normal(rng);
            break;
          case 3:
            v = cauchy(rng);
            break;
          case 4:
            v = 0.5f * float(small(rng));
            break;
          default:
            v = rep % 3 == 0 ? 0.0f : 1.25f;
            break;
        }
      }
      out.push_back(std::move(x));
    }
  }
  return out;
}

TEST(QuantsKSearch, SymmetricEqualsOneCandidateAtATime) {
  const int ranges[][2] = {{-4, 3}, {-32, 31}};  // q3_K, q6_K
  for (const auto& r : ranges)
    for (const auto& x : sub_blocks(16)) {
      const float want = ref_fit_symmetric(x.data(), 16, r[0], r[1]);
      const float got = kquants::fit_symmetric(x.data(), 16, r[0], r[1]);
      ASSERT_EQ(bits(got), bits(want)) << got << " vs " << want << " x[0]=" << x[0];
    }
}

TEST(QuantsKSearch, AffineEqualsOneCandidateAtATime) {
  struct Case {
    int n, qmax;
  };
  const Case cases[] = {{16, 3}, {32, 15}, {32, 31}};  // q2_K, q4_K, q5_K
  for (const Case& c : cases)
    for (int sign : {-1, +1})
      for (const auto& x : sub_blocks(c.n)) {
        const Fit want = ref_fit_affine(x.data(), c.n, c.qmax, sign);
        const Fit got = kquants::fit_affine(x.data(), c.n, c.qmax, sign);
        ASSERT_EQ(bits(got.scale), bits(want.scale)) << "qmax " << c.qmax << " sign " << sign;
        ASSERT_EQ(bits(got.offset), bits(want.offset)) << "qmax " << c.qmax << " sign " << sign;
        ASSERT_EQ(bits(got.err), bits(want.err)) << "qmax " << c.qmax << " sign " << sign;
      }
}

}  // namespace
}  // namespace kvrun
