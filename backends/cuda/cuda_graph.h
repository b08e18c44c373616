// cuda_graph.h — a decode step recorded as a CUDA graph and replayed with one launch (removing
// the per-kernel launch cost of a few hundred small kernels per token). Plain C++ header.
//
// Use: run the step once eagerly (so every op's scratch memory and cuBLAS's workspace exist),
// upload the step's inputs (AttnBatch::set, token ids, ...) outside the graph each step, then
// StepGraph::capture with the ops and StepGraph::launch. Capturing again every step is cheap: the
// new recording updates the instantiated graph in place (cudaGraphExecUpdate) when only kernel
// parameters changed (context length, segment count), and is re-instantiated otherwise.
// Ops must not synchronize during capture: an op whose scratch would have to grow throws
// CudaError instead (see Context).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "cuda/cuda_context.h"

namespace kvrun::cuda {

/// An instantiated CUDA graph of one step's ops on one context. Move-only.
class StepGraph {
 public:
  StepGraph();
  ~StepGraph();
  StepGraph(StepGraph&&) noexcept;
  StepGraph& operator=(StepGraph&&) noexcept;

  /// Records what `enqueue` enqueues on the context's stream (nothing runs) and makes it the
  /// graph launch() replays. Throws CudaError when capture fails (an op synchronized, a CUDA
  /// error) — the stream is left out of capture mode either way.
  void capture(Context& ctx, const std::function<void()>& enqueue);
  /// Enqueues the recorded step on the context's stream. Throws std::logic_error before the
  /// first capture, CudaError on failure.
  void launch(Context& ctx);
  /// True once capture() has succeeded.
  bool ready() const;
  /// How many captures replaced the executable graph instead of updating it in place.
  int instantiations() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Where a replayed step's time goes, for KVRUN_CUDA_STEP_TIMES=1: per step the host time
/// before the launch (the step key's dry pass, and the recording — capture and executable
/// update — when the key changed; the GPU waits meanwhile), the GPU time of the replay (CUDA
/// events around the launch) and the wall time from one launch to the next (a decode token, in
/// steady state); report() gives their medians. Off, every call returns at once. Move-only.
class StepTimer {
 public:
  StepTimer();
  ~StepTimer();
  StepTimer(StepTimer&&) noexcept;
  StepTimer& operator=(StepTimer&&) noexcept;

  /// True when KVRUN_CUDA_STEP_TIMES=1 was set at construction.
  bool enabled() const;
  /// Around the host's work before StepGraph::launch; `recorded`: the step was recorded anew.
  void begin_host();
  void end_host(bool recorded);
  /// Around StepGraph::launch, on the context's stream. before_launch reads the previous
  /// step's GPU time (waiting for its end event, which the engine's logits download has
  /// passed already). Throws CudaError on failure.
  void before_launch(Context& ctx);
  void after_launch(Context& ctx);
  /// "N steps (R recorded): launch to launch A us, GPU B us, host C us replayed / D us
  /// recorded (medians)", or "" before two launches.
  std::string report() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvrun::cuda
