// op_profile.cpp — see op_profile.h.
#include "cpu/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace kvrun::cpu {
namespace {

struct Entry {
  int64_t calls = 0;
  int64_t ns = 0;
  int64_t bytes = 0;
};

std::mutex& mu() {
  static std::mutex m;
  return m;
}

std::map<std::string, Entry>& table() {
  static std::map<std::string, Entry> t;
  return t;
}

}  // namespace

bool op_profile_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("KVRUN_PROFILE");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

void op_profile_add(const char* op, const std::string& detail, int64_t ns, int64_t weight_bytes) {
  std::string key = op;
  if (!detail.empty()) key += " " + detail;
  std::lock_guard<std::mutex> lock(mu());
  Entry& e = table()[key];
  ++e.calls;
  e.ns += ns;
  e.bytes += weight_bytes;
}

std::string op_profile_report() {
  std::vector<std::pair<std::string, Entry>> rows;
  {
    std::lock_guard<std::mutex> lock(mu());
    rows.assign(table().begin(), table().end());
  }
  if (rows.empty()) return "";
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  int64_t total = 0, calls = 0;
  for (const auto& r : rows) {
    total += r.second.ns;
    calls += r.second.calls;
  }
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-34s %10s %12s %7s %11s %9s\n", "op (KVRUN_PROFILE)", "calls",
                "total ms", "share", "us/call", "GB/s");
  out += line;
  for (const auto& [key, e] : rows) {
    const double ms = double(e.ns) / 1e6;
    char gbs[32] = "";
    if (e.bytes > 0 && e.ns > 0)
      std::snprintf(gbs, sizeof gbs, "%.1f", double(e.bytes) / double(e.ns));
    std::snprintf(line, sizeof line, "%-34s %10lld %12.2f %6.1f%% %11.2f %9s\n", key.c_str(),
                  static_cast<long long>(e.calls), ms, 100.0 * double(e.ns) / double(total),
                  double(e.ns) / 1e3 / double(e.calls), gbs);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-34s %10lld %12.2f\n", "total", static_cast<long long>(calls),
                double(total) / 1e6);
  out += line;
  return out;
}

void OpTimer::finish() {
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_)
          .count();
  std::string detail;
  if (n_types_ >= 1) detail = traits(a_).name;
  if (n_types_ == 2) detail = detail + "/" + traits(b_).name;
  op_profile_add(op_, detail, int64_t(ns), bytes_);
}

void op_profile_reset() {
  std::lock_guard<std::mutex> lock(mu());
  table().clear();
}

}  // namespace kvrun::cpu
