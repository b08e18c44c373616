// cuda_backend.h — the NVIDIA GPUs behind the seam (backend.h): a Device per visible CUDA device
// (named CUDA0, CUDA1, … in the runtime's order), whose memory is cudaMalloc'ed device memory,
// and a Backend that enqueues the seam's ops as the kernels of backends/cuda/ on its own stream.
// docs/cuda.md: design, what each op supports, and what has not run on a GPU yet. Plain C++.
#pragma once

#include <cstdint>
#include <vector>

#include "backend.h"

namespace kvrun::cuda {

/// The CUDA devices of this machine as seam devices, made once per process and never destroyed
/// (the registry's gpu_devices() lists them first). Empty without a driver or a GPU (never
/// throws for that).
std::vector<kvrun::Device*> seam_devices();

/// How a CUDA backend ran its decode steps' graphs (Backend::run_graph): steps recorded anew
/// and steps whose recorded graph was replayed unchanged (equal step keys). For tests and
/// diagnostics.
struct GraphStats {
  int64_t recorded = 0;
  int64_t replayed = 0;
};
/// The counts of a backend made by a seam_devices() device. Throws std::invalid_argument for
/// another backend.
GraphStats graph_stats(const kvrun::Backend& be);

}  // namespace kvrun::cuda
