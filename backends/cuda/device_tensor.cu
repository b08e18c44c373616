// device_tensor.cu — upload_tensor (see device_tensor.h).
#include <stdexcept>

#include "cuda/device_tensor.h"

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

}  // namespace kvrun::cuda
