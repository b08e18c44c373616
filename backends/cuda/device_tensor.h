// device_tensor.h — a weight tensor copied to device memory once (at model load), and the
// Tensor view the CUDA ops take for it. Plain C++ header.
#pragma once

#include "cuda/cuda_context.h"
#include "tensor.h"

namespace kvrun::cuda {

/// A tensor whose bytes live in device memory: `view` has the host tensor's type, shape and
/// strides with `data` pointing into `buf` (device memory: never dereference it on the host).
struct DeviceTensor {
  DeviceBuffer buf;
  Tensor view;
};

/// Uploads `host` (rows packed: is_contiguous()) to the context's device. Throws
/// std::invalid_argument for a non-contiguous tensor, kvrun::DeviceOutOfMemory when the device is
/// out of memory.
DeviceTensor upload_tensor(Context& ctx, const Tensor& host);
/// Uploads a q4_0 / q8_0 / q6_K / q4_K / q5_K matrix in the split layout (matmul.h split_weight)
/// and sets view.packed = view.data, which tells matmul and get_rows to read it so. Throws as
/// upload_tensor, and std::invalid_argument for another type.
DeviceTensor upload_tensor_split(Context& ctx, const Tensor& host);

}  // namespace kvrun::cuda
