// vulkan_backend.h — the Vulkan devices behind the seam (backend.h): a Device per usable
// physical device (Vulkan 1.2 with bufferDeviceAddress), whose memory is VkBuffers addressed by
// device address, and a Backend that records the seam's ops as compute dispatches of the
// embedded SPIR-V shaders (shaders/*.comp) on one queue. docs/vulkan.md: design, what each op
// supports, and what is not done yet (Device::supports answers false for it).
#pragma once

#include <string>
#include <vector>

#include "backend.h"

namespace kvrun::vulkan {

/// The usable Vulkan devices of this machine, named Vulkan0, Vulkan1, … in the loader's order,
/// made once per process (devices are never destroyed). Software implementations (Mesa's
/// lavapipe, VK_PHYSICAL_DEVICE_TYPE_CPU) are listed only when the environment variable
/// KVRUN_VULKAN_SOFTWARE is set to 1 at the first call: on a machine without a GPU they are
/// no faster than the CPU backend, so -ngl never picks one by default. Empty without a loader,
/// a driver or a usable device.
std::vector<Device*> devices();

/// One line per Vulkan physical device the loader reports that devices() leaves out, with why
/// (no Vulkan 1.2, no bufferDeviceAddress, software without KVRUN_VULKAN_SOFTWARE=1).
std::vector<std::string> skipped_devices();

}  // namespace kvrun::vulkan
