// cpu_traits.cpp — the CPU traits table of each kernel level (see cpu_traits.h).
#include "cpu/cpu_traits.h"

#include <array>
#include <cstddef>

#if defined(__x86_64__)
#include "cpu/x86/kernels_x86.h"
#endif
#if defined(__aarch64__)
#include "cpu/arm/kernels_neon.h"
#endif

namespace kvrun::cpu {

namespace {

// The scalar (reference) kernels; the SIMD levels replace entries of a copy of this table.
constexpr CpuTypeTraits kScalar[] = {
    {DType::F32, DType::F32, act_from_float_f32, vec_dot_f32, gemm_dot_f32, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::F16, DType::F16, act_from_float_f16, vec_dot_f16, gemm_dot_f16, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::BF16, DType::BF16, act_from_float_bf16, vec_dot_bf16, nullptr, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::Q4_0, DType::Q8_0, act_from_float_q8_0, vec_dot_q4_0_q8_0, nullptr,
     repack_dot_q4_0_q8_0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::Q5_0, DType::Q8_0, act_from_float_q8_0, vec_dot_q5_0_q8_0, nullptr, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::Q8_0, DType::Q8_0, act_from_float_q8_0, vec_dot_q8_0_q8_0, nullptr, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, fast_dot_q8_0_q8_0},
    {DType::IQ4_NL, DType::Q8_0, act_from_float_q8_0, vec_dot_iq4_nl_q8_0, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::MXFP4, DType::Q8_0, act_from_float_q8_0, vec_dot_mxfp4_q8_0, nullptr, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, fast_dot_mxfp4_q8_0},
    {DType::Q4_1, DType::Q8_1, act_from_float_q8_1, vec_dot_q4_1_q8_1, nullptr, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::Q5_1, DType::Q8_1, act_from_float_q8_1, vec_dot_q5_1_q8_1, nullptr, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::Q2_K, DType::Q8_K, act_from_float_q8_K, vec_dot_q2_K_q8_K, nullptr, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::Q3_K, DType::Q8_K, act_from_float_q8_K, vec_dot_q3_K_q8_K, nullptr, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::Q4_K, DType::Q8_K, act_from_float_q8_K, vec_dot_q4_K_q8_K, nullptr, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, fast_dot_q4_K_q8_K},
    {DType::Q5_K, DType::Q8_K, act_from_float_q8_K, vec_dot_q5_K_q8_K, nullptr, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, fast_dot_q5_K_q8_K},
    {DType::Q6_K, DType::Q8_K, act_from_float_q8_K, vec_dot_q6_K_q8_K, nullptr, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, fast_dot_q6_K_q8_K},
    {DType::IQ4_XS, DType::Q8_K, act_from_float_q8_K, vec_dot_iq4_xs_q8_K, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::IQ3_S, DType::Q8_K, act_from_float_q8_K, vec_dot_iq3_s_q8_K, nullptr, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::IQ2_S, DType::Q8_K, act_from_float_q8_K, vec_dot_iq2_s_q8_K, nullptr, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::IQ3_XXS, DType::Q8_K, act_from_float_q8_K, vec_dot_iq3_xxs_q8_K, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::IQ2_XXS, DType::Q8_K, act_from_float_q8_K, vec_dot_iq2_xxs_q8_K, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::IQ2_XS, DType::Q8_K, act_from_float_q8_K, vec_dot_iq2_xs_q8_K, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::IQ1_S, DType::Q8_K, act_from_float_q8_K, vec_dot_iq1_s_q8_K, nullptr, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr},
    {DType::IQ1_M, DType::Q8_K, act_from_float_q8_K, vec_dot_iq1_m_q8_K, nullptr, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr},
};

constexpr size_t kTypes = sizeof(kScalar) / sizeof(kScalar[0]);
constexpr size_t kLevels = sizeof(kAllCpuLevels) / sizeof(kAllCpuLevels[0]);
using Table = std::array<CpuTypeTraits, kTypes>;

CpuTypeTraits& row_of(Table& t, DType type) {
  for (CpuTypeTraits& row : t)
    if (row.type == type) return row;
  return t[0];  // not reached: every type set below is in kScalar
}

// The SIMD kernels of namespace NS (simd_kernels.h) over the scalar table `t`; activation
// converters change with the activation type, so every weight type paired with q8_0 / q8_K gets the
// SIMD one.
#define KVRUN_APPLY_SIMD(t, NS)                                                      \
  do {                                                                               \
    for (CpuTypeTraits & row : t) {                                                  \
      if (row.act_type == DType::Q8_0) row.act_from_float = NS::act_from_float_q8_0; \
      if (row.act_type == DType::Q8_K) row.act_from_float = NS::act_from_float_q8_K; \
    }                                                                                \
    CpuTypeTraits& f32 = row_of(t, DType::F32);                                      \
    f32.vec_dot = NS::vec_dot_f32;                                                   \
    f32.gemm_dot = NS::gemm_dot_f32;                                                 \
    f32.gemm_dot_tile = NS::tile_gemm_f32;                                           \
    CpuTypeTraits& f16 = row_of(t, DType::F16);                                      \
    f16.act_from_float = NS::act_from_float_f16;                                     \
    f16.vec_dot = NS::vec_dot_f16;                                                   \
    f16.gemm_dot = NS::gemm_dot_f16;                                                 \
    f16.gemm_dot_tile = NS::tile_gemm_f16;                                           \
    row_of(t, DType::BF16).vec_dot = NS::vec_dot_bf16;                               \
    CpuTypeTraits& q4_0 = row_of(t, DType::Q4_0);                                    \
    q4_0.vec_dot = NS::vec_dot_q4_0_q8_0;                                            \
    q4_0.vec_dot_tile = NS::tile_q4_0_q8_0;                                          \
    q4_0.repack_dot = NS::repack_dot_q4_0_q8_0;                                      \
    q4_0.repack_dot_tile = NS::tile_repack_q4_0_q8_0;                                \
    CpuTypeTraits& q5_0 = row_of(t, DType::Q5_0);                                    \
    q5_0.vec_dot = NS::vec_dot_q5_0_q8_0;                                            \
    q5_0.vec_dot_tile = NS::tile_q5_0_q8_0;                                          \
    CpuTypeTraits& q8_0 = row_of(t, DType::Q8_0);                                    \
    q8_0.vec_dot = NS::vec_dot_q8_0_q8_0;                                            \
    q8_0.vec_dot_tile = NS::tile_q8_0_q8_0;                                          \
    CpuTypeTraits& q4_K = row_of(t, DType::Q4_K);                                    \
    q4_K.vec_dot = NS::vec_dot_q4_K_q8_K;                                            \
    q4_K.vec_dot_tile = NS::tile_q4_K_q8_K;                                          \
    CpuTypeTraits& q5_K = row_of(t, DType::Q5_K);                                    \
    q5_K.vec_dot = NS::vec_dot_q5_K_q8_K;                                            \
    q5_K.vec_dot_tile = NS::tile_q5_K_q8_K;                                          \
    CpuTypeTraits& q6_K = row_of(t, DType::Q6_K);                                    \
    q6_K.vec_dot = NS::vec_dot_q6_K_q8_K;                                            \
    q6_K.vec_dot_tile = NS::tile_q6_K_q8_K;                                          \
  } while (0)

#if defined(__x86_64__)
/// The x86 kernels of q4_1 and q5_1 against q8_1 (kernels_x86.inl; not in the common SIMD set:
/// NEON has none yet) of namespace NS.
#define KVRUN_APPLY_X86_AFFINE(t, NS)                         \
  do {                                                        \
    row_of(t, DType::Q4_1).vec_dot = NS::vec_dot_q4_1_q8_1;   \
    row_of(t, DType::Q4_1).vec_dot_tile = NS::tile_q4_1_q8_1; \
    row_of(t, DType::Q5_1).vec_dot = NS::vec_dot_q5_1_q8_1;   \
    row_of(t, DType::Q5_1).vec_dot_tile = NS::tile_q5_1_q8_1; \
  } while (0)

/// The `--kernels fast` prefill kernels of an x86 level (packed_fast_avx2.inl,
/// packed_fast_avx512.inl, packed_mxfp4.inl): every packed type but q4_0, whose kernel already
/// sums in that order.
#define KVRUN_APPLY_X86_FAST(t, NS)                                        \
  do {                                                                     \
    row_of(t, DType::Q8_0).packed_fast_tile = NS::packed_fast_q8_0_q8_0;   \
    row_of(t, DType::Q4_K).packed_fast_tile = NS::packed_fast_q4_K_q8_K;   \
    row_of(t, DType::Q5_K).packed_fast_tile = NS::packed_fast_q5_K_q8_K;   \
    row_of(t, DType::Q6_K).packed_fast_tile = NS::packed_fast_q6_K_q8_K;   \
    row_of(t, DType::MXFP4).packed_fast_tile = NS::packed_fast_mxfp4_q8_0; \
  } while (0)

/// The x86 kernels of mxfp4 and iq4_xs (iq_x86.inl; not in the common SIMD set yet).
void apply_x86_iq(Table& t, VecDotFn mxfp4, DotTileFn mxfp4_tile, VecDotFn iq4_xs,
                  DotTileFn iq4_xs_tile) {
  row_of(t, DType::MXFP4).vec_dot = mxfp4;
  row_of(t, DType::MXFP4).vec_dot_tile = mxfp4_tile;
  row_of(t, DType::IQ4_XS).vec_dot = iq4_xs;
  row_of(t, DType::IQ4_XS).vec_dot_tile = iq4_xs_tile;
}

// The x86 kernels of the grid i-quants (iq_grid_x86.inl) of namespace NS.
#define KVRUN_APPLY_X86_IQ_GRID(t, NS)                              \
  do {                                                              \
    row_of(t, DType::IQ3_S).vec_dot = NS::vec_dot_iq3_s_q8_K;       \
    row_of(t, DType::IQ3_S).vec_dot_tile = NS::tile_iq3_s_q8_K;     \
    row_of(t, DType::IQ2_S).vec_dot = NS::vec_dot_iq2_s_q8_K;       \
    row_of(t, DType::IQ2_S).vec_dot_tile = NS::tile_iq2_s_q8_K;     \
    row_of(t, DType::IQ3_XXS).vec_dot = NS::vec_dot_iq3_xxs_q8_K;   \
    row_of(t, DType::IQ3_XXS).vec_dot_tile = NS::tile_iq3_xxs_q8_K; \
    row_of(t, DType::IQ2_XXS).vec_dot = NS::vec_dot_iq2_xxs_q8_K;   \
    row_of(t, DType::IQ2_XXS).vec_dot_tile = NS::tile_iq2_xxs_q8_K; \
    row_of(t, DType::IQ2_XS).vec_dot = NS::vec_dot_iq2_xs_q8_K;     \
    row_of(t, DType::IQ2_XS).vec_dot_tile = NS::tile_iq2_xs_q8_K;   \
    row_of(t, DType::IQ1_S).vec_dot = NS::vec_dot_iq1_s_q8_K;       \
    row_of(t, DType::IQ1_S).vec_dot_tile = NS::tile_iq1_s_q8_K;     \
    row_of(t, DType::IQ1_M).vec_dot = NS::vec_dot_iq1_m_q8_K;       \
    row_of(t, DType::IQ1_M).vec_dot_tile = NS::tile_iq1_m_q8_K;     \
  } while (0)
#endif

std::array<Table, kLevels> build_tables() {
  std::array<Table, kLevels> tables;
  for (Table& t : tables)
    for (size_t i = 0; i < kTypes; ++i) t[i] = kScalar[i];
#if defined(__x86_64__)
  KVRUN_APPLY_SIMD(tables[size_t(CpuLevel::avx2)], avx2);
  KVRUN_APPLY_SIMD(tables[size_t(CpuLevel::avx512)], avx512);
  apply_x86_iq(tables[size_t(CpuLevel::avx2)], avx2::vec_dot_mxfp4_q8_0, avx2::tile_mxfp4_q8_0,
               avx2::vec_dot_iq4_xs_q8_K, avx2::tile_iq4_xs_q8_K);
  apply_x86_iq(tables[size_t(CpuLevel::avx512)], avx512::vec_dot_mxfp4_q8_0,
               avx512::tile_mxfp4_q8_0, avx512::vec_dot_iq4_xs_q8_K, avx512::tile_iq4_xs_q8_K);
  KVRUN_APPLY_X86_IQ_GRID(tables[size_t(CpuLevel::avx2)], avx2);
  KVRUN_APPLY_X86_IQ_GRID(tables[size_t(CpuLevel::avx512)], avx512);
  KVRUN_APPLY_X86_AFFINE(tables[size_t(CpuLevel::avx2)], avx2);
  KVRUN_APPLY_X86_AFFINE(tables[size_t(CpuLevel::avx512)], avx512);
  row_of(tables[size_t(CpuLevel::avx2)], DType::Q4_0).packed_tile = avx2::packed_q4_0_q8_0;
  row_of(tables[size_t(CpuLevel::avx2)], DType::Q8_0).packed_tile = avx2::packed_q8_0_q8_0;
  row_of(tables[size_t(CpuLevel::avx2)], DType::Q4_K).packed_tile = avx2::packed_q4_K_q8_K;
  row_of(tables[size_t(CpuLevel::avx2)], DType::Q5_K).packed_tile = avx2::packed_q5_K_q8_K;
  row_of(tables[size_t(CpuLevel::avx2)], DType::Q6_K).packed_tile = avx2::packed_q6_K_q8_K;
  row_of(tables[size_t(CpuLevel::avx2)], DType::MXFP4).packed_tile = avx2::packed_mxfp4_q8_0;
  // The avx2 q8_0 and q6_K kernels flip q8_0's bytes back to signed / take q6_K's offset from the
  // weights (x86/packed_prefill_avx2.inl), so they read no activation offsets.
  row_of(tables[size_t(CpuLevel::avx2)], DType::Q8_0).packed_reads_xoff = false;
  row_of(tables[size_t(CpuLevel::avx2)], DType::Q6_K).packed_reads_xoff = false;
  row_of(tables[size_t(CpuLevel::avx512)], DType::Q4_0).packed_tile = avx512::packed_q4_0_q8_0;
  row_of(tables[size_t(CpuLevel::avx512)], DType::Q8_0).packed_tile = avx512::packed_q8_0_q8_0;
  row_of(tables[size_t(CpuLevel::avx512)], DType::Q6_K).packed_tile = avx512::packed_q6_K_q8_K;
  row_of(tables[size_t(CpuLevel::avx512)], DType::MXFP4).packed_tile = avx512::packed_mxfp4_q8_0;
  KVRUN_APPLY_X86_FAST(tables[size_t(CpuLevel::avx2)], avx2);
  KVRUN_APPLY_X86_FAST(tables[size_t(CpuLevel::avx512)], avx512);
  // q4_K: the native avx512 kernel (x86/packed_q4k_avx512.inl).
  row_of(tables[size_t(CpuLevel::avx512)], DType::Q4_K).packed_tile = avx512::packed_q4_K_q8_K;
  // q5_K: the avx512 decode form, the avx2 kernel's prefill (x86/packed_q4k_avx512.inl).
  row_of(tables[size_t(CpuLevel::avx512)], DType::Q5_K).packed_tile = avx512::packed_q5_K_q8_K;
#endif
#if defined(__aarch64__)
  KVRUN_APPLY_SIMD(tables[size_t(CpuLevel::neon)], neon);
  // The packed kernels (pack.h; packed_neon.cpp): q8_0 reads its q + 128 bytes flipped back to
  // signed q, as the avx2 level does, q6_K its q + 32 made signed and mxfp4 its levels looked up
  // signed (none of them reads the offsets of pack_act_offsets; q4_0's kernel does).
  row_of(tables[size_t(CpuLevel::neon)], DType::Q4_0).packed_tile = neon::packed_q4_0_q8_0;
  row_of(tables[size_t(CpuLevel::neon)], DType::Q8_0).packed_tile = neon::packed_q8_0_q8_0;
  row_of(tables[size_t(CpuLevel::neon)], DType::MXFP4).packed_tile = neon::packed_mxfp4_q8_0;
  row_of(tables[size_t(CpuLevel::neon)], DType::Q4_K).packed_tile = neon::packed_q4_K_q8_K;
  row_of(tables[size_t(CpuLevel::neon)], DType::Q5_K).packed_tile = neon::packed_q5_K_q8_K;
  row_of(tables[size_t(CpuLevel::neon)], DType::Q6_K).packed_tile = neon::packed_q6_K_q8_K;
#endif
  return tables;
}

}  // namespace

const CpuTypeTraits* cpu_traits(DType t, CpuLevel level) {
  static const std::array<Table, kLevels> tables = build_tables();
  for (const CpuTypeTraits& row : tables[size_t(level)])
    if (row.type == t) return &row;
  return nullptr;
}

const CpuTypeTraits* cpu_traits(DType t) { return cpu_traits(t, cpu_level()); }

}  // namespace kvrun::cpu
