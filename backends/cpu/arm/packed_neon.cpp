// packed_neon.cpp — the NEON level's packed-weight kernels (pack.h layouts; kernels_neon.h).
// Not written from llama.cpp's code: the layouts are kvrun's (pack.h) and the float orders those
// of the scalar references (vec_dot.h), kept bit for bit.
//
// Two builds of packed_neon.inl: `plain` (baseline Advanced SIMD: widening multiplies and
// pairwise adds) and `dotprod` (SDOT, FEAT_DotProd, compiled for Armv8.2-A+dotprod under a
// target pragma, so nothing outside those functions needs the extension). The exported kernels
// pick one at run time from cpu_features().neon_dotprod (Linux HWCAP_ASIMDDP); both give the
// same floats. Tests run both under qemu-aarch64: scripts/arm-check.sh runs the packed tests
// again with QEMU_CPU=cortex-a72 (no dot product).
#include <arm_neon.h>

#include <cstring>

#include "blocks.h"
#include "cpu/arm/kernels_neon.h"
#include "cpu/cpu_info.h"

namespace kvrun::cpu::neon {

namespace plain {
#define KVRUN_NEON_DOTPROD 0
#include "cpu/arm/packed_neon.inl"
#undef KVRUN_NEON_DOTPROD
}  // namespace plain

#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
namespace dotprod {
#define KVRUN_NEON_DOTPROD 1
#include "cpu/arm/packed_neon.inl"
#undef KVRUN_NEON_DOTPROD
}  // namespace dotprod
#pragma GCC pop_options

namespace {
/// Whether this CPU has SDOT (read once).
bool use_dotprod() {
  static const bool on = cpu_features().neon_dotprod;
  return on;
}
}  // namespace

// Each exported kernel runs the SDOT or the plain form (the same floats), chosen once per process.
#define KVRUN_NEON_PACKED(name)                                                            \
  void name(int64_t n, const void* wp, int64_t ngroups, const void* x, size_t xs,          \
            const int32_t* xoff, int64_t nx, float* y, size_t ys) {                        \
    (use_dotprod() ? dotprod::name : plain::name)(n, wp, ngroups, x, xs, xoff, nx, y, ys); \
  }
KVRUN_NEON_PACKED(packed_q4_0_q8_0)
KVRUN_NEON_PACKED(packed_q8_0_q8_0)
KVRUN_NEON_PACKED(packed_mxfp4_q8_0)
KVRUN_NEON_PACKED(packed_q4_K_q8_K)
KVRUN_NEON_PACKED(packed_q5_K_q8_K)
KVRUN_NEON_PACKED(packed_q6_K_q8_K)
#undef KVRUN_NEON_PACKED

}  // namespace kvrun::cpu::neon
