// test_quants_legacy.cpp — q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, iq4_nl: decoders bit-exact on
// hand-built blocks, per-block error bounds of kvrun's quantizers on random data, and real
// llama.cpp-quantized GGUF tensors decoding to within the quantization bound of their F32 source.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "blocks.h"
#include "dtype.h"
#include "fp16.h"
#include "gguf.h"
#include "quants.h"
#include "test_util.h"

namespace kvrun {
namespace {

// GGUF's iq4_nl levels, written out here independently of blocks.h.
constexpr int kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                            1,    13,   25,  38,  53,  69,  89,  113};

// ---------------------------------------------------------------- hand-built blocks

TEST(LegacyDecode, Q4_0NibbleOrder) {
  block_q4_0 b;
  b.d = 0x3800;  // f16 0.5
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | (15 - j) << 4);
  float y[32];
  dequantize_row_q4_0(&b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * float(j - 8)) << j;            // low nibble → element j
    EXPECT_EQ(y[j + 16], 0.5f * float(15 - j - 8)) << j;  // high nibble → element j + 16
  }
}

TEST(LegacyDecode, Q4_1ScaleAndMin) {
  block_q4_1 b[2];
  b[0].d = 0x3C00;  // 1.0
  b[0].m = 0xC000;  // -2.0
  b[1].d = 0xB400;  // -0.25
  b[1].m = 0x3E00;  // 1.5
  for (int j = 0; j < 16; ++j) b[0].qs[j] = b[1].qs[j] = uint8_t(j | ((j + 3) % 16) << 4);
  float y[64];
  dequantize_row_q4_1(b, y, 64);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], float(j) - 2.0f);
    EXPECT_EQ(y[j + 16], float((j + 3) % 16) - 2.0f);
    EXPECT_EQ(y[32 + j], -0.25f * float(j) + 1.5f);
    EXPECT_EQ(y[32 + j + 16], -0.25f * float((j + 3) % 16) + 1.5f);
  }
}

TEST(LegacyDecode, Q5_0HighBitPlacement) {
  block_q5_0 b;
  b.d = 0x3C00;  // 1.0
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | (15 - j) << 4);
  // qh as a little-endian uint32: bits 0, 17 and 31 set → elements 0, 17, 31 get +16.
  const uint8_t qh[4] = {0x01, 0x00, 0x02, 0x80};
  std::memcpy(b.qh, qh, 4);
  float y[32];
  dequantize_row_q5_0(&b, y, 32);
  for (int i = 0; i < 32; ++i) {
    const int nib = i < 16 ? i : 15 - (i - 16);
    const int hi = (i == 0 || i == 17 || i == 31) ? 16 : 0;
    EXPECT_EQ(y[i], float(nib + hi - 16)) << i;
  }
}

TEST(LegacyDecode, Q5_1HighBitsScaleAndMin) {
  block_q5_1 b;
  b.d = 0x3800;  // 0.5
  b.m = 0x4000;  // 2.0
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(((3 * j) & 15) | (j << 4));
  const uint8_t qh[4] = {0xFF, 0x00, 0x00, 0xF0};  // elements 0..7 and 28..31
  std::memcpy(b.qh, qh, 4);
  float y[32];
  dequantize_row_q5_1(&b, y, 32);
  for (int i = 0; i < 32; ++i) {
    const int nib = i < 16 ? (3 * i) & 15 : i - 16;
    const int hi = (i < 8 || i >= 28) ? 16 : 0;
    EXPECT_EQ(y[i], 0.5f * float(nib + hi) + 2.0f) << i;
  }
}

TEST(LegacyDecode, Q8_0AndQ8_1FullInt8Range) {
  block_q8_0 b0[2];
  block_q8_1 b1;
  b0[0].d = 0x3400;  // 0.25
  b0[1].d = 0xBC00;  // -1.0
  b1.d = 0x3400;
  b1.s = 0x7BFF;  // the sum is not used to decode
  for (int i = 0; i < 32; ++i) b0[0].qs[i] = b0[1].qs[i] = b1.qs[i] = int8_t(i * 8 - 128);
  float y[64], z[32];
  dequantize_row_q8_0(b0, y, 64);
  dequantize_row_q8_1(&b1, z, 32);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(y[i], 0.25f * float(i * 8 - 128));
    EXPECT_EQ(y[32 + i], -float(i * 8 - 128));
    EXPECT_EQ(z[i], 0.25f * float(i * 8 - 128));
  }
}

TEST(LegacyDecode, Iq4NlLevels) {
  block_iq4_nl b;
  b.d = 0x3A00;  // 0.75
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | (15 - j) << 4);
  float y[32];
  dequantize_row_iq4_nl(&b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.75f * float(kIq4nl[j]));
    EXPECT_EQ(y[j + 16], 0.75f * float(kIq4nl[15 - j]));
  }
}

// ---------------------------------------------------------------- random round trips

constexpr double kF16Eps = 1.0 / 2048;  // f16 relative rounding error bound (2^-11)

float absmax(const float* x, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

/// Per-block checks of one type: x, the encoded block, the decoded y (32 values each).
using BlockCheck = std::function<void(const float* x, const void* blk, const float* y)>;

/// Symmetric absmax types (q4_0: half = 8, q5_0: half = 16). |d| = absmax/half (f16-rounded).
/// Error <= |d|/2, except elements with x/d > half - 0.5 (opposite sign to the absmax element,
/// beyond the top level half - 1) which clamp: error <= |d|.
BlockCheck symmetric_check(int half) {
  return [half](const float* x, const void* blk, const float* y) {
    f16_bits dh;
    std::memcpy(&dh, blk, 2);
    const double d = fp16_to_f32(dh);
    const double am = absmax(x, 32);
    ASSERT_NEAR(std::fabs(d), am / half, am / half * kF16Eps * 1.01);
    for (int i = 0; i < 32; ++i) {
      const double err = std::fabs(double(y[i]) - x[i]);
      const bool clamped = x[i] / d > half - 0.5;
      ASSERT_LE(err, std::fabs(d) * ((clamped ? 1.0 : 0.5) + 1e-5)) << "element " << i;
    }
  };
}

/// Min/max types (q4_1: levels = 15, q5_1: 31): error <= d/2 plus the f16 rounding of m and d
/// (|min - m| at the bottom, levels * |d_exact - d| at the top).
BlockCheck minmax_check(int levels) {
  return [levels](const float* x, const void* blk, const float* y) {
    f16_bits dh, mh;
    std::memcpy(&dh, blk, 2);
    std::memcpy(&mh, static_cast<const uint8_t*>(blk) + 2, 2);
    const double d = fp16_to_f32(dh), m = fp16_to_f32(mh);
    const double mn = *std::min_element(x, x + 32), mx = *std::max_element(x, x + 32);
    const double d_exact = (mx - mn) / levels;
    ASSERT_NEAR(d, d_exact, d_exact * kF16Eps * 1.01);
    const double bound = d / 2 + std::fabs(mn - m) + levels * std::fabs(d_exact - d) + 1e-6 * d;
    for (int i = 0; i < 32; ++i) ASSERT_LE(std::fabs(double(y[i]) - x[i]), bound) << i;
  };
}

/// q8_0 / q8_1: d = absmax/127 (f16-rounded), error <= d/2. For q8_1 also s = f16(d * sum(q)).
BlockCheck q8_check(bool with_sum) {
  return [with_sum](const float* x, const void* blk, const float* y) {
    f16_bits dh;
    std::memcpy(&dh, blk, 2);
    const double d = fp16_to_f32(dh), am = absmax(x, 32);
    ASSERT_NEAR(d, am / 127, am / 127 * kF16Eps * 1.01);
    for (int i = 0; i < 32; ++i)
      ASSERT_LE(std::fabs(double(y[i]) - x[i]), d * (0.5 + 1e-5)) << "element " << i;
    if (with_sum) {
      const auto* b = static_cast<const block_q8_1*>(blk);
      int sum = 0;
      for (int i = 0; i < 32; ++i) sum += b->qs[i];
      const double s = fp16_to_f32(b->s), want = d * sum;
      EXPECT_NEAR(s, want, std::fabs(want) * kF16Eps * 1.01 + 1e-7);
    }
  };
}

/// iq4_nl: the block's squared error is no worse than the plain absmax choice d = m / -127
/// (m = signed absmax, f16-rounded) with every element at its nearest level.
void iq4nl_check(const float* x, const void* blk, const float* y) {
  float m = 0;
  for (int i = 0; i < 32; ++i)
    if (std::fabs(x[i]) > std::fabs(m)) m = x[i];
  const double d0 = fp16_to_f32(f32_to_fp16(m / -127.0f));
  double naive = 0, sse = 0;
  for (int i = 0; i < 32; ++i) {
    double best = 1e300;
    for (int k = 0; k < 16; ++k) best = std::min(best, std::fabs(x[i] - d0 * kIq4nl[k]));
    naive += best * best;
    sse += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
  }
  (void)blk;
  EXPECT_LE(sse, naive * (1 + 1e-6));
}

struct RoundTripCase {
  DType type;
  BlockCheck check;
  double rel_rmse_bound;  ///< on N(0,1) data; see the derivation at kCases
};

// Rel-RMSE bounds on N(0,1) data in blocks of 32: with step s the rounding noise RMS is
// s/sqrt(12); a block's absmax is ≈ 2.1 (rarely above 3.5) and its range ≈ 4.1. So:
//   q8_0/q8_1  s = absmax/127 → ≈ 0.005;  bound 0.009 (absmax 4)
//   q4_0       s = absmax/8   → ≈ 0.076 (+ clamping);  bound 0.13
//   q5_0       s = absmax/16  → ≈ 0.038;  bound 0.065
//   q4_1       s = range/15   → ≈ 0.079;  bound 0.13
//   q5_1       s = range/31   → ≈ 0.038;  bound 0.065
//   iq4_nl     non-uniform levels, step ≈ absmax/8 near 0 → like q4_0;  bound 0.13
const std::map<std::string, RoundTripCase>& cases() {
  static const std::map<std::string, RoundTripCase> kCases = {
      {"q8_0", {DType::Q8_0, q8_check(false), 0.009}},
      {"q8_1", {DType::Q8_1, q8_check(true), 0.009}},
      {"q4_0", {DType::Q4_0, symmetric_check(8), 0.13}},
      {"q5_0", {DType::Q5_0, symmetric_check(16), 0.065}},
      {"q4_1", {DType::Q4_1, minmax_check(15), 0.13}},
      {"q5_1", {DType::Q5_1, minmax_check(31), 0.065}},
      {"iq4_nl", {DType::IQ4_NL, iq4nl_check, 0.13}},
  };
  return kCases;
}

/// Quantizes and decodes `x`, runs the per-block check, returns the relative RMSE.
double round_trip(const RoundTripCase& c, const std::vector<float>& x) {
  const DTypeTraits& tr = traits(c.type);
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> q(size_t(*row_bytes(c.type, n)));
  std::vector<float> y(x.size());
  tr.from_float(x.data(), q.data(), n);
  tr.to_float(q.data(), y.data(), n);
  for (int64_t ib = 0; ib < n / 32; ++ib) {
    c.check(&x[32 * ib], &q[size_t(ib * tr.block_bytes)], &y[32 * ib]);
    if (::testing::Test::HasFatalFailure()) return 0;
  }
  double se = 0, ss = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    se += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
    ss += double(x[i]) * x[i];
  }
  return std::sqrt(se / ss);
}

class LegacyRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(LegacyRoundTrip, NormalDataWithinPerBlockBoundAndRmse) {
  const RoundTripCase& c = cases().at(GetParam());
  double worst = 0;
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    const auto x = test::random_floats(32 * 128, seed);
    const double rel = round_trip(c, x);
    ASSERT_FALSE(HasFatalFailure()) << "seed " << seed;
    EXPECT_LT(rel, c.rel_rmse_bound) << "seed " << seed;
    worst = std::max(worst, rel);
  }
  std::cout << "[ metric ] " << GetParam() << " rel RMSE (N(0,1), worst of 5 seeds) = " << worst
            << " (bound " << c.rel_rmse_bound << ")\n";
  RecordProperty("rel_rmse_" + GetParam(), std::to_string(worst));
}

// Non-zero-mean data, outliers and wide dynamic range: the per-block bounds still hold.
TEST_P(LegacyRoundTrip, ShiftedScaledAndOutlierData) {
  const RoundTripCase& c = cases().at(GetParam());
  auto x = test::random_floats(32 * 64, 99, 0.01f);
  for (size_t i = 0; i < x.size(); ++i) {
    if (i < 32 * 16) x[i] += 0.05f;     // mean shift
    if (i % 97 == 0) x[i] *= 300.0f;    // outliers
    if (i >= 32 * 48) x[i] *= 1000.0f;  // a louder region
  }
  round_trip(c, x);
  ASSERT_FALSE(HasFatalFailure());
}

TEST_P(LegacyRoundTrip, AllZeroBlocksDecodeToZero) {
  const RoundTripCase& c = cases().at(GetParam());
  std::vector<float> x(64, 0.0f), y(64, 1.0f);
  std::vector<uint8_t> q(size_t(*row_bytes(c.type, 64)), 0xAB);
  traits(c.type).from_float(x.data(), q.data(), 64);
  traits(c.type).to_float(q.data(), y.data(), 64);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Types, LegacyRoundTrip,
                         ::testing::Values("q8_0", "q8_1", "q4_0", "q5_0", "q4_1", "q5_1",
                                           "iq4_nl"));

// ---------------------------------------------------------------- real GGUF files

struct RealCase {
  const char* quant_file;
  const char* f32_file;
  const char* tensor;
  DType type;
};

/// Per-element bound for llama.cpp's reference quantizers (which compute q with the exact
/// scale and store f16 scales): the rounding bound of the type, plus the f16 rounding of d (and
/// m) times the largest level. q4_0/q5_0 clamp one side: |d|; q8_0: |d|/2; q5_1/q4_1: d/2 + m.
double real_bound(DType t, double d, double m) {
  d = std::fabs(d);
  switch (t) {
    case DType::Q8_0:
      return d * (0.5 + 128 * kF16Eps) + 1e-7;
    case DType::Q4_0:
      return d * (1.0 + 16 * kF16Eps) + 1e-7;
    case DType::Q5_0:
      return d * (1.0 + 32 * kF16Eps) + 1e-7;
    default:
      return d * (0.5 + 32 * kF16Eps) + std::fabs(m) * kF16Eps + 1e-7;  // q4_1/q5_1
  }
}

TEST(LegacyRealFiles, LlamaCppTensorsDecodeWithinTheBoundOfTheirF32Source) {
  const RealCase kReal[] = {
      {"stories260K-pad-Q8_0.gguf", "stories260K-pad-F32.gguf", "token_embd.weight", DType::Q8_0},
      {"stories260K-pad-Q8_0.gguf", "stories260K-pad-F32.gguf", "blk.3.ffn_down.weight",
       DType::Q8_0},
      {"stories260K-pad-Q4_0.gguf", "stories260K-pad-F32.gguf", "token_embd.weight", DType::Q4_0},
      {"stories260K-pad-Q4_0.gguf", "stories260K-pad-F32.gguf", "blk.0.attn_q.weight", DType::Q4_0},
      {"stories260K-Q4_K_M.gguf", "stories260K-F32.gguf", "token_embd.weight", DType::Q5_0},
      {"stories260K-Q5_K_M.gguf", "stories260K-F32.gguf", "token_embd.weight", DType::Q5_1},
  };
  for (const RealCase& rc : kReal) {
    KVRUN_REQUIRE_FIXTURE(std::string("models/") + rc.quant_file);
    KVRUN_REQUIRE_FIXTURE(std::string("models/") + rc.f32_file);
    const gguf::File gq = gguf::File::open(test::fixture(std::string("models/") + rc.quant_file));
    const gguf::File gf = gguf::File::open(test::fixture(std::string("models/") + rc.f32_file));
    const gguf::TensorInfo* tq = gq.find_tensor(rc.tensor);
    const gguf::TensorInfo* tf = gf.find_tensor(rc.tensor);
    ASSERT_TRUE(tq && tf) << rc.tensor;
    ASSERT_EQ(tq->type, rc.type) << rc.quant_file << " " << rc.tensor;
    ASSERT_EQ(tf->type, DType::F32);
    const int64_t n = gq.view(*tq).n_elements();
    ASSERT_EQ(n, gf.view(*tf).n_elements());
    const DTypeTraits& tr = traits(rc.type);
    const auto* qdata = static_cast<const uint8_t*>(tq->data);
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    std::memcpy(x.data(), tf->data, size_t(n) * 4);
    tr.to_float(qdata, y.data(), n);
    // Our quantizer on the F32 source: same rule for q8_0/q4_0/q5_0/q5_1 → mostly same blocks.
    std::vector<uint8_t> mine(size_t(*row_bytes(rc.type, n)));
    tr.from_float(x.data(), mine.data(), n);
    int64_t same = 0;
    for (int64_t ib = 0; ib < n / 32; ++ib) {
      const uint8_t* blk = qdata + ib * tr.block_bytes;
      f16_bits dh, mh = 0;
      std::memcpy(&dh, blk, 2);
      if (rc.type == DType::Q5_1) std::memcpy(&mh, blk + 2, 2);
      const double bound = real_bound(rc.type, fp16_to_f32(dh), fp16_to_f32(mh));
      for (int i = 0; i < 32; ++i)
        ASSERT_LE(std::fabs(y[32 * ib + i] - x[32 * ib + i]), bound)
            << rc.quant_file << " " << rc.tensor << " block " << ib << " element " << i;
      same += std::memcmp(blk, &mine[size_t(ib * tr.block_bytes)], size_t(tr.block_bytes)) == 0;
    }
    std::cout << "[ metric ] " << rc.quant_file << " " << rc.tensor << " (" << tr.name
              << "): decoded within bound; kvrun's quantizer gives identical bytes for " << same
              << "/" << n / 32 << " blocks\n";
  }
}

}  // namespace
}  // namespace kvrun
