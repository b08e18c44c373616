// cuda_device.h — which NVIDIA GPUs this process can use. Plain C++ header (no CUDA headers), so
// g++-compiled code can call it; defined in cuda_device.cu when the CUDA backend is built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvrun::cuda {

/// One visible CUDA device.
struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  ///< compute capability (9.0 = Hopper)
  int64_t total_bytes = 0;         ///< device memory
  int64_t free_bytes = 0;          ///< free device memory now
};

/// The visible devices; empty when there is no driver or no GPU (never throws for that).
std::vector<DeviceInfo> devices();

/// The CUDA runtime version the backend was built with, e.g. "13.0".
std::string runtime_version();

}  // namespace kvrun::cuda
