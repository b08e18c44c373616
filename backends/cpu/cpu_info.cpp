// cpu_info.cpp — CPUID feature detection and the physical core count.
#include "cpu/cpu_info.h"

#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace kvrun::cpu {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    f.fma = (c >> 12) & 1;
    f.f16c = (c >> 29) & 1;
    const bool osxsave = (c >> 27) & 1;
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    if (osxsave) __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    const bool os_avx = (xcr0_lo & 0x6) == 0x6;
    const bool os_avx512 = (xcr0_lo & 0xe6) == 0xe6;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
      f.avx2 = os_avx && ((b >> 5) & 1);
      f.avx512f = os_avx512 && ((b >> 16) & 1);
      f.avx512bw = os_avx512 && ((b >> 30) & 1);
      f.avx512vl = os_avx512 && ((b >> 31) & 1);
      f.avx512_vnni = os_avx512 && ((c >> 11) & 1);
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = os_avx512 && ((a >> 5) & 1);
    if (!os_avx) f.fma = f.f16c = false;
  }
#elif defined(__aarch64__)
  f.neon = true;
#if defined(__linux__)
  f.neon_dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::string cpu_features_string() {
  const CpuFeatures& f = cpu_features();
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "AVX2");
  add(f.fma, "FMA");
  add(f.f16c, "F16C");
  add(f.avx512f, "AVX512F");
  add(f.avx512bw, "AVX512BW");
  add(f.avx512vl, "AVX512VL");
  add(f.avx512_vnni, "AVX512_VNNI");
  add(f.avx512_bf16, "AVX512_BF16");
  add(f.neon, "NEON");
  add(f.neon_dotprod, "DOTPROD");
  return s.empty() ? "none" : s;
}

int physical_cores() {
  std::set<std::pair<std::string, std::string>> cores;
  for (unsigned cpu = 0; cpu < 4096; ++cpu) {
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream core(base + "core_id"), pkg(base + "physical_package_id");
    if (!core) break;
    std::string c, p;
    core >> c;
    pkg >> p;
    cores.emplace(p, c);
  }
  if (!cores.empty()) return int(cores.size());
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

}  // namespace kvrun::cpu
