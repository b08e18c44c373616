// test_kv_layout.cpp — the KV memory math (kv_layout.h) that `kvrun info` prints and the KV
// pool will allocate.
#include <gtest/gtest.h>

#include <numeric>

#include "blocks.h"
#include "kv_layout.h"

namespace kvrun {
namespace {

TEST(KvLayout, PlainTypesAreElementBytesTimesValues) {
  EXPECT_EQ(kv_row_bytes(DType::F32, 8, 128), 8 * 128 * 4);
  EXPECT_EQ(kv_row_bytes(DType::F16, 8, 128), 8 * 128 * 2);
  EXPECT_EQ(kv_row_bytes(DType::BF16, 4, 8), 4 * 8 * 2);
}

TEST(KvLayout, BlockTypesCountWholeBlocksWithScales) {
  // head_dim 128: 4 blocks of 32 per head.
  EXPECT_EQ(kv_row_bytes(DType::Q8_0, 8, 128), 8 * 4 * 34);
  EXPECT_EQ(kv_row_bytes(DType::Q4_0, 8, 128), 8 * 4 * 18);
  // head_dim 8 (stories260K): blocks span heads; 4 heads × 8 = one block of 32.
  EXPECT_EQ(kv_row_bytes(DType::Q8_0, 4, 8), 34);
  EXPECT_EQ(kv_row_bytes(DType::Q4_0, 4, 8), 18);
  // 3 heads × 8 = 24 values: padded up to one whole block.
  EXPECT_EQ(kv_row_bytes(DType::Q8_0, 3, 8), 34);
}

TEST(KvLayout, Fp8HasOneScaleBytePerHead) {
  EXPECT_EQ(kv_row_bytes(DType::FP8_E4M3, 8, 128), 8 * 128 + 8);
  EXPECT_EQ(kv_row_bytes(DType::FP8_E5M2, 4, 8), 4 * 8 + 4);
}

TEST(KvLayout, Nvfp4HasBlockScalesAndOneF32PerScaleGroup) {
  // head_dim 128: per head 8 blocks of 9 bytes + a 4-byte second-level scale.
  EXPECT_EQ(kv_row_bytes(DType::NVFP4, 8, 128), 8 * (8 * 9 + 4));
  // head_dim 8: scale groups of lcm(8, 16) = 16 values (two heads), one block each.
  EXPECT_EQ(kv_row_bytes(DType::NVFP4, 4, 8), 2 * (9 + 4));
  // head_dim 24: groups of lcm(24, 16) = 48 values = 3 blocks; 2 heads = one group.
  EXPECT_EQ(kv_row_bytes(DType::NVFP4, 2, 24), 3 * 9 + 4);
}

TEST(KvLayout, RejectsNonKvTypesAndBadShapes) {
  EXPECT_THROW(kv_row_bytes(DType::Q4_K, 8, 128), std::invalid_argument);
  EXPECT_THROW(kv_row_bytes(DType::F16, 0, 128), std::invalid_argument);
  EXPECT_THROW(kv_row_bytes(DType::F16, 8, -1), std::invalid_argument);
}

TEST(KvLayout, TypeNamesParseAsUsersWriteThem) {
  EXPECT_EQ(kv_type_from_name("fp8"), DType::FP8_E4M3);
  EXPECT_EQ(kv_type_from_name("fp8_e5m2"), DType::FP8_E5M2);
  EXPECT_EQ(kv_type_from_name("Q8_0"), DType::Q8_0);
  EXPECT_EQ(kv_type_from_name("nvfp4"), DType::NVFP4);
  EXPECT_EQ(kv_type_from_name("q4_K"), std::nullopt);  // a weight type, not a cache type
  EXPECT_EQ(kv_type_from_name("fp9"), std::nullopt);
  for (DType t : kKvCacheTypes) EXPECT_EQ(kv_type_from_name(kv_type_name(t)), t);
}

// Llama 3.1 70B: 80 layers, 8 KV heads, head_dim 128, 131072 tokens.
TEST(KvLayout, Llama70BAt128kTokens) {
  const int64_t n_ctx = 131072;
  const int64_t bf16 = kv_bytes_per_token(DType::BF16, DType::BF16, 80, 8, 128, 128) * n_ctx;
  EXPECT_EQ(bf16, int64_t(2) * 80 * 8 * 128 * 2 * n_ctx);
  EXPECT_NEAR(double(bf16) / 1e9, 42.9, 0.05);  // 42.9 GB (10^9 bytes)
  const int64_t fp8 = kv_bytes_per_token(DType::FP8_E4M3, DType::FP8_E4M3, 80, 8, 128, 128) * n_ctx;
  EXPECT_EQ(fp8, int64_t(2) * 80 * 8 * (128 + 1) * n_ctx);  // + one scale byte per head
  EXPECT_NEAR(double(fp8) / 21.5e9, 1.0, 0.01);             // ≈ 21.5 GB
}

TEST(KvLayout, MixedKAndVTypesAddUp) {
  EXPECT_EQ(kv_bytes_per_token(DType::Q8_0, DType::F16, 32, 8, 128, 128),
            32 * (kv_row_bytes(DType::Q8_0, 8, 128) + kv_row_bytes(DType::F16, 8, 128)));
  EXPECT_EQ(kv_bytes_per_token(DType::F16, DType::F16, 2, 4, 192, 128),
            2 * (4 * 192 * 2 + 4 * 128 * 2));
}

}  // namespace
}  // namespace kvrun
