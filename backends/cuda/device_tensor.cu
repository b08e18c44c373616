// device_tensor.cu — upload_tensor (see device_tensor.h).
#include <stdexcept>

#include "cuda/device_tensor.h"
#include "cuda/matmul.h"

namespace kvrun::cuda {

DeviceTensor upload_tensor(Context& ctx, const Tensor& host) {
  if (!host.is_contiguous()) throw std::invalid_argument("upload_tensor: tensor is not contiguous");
  DeviceTensor t;
  t.buf = DeviceBuffer(ctx, host.n_bytes());
  t.buf.upload(ctx, host.data, host.n_bytes());
  t.view = host;
  t.view.data = t.buf.data();
  return t;
}

DeviceTensor upload_tensor_split(Context& ctx, const Tensor& host) {
  const std::vector<uint8_t> bytes = split_weight(host);
  DeviceTensor t;
  t.buf = DeviceBuffer(ctx, bytes.size());
  t.buf.upload(ctx, bytes.data(), bytes.size());
  t.view = host;
  t.view.data = t.buf.data();
  t.view.packed = t.view.data;
  return t;
}

}  // namespace kvrun::cuda
