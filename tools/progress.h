// progress.h — a one-line progress display on stderr for long waits (loading and packing the
// weights, a long prefill), as llama.cpp prints dots and ollama a bar.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace kvrun::tools {

/// Whether progress lines are shown: stderr is a terminal (or KVRUN_PROGRESS=1 forces it, for
/// logs and tests) and `log_disable` (--log-disable) is off.
bool progress_enabled(bool log_disable);

/// "\r<label> 42% (done/total unit)" on stderr, redrawn at most 10 times a second; drawn only
/// once the work has taken 0.3 s since its first update (so quick loads print nothing) unless
/// KVRUN_PROGRESS=1; the line is cleared when the work completes (done == total) or the object goes
/// away.
class ProgressLine {
 public:
  /// `unit` names what is counted ("MiB" divides bytes by 2^20; anything else is printed as is).
  ProgressLine(std::string label, std::string unit);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  /// Reports `done` of `total` (total > 0).
  void update(int64_t done, int64_t total);

 private:
  void clear();
  std::string label_, unit_;
  std::chrono::steady_clock::time_point start_, last_{};
  bool drawn_ = false, forced_ = false, active_ = false;
};

/// A callback for ModelParams::progress / Context::set_progress drawing a ProgressLine, or an
/// empty function when progress is not enabled.
std::function<void(int64_t, int64_t)> progress_callback(bool enabled, const std::string& label,
                                                        const std::string& unit);

}  // namespace kvrun::tools
