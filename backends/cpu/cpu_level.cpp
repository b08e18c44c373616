// cpu_level.cpp — choosing the kernel level from CPUID and KVRUN_CPU (see cpu_level.h).
#include "cpu/cpu_level.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "cpu/cpu_info.h"

namespace kvrun::cpu {

const char* cpu_level_name(CpuLevel level) {
  switch (level) {
    case CpuLevel::scalar:
      return "scalar";
    case CpuLevel::avx2:
      return "avx2";
    case CpuLevel::avx512:
      return "avx512";
    case CpuLevel::neon:
      return "neon";
  }
  return "scalar";
}

std::optional<CpuLevel> parse_cpu_level(std::string_view name) {
  for (CpuLevel l : kAllCpuLevels)
    if (name == cpu_level_name(l)) return l;
  return std::nullopt;
}

bool cpu_level_supported(CpuLevel level) {
  const CpuFeatures& f = cpu_features();
  switch (level) {
    case CpuLevel::scalar:
      return true;
    case CpuLevel::avx2:
#if defined(__x86_64__)
      return f.avx2 && f.fma && f.f16c;
#else
      return false;  // no x86 kernels in this build
#endif
    case CpuLevel::avx512:
#if defined(__x86_64__)
      return f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512_vnni;
#else
      return false;
#endif
    case CpuLevel::neon:
#if defined(__aarch64__)
      return f.neon;
#else
      return false;  // no NEON kernels in this build
#endif
  }
  return false;
}

CpuLevel best_cpu_level() {
  CpuLevel best = CpuLevel::scalar;
  for (CpuLevel l : kAllCpuLevels)
    if (cpu_level_supported(l)) best = l;
  return best;
}

CpuLevel resolve_cpu_level(const char* env) {
  const CpuLevel best = best_cpu_level();
  if (!env || !*env) return best;
  const std::optional<CpuLevel> want = parse_cpu_level(env);
  if (!want) {
    std::fprintf(stderr, "kvrun: KVRUN_CPU=%s is not scalar, avx2, avx512 or neon; using %s\n", env,
                 cpu_level_name(best));
    return best;
  }
  if (cpu_level_supported(*want)) return *want;
  std::fprintf(stderr, "kvrun: KVRUN_CPU=%s is not supported by this CPU; using %s\n", env,
               cpu_level_name(best));
  return best;
}

CpuLevel cpu_level() {
  static const CpuLevel level = resolve_cpu_level(std::getenv("KVRUN_CPU"));
  return level;
}

namespace {
std::atomic<KernelOrder> g_kernel_order{KernelOrder::exact};
}  // namespace

const char* kernel_order_name(KernelOrder order) {
  return order == KernelOrder::fast ? "fast" : "exact";
}

std::optional<KernelOrder> parse_kernel_order(std::string_view name) {
  if (name == "exact") return KernelOrder::exact;
  if (name == "fast") return KernelOrder::fast;
  return std::nullopt;
}

KernelOrder kernel_order() { return g_kernel_order.load(std::memory_order_relaxed); }

void set_kernel_order(KernelOrder order) { g_kernel_order.store(order, std::memory_order_relaxed); }

}  // namespace kvrun::cpu
