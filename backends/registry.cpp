// registry.cpp — the devices of this build and machine (backend.h's registry functions). The
// one file outside the backend folders that knows them all.
#include <string>

#include "backend.h"
#include "cpu/cpu_backend.h"
#ifdef KVRUN_HAVE_VULKAN
#include "vulkan/vulkan_backend.h"
#endif

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

// The CUDA ops (backends/cuda/) are not behind the seam yet (the CUDA issue). The Vulkan backend
// (backends/vulkan/, when built) lists its devices; it refuses (Device::supports) the ops it
// does not have yet, so a model that needs them is refused at load.
std::vector<Device*> gpu_devices() {
#ifdef KVRUN_HAVE_VULKAN
  return vulkan::devices();
#else
  return {};
#endif
}

std::vector<std::string> gpu_backends_built() {
#ifdef KVRUN_HAVE_VULKAN
  return {"Vulkan"};
#else
  return {};
#endif
}

}  // namespace kvrun
