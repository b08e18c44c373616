// cpu_traits.cpp — the CPU traits table (see cpu_traits.h).
#include "cpu/cpu_traits.h"

namespace kvrun::cpu {

namespace {

constexpr CpuTypeTraits kTable[] = {
    {DType::F32, DType::F32, act_from_float_f32, vec_dot_f32, gemm_dot_f32, nullptr},
    {DType::F16, DType::F16, act_from_float_f16, vec_dot_f16, gemm_dot_f16, nullptr},
    {DType::BF16, DType::BF16, act_from_float_bf16, vec_dot_bf16, nullptr, nullptr},
    {DType::Q4_0, DType::Q8_0, act_from_float_q8_0, vec_dot_q4_0_q8_0, nullptr,
     repack_dot_q4_0_q8_0},
    {DType::Q5_0, DType::Q8_0, act_from_float_q8_0, vec_dot_q5_0_q8_0, nullptr, nullptr},
    {DType::Q8_0, DType::Q8_0, act_from_float_q8_0, vec_dot_q8_0_q8_0, nullptr, nullptr},
    {DType::IQ4_NL, DType::Q8_0, act_from_float_q8_0, vec_dot_iq4_nl_q8_0, nullptr, nullptr},
    {DType::Q4_1, DType::Q8_1, act_from_float_q8_1, vec_dot_q4_1_q8_1, nullptr, nullptr},
    {DType::Q5_1, DType::Q8_1, act_from_float_q8_1, vec_dot_q5_1_q8_1, nullptr, nullptr},
    {DType::Q2_K, DType::Q8_K, act_from_float_q8_K, vec_dot_q2_K_q8_K, nullptr, nullptr},
    {DType::Q3_K, DType::Q8_K, act_from_float_q8_K, vec_dot_q3_K_q8_K, nullptr, nullptr},
    {DType::Q4_K, DType::Q8_K, act_from_float_q8_K, vec_dot_q4_K_q8_K, nullptr, nullptr},
    {DType::Q5_K, DType::Q8_K, act_from_float_q8_K, vec_dot_q5_K_q8_K, nullptr, nullptr},
    {DType::Q6_K, DType::Q8_K, act_from_float_q8_K, vec_dot_q6_K_q8_K, nullptr, nullptr},
};

}  // namespace

const CpuTypeTraits* cpu_traits(DType t) {
  for (const CpuTypeTraits& row : kTable)
    if (row.type == t) return &row;
  return nullptr;
}

}  // namespace kvrun::cpu
