// cpu_level.cpp — choosing the kernel level from CPUID and KVRUN_CPU (see cpu_level.h).
#include "cpu/cpu_level.h"

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
#if defined(__x86_64__)
    case CpuLevel::avx2:
      return f.avx2 && f.fma && f.f16c;
    case CpuLevel::avx512:
      return f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512_vnni;
#else
    default:
      (void)f;
      return false;
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
    std::fprintf(stderr, "kvrun: KVRUN_CPU=%s is not scalar, avx2 or avx512; using %s\n", env,
                 cpu_level_name(best));
    return best;
  }
  if (*want <= best) return *want;
  std::fprintf(stderr, "kvrun: KVRUN_CPU=%s is not supported by this CPU; using %s\n", env,
               cpu_level_name(best));
  return best;
}

CpuLevel cpu_level() {
  static const CpuLevel level = resolve_cpu_level(std::getenv("KVRUN_CPU"));
  return level;
}

}  // namespace kvrun::cpu
