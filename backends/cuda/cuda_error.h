// cuda_error.h — the exception every CUDA backend call throws when the CUDA runtime or cuBLAS
// fails. Plain C++ header (no CUDA headers), so g++-compiled callers can catch it.
#pragma once

#include <stdexcept>

namespace kvrun::cuda {

/// A CUDA runtime or cuBLAS call failed, or no usable device exists. The message names the call
/// and the CUDA error string, e.g. "cudaMalloc: out of memory".
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace kvrun::cuda
