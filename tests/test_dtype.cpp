// test_dtype.cpp — consistency of the one traits table (dtype.h / dtype.cpp).
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <iterator>
#include <limits>
#include <set>
#include <string>

#include "blocks.h"
#include "dtype.h"

namespace kvrun {
namespace {

/// What the table must say about a type, written out here independently: GGUF type id and name
/// (GGUF spec / ggml's type numbering), elements and bytes per block (sizeof the block struct).
struct Expected {
  DType type;
  uint32_t id;
  const char* name;
  int elems;
  size_t bytes;
  bool integer;              ///< plain integer type: no codecs
  bool decode_only = false;  ///< grid i-quant: a decoder but no kvrun quantizer (quants.h)
};

const Expected kExpected[] = {
    {DType::F32, 0, "f32", 1, sizeof(float), false},
    {DType::F16, 1, "f16", 1, sizeof(uint16_t), false},
    {DType::Q4_0, 2, "q4_0", 32, sizeof(block_q4_0), false},
    {DType::Q4_1, 3, "q4_1", 32, sizeof(block_q4_1), false},
    {DType::Q5_0, 6, "q5_0", 32, sizeof(block_q5_0), false},
    {DType::Q5_1, 7, "q5_1", 32, sizeof(block_q5_1), false},
    {DType::Q8_0, 8, "q8_0", 32, sizeof(block_q8_0), false},
    {DType::Q8_1, 9, "q8_1", 32, sizeof(block_q8_1), false},
    {DType::Q2_K, 10, "q2_K", 256, sizeof(block_q2_K), false},
    {DType::Q3_K, 11, "q3_K", 256, sizeof(block_q3_K), false},
    {DType::Q4_K, 12, "q4_K", 256, sizeof(block_q4_K), false},
    {DType::Q5_K, 13, "q5_K", 256, sizeof(block_q5_K), false},
    {DType::Q6_K, 14, "q6_K", 256, sizeof(block_q6_K), false},
    {DType::Q8_K, 15, "q8_K", 256, sizeof(block_q8_K), false},
    {DType::IQ4_NL, 20, "iq4_nl", 32, sizeof(block_iq4_nl), false},
    {DType::IQ4_XS, 23, "iq4_xs", 256, 136, false},  // f16 d, u16 scales_h, 4 scales_l, 128 qs
    {DType::MXFP4, 39, "mxfp4", 32, 17, false},      // E8M0 byte, 16 bytes of E2M1 pairs
    // ggml-common.h sizes: f16 d + 64 qs + 8 qh + 32 signs + 4 scales; f16 d + 64 + 8 + 8.
    {DType::IQ3_S, 21, "iq3_s", 256, 110, false, true},
    {DType::IQ2_S, 22, "iq2_s", 256, 82, false, true},
    // f16 d + 64 index bytes + 32 bytes of sign codes and scales; f16 d + 32 uint16; + 8 scales.
    {DType::IQ3_XXS, 18, "iq3_xxs", 256, 98, false, true},
    {DType::IQ2_XXS, 16, "iq2_xxs", 256, 66, false, true},
    {DType::IQ2_XS, 17, "iq2_xs", 256, 74, false, true},
    // f16 d + 32 index bytes + 8 uint16 (3 index bits ×4, scale, shift sign); iq1_m: no d field
    // (its nibbles are in the 8 scale bytes), 32 + 16 + 8.
    {DType::IQ1_S, 19, "iq1_s", 256, 50, false, true},
    {DType::IQ1_M, 29, "iq1_m", 256, 56, false, true},
    {DType::I8, 24, "i8", 1, sizeof(int8_t), true},
    {DType::I16, 25, "i16", 1, sizeof(int16_t), true},
    {DType::I32, 26, "i32", 1, sizeof(int32_t), true},
    {DType::I64, 27, "i64", 1, sizeof(int64_t), true},
    {DType::F64, 28, "f64", 1, sizeof(double), false},
    {DType::BF16, 30, "bf16", 1, sizeof(uint16_t), false},
    {DType::FP8_E4M3, 0x100, "fp8_e4m3", 1, 1, false},
    {DType::FP8_E5M2, 0x101, "fp8_e5m2", 1, 1, false},
    {DType::NVFP4, 0x102, "nvfp4", 16, sizeof(block_nvfp4), false},
};

TEST(DType, TableMatchesTheIndependentList) {
  size_t n = 0;
  const DType* all = all_dtypes(&n);
  ASSERT_EQ(n, std::size(kExpected));
  std::set<uint32_t> seen;
  for (size_t i = 0; i < n; ++i) EXPECT_TRUE(seen.insert(uint32_t(all[i])).second) << i;
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.name);
    EXPECT_EQ(seen.count(e.id), 1u);
    const DTypeTraits& tr = traits(e.type);
    EXPECT_EQ(tr.type, e.type);
    EXPECT_EQ(uint32_t(tr.type), e.id);
    EXPECT_STREQ(tr.name, e.name);
    EXPECT_EQ(tr.block_elems, e.elems);
    EXPECT_EQ(size_t(tr.block_bytes), e.bytes);
    EXPECT_EQ(tr.gguf, e.id < 0x100);
    EXPECT_EQ(tr.quantized, e.elems > 1 || e.id >= 0x100);
    if (e.integer) {
      EXPECT_EQ(tr.to_float, nullptr);
      EXPECT_EQ(tr.from_float, nullptr);
    } else if (e.decode_only) {
      EXPECT_NE(tr.to_float, nullptr);
      EXPECT_EQ(tr.from_float, nullptr);
    } else {
      EXPECT_NE(tr.to_float, nullptr);
      EXPECT_NE(tr.from_float, nullptr);
    }
  }
}

TEST(DType, NamesRoundTripCaseInsensitively) {
  for (const Expected& e : kExpected) {
    EXPECT_EQ(dtype_from_name(e.name), e.type) << e.name;
    std::string upper = e.name;
    for (char& ch : upper) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    EXPECT_EQ(dtype_from_name(upper), e.type) << upper;
  }
  for (const char* bad : {"", "q4_2", "f32 ", "fp8", "q4", "nvfp4x", "Q4_K_M"})
    EXPECT_EQ(dtype_from_name(bad), std::nullopt) << "'" << bad << "'";
}

TEST(DType, GgufIdsAcceptedAndRejected) {
  for (const Expected& e : kExpected) {
    if (e.id < 0x100)
      EXPECT_EQ(dtype_from_gguf_id(e.id), e.type) << e.name;
    else
      EXPECT_EQ(dtype_from_gguf_id(e.id), std::nullopt) << e.name;  // KV-only formats
  }
  // Ids GGUF removed (4, 5: q4_2/q4_3), ones kvrun does not implement, and garbage.
  for (const uint32_t id :
       {4u, 5u, 31u, 40u, 99u, 0x100u, 0x101u, 0x102u, 0x103u, 0xFFFFu, 0xFFFFFFFFu})
    EXPECT_EQ(dtype_from_gguf_id(id), std::nullopt) << id;
}

TEST(DType, RowBytes) {
  EXPECT_EQ(row_bytes(DType::F32, 10), 40);
  EXPECT_EQ(row_bytes(DType::F32, 0), 0);
  EXPECT_EQ(row_bytes(DType::Q4_0, 64), 36);
  EXPECT_EQ(row_bytes(DType::Q4_K, 512), 288);
  EXPECT_EQ(row_bytes(DType::NVFP4, 32), 18);
  EXPECT_EQ(row_bytes(DType::Q4_0, 33), std::nullopt);  // not a whole number of blocks
  EXPECT_EQ(row_bytes(DType::NVFP4, 8), std::nullopt);
  EXPECT_EQ(row_bytes(DType::F32, -4), std::nullopt);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(row_bytes(DType::F32, kMax / 4), kMax / 4 * 4);
  EXPECT_EQ(row_bytes(DType::F32, kMax / 4 + 1), std::nullopt);  // overflow
  EXPECT_EQ(row_bytes(DType::F64, kMax / 2), std::nullopt);
  EXPECT_EQ(row_bytes(DType::Q8_0, kMax / 32 * 32), std::nullopt);  // 34 bytes per 32
  for (const Expected& e : kExpected) {
    const int64_t blocks = kMax / int64_t(e.bytes);
    if (blocks > kMax / e.elems) continue;  // element count itself not representable
    EXPECT_EQ(row_bytes(e.type, blocks * e.elems), blocks * int64_t(e.bytes)) << e.name;
    if ((blocks + 1) <= kMax / e.elems) {
      EXPECT_EQ(row_bytes(e.type, (blocks + 1) * e.elems), std::nullopt) << e.name;
    }
  }
}

}  // namespace
}  // namespace kvrun
