// cpu_level.h — the SIMD level the CPU kernels run at, chosen once per process.
//
// One kvrun binary runs on any x86-64: the SIMD kernels live in their own translation units
// (backends/cpu/x86/, compiled with -mavx2 / -mavx512* flags) and are only called after CPUID
// says the CPU has the features. An AArch64 build has the NEON kernels (backends/cpu/arm/;
// Advanced SIMD is part of every AArch64 CPU). The level is the best the CPU supports unless the
// environment variable KVRUN_CPU (scalar | avx2 | avx512 | neon) asks for another supported one,
// for tests and benchmarks.
//
// Levels and the features each requires:
//   scalar  portable C++ (the reference kernels; every build has it)
//   avx2    x86-64 with AVX2 + FMA + F16C
//   avx512  the above + AVX512F/BW/VL + AVX512_VNNI
//   neon    AArch64 (Armv8-A Advanced SIMD): the kernels of backends/cpu/arm/kernels_neon.h
//           (the packed-weight kernels use SDOT when the CPU has it), the others are scalar
#pragma once

#include <optional>
#include <string_view>

namespace kvrun::cpu {

/// A kernel level. On x86-64 a higher value needs more CPU features; neon is the AArch64 level.
enum class CpuLevel { scalar = 0, avx2 = 1, avx512 = 2, neon = 3 };

/// Every level, in the order best_cpu_level prefers the later ones.
inline constexpr CpuLevel kAllCpuLevels[] = {CpuLevel::scalar, CpuLevel::avx2, CpuLevel::avx512,
                                             CpuLevel::neon};

/// "scalar", "avx2", "avx512" or "neon".
const char* cpu_level_name(CpuLevel level);

/// The level named `name` (as cpu_level_name writes it), or nullopt.
std::optional<CpuLevel> parse_cpu_level(std::string_view name);

/// True when this build has kernels for `level` and this CPU has its features.
bool cpu_level_supported(CpuLevel level);

/// The last supported level of kAllCpuLevels (avx512, avx2 or scalar on x86-64; neon on
/// AArch64).
CpuLevel best_cpu_level();

/// The level that KVRUN_CPU requests (`env`, may be null) when this build and CPU support it;
/// best_cpu_level() when env is null or empty; an unknown name or an unsupported level prints
/// one warning to stderr and gives best_cpu_level().
CpuLevel resolve_cpu_level(const char* env);

/// The level the kernels use in this process: resolve_cpu_level(getenv("KVRUN_CPU")), computed
/// on first call (thread-safe) and fixed afterwards.
CpuLevel cpu_level();

/// The summation order of the quantized matmuls (`kvrun --kernels exact|fast`), one per process.
///   exact  every kernel performs the float steps of its scalar reference, which follows
///          llama.cpp's CPU backend (vec_dot.h), so every level gives the same bits (the default).
///   fast   the matmuls with ≥ 2 activation rows (prefill) of packed q8_0, q4_K and q6_K weights
///          at the avx2 level use the fast order of vec_dot.h (fast_dot_*): per weight row and
///          (super-)block one exact int32 dot, then ONE float multiply-add into one accumulator
///          per (weight row, activation row), which lets the kernel hold several weight rows ×
///          several activation rows in registers. Results differ from exact in the last bits;
///          they are the same on every level with a fast kernel (the scalar fast_dot_* are the
///          reference). Other types, decode (one activation row) and levels without a fast
///          kernel (scalar, avx512, neon) run the exact kernels.
enum class KernelOrder { exact = 0, fast = 1 };

/// "exact" or "fast".
const char* kernel_order_name(KernelOrder order);

/// The order named `name` ("exact" or "fast"), or nullopt.
std::optional<KernelOrder> parse_kernel_order(std::string_view name);

/// The process's summation order: exact until set_kernel_order is called.
KernelOrder kernel_order();

/// Sets the process's summation order (thread-safe; set it before the model runs, as the
/// command line does: a matmul reads it once when it starts).
void set_kernel_order(KernelOrder order);

}  // namespace kvrun::cpu
