// test_quants_k_search.cpp — the K-quant scale searches (ggml-like/quants_k_search.h) against a
// plain reference written here: one candidate at a time, std::round, double sums, exactly the
// search the header describes. The optimized searches evaluate the candidates side by side
// (padded lanes, integer sums, branch-free rounding, an AVX2 clone on x86-64); they must pick
// bit-identical scales, offsets and errors on every input, including values on rounding ties.
// The whole-row quantizers (q2_K, q4_K, q5_K, q6_K) are held the same way against row
// quantizers written here from those references, which always try both offset signs of the
// affine types (the library skips the positive one when a bound shows it cannot win).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "blocks.h"
#include "fp16.h"
#include "quants.h"
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

// ---- whole rows: the library's quantizers against reference ones built from the above ----

/// Reference codes of one affine super-block (q2_K / q4_K / q5_K) at one offset sign: the
/// sub-block fits, their codes against f16 super-block scales, the re-rounded quants and the
/// squared error, as quants_k.cpp describes them.
struct RefAffine {
  uint16_t d = 0, dmin = 0;
  int sc[16] = {}, m[16] = {}, q[QK_K] = {};
  double err = 0.0;
};

uint16_t ref_factors(const float* v, int n, int max_code, float sign, int* codes) {
  float vmax = 0.0f;
  for (int j = 0; j < n; ++j) vmax = std::fmax(vmax, v[j]);
  const uint16_t dh = f32_to_fp16_sat(sign * vmax / float(max_code));
  const float d = std::fabs(fp16_to_f32(dh));
  for (int j = 0; j < n; ++j) codes[j] = d > 0.0f ? ref_round_clamp(v[j] / d, 0, max_code) : 0;
  return dh;
}

RefAffine ref_affine_superblock(const float* x, int n_sub, int qmax, int max_code, int sign) {
  RefAffine r;
  const int len = QK_K / n_sub;
  float scales[16], mins[16];
  for (int j = 0; j < n_sub; ++j) {
    const Fit f = ref_fit_affine(x + j * len, len, qmax, sign);
    scales[j] = f.scale;
    mins[j] = std::fabs(f.offset);
  }
  r.d = ref_factors(scales, n_sub, max_code, 1.0f, r.sc);
  r.dmin = ref_factors(mins, n_sub, max_code, sign > 0 ? -1.0f : 1.0f, r.m);
  const float d = fp16_to_f32(r.d), dmin = fp16_to_f32(r.dmin);
  for (int i = 0; i < QK_K; ++i) {
    const float dl = d * float(r.sc[i / len]), ml = dmin * float(r.m[i / len]);
    const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
    r.q[i] = ref_round_clamp((x[i] + ml) * idl, 0, qmax);
    const double e = double(x[i]) - double(dl * float(r.q[i]) - ml);
    r.err += e * e;
  }
  return r;
}

/// Both offset signs, always; the positive one wins only with a strictly smaller error.
RefAffine ref_affine_best(const float* x, int n_sub, int qmax, int max_code) {
  const RefAffine neg = ref_affine_superblock(x, n_sub, qmax, max_code, -1);
  const RefAffine pos = ref_affine_superblock(x, n_sub, qmax, max_code, +1);
  return pos.err < neg.err ? pos : neg;
}

void ref_pack_k4(const RefAffine& c, uint8_t* scales) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = uint8_t(c.sc[j] | ((c.sc[j + 4] >> 4) << 6));
    scales[j + 4] = uint8_t(c.m[j] | ((c.m[j + 4] >> 4) << 6));
    scales[j + 8] = uint8_t((c.sc[j + 4] & 0x0F) | ((c.m[j + 4] & 0x0F) << 4));
  }
}

void ref_row_q2_K(const float* x, int64_t n, block_q2_K* out) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const RefAffine c = ref_affine_best(x + b * QK_K, 16, 3, 15);
    block_q2_K& blk = out[b];
    std::memset(&blk, 0, sizeof blk);
    blk.d = c.d;
    blk.dmin = c.dmin;
    for (int j = 0; j < 16; ++j) blk.scales[j] = uint8_t(c.sc[j] | (c.m[j] << 4));
    for (int i = 0; i < QK_K; ++i)
      blk.qs[32 * (i / 128) + i % 32] |= uint8_t(c.q[i] << (2 * ((i % 128) / 32)));
  }
}

template <typename Block>
void ref_row_q4_q5_K(const float* x, int64_t n, int qmax, Block* out) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const RefAffine c = ref_affine_best(x + b * QK_K, 8, qmax, 63);
    Block& blk = out[b];
    std::memset(&blk, 0, sizeof blk);
    blk.d = c.d;
    blk.dmin = c.dmin;
    ref_pack_k4(c, blk.scales);
    for (int i = 0; i < QK_K; ++i) {
      blk.qs[32 * (i / 64) + i % 32] |= uint8_t((c.q[i] & 0x0F) << ((i % 64) < 32 ? 0 : 4));
      if constexpr (sizeof(Block) == sizeof(block_q5_K))
        blk.qh[i % 32] |= uint8_t((c.q[i] >> 4) << (i / 32));
    }
  }
}

void ref_row_q6_K(const float* x, int64_t n, block_q6_K* out) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float* xb = x + b * QK_K;
    float scales[16], smax = 0.0f;
    for (int j = 0; j < 16; ++j) {
      scales[j] = ref_fit_symmetric(xb + 16 * j, 16, -32, 31);
      if (std::fabs(scales[j]) > std::fabs(smax)) smax = scales[j];
    }
    block_q6_K& blk = out[b];
    std::memset(&blk, 0, sizeof blk);
    blk.d = f32_to_fp16_sat(smax / -128.0f);
    const float d = fp16_to_f32(blk.d);
    for (int j = 0; j < 16; ++j) {
      const int code = d != 0.0f ? ref_round_clamp(scales[j] / d, -128, 127) : 0;
      blk.scales[j] = int8_t(code);
      const float dl = d * float(code), idl = dl != 0.0f ? 1.0f / dl : 0.0f;
      for (int l = 0; l < 16; ++l) {
        const int i = 16 * j + l, r = i % 128;
        const int u = (dl != 0.0f ? ref_round_clamp(xb[i] * idl, -32, 31) : 0) + 32;
        blk.ql[64 * (i / 128) + i % 32 + 32 * ((r / 32) & 1)] |=
            uint8_t((u & 0x0F) << (r < 64 ? 0 : 4));
        blk.qh[32 * (i / 128) + i % 32] |= uint8_t((u >> 4) << (2 * (r / 32)));
      }
    }
  }
}

/// Rows of 2 super-blocks each: zero-mean normal (the positive-offset search is skipped), all
/// positive, far from zero (the positive offset wins) and the same with one small negative value,
/// all negative, all zero, one large value among zeros or small ones (either sign), a negative
/// maximum, heavy tails, ties (multiples of 1/2), tiny magnitudes, and a constant row.
std::vector<std::vector<float>> edge_rows() {
  constexpr int kN = 2 * QK_K;
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> pos(0.0f, 2.0f);
  std::cauchy_distribution<float> cauchy(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-6, 6), at(0, kN - 1);
  std::vector<std::vector<float>> rows;
  for (int rep = 0; rep < 40; ++rep) {
    for (int kind = 0; kind < 13; ++kind) {
      std::vector<float> x(kN, 0.0f);
      const float scale = std::ldexp(1.0f, rep % 9 - 4);
      for (float& v : x) {
        switch (kind) {
          case 0:
            v = scale * normal(rng);
            break;
          case 1:
            v = scale * pos(rng);
            break;
          case 2:
          case 12:
            v = scale * (4.0f + 0.3f * normal(rng));
            break;
          case 3:
            v = -scale * pos(rng);
            break;
          case 4:
            v = 0.0f;
            break;
          case 5:
            v = 0.0f;
            break;
          case 6:
            v = 1e-3f * scale * normal(rng);
            break;
          case 7:
            v = scale * normal(rng) - 0.5f * scale;
            break;
          case 8:
            v = scale * cauchy(rng);
            break;
          case 9:
            v = 0.5f * float(small(rng));
            break;
          case 10:
            v = 1e-7f * normal(rng);
            break;
          default:
            v = -0.75f * scale;
            break;
        }
      }
      if (kind == 12) x[size_t(at(rng))] = -0.01f * scale;
      if (kind == 5 || kind == 6) x[size_t(at(rng))] = (rep % 2 ? 1.0f : -1.0f) * 100.0f * scale;
      if (kind == 7) x[size_t(at(rng))] = -40.0f * scale;  // the largest magnitude, negative
      rows.push_back(std::move(x));
    }
  }
  return rows;
}

template <typename Block>
void expect_rows_equal(void (*fast)(const float*, void*, int64_t),
                       const std::function<void(const float*, int64_t, Block*)>& ref,
                       const char* name) {
  int row = 0;
  for (const auto& x : edge_rows()) {
    const int64_t n = int64_t(x.size());
    std::vector<Block> got(size_t(n / QK_K)), want(size_t(n / QK_K));
    fast(x.data(), got.data(), n);
    ref(x.data(), n, want.data());
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(Block)), 0)
        << name << " row " << row << " (kind " << row % 13 << ")";
    ++row;
  }
}

TEST(QuantsKSearch, RowsEqualReferenceQuantizers) {
  expect_rows_equal<block_q2_K>(quantize_row_q2_K, ref_row_q2_K, "q2_K");
  expect_rows_equal<block_q4_K>(
      quantize_row_q4_K,
      [](const float* x, int64_t n, block_q4_K* o) { ref_row_q4_q5_K(x, n, 15, o); }, "q4_K");
  expect_rows_equal<block_q5_K>(
      quantize_row_q5_K,
      [](const float* x, int64_t n, block_q5_K* o) { ref_row_q4_q5_K(x, n, 31, o); }, "q5_K");
  expect_rows_equal<block_q6_K>(quantize_row_q6_K, ref_row_q6_K, "q6_K");
}

}  // namespace
}  // namespace kvrun
