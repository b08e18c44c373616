// cuda_backend.h — the NVIDIA GPUs behind the seam (backend.h): a Device per visible CUDA device
// (named CUDA0, CUDA1, … in the runtime's order), whose memory is cudaMalloc'ed device memory,
// and a Backend that enqueues the seam's ops as the kernels of backends/cuda/ on its own stream.
// docs/cuda.md: design, what each op supports, and what has not run on a GPU yet. Plain C++.
#pragma once

#include <vector>

#include "backend.h"

namespace kvrun::cuda {

/// The CUDA devices of this machine as seam devices, made once per process and never destroyed
/// (the registry's gpu_devices() lists them first). Empty without a driver or a GPU (never
/// throws for that).
std::vector<kvrun::Device*> seam_devices();

}  // namespace kvrun::cuda
