// vk_shaders.h — the SPIR-V modules compiled from shaders/*.comp at build time (glslc, see
// cmake/vulkan.cmake), embedded in the binary. Names: "eltwise", "rms_norm", "rope",
// "get_rows_<type>", "matvec_<type>", "matmul_<type>" (type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0
// q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs mxfp4 iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s iq1_s
// iq1_m), "quantize_q8", "matvec_dot_q8_0", "matvec_dot_q4_0" (the int8 dot-product
// matvec).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvrun::vulkan {

/// One embedded SPIR-V module.
struct Spirv {
  const char* name;
  const uint32_t* words;
  size_t bytes;
};

/// The module named `name`, or null when the build has none of that name.
const Spirv* find_spirv(const std::string& name);

}  // namespace kvrun::vulkan
