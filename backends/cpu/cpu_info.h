// cpu_info.h — what the CPU running kvrun offers: SIMD features (from CPUID on x86-64, from the
// kernel's HWCAP bits on AArch64) and the physical core count (the default for -t).
#pragma once

#include <string>

namespace kvrun::cpu {

/// SIMD features detected at run time (one binary runs on any x86-64).
struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool neon = false;
  /// AArch64 SDOT/UDOT (FEAT_DotProd, Linux HWCAP_ASIMDDP): the NEON packed-weight kernels'
  /// integer sums use it when set (backends/cpu/arm/packed_neon.cpp), the same floats either way.
  bool neon_dotprod = false;
};

/// Features of this CPU (computed once; safe to call from any thread).
const CpuFeatures& cpu_features();

/// The features as a space-separated list, e.g. "AVX2 FMA F16C AVX512F AVX512_VNNI".
std::string cpu_features_string();

/// Physical cores (distinct core ids in /sys), falling back to the logical CPU count; ≥ 1.
int physical_cores();

}  // namespace kvrun::cpu
