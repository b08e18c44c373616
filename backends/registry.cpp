// registry.cpp — the devices of this build and machine (backend.h's registry functions). The
// one file outside backends/cpu/ and backends/cuda/ that knows both.
#include <string>

#include "backend.h"
#include "cpu/cpu_backend.h"

namespace kvrun {

const char* op_name(Op op) {
  switch (op) {
    case Op::kGetRows:
      return "get_rows";
    case Op::kRmsNorm:
      return "rms_norm";
    case Op::kMatmul:
      return "matmul";
    case Op::kRope:
      return "rope";
    case Op::kGlu:
      return "glu";
    case Op::kAdd:
      return "add";
    case Op::kScale:
      return "scale";
    case Op::kKvStore:
      return "kv_store";
    case Op::kPagedAttention:
      return "paged_attention";
    case Op::kCopy:
      return "copy";
  }
  return "?";
}

Device& cpu_device() {
  static const std::unique_ptr<Device> dev = cpu::make_device("CPU");
  return *dev;
}

std::unique_ptr<Device> make_cpu_device(const std::string& name) { return cpu::make_device(name); }

// The CUDA ops (backends/cuda/) are not behind the seam yet: no GPU Device exists in any build
// until they are (the CUDA issue), so -ngl N > 0 is refused with a message saying so.
std::vector<Device*> gpu_devices() { return {}; }

std::vector<std::string> gpu_backends_built() { return {}; }

}  // namespace kvrun
