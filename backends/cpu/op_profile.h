// op_profile.h — the CPU backend's per-op wall time, for finding where a step's time goes.
//
// With the environment variable KVRUN_PROFILE set (to anything but "" or "0"), every op the CPU
// backend runs is timed on the calling thread (the pool's work inside it included) and the
// backend prints a table to stderr when it is destroyed: per op and weight type ("matmul q4_K",
// "paged_attention q8_0/q8_0", "rms_norm"), the calls, the total milliseconds, the share of the
// profiled time, microseconds per call, and for matmul / matmul_id the weight bytes read per
// second (matmul_id: the experts the rows chose, each counted once per call). Unset, an op
// costs one well-predicted branch. The figures are wall time: with other work on the machine
// they include its interference, as `kvrun bench`'s own do.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace kvrun::cpu {

/// True when KVRUN_PROFILE is set to a value other than "" and "0" (read once per process).
bool op_profile_enabled();

/// Adds one call of op `op` labelled `detail` (a weight type, "" for none) that took `ns`
/// nanoseconds and read `weight_bytes` bytes of weights (0: not counted). Thread-safe.
void op_profile_add(const char* op, const std::string& detail, int64_t ns, int64_t weight_bytes);

/// The table of everything added since the last reset, sorted by total time (longest first),
/// with a total line; "" when nothing was added.
std::string op_profile_report();

/// Forgets everything added so far.
void op_profile_reset();

/// Times its scope as one call of (op, detail) when op_profile_enabled(); `weight_bytes` as
/// op_profile_add's, settable after construction (set_weight_bytes).
class OpTimer {
 public:
  explicit OpTimer(const char* op, std::string detail = {}, int64_t weight_bytes = 0)
      : on_(op_profile_enabled()) {
    if (!on_) return;
    op_ = op;
    detail_ = std::move(detail);
    bytes_ = weight_bytes;
    t0_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() {
    if (!on_) return;
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_)
            .count();
    op_profile_add(op_, detail_, int64_t(ns), bytes_);
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;
  bool on() const { return on_; }
  void set_weight_bytes(int64_t b) { bytes_ = b; }

 private:
  bool on_;
  const char* op_ = nullptr;
  std::string detail_;
  int64_t bytes_ = 0;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace kvrun::cpu
