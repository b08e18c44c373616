// test_quants_k.cpp — the K-quant codecs (q2_K, q3_K, q4_K, q5_K, q6_K, q8_K).
//
// 1. Hand-built blocks: literal bytes whose decoded values were worked out by hand from the
//    layout description (quants_k.cpp), covering every sub-block index of the scale packings.
// 2. Randomly filled blocks built by an independent packer written here, in the layout's loop
//    order (half / group / lane), decode to exactly the values of the layout formula. Scales are
//    powers of two and codes small integers, so every product is exact in float.
// 3. Round trips through kvrun's quantizers: normalized RMSE (‖x − y‖ / ‖x‖) on random normal
//    data, data with outliers and non-zero-mean data, each against a bound per type.
// 4. q8_K: bsums are the sums of the quants; d = absmax / 127.
// 5. Real llama.cpp-made K-quant tensors (stories260K-pad-Q4_K_M / Q5_K_M / Q6_K) decode close
//    to the same tensors of stories260K-pad-F32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
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

constexpr uint16_t kF16One = 0x3C00;      // 1.0
constexpr uint16_t kF16Half = 0x3800;     // 0.5
constexpr uint16_t kF16Quarter = 0x3400;  // 0.25

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// ‖x − y‖ / ‖x‖.
double nrmse(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = double(x[i]) - double(y[i]);
    num += e * e;
    den += double(x[i]) * x[i];
  }
  return std::sqrt(num / den);
}

/// Quantizes `x` to `t` with the traits' reference quantizer and decodes it back.
std::vector<float> round_trip(DType t, const std::vector<float>& x) {
  const DTypeTraits& tr = traits(t);
  std::vector<uint8_t> buf(size_t(*row_bytes(t, int64_t(x.size()))));
  tr.from_float(x.data(), buf.data(), int64_t(x.size()));
  std::vector<float> y(x.size());
  tr.to_float(buf.data(), y.data(), int64_t(x.size()));
  return y;
}

/// Decodes one block of a K-quant type.
template <typename Block>
std::vector<float> decode(DType t, const Block& blk) {
  std::vector<float> y(QK_K);
  traits(t).to_float(&blk, y.data(), QK_K);
  return y;
}

template <typename Block>
Block zero_block() {
  Block b;
  std::memset(&b, 0, sizeof(b));
  return b;
}

/// Test-side packing of q4_K/q5_K scale codes sc[8] and min codes m[8] (6 bits each), written
/// from the field description: bytes 0..3 = sc0..3 | top bits of sc4..7 in bits 6-7; bytes 4..7
/// = m0..3 | top bits of m4..7; bytes 8..11 = low nibble sc4..7 | low nibble m4..7 << 4.
void pack_k4_scales(const int* sc, const int* m, uint8_t* out) {
  for (int k = 0; k < 4; ++k) {
    out[k] = uint8_t((sc[k] & 63) | ((sc[4 + k] >> 4) & 3) << 6);
    out[4 + k] = uint8_t((m[k] & 63) | ((m[4 + k] >> 4) & 3) << 6);
    out[8 + k] = uint8_t((sc[4 + k] & 15) | (m[4 + k] & 15) << 4);
  }
}

/// Test-side packing of the 16 q3_K scale codes u (0..63): for group g = s / 4 and lane
/// k = s % 4, the low nibble goes to byte s (s < 8) or the high nibble of byte s - 8, and the
/// top 2 bits to bits 2g..2g+1 of byte 8 + k.
void pack_q3_scales(const int* u, uint8_t* out) {
  std::memset(out, 0, 12);
  for (int g = 0; g < 4; ++g) {
    for (int k = 0; k < 4; ++k) {
      const int s = 4 * g + k;
      if (g < 2)
        out[s] |= uint8_t(u[s] & 15);
      else
        out[s - 8] |= uint8_t((u[s] & 15) << 4);
      out[8 + k] |= uint8_t(((u[s] >> 4) & 3) << (2 * g));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// 1. Hand-built blocks with literal bytes
// ---------------------------------------------------------------------------------------------

// Scale bytes shared by the q4_K and q5_K literal tests. Worked out by hand:
//   j  sc                          m
//   0  0xC1&63 = 1                 0xC5&63 = 5
//   1  0x42&63 = 2                 0x06&63 = 6
//   2  0x83&63 = 3                 0x47&63 = 7
//   3  0x04&63 = 4                 0x88&63 = 8
//   4  0xA | (0xC1>>6)<<4 = 58     0x9 | (0xC5>>6)<<4 = 57
//   5  0xC | (0x42>>6)<<4 = 28     0xB | (0x06>>6)<<4 = 11
//   6  0xD | (0x83>>6)<<4 = 45     0x3 | (0x47>>6)<<4 = 19
//   7  0x2 | (0x04>>6)<<4 = 2      0xE | (0x88>>6)<<4 = 46
constexpr uint8_t kK4Scales[12] = {0xC1, 0x42, 0x83, 0x04, 0xC5, 0x06,
                                   0x47, 0x88, 0x9A, 0xBC, 0x3D, 0xE2};
constexpr int kK4Sc[8] = {1, 2, 3, 4, 58, 28, 45, 2};
constexpr int kK4M[8] = {5, 6, 7, 8, 57, 11, 19, 46};

TEST(QuantsKLiteral, Q4KScalesAndMinsOfEverySubBlock) {
  auto blk = zero_block<block_q4_K>();
  std::memcpy(blk.scales, kK4Scales, 12);
  std::memset(blk.qs, 0x11, sizeof(blk.qs));  // every quant = 1
  blk.d = kF16One;                            // x = sc
  auto y = decode(DType::Q4_K, blk);
  for (int i = 0; i < QK_K; ++i) ASSERT_EQ(y[i], float(kK4Sc[i / 32])) << "scale, value " << i;
  blk.d = 0;
  blk.dmin = kF16One;  // x = -m
  y = decode(DType::Q4_K, blk);
  for (int i = 0; i < QK_K; ++i) ASSERT_EQ(y[i], -float(kK4M[i / 32])) << "min, value " << i;
}

TEST(QuantsKLiteral, Q4KNibbleOrder) {
  auto blk = zero_block<block_q4_K>();
  std::memcpy(blk.scales, kK4Scales, 12);
  blk.d = kF16One;
  blk.qs[37] = 0x9E;  // chunk 1, lane 5: value 64+5 = 69 (low) = 14, value 96+5 = 101 (high) = 9
  const auto y = decode(DType::Q4_K, blk);
  EXPECT_EQ(y[69], 14.0f * kK4Sc[2]);
  EXPECT_EQ(y[101], 9.0f * kK4Sc[3]);
  for (int i = 0; i < QK_K; ++i)
    if (i != 69 && i != 101) {
      ASSERT_EQ(y[i], 0.0f) << i;
    }
}

TEST(QuantsKLiteral, Q5KHighBitsAndNibbles) {
  auto blk = zero_block<block_q5_K>();
  std::memcpy(blk.scales, kK4Scales, 12);
  blk.d = kF16One;
  blk.qh[7] = 0xA5;   // bits 0,2,5,7 → values 7, 71, 167, 231 get +16
  blk.qs[71] = 0x90;  // chunk 2, lane 7, high nibble → value 128+32+7 = 167 gets 9
  const auto y = decode(DType::Q5_K, blk);
  EXPECT_EQ(y[7], 16.0f * 1);
  EXPECT_EQ(y[71], 16.0f * 3);
  EXPECT_EQ(y[167], 25.0f * 28);
  EXPECT_EQ(y[231], 16.0f * 2);
  for (int i = 0; i < QK_K; ++i)
    if (i != 7 && i != 71 && i != 167 && i != 231) {
      ASSERT_EQ(y[i], 0.0f) << i;
    }
}

TEST(QuantsKLiteral, Q3KAllSixteenScales) {
  // Low nibbles: bytes 0..7 give scales 0..7 (low) and 8..15 (high).
  // High bits: byte 8+k holds scales k, 4+k, 8+k, 12+k in bit pairs 0-1, 2-3, 4-5, 6-7.
  // 0xE4 = pairs (0,1,2,3), 0x1B = (3,2,1,0), 0x9C = (0,3,1,2), 0x63 = (3,0,2,1).
  auto blk = zero_block<block_q3_K>();
  const uint8_t scales[12] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA,
                              0xDC, 0xFE, 0xE4, 0x1B, 0x9C, 0x63};
  const int expect[16] = {-32, 18, -28, 22, -8, 10, 28, -18, 1, -13, -11, 7, 25, -21, 13, -1};
  std::memcpy(blk.scales, scales, 12);
  blk.d = kF16One;
  std::memset(blk.qs, 0x55, sizeof(blk.qs));        // low 2 bits = 1 everywhere
  std::memset(blk.hmask, 0xFF, sizeof(blk.hmask));  // high bit set: q = 1
  auto y = decode(DType::Q3_K, blk);
  for (int i = 0; i < QK_K; ++i) ASSERT_EQ(y[i], float(expect[i / 16])) << "value " << i;
  std::memset(blk.hmask, 0, sizeof(blk.hmask));  // high bit clear: q = 1 - 4 = -3
  y = decode(DType::Q3_K, blk);
  for (int i = 0; i < QK_K; ++i) ASSERT_EQ(y[i], -3.0f * expect[i / 16]) << "value " << i;
}

TEST(QuantsKLiteral, Q3KHmaskBitPositions) {
  auto blk = zero_block<block_q3_K>();
  int codes[16];
  for (auto& c : codes) c = 33;  // every scale = 33 - 32 = +1
  pack_q3_scales(codes, blk.scales);
  blk.d = kF16One;
  blk.hmask[3] = 0x21;  // bit 0 → value 3 (half 0, group 0); bit 5 → value 128+32+3 = 163
  const auto y = decode(DType::Q3_K, blk);
  for (int i = 0; i < QK_K; ++i) ASSERT_EQ(y[i], (i == 3 || i == 163) ? 0.0f : -4.0f) << i;
}

TEST(QuantsKLiteral, Q2KScalesMinsAndCrumbs) {
  auto blk = zero_block<block_q2_K>();
  blk.d = kF16Quarter;
  blk.dmin = kF16Half;
  blk.scales[5] = 0x37;   // sub-block 5 (values 80..95): sc 7, m 3
  blk.scales[13] = 0xF1;  // sub-block 13 (values 208..223): sc 1, m 15
  blk.qs[20] = 0x30;      // half 0, lane 20, bits 4-5 → value 64+20 = 84: q = 3
  blk.qs[63] = 0x20;      // half 1, lane 31, bits 4-5 → value 128+64+31 = 223: q = 2
  const auto y = decode(DType::Q2_K, blk);
  EXPECT_EQ(y[84], 0.25f * 7 * 3 - 0.5f * 3);
  EXPECT_EQ(y[85], -0.5f * 3);
  EXPECT_EQ(y[223], 0.25f * 1 * 2 - 0.5f * 15);
  EXPECT_EQ(y[222], -0.5f * 15);
  for (int i = 0; i < QK_K; ++i)
    if (i / 16 != 5 && i / 16 != 13) {
      ASSERT_EQ(y[i], 0.0f) << i;
    }
}

TEST(QuantsKLiteral, Q6KQuarters) {
  auto blk = zero_block<block_q6_K>();
  blk.d = kF16Half;
  blk.scales[0] = -3;
  blk.scales[2] = 7;
  blk.scales[4] = -128;
  blk.scales[6] = 127;
  blk.scales[12] = -1;
  blk.ql[0] = 0x5A;   // value 0 low nibble 0xA, value 64 high nibble 5
  blk.ql[32] = 0x3C;  // value 32 low nibble 0xC, value 96 high nibble 3
  blk.qh[0] = 0xE4;   // pairs: value 0 → 0, 32 → 1, 64 → 2, 96 → 3
  blk.ql[65] = 0xF0;  // half 1, lane 1, high nibble → value 128+64+1 = 193: 0xF
  blk.qh[33] = 0x20;  // half 1, lane 1, bits 4-5 → value 193: 2
  const auto y = decode(DType::Q6_K, blk);
  EXPECT_EQ(y[0], 0.5f * -3 * (10 - 32));
  EXPECT_EQ(y[32], 0.5f * 7 * (0x1C - 32));
  EXPECT_EQ(y[64], 0.5f * -128 * (0x25 - 32));
  EXPECT_EQ(y[96], 0.5f * 127 * (0x33 - 32));
  EXPECT_EQ(y[193], 0.5f * -1 * (0x2F - 32));
  EXPECT_EQ(y[1], 0.5f * -3 * -32);  // all-zero bits: q = -32
}

// ---------------------------------------------------------------------------------------------
// 2. Random blocks from the test-side packer decode to the layout formula exactly
// ---------------------------------------------------------------------------------------------

/// A random power-of-two f16 scale in [2^-6, 2^2] with a random sign when `signed_ok`.
uint16_t random_pow2_f16(std::mt19937& rng, bool signed_ok) {
  const int e = std::uniform_int_distribution<int>(-6, 2)(rng);
  const float v = std::ldexp(1.0f, e);
  const bool neg = signed_ok && (rng() & 1);
  return f32_to_fp16(neg ? -v : v);
}

int rnd(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

class QuantsKPacked : public ::testing::TestWithParam<uint32_t> {};

TEST_P(QuantsKPacked, Q2K) {
  std::mt19937 rng(GetParam());
  auto blk = zero_block<block_q2_K>();
  blk.d = random_pow2_f16(rng, true);
  blk.dmin = random_pow2_f16(rng, true);
  int sc[16], m[16], q[QK_K];
  for (int s = 0; s < 16; ++s) {
    sc[s] = rnd(rng, 0, 15);
    m[s] = rnd(rng, 0, 15);
    blk.scales[s] = uint8_t(sc[s] | m[s] << 4);
  }
  for (int h = 0; h < 2; ++h)
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) {
        const int i = 128 * h + 32 * g + l;
        q[i] = rnd(rng, 0, 3);
        blk.qs[32 * h + l] |= uint8_t(q[i] << (2 * g));
      }
  const auto y = decode(DType::Q2_K, blk);
  const float d = fp16_to_f32(blk.d), dmin = fp16_to_f32(blk.dmin);
  for (int i = 0; i < QK_K; ++i) ASSERT_EQ(y[i], d * sc[i / 16] * q[i] - dmin * m[i / 16]) << i;
}

TEST_P(QuantsKPacked, Q3K) {
  std::mt19937 rng(GetParam());
  auto blk = zero_block<block_q3_K>();
  blk.d = random_pow2_f16(rng, true);
  int u[16], q[QK_K];
  for (int s = 0; s < 16; ++s) u[s] = rnd(rng, 0, 63);
  pack_q3_scales(u, blk.scales);
  for (int h = 0; h < 2; ++h)
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) {
        const int i = 128 * h + 32 * g + l;
        q[i] = rnd(rng, -4, 3);
        const bool high = q[i] >= 0;  // stored high bit set ⇔ no "-4"
        blk.qs[32 * h + l] |= uint8_t((high ? q[i] : q[i] + 4) << (2 * g));
        if (high) blk.hmask[l] |= uint8_t(1 << (4 * h + g));
      }
  const auto y = decode(DType::Q3_K, blk);
  const float d = fp16_to_f32(blk.d);
  for (int i = 0; i < QK_K; ++i) ASSERT_EQ(y[i], d * (u[i / 16] - 32) * q[i]) << i;
}

/// Fills a q4_K- or q5_K-style block (scales, nibbles, optional qh); returns the quants.
template <typename Block>
std::vector<int> fill_k4(std::mt19937& rng, Block* blk, int* sc, int* m, uint8_t* qh) {
  blk->d = random_pow2_f16(rng, true);
  blk->dmin = random_pow2_f16(rng, true);
  for (int s = 0; s < 8; ++s) {
    sc[s] = rnd(rng, 0, 63);
    m[s] = rnd(rng, 0, 63);
  }
  pack_k4_scales(sc, m, blk->scales);
  std::vector<int> q(QK_K);
  const int qmax = qh ? 31 : 15;
  for (int c = 0; c < 4; ++c)
    for (int half = 0; half < 2; ++half)
      for (int l = 0; l < 32; ++l) {
        const int i = 64 * c + 32 * half + l;
        q[i] = rnd(rng, 0, qmax);
        blk->qs[32 * c + l] |= uint8_t((q[i] & 15) << (4 * half));
        if (qh) qh[l] |= uint8_t((q[i] >> 4) << (2 * c + half));
      }
  return q;
}

TEST_P(QuantsKPacked, Q4K) {
  std::mt19937 rng(GetParam());
  auto blk = zero_block<block_q4_K>();
  int sc[8], m[8];
  const auto q = fill_k4(rng, &blk, sc, m, nullptr);
  const auto y = decode(DType::Q4_K, blk);
  const float d = fp16_to_f32(blk.d), dmin = fp16_to_f32(blk.dmin);
  for (int i = 0; i < QK_K; ++i) ASSERT_EQ(y[i], d * sc[i / 32] * q[i] - dmin * m[i / 32]) << i;
}

TEST_P(QuantsKPacked, Q5K) {
  std::mt19937 rng(GetParam());
  auto blk = zero_block<block_q5_K>();
  int sc[8], m[8];
  const auto q = fill_k4(rng, &blk, sc, m, blk.qh);
  const auto y = decode(DType::Q5_K, blk);
  const float d = fp16_to_f32(blk.d), dmin = fp16_to_f32(blk.dmin);
  for (int i = 0; i < QK_K; ++i) ASSERT_EQ(y[i], d * sc[i / 32] * q[i] - dmin * m[i / 32]) << i;
}

TEST_P(QuantsKPacked, Q6K) {
  std::mt19937 rng(GetParam());
  auto blk = zero_block<block_q6_K>();
  blk.d = random_pow2_f16(rng, true);
  for (auto& s : blk.scales) s = int8_t(rnd(rng, -128, 127));
  int q[QK_K];
  for (int h = 0; h < 2; ++h)
    for (int quarter = 0; quarter < 4; ++quarter)
      for (int l = 0; l < 32; ++l) {
        const int i = 128 * h + 32 * quarter + l;
        q[i] = rnd(rng, -32, 31);
        const int u = q[i] + 32;
        blk.ql[64 * h + 32 * (quarter % 2) + l] |= uint8_t((u & 15) << (4 * (quarter / 2)));
        blk.qh[32 * h + l] |= uint8_t((u >> 4) << (2 * quarter));
      }
  const auto y = decode(DType::Q6_K, blk);
  const float d = fp16_to_f32(blk.d);
  for (int i = 0; i < QK_K; ++i) ASSERT_EQ(y[i], d * blk.scales[i / 16] * q[i]) << i;
}

TEST_P(QuantsKPacked, Q8K) {
  std::mt19937 rng(GetParam());
  auto blk = zero_block<block_q8_K>();
  blk.d = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
  for (auto& v : blk.qs) v = int8_t(rnd(rng, -128, 127));
  const auto y = decode(DType::Q8_K, blk);
  for (int i = 0; i < QK_K; ++i) ASSERT_EQ(y[i], blk.d * float(blk.qs[i])) << i;
}

INSTANTIATE_TEST_SUITE_P(Seeds, QuantsKPacked, ::testing::Values(1u, 2u, 3u, 17u, 99u));

// ---------------------------------------------------------------------------------------------
// 3. Round trips through kvrun's quantizers
// ---------------------------------------------------------------------------------------------

struct Bounds {
  DType type;
  double normal;    ///< NRMSE bound, N(0, 1) data
  double outliers;  ///< N(0, 1) with 1% of values ×12
  double offset;    ///< N(3, 1) data
};

// Bounds: about 1.1-1.2x the worst value measured over the seeds below for normal and mean-3
// data, about 1.25x for the (more variable) outlier data. Measured (g++/libstdc++), worst seed:
//          normal   outliers  mean 3
//   q2_K   0.2694   0.2876    0.0853
//   q3_K   0.1444   0.1913    0.0940
//   q4_K   0.0719   0.0991    0.0228
//   q5_K   0.0365   0.0503    0.0116
//   q6_K   0.0171   0.0317    0.0117
//   q8_K   0.0071   0.0324    0.0043
// (q8_K has one scale per 256 values, so outliers cost it more than q6_K's per-16 scales.)
constexpr Bounds kBounds[] = {
    {DType::Q2_K, 0.30, 0.36, 0.10},    {DType::Q3_K, 0.16, 0.24, 0.11},
    {DType::Q4_K, 0.080, 0.125, 0.027}, {DType::Q5_K, 0.041, 0.063, 0.014},
    {DType::Q6_K, 0.019, 0.040, 0.014}, {DType::Q8_K, 0.0080, 0.041, 0.0050},
};

constexpr uint32_t kSeeds[] = {11, 12, 13, 14, 15};
constexpr int kSuperBlocks = 16;

std::vector<float> normal_data(uint32_t seed, float mean) {
  auto x = test::random_floats(size_t(kSuperBlocks) * QK_K, seed);
  for (auto& v : x) v += mean;
  return x;
}

std::vector<float> outlier_data(uint32_t seed) {
  auto x = test::random_floats(size_t(kSuperBlocks) * QK_K, seed);
  std::mt19937 rng(seed * 7919u);
  for (size_t k = 0; k < x.size() / 100; ++k) x[rng() % x.size()] *= 12.0f;
  return x;
}

/// Worst NRMSE over the seeds for data from `make(seed)`; prints the range.
template <typename Make>
double worst_nrmse(DType t, const char* what, Make make) {
  double worst = 0.0, best = 1e30;
  for (uint32_t seed : kSeeds) {
    const auto x = make(seed);
    const auto y = round_trip(t, x);
    for (float v : y) EXPECT_TRUE(std::isfinite(v));
    const double e = nrmse(x, y);
    worst = std::max(worst, e);
    best = std::min(best, e);
  }
  std::printf("[ measured ] %-5s %-9s NRMSE %.5f .. %.5f\n", traits(t).name, what, best, worst);
  return worst;
}

TEST(QuantsKRoundTrip, NormalData) {
  for (const auto& b : kBounds) {
    const double e = worst_nrmse(b.type, "normal", [](uint32_t s) { return normal_data(s, 0); });
    EXPECT_LT(e, b.normal) << traits(b.type).name;
    EXPECT_GT(e, 0.0) << traits(b.type).name;  // lossy formats: exact output would be a bug
  }
}

TEST(QuantsKRoundTrip, Outliers) {
  for (const auto& b : kBounds) {
    const double e = worst_nrmse(b.type, "outliers", outlier_data);
    EXPECT_LT(e, b.outliers) << traits(b.type).name;
  }
}

TEST(QuantsKRoundTrip, NonZeroMean) {
  for (const auto& b : kBounds) {
    const double e = worst_nrmse(b.type, "mean 3", [](uint32_t s) { return normal_data(s, 3); });
    EXPECT_LT(e, b.offset) << traits(b.type).name;
  }
}

TEST(QuantsKRoundTrip, ScaleInvariance) {
  // The error relative to the data's size must not depend on its magnitude (within f16 range).
  for (const auto& b : kBounds) {
    for (float scale : {1e-3f, 50.0f}) {
      auto x = normal_data(21, 0);
      for (auto& v : x) v *= scale;
      EXPECT_LT(nrmse(x, round_trip(b.type, x)), b.normal) << traits(b.type).name << " ×" << scale;
    }
  }
}

TEST(QuantsKRoundTrip, ZeroRegionsDecodeToZero) {
  // A zero sub-block and a zero super-block inside random data: exact zeros, no NaN.
  for (const auto& b : kBounds) {
    auto x = normal_data(31, 0.5f);
    for (int i = 32; i < 64; ++i) x[i] = 0.0f;              // one 32-value sub-block
    for (int i = 2 * QK_K; i < 3 * QK_K; ++i) x[i] = 0.0f;  // all of super-block 2
    const auto y = round_trip(b.type, x);
    for (int i = 32; i < 64; ++i) ASSERT_EQ(y[i], 0.0f) << traits(b.type).name << " " << i;
    for (int i = 2 * QK_K; i < 3 * QK_K; ++i) ASSERT_EQ(y[i], 0.0f) << traits(b.type).name;
    for (float v : y) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(nrmse(x, y), b.outliers) << traits(b.type).name;
  }
}

TEST(QuantsKRoundTrip, ExactlyRepresentableQ8K) {
  // Integers -127..127 times a power of two survive q8_K exactly.
  std::mt19937 rng(5);
  std::vector<float> x(2 * QK_K);
  for (auto& v : x) v = 0.125f * float(rnd(rng, -126, 126));
  x[7] = 0.125f * 127;
  x[QK_K + 3] = -0.125f * 127;
  const auto y = round_trip(DType::Q8_K, x);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], 1e-6f) << i;
}

// ---------------------------------------------------------------------------------------------
// 4. q8_K block contents
// ---------------------------------------------------------------------------------------------

TEST(QuantsKQ8K, BsumsAndScale) {
  for (uint32_t seed : kSeeds) {
    const auto x = normal_data(seed, 0.25f);
    std::vector<block_q8_K> blocks(kSuperBlocks);
    quantize_row_q8_K(x.data(), blocks.data(), int64_t(x.size()));
    for (int b = 0; b < kSuperBlocks; ++b) {
      float amax = 0.0f;
      for (int i = 0; i < QK_K; ++i) amax = std::max(amax, std::fabs(x[b * QK_K + i]));
      EXPECT_FLOAT_EQ(blocks[b].d, amax / 127.0f);
      int qmax = 0;
      for (int s = 0; s < QK_K / 16; ++s) {
        int sum = 0;
        for (int l = 0; l < 16; ++l) {
          sum += blocks[b].qs[16 * s + l];
          qmax = std::max(qmax, std::abs(int(blocks[b].qs[16 * s + l])));
        }
        ASSERT_EQ(blocks[b].bsums[s], sum) << "block " << b << " group " << s;
      }
      EXPECT_EQ(qmax, 127);  // the absmax element lands on ±127
    }
  }
}

// ---------------------------------------------------------------------------------------------
// 5. Real llama.cpp-made K-quant tensors
// ---------------------------------------------------------------------------------------------

/// Per-type statistics over the K-quant tensors of one file.
struct RealStats {
  int tensors = 0;
  double err_file = 0.0;   ///< Σ(x − decoded llama.cpp block)²
  double err_kvrun = 0.0;  ///< Σ(x − decoded kvrun block of the same type)²
  double sum_sq = 0.0;     ///< Σx²
  int zero_sub_blocks = 0;
  int nonzero_in_zero_sub_blocks = 0;
  double nrmse_file() const { return std::sqrt(err_file / sum_sq); }
  double nrmse_kvrun() const { return std::sqrt(err_kvrun / sum_sq); }
};

/// Adds one tensor: `x` is the F32 reference, `y` the decoded file tensor, `type` its type.
void accumulate(DType type, const std::vector<float>& x, const std::vector<float>& y,
                RealStats* st) {
  const auto z = round_trip(type, x);  // kvrun's own quantizer on the same weights
  for (size_t i = 0; i < x.size(); ++i) {
    st->err_file += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    st->err_kvrun += (double(x[i]) - z[i]) * (double(x[i]) - z[i]);
    st->sum_sq += double(x[i]) * x[i];
  }
  // Sub-blocks that are all zero in F32 (the pad family has many) must decode to exact zeros:
  // their scale codes are 0, so any nonzero output would mean misplaced bits.
  const size_t sub = (type == DType::Q4_K || type == DType::Q5_K) ? 32 : 16;
  for (size_t s = 0; s < x.size(); s += sub) {
    bool zero = true;
    for (size_t l = 0; l < sub; ++l) zero = zero && x[s + l] == 0.0f;
    if (!zero) continue;
    ++st->zero_sub_blocks;
    for (size_t l = 0; l < sub; ++l) st->nonzero_in_zero_sub_blocks += y[s + l] != 0.0f;
  }
  ++st->tensors;
}

/// Decodes every K-quant tensor of `quant_file`, compares it with the same tensor of
/// stories260K-pad-F32 and re-quantizes that F32 tensor with kvrun's quantizer. Per type name.
std::map<std::string, RealStats> compare_with_f32(const std::string& quant_file) {
  const auto qf = gguf::File::open(test::fixture(quant_file).string());
  const auto ff = gguf::File::open(test::fixture("models/stories260K-pad-F32.gguf").string());
  std::map<std::string, RealStats> stats;
  for (const auto& ti : qf.tensors()) {
    if (ti.type < DType::Q2_K || ti.type > DType::Q8_K) continue;
    const gguf::TensorInfo* ref = ff.find_tensor(ti.name);
    EXPECT_NE(ref, nullptr) << ti.name;
    if (!ref) continue;
    EXPECT_EQ(ref->type, DType::F32) << ti.name;
    int64_t n = 1;
    for (int k = 0; k < ti.n_dims; ++k) {
      EXPECT_EQ(ti.ne[k], ref->ne[k]) << ti.name;
      n *= ti.ne[k];
    }
    std::vector<float> y(static_cast<size_t>(n));
    traits(ti.type).to_float(ti.data, y.data(), n);
    const float* xp = static_cast<const float*>(ref->data);
    accumulate(ti.type, std::vector<float>(xp, xp + n), y, &stats[traits(ti.type).name]);
  }
  for (const auto& [name, st] : stats) {
    std::printf(
        "[ measured ] %s: %s over %d tensors: NRMSE vs F32 %.5f (kvrun's quantizer on the same "
        "weights %.5f); %d all-zero sub-blocks\n",
        quant_file.c_str(), name.c_str(), st.tensors, st.nrmse_file(), st.nrmse_kvrun(),
        st.zero_sub_blocks);
    EXPECT_EQ(st.nonzero_in_zero_sub_blocks, 0) << quant_file << " " << name;
  }
  return stats;
}

/// Checks one type of one file: llama.cpp's blocks decode within `bound` (NRMSE vs F32), and
/// kvrun's quantizer is no more than 10% worse than llama.cpp's on the same weights.
void check_type(const std::map<std::string, RealStats>& stats, const char* type, double bound) {
  ASSERT_TRUE(stats.count(type)) << "no " << type << " tensors";
  const RealStats& st = stats.at(type);
  EXPECT_GT(st.tensors, 0);
  EXPECT_LT(st.nrmse_file(), bound) << type;
  EXPECT_LT(st.nrmse_kvrun(), 1.10 * st.nrmse_file()) << type;
}

// Bounds for llama.cpp's own quantizations of stories260K (NRMSE over all tensors of a type;
// measured 0.0696 / 0.0367 / 0.0172-0.0178): q4_K < 0.08, q5_K < 0.042, q6_K < 0.02. A wrong
// layout gives ~1 or more.
TEST(QuantsKRealFiles, Q6K) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-Q6_K.gguf");
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-F32.gguf");
  const auto stats = compare_with_f32("models/stories260K-pad-Q6_K.gguf");
  check_type(stats, "q6_K", 0.02);
  EXPECT_EQ(stats.at("q6_K").tensors, 10);  // 5 × attn_output + 5 × ffn_down
}

TEST(QuantsKRealFiles, Q4KM) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-Q4_K_M.gguf");
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-F32.gguf");
  const auto stats = compare_with_f32("models/stories260K-pad-Q4_K_M.gguf");
  check_type(stats, "q4_K", 0.08);
  check_type(stats, "q6_K", 0.02);
}

TEST(QuantsKRealFiles, Q5KM) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-Q5_K_M.gguf");
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-F32.gguf");
  const auto stats = compare_with_f32("models/stories260K-pad-Q5_K_M.gguf");
  check_type(stats, "q5_K", 0.042);
  check_type(stats, "q6_K", 0.02);
}

}  // namespace
}  // namespace kvrun
