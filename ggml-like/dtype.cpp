// dtype.cpp — the one traits table (see dtype.h).
#include "dtype.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "blocks.h"
#include "quants.h"

namespace kvrun {
namespace {

// One row per type; the order is the order `all_dtypes` reports (and `kvrun info` prints).
constexpr DTypeTraits kTraits[] = {
    // type           name        elems   bytes                 quant  gguf
    {DType::F32, "f32", 1, 4, false, true, dequantize_row_f32, quantize_row_f32},
    {DType::F16, "f16", 1, 2, false, true, dequantize_row_f16, quantize_row_f16},
    {DType::BF16, "bf16", 1, 2, false, true, dequantize_row_bf16, quantize_row_bf16},
    {DType::F64, "f64", 1, 8, false, true, dequantize_row_f64, quantize_row_f64},
    {DType::Q4_0, "q4_0", QK4_0, sizeof(block_q4_0), true, true, dequantize_row_q4_0,
     quantize_row_q4_0},
    {DType::Q4_1, "q4_1", QK4_1, sizeof(block_q4_1), true, true, dequantize_row_q4_1,
     quantize_row_q4_1},
    {DType::Q5_0, "q5_0", QK5_0, sizeof(block_q5_0), true, true, dequantize_row_q5_0,
     quantize_row_q5_0},
    {DType::Q5_1, "q5_1", QK5_1, sizeof(block_q5_1), true, true, dequantize_row_q5_1,
     quantize_row_q5_1},
    {DType::Q8_0, "q8_0", QK8_0, sizeof(block_q8_0), true, true, dequantize_row_q8_0,
     quantize_row_q8_0},
    {DType::Q8_1, "q8_1", QK8_1, sizeof(block_q8_1), true, true, dequantize_row_q8_1,
     quantize_row_q8_1},
    {DType::Q2_K, "q2_K", QK_K, sizeof(block_q2_K), true, true, dequantize_row_q2_K,
     quantize_row_q2_K},
    {DType::Q3_K, "q3_K", QK_K, sizeof(block_q3_K), true, true, dequantize_row_q3_K,
     quantize_row_q3_K},
    {DType::Q4_K, "q4_K", QK_K, sizeof(block_q4_K), true, true, dequantize_row_q4_K,
     quantize_row_q4_K},
    {DType::Q5_K, "q5_K", QK_K, sizeof(block_q5_K), true, true, dequantize_row_q5_K,
     quantize_row_q5_K},
    {DType::Q6_K, "q6_K", QK_K, sizeof(block_q6_K), true, true, dequantize_row_q6_K,
     quantize_row_q6_K},
    {DType::Q8_K, "q8_K", QK_K, sizeof(block_q8_K), true, true, dequantize_row_q8_K,
     quantize_row_q8_K},
    {DType::IQ4_NL, "iq4_nl", QK4_NL, sizeof(block_iq4_nl), true, true, dequantize_row_iq4_nl,
     quantize_row_iq4_nl},
    {DType::IQ4_XS, "iq4_xs", QK_K, sizeof(block_iq4_xs), true, true, dequantize_row_iq4_xs,
     quantize_row_iq4_xs},
    {DType::IQ3_S, "iq3_s", QK_K, sizeof(block_iq3_s), true, true, dequantize_row_iq3_s, nullptr},
    {DType::IQ2_S, "iq2_s", QK_K, sizeof(block_iq2_s), true, true, dequantize_row_iq2_s, nullptr},
    {DType::IQ3_XXS, "iq3_xxs", QK_K, sizeof(block_iq3_xxs), true, true, dequantize_row_iq3_xxs,
     nullptr},
    {DType::IQ2_XXS, "iq2_xxs", QK_K, sizeof(block_iq2_xxs), true, true, dequantize_row_iq2_xxs,
     nullptr},
    {DType::IQ2_XS, "iq2_xs", QK_K, sizeof(block_iq2_xs), true, true, dequantize_row_iq2_xs,
     nullptr},
    {DType::IQ1_S, "iq1_s", QK_K, sizeof(block_iq1_s), true, true, dequantize_row_iq1_s, nullptr},
    {DType::IQ1_M, "iq1_m", QK_K, sizeof(block_iq1_m), true, true, dequantize_row_iq1_m, nullptr},
    {DType::MXFP4, "mxfp4", QK_MXFP4, sizeof(block_mxfp4), true, true, dequantize_row_mxfp4,
     quantize_row_mxfp4},
    {DType::I8, "i8", 1, 1, false, true, nullptr, nullptr},
    {DType::I16, "i16", 1, 2, false, true, nullptr, nullptr},
    {DType::I32, "i32", 1, 4, false, true, nullptr, nullptr},
    {DType::I64, "i64", 1, 8, false, true, nullptr, nullptr},
    {DType::FP8_E4M3, "fp8_e4m3", 1, 1, true, false, dequantize_row_fp8_e4m3,
     quantize_row_fp8_e4m3},
    {DType::FP8_E5M2, "fp8_e5m2", 1, 1, true, false, dequantize_row_fp8_e5m2,
     quantize_row_fp8_e5m2},
    {DType::NVFP4, "nvfp4", QK_NVFP4, sizeof(block_nvfp4), true, false, dequantize_row_nvfp4,
     quantize_row_nvfp4},
};

constexpr size_t kNumTypes = sizeof(kTraits) / sizeof(kTraits[0]);

constexpr DType kAll[] = {
    DType::F32,      DType::F16,      DType::BF16,    DType::F64,     DType::Q4_0,   DType::Q4_1,
    DType::Q5_0,     DType::Q5_1,     DType::Q8_0,    DType::Q8_1,    DType::Q2_K,   DType::Q3_K,
    DType::Q4_K,     DType::Q5_K,     DType::Q6_K,    DType::Q8_K,    DType::IQ4_NL, DType::IQ4_XS,
    DType::IQ3_S,    DType::IQ2_S,    DType::IQ3_XXS, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ1_S,
    DType::IQ1_M,    DType::MXFP4,    DType::I8,      DType::I16,     DType::I32,    DType::I64,
    DType::FP8_E4M3, DType::FP8_E5M2, DType::NVFP4,
};
static_assert(sizeof(kAll) / sizeof(kAll[0]) == kNumTypes, "kAll must list every table row");

const DTypeTraits* find_row(DType t) {
  for (const auto& row : kTraits)
    if (row.type == t) return &row;
  return nullptr;
}

}  // namespace

const DTypeTraits& traits(DType t) {
  const DTypeTraits* row = find_row(t);
  if (!row) {
    std::fprintf(stderr, "kvrun: internal error: dtype %u is not in the traits table\n",
                 static_cast<unsigned>(t));
    std::abort();
  }
  return *row;
}

std::optional<DType> dtype_from_gguf_id(uint32_t id) {
  const DTypeTraits* row = find_row(static_cast<DType>(id));
  if (!row || !row->gguf) return std::nullopt;
  return row->type;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& row : kTraits) {
    std::string_view rn = row.name;
    if (rn.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < rn.size() && eq; ++i)
      eq = std::tolower(static_cast<unsigned char>(rn[i])) ==
           std::tolower(static_cast<unsigned char>(name[i]));
    if (eq) return row.type;
  }
  return std::nullopt;
}

const DType* all_dtypes(size_t* n) {
  *n = kNumTypes;
  return kAll;
}

std::optional<int64_t> row_bytes(DType t, int64_t n_elems) {
  const DTypeTraits& tr = traits(t);
  if (n_elems < 0 || n_elems % tr.block_elems != 0) return std::nullopt;
  const int64_t n_blocks = n_elems / tr.block_elems;
  if (n_blocks > std::numeric_limits<int64_t>::max() / tr.block_bytes) return std::nullopt;
  return n_blocks * tr.block_bytes;
}

}  // namespace kvrun
