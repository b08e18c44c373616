// cpu_level.h — the SIMD level the CPU kernels run at, chosen once per process.
//
// One kvrun binary runs on any x86-64: the SIMD kernels live in their own translation units
// (backends/cpu/x86/, compiled with -mavx2 / -mavx512* flags) and are only called after CPUID
// says the CPU has the features. The level is the best the CPU supports unless the environment
// variable KVRUN_CPU (scalar | avx2 | avx512) asks for a lower one, for tests and benchmarks.
//
// Levels and the features each requires:
//   scalar  portable C++ (the reference kernels; the only level on non-x86 builds)
//   avx2    AVX2 + FMA + F16C
//   avx512  the above + AVX512F/BW/VL + AVX512_VNNI
#pragma once

#include <optional>
#include <string_view>

namespace kvrun::cpu {

/// A kernel level; higher values need more CPU features.
enum class CpuLevel { scalar = 0, avx2 = 1, avx512 = 2 };

/// Every level, lowest first.
inline constexpr CpuLevel kAllCpuLevels[] = {CpuLevel::scalar, CpuLevel::avx2, CpuLevel::avx512};

/// "scalar", "avx2" or "avx512".
const char* cpu_level_name(CpuLevel level);

/// The level named `name` (as cpu_level_name writes it), or nullopt.
std::optional<CpuLevel> parse_cpu_level(std::string_view name);

/// True when this build has kernels for `level` and this CPU has its features.
bool cpu_level_supported(CpuLevel level);

/// The highest supported level.
CpuLevel best_cpu_level();

/// The level that KVRUN_CPU requests (`env`, may be null), capped to what is supported:
/// best_cpu_level() when env is null or empty; an unknown name or an unsupported level prints
/// one warning to stderr and gives the best supported level not above the request.
CpuLevel resolve_cpu_level(const char* env);

/// The level the kernels use in this process: resolve_cpu_level(getenv("KVRUN_CPU")), computed
/// on first call (thread-safe) and fixed afterwards.
CpuLevel cpu_level();

}  // namespace kvrun::cpu
