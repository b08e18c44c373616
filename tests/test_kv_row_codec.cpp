// test_kv_row_codec.cpp — kv_encode_row / kv_decode_row (ggml-like/kv_layout.h) and the
// per-head decoder of the paged attention kernels (backends/cpu/kv_row_ops.h): round-trip error
// per type, exact byte size (every byte of the row written, nothing past it), zero padding,
// where the scales sit, and the shapes (n_head_kv, head_dim) the KV cache meets, head_dim 8
// included for every type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "blocks.h"
#include "cpu/kv_row_ops.h"
#include "cpu/vec_dot.h"
#include "fp16.h"
#include "kv_layout.h"
#include "quants.h"
#include "quants_kv.h"
#include "test_util.h"

namespace kvrun {
namespace {

struct Shape {
  int64_t n_head_kv, head_dim;
};
constexpr Shape kShapes[] = {{4, 8}, {3, 8}, {2, 24}, {8, 128}, {1, 64}};

/// Bound on the relative RMSE ‖x − x̂‖ / ‖x‖ of row round trips over N(0, 1) data: the bounds
/// of the block codecs in docs/formats.md, a little wider for the small rows here; measured
/// values are printed by RoundTripErrorPerType.
double bound(DType t) {
  switch (t) {
    case DType::F32:
      return 0.0;
    case DType::F16:
      return 5e-4;
    case DType::BF16:
      return 4e-3;
    case DType::Q8_0:
      return 0.008;
    case DType::Q4_0:
      return 0.12;
    case DType::FP8_E4M3:
      return 0.036;
    case DType::FP8_E5M2:
      return 0.072;
    default:  // NVFP4
      return 0.13;
  }
}

/// `rows` rows of n_head_kv × head_dim N(0, 1) values; with `vary_heads`, head h of every row
/// is scaled by 10^((h % 3) − 1) (sd 0.1, 1, 10).
std::vector<float> make_rows(const Shape& s, int64_t rows, uint32_t seed, bool vary_heads = false) {
  std::vector<float> x = test::random_floats(size_t(rows * s.n_head_kv * s.head_dim), seed);
  if (!vary_heads) return x;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < s.n_head_kv; ++h)
      for (int64_t i = 0; i < s.head_dim; ++i)
        x[size_t((r * s.n_head_kv + h) * s.head_dim + i)] *= std::pow(10.0f, float(h % 3) - 1.0f);
  return x;
}

/// Relative RMSE per head over `rows` round trips of rows made by make_rows.
std::vector<double> head_errors(DType t, const Shape& s, int64_t rows, bool vary_heads) {
  const int64_t n = s.n_head_kv * s.head_dim;
  const std::vector<float> x = make_rows(s, rows, 7 + uint32_t(n), vary_heads);
  std::vector<uint8_t> enc(static_cast<size_t>(kv_row_bytes(t, s.n_head_kv, s.head_dim)));
  std::vector<float> y(static_cast<size_t>(n));
  std::vector<double> err(size_t(s.n_head_kv)), ref(size_t(s.n_head_kv));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * n;
    kv_encode_row(t, s.n_head_kv, s.head_dim, xr, enc.data());
    kv_decode_row(t, s.n_head_kv, s.head_dim, enc.data(), y.data());
    for (int64_t i = 0; i < n; ++i) {
      err[size_t(i / s.head_dim)] += std::pow(double(xr[i]) - y[size_t(i)], 2);
      ref[size_t(i / s.head_dim)] += std::pow(double(xr[i]), 2);
    }
  }
  for (int64_t h = 0; h < s.n_head_kv; ++h)
    err[size_t(h)] = std::sqrt(err[size_t(h)] / ref[size_t(h)]);
  return err;
}

TEST(KvRowCodec, RoundTripErrorPerType) {
  for (DType t : kKvCacheTypes) {
    double worst = 0;
    for (const Shape& s : kShapes) {
      const int64_t rows = std::max<int64_t>(16, 8192 / (s.n_head_kv * s.head_dim));
      for (double e : head_errors(t, s, rows, false)) {
        worst = std::max(worst, e);
        EXPECT_LE(e, bound(t)) << kv_type_name(t) << " (" << s.n_head_kv << ", " << s.head_dim
                               << ")";
      }
    }
    std::printf("  %-9s worst per-head rel. RMSE %.3g (bound %.3g)\n", kv_type_name(t), worst,
                bound(t));
  }
}

// fp8 keeps one scale per head: heads of very different magnitude (sd 0.1, 1, 10) each keep
// the format's relative precision. (Block types share a block, and nvfp4 a 16-value block,
// between heads when head_dim < 32 or 16, so there a small head next to a large one loses
// precision: a property of those formats, not checked here.)
TEST(KvRowCodec, Fp8ScalesPerHead) {
  for (DType t : {DType::FP8_E4M3, DType::FP8_E5M2})
    for (const Shape& s : kShapes)
      for (double e : head_errors(t, s, 64, true)) EXPECT_LE(e, bound(t)) << kv_type_name(t);
}

TEST(KvRowCodec, WritesExactlyRowBytes) {
  for (DType t : kKvCacheTypes)
    for (const Shape& s : kShapes) {
      const int64_t n = s.n_head_kv * s.head_dim;
      const int64_t bytes = kv_row_bytes(t, s.n_head_kv, s.head_dim);
      const std::vector<float> x = make_rows(s, 1, 3);
      // Two buffers prefilled differently: equal afterwards means every byte of the row was
      // written; the guard bytes past it stay untouched.
      std::vector<uint8_t> a(static_cast<size_t>(bytes + 16), 0x00),
          b(static_cast<size_t>(bytes + 16), 0xA5);
      kv_encode_row(t, s.n_head_kv, s.head_dim, x.data(), a.data());
      kv_encode_row(t, s.n_head_kv, s.head_dim, x.data(), b.data());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), size_t(bytes))) << kv_type_name(t) << " " << n;
      for (int64_t i = bytes; i < bytes + 16; ++i) {
        EXPECT_EQ(a[size_t(i)], 0x00);
        EXPECT_EQ(b[size_t(i)], 0xA5);
      }
    }
}

TEST(KvRowCodec, PlainTypesAreTheValues) {
  const Shape s{3, 8};
  const std::vector<float> x = make_rows(s, 1, 11);
  std::vector<float> f(24), y(24);
  kv_encode_row(DType::F32, 3, 8, x.data(), f.data());
  EXPECT_EQ(0, std::memcmp(f.data(), x.data(), 24 * 4));
  std::vector<uint16_t> h(24);
  kv_encode_row(DType::F16, 3, 8, x.data(), h.data());
  for (int i = 0; i < 24; ++i) EXPECT_EQ(h[size_t(i)], f32_to_fp16(x[size_t(i)]));
  kv_encode_row(DType::BF16, 3, 8, x.data(), h.data());
  for (int i = 0; i < 24; ++i) EXPECT_EQ(h[size_t(i)], f32_to_bf16(x[size_t(i)]));
}

// q8_0 rows are quantized as llama.cpp writes its q8_0 cache: the CPU backend's activation
// quantizer (act_from_float_q8_0 reproduces it) gives the same bytes.
TEST(KvRowCodec, Q8_0MatchesLlamaCppCacheQuantizer) {
  const std::vector<float> x = make_rows({8, 128}, 1, 5);
  std::vector<uint8_t> a(static_cast<size_t>(kv_row_bytes(DType::Q8_0, 8, 128))), b(a.size());
  kv_encode_row(DType::Q8_0, 8, 128, x.data(), a.data());
  cpu::act_from_float_q8_0(x.data(), b.data(), 1024);
  EXPECT_EQ(a, b);
}

// Rows of a length that is not a multiple of the block (group) size: the padding decodes to
// exact zeros and the real values survive.
TEST(KvRowCodec, PaddingIsZero) {
  for (const Shape& s : {Shape{3, 8}, Shape{2, 24}, Shape{1, 8}}) {
    const int64_t n = s.n_head_kv * s.head_dim;
    const std::vector<float> x = make_rows(s, 1, 13);
    for (DType t : {DType::Q8_0, DType::Q4_0}) {
      const int64_t nb = (n + 31) / 32;
      std::vector<uint8_t> enc(static_cast<size_t>(kv_row_bytes(t, s.n_head_kv, s.head_dim)));
      kv_encode_row(t, s.n_head_kv, s.head_dim, x.data(), enc.data());
      std::vector<float> all(static_cast<size_t>(nb * 32));
      if (t == DType::Q8_0)
        dequantize_row_q8_0(enc.data(), all.data(), nb * 32);
      else
        dequantize_row_q4_0(enc.data(), all.data(), nb * 32);
      for (int64_t i = n; i < nb * 32; ++i) EXPECT_EQ(all[size_t(i)], 0.0f) << i;
    }
    // nvfp4: group g = lcm(head_dim, 16); decode the whole last group.
    const int64_t g = std::lcm(s.head_dim, int64_t(16)), groups = (n + g - 1) / g;
    std::vector<uint8_t> enc(
        static_cast<size_t>(kv_row_bytes(DType::NVFP4, s.n_head_kv, s.head_dim)));
    kv_encode_row(DType::NVFP4, s.n_head_kv, s.head_dim, x.data(), enc.data());
    const auto* blocks = reinterpret_cast<const block_nvfp4*>(enc.data());
    float s2;
    std::memcpy(&s2, enc.data() + groups * (g / 16) * 9 + (groups - 1) * 4, 4);
    std::vector<float> last(static_cast<size_t>(g));
    dequantize_row_nvfp4_scaled(blocks + (groups - 1) * (g / 16), s2, last.data(), g);
    for (int64_t i = n - (groups - 1) * g; i < g; ++i) EXPECT_EQ(last[size_t(i)], 0.0f) << i;
  }
}

// fp8: n codes, then one E8M0 byte per head, as quantize_row_fp8_scaled gives per head.
// nvfp4: the blocks of each group, then one little-endian FP32 s2 per group.
TEST(KvRowCodec, ScalesFollowTheValues) {
  for (const Shape& s : kShapes) {
    const int64_t n = s.n_head_kv * s.head_dim;
    const std::vector<float> x = make_rows(s, 1, 17);
    for (DType t : {DType::FP8_E4M3, DType::FP8_E5M2}) {
      std::vector<uint8_t> enc(static_cast<size_t>(n + s.n_head_kv)),
          q(static_cast<size_t>(s.head_dim));
      kv_encode_row(t, s.n_head_kv, s.head_dim, x.data(), enc.data());
      for (int64_t h = 0; h < s.n_head_kv; ++h) {
        const uint8_t b =
            quantize_row_fp8_scaled(t, x.data() + h * s.head_dim, q.data(), s.head_dim);
        EXPECT_EQ(enc[size_t(n + h)], b);
        EXPECT_EQ(0, std::memcmp(enc.data() + h * s.head_dim, q.data(), size_t(s.head_dim)));
      }
    }
    const int64_t g = std::lcm(s.head_dim, int64_t(16)), groups = (n + g - 1) / g;
    std::vector<uint8_t> enc(
        static_cast<size_t>(kv_row_bytes(DType::NVFP4, s.n_head_kv, s.head_dim)));
    kv_encode_row(DType::NVFP4, s.n_head_kv, s.head_dim, x.data(), enc.data());
    for (int64_t gi = 0; gi * g < n; ++gi) {
      std::vector<float> src(static_cast<size_t>(g), 0.0f);
      std::copy_n(x.data() + gi * g, std::min(g, n - gi * g), src.begin());
      std::vector<block_nvfp4> blocks(static_cast<size_t>(g / 16));
      const float s2 = quantize_row_nvfp4_scaled(src.data(), blocks.data(), g);
      const uint8_t* le = enc.data() + groups * (g / 16) * 9 + gi * 4;
      const uint32_t bits =
          uint32_t(le[0]) | uint32_t(le[1]) << 8 | uint32_t(le[2]) << 16 | uint32_t(le[3]) << 24;
      EXPECT_EQ(bits, f32_bits(s2));
      EXPECT_EQ(0, std::memcmp(enc.data() + gi * (g / 16) * 9, blocks.data(), size_t(g / 16 * 9)));
    }
  }
}

// The attention kernels decode one head at a time; it must agree with the row decoder.
TEST(KvRowCodec, DecodeHeadMatchesDecodeRow) {
  for (DType t : kKvCacheTypes)
    for (const Shape& s : kShapes) {
      const std::vector<float> x = make_rows(s, 1, 19);
      std::vector<uint8_t> enc(static_cast<size_t>(kv_row_bytes(t, s.n_head_kv, s.head_dim)));
      kv_encode_row(t, s.n_head_kv, s.head_dim, x.data(), enc.data());
      std::vector<float> row(static_cast<size_t>(s.n_head_kv * s.head_dim)),
          head(static_cast<size_t>(s.head_dim));
      kv_decode_row(t, s.n_head_kv, s.head_dim, enc.data(), row.data());
      for (int64_t h = 0; h < s.n_head_kv; ++h) {
        cpu::kv_decode_head(t, s.n_head_kv, s.head_dim, enc.data(), h, head.data());
        EXPECT_EQ(0, std::memcmp(head.data(), row.data() + h * s.head_dim, size_t(s.head_dim) * 4))
            << kv_type_name(t) << " (" << s.n_head_kv << ", " << s.head_dim << ") head " << h;
      }
    }
}

TEST(KvRowCodec, ZeroRowDecodesToZero) {
  for (DType t : kKvCacheTypes) {
    std::vector<float> x(64, 0.0f), y(64, 1.0f);
    std::vector<uint8_t> enc(static_cast<size_t>(kv_row_bytes(t, 8, 8)));
    kv_encode_row(t, 8, 8, x.data(), enc.data());
    kv_decode_row(t, 8, 8, enc.data(), y.data());
    for (float v : y) EXPECT_EQ(v, 0.0f) << kv_type_name(t);
  }
}

TEST(KvRowCodec, RejectsNonKvTypesAndBadShapes) {
  float x[32] = {};
  uint8_t buf[256];
  EXPECT_THROW(kv_encode_row(DType::Q4_K, 1, 32, x, buf), std::invalid_argument);
  EXPECT_THROW(kv_decode_row(DType::Q5_0, 1, 32, buf, x), std::invalid_argument);
  EXPECT_THROW(kv_encode_row(DType::F16, 0, 32, x, buf), std::invalid_argument);
}

}  // namespace
}  // namespace kvrun
