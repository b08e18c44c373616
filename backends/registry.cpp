// registry.cpp — the devices of this build and machine (backend.h's registry functions). The
// one file outside the backend folders that knows them all.
#include <string>

#include "backend.h"
#include "cpu/cpu_backend.h"
#ifdef KVRUN_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif
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
    case Op::kMoeRoute:
      return "moe_route";
    case Op::kMatmulId:
      return "matmul_id";
    case Op::kLayerNorm:
      return "layer_norm";
    case Op::kGelu:
      return "gelu";
    case Op::kAttention:
      return "attention";
    case Op::kAttnSinks:
      return "attention sinks";
    case Op::kMla:
      return "MLA attention";
    case Op::kKvHostTier:
      return "KV host tier";
    case Op::kAttnParts:
      return "attention by KV tier";
  }
  return "?";
}

Device& cpu_device() {
  static const std::unique_ptr<Device> dev = cpu::make_device("CPU");
  return *dev;
}

std::unique_ptr<Device> make_cpu_device(const std::string& name) { return cpu::make_device(name); }

// CUDA devices first (backends/cuda/, when built), then Vulkan's (backends/vulkan/): -ngl
// without -dev takes the first. A backend refuses (Device::supports) the ops it does not have,
// so a model that needs them is refused at load.
std::vector<Device*> gpu_devices() {
  std::vector<Device*> out;
#ifdef KVRUN_HAVE_CUDA
  for (Device* d : cuda::seam_devices()) out.push_back(d);
#endif
#ifdef KVRUN_HAVE_VULKAN
  for (Device* d : vulkan::devices()) out.push_back(d);
#endif
  return out;
}

std::vector<std::string> gpu_backends_built() {
  std::vector<std::string> out;
#ifdef KVRUN_HAVE_CUDA
  out.push_back("CUDA");
#endif
#ifdef KVRUN_HAVE_VULKAN
  out.push_back("Vulkan");
#endif
  return out;
}

}  // namespace kvrun
