// cuda_check.cuh — error checks for the CUDA backend's .cu files (device-side code only).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cuda/cuda_error.h"

namespace kvrun::cuda {

/// Throws CudaError("<what>: <CUDA error string>") when `err` is not cudaSuccess.
inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorString(err));
}

/// Checks the launch of the kernel just enqueued (configuration errors show up here; faults
/// inside the kernel surface at the next synchronizing call).
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

/// Blocks of `threads` covering `n` items (at least one).
inline unsigned grid_for(int64_t n, int threads) {
  return unsigned(n <= 0 ? 1 : (n + threads - 1) / threads);
}

}  // namespace kvrun::cuda
