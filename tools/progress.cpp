// progress.cpp — see progress.h.
#include "progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvrun::tools {
namespace {

bool forced() {
  const char* v = std::getenv("KVRUN_PROGRESS");
  return v && std::strcmp(v, "1") == 0;
}

}  // namespace

bool progress_enabled(bool log_disable) {
  return !log_disable && (forced() || isatty(STDERR_FILENO) != 0);
}

ProgressLine::ProgressLine(std::string label, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      start_(std::chrono::steady_clock::now()),
      forced_(forced()) {}

ProgressLine::~ProgressLine() { clear(); }

void ProgressLine::update(int64_t done, int64_t total) {
  using namespace std::chrono;
  const auto now = steady_clock::now();
  const bool complete = done >= total;
  if (!active_) {  // a new run of work (a later prefill): its own delay
    active_ = true;
    start_ = now;
  }
  if (complete) active_ = false;
  if (!forced_ && now - start_ < milliseconds(300)) return;
  if (!complete && drawn_ && now - last_ < milliseconds(100)) return;
  last_ = now;
  const bool mib = unit_ == "MiB";
  const double scale = mib ? 1.0 / (1024.0 * 1024.0) : 1.0;
  std::fprintf(stderr, "\r%s %3d%% (%.*f/%.*f %s)", label_.c_str(),
               total > 0 ? int(100 * done / total) : 100, mib ? 1 : 0, double(done) * scale,
               mib ? 1 : 0, double(total) * scale, unit_.c_str());
  std::fflush(stderr);
  drawn_ = true;
  if (complete) clear();
}

void ProgressLine::clear() {
  if (!drawn_) return;
  // Forced (logs, tests): keep the last state as a line of its own; on a terminal, erase it.
  std::fputs(forced_ ? "\n" : "\r\033[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

std::function<void(int64_t, int64_t)> progress_callback(bool enabled, const std::string& label,
                                                        const std::string& unit) {
  if (!enabled) return {};
  auto line = std::make_shared<ProgressLine>(label, unit);
  return [line](int64_t done, int64_t total) { line->update(done, total); };
}

}  // namespace kvrun::tools
