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

#include "dtype.h"

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

/// Times its scope as one call of `op` when op_profile_enabled(), labelled with the weight type
/// ("matmul q4_K") or the K and V types ("paged_attention q8_0/q8_0"); `weight_bytes` as
/// op_profile_add's, settable after construction (set_weight_bytes). With profiling off the
/// constructor stores nothing but the flag: the label is built only when a call is recorded.
class OpTimer {
 public:
  /// An op without a type ("rms_norm").
  explicit OpTimer(const char* op) : OpTimer(op, 0, DType::F32, DType::F32, 0) {}
  /// An op on a weight of type `t` that reads `weight_bytes` of it.
  OpTimer(const char* op, DType t, int64_t weight_bytes = 0) : OpTimer(op, 1, t, t, weight_bytes) {}
  /// An op on K rows of type `k` and V rows of type `v`.
  OpTimer(const char* op, DType k, DType v) : OpTimer(op, 2, k, v, 0) {}
  ~OpTimer() {
    if (on_) finish();
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;
  bool on() const { return on_; }
  void set_weight_bytes(int64_t b) { bytes_ = b; }

 private:
  OpTimer(const char* op, int n_types, DType a, DType b, int64_t weight_bytes)
      : on_(op_profile_enabled()) {
    if (!on_) return;
    op_ = op;
    n_types_ = n_types;
    a_ = a;
    b_ = b;
    bytes_ = weight_bytes;
    t0_ = std::chrono::steady_clock::now();
  }
  /// Records the call (op_profile_add) with its label.
  void finish();

  bool on_;
  const char* op_ = nullptr;
  int n_types_ = 0;  ///< 0: no type in the label, 1: a_, 2: a_/b_
  DType a_ = DType::F32, b_ = DType::F32;
  int64_t bytes_ = 0;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace kvrun::cpu
