// vk_context.cpp — see vk_context.h.
#include "vulkan/vk_context.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "backend.h"
#include "vulkan/vk_shaders.h"

namespace kvrun::vulkan {
namespace {

/// A zeroed Vulkan info struct of type `s` (every other member zero / null).
template <typename T>
T vk_struct(VkStructureType s) {
  T t{};
  t.sType = s;
  return t;
}

void check(VkResult r, const char* what) {
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY)
    throw DeviceOutOfMemory(std::string("Vulkan: ") + what + ": out of device memory");
  if (r == VK_ERROR_OUT_OF_HOST_MEMORY) throw std::bad_alloc();
  if (r != VK_SUCCESS)
    throw VulkanError(std::string("Vulkan: ") + what + " failed (VkResult " +
                      std::to_string(int(r)) + ")");
}

/// The process's instance (Vulkan 1.2), or VK_NULL_HANDLE when the loader has no driver.
/// Destroyed at exit, after the devices made from it (statics made later are destroyed first).
VkInstance instance() {
  struct Holder {
    VkInstance inst = VK_NULL_HANDLE;
    Holder() {
      auto app = vk_struct<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
      app.pApplicationName = "kvrun";
      app.apiVersion = VK_API_VERSION_1_2;
      auto ci = vk_struct<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
      ci.pApplicationInfo = &app;
      if (vkCreateInstance(&ci, nullptr, &inst) != VK_SUCCESS) inst = VK_NULL_HANDLE;
    }
    ~Holder() {
      if (inst) vkDestroyInstance(inst, nullptr);
    }
  };
  static const Holder h;
  return h.inst;
}

/// True when the device lists the extension `name`.
bool has_extension(VkPhysicalDevice h, const char* name) {
  uint32_t n = 0;
  if (vkEnumerateDeviceExtensionProperties(h, nullptr, &n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkExtensionProperties> ext(n);
  if (vkEnumerateDeviceExtensionProperties(h, nullptr, &n, ext.data()) != VK_SUCCESS) return false;
  for (const VkExtensionProperties& e : ext)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

PhysicalDevice describe(VkPhysicalDevice h) {
  PhysicalDevice d;
  d.handle = h;
  const bool dot_ext = has_extension(h, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
  auto sub = vk_struct<VkPhysicalDeviceSubgroupProperties>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
  auto dotp = vk_struct<VkPhysicalDeviceShaderIntegerDotProductPropertiesKHR>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES_KHR);
  auto props =
      vk_struct<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  props.pNext = &sub;
  if (dot_ext) sub.pNext = &dotp;
  vkGetPhysicalDeviceProperties2(h, &props);
  d.name = props.properties.deviceName;
  d.software = props.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  d.api_version = props.properties.apiVersion;
  d.subgroup_size = sub.subgroupSize;
  d.max_shared = props.properties.limits.maxComputeSharedMemorySize;
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(h, &mp);
  for (uint32_t i = 0; i < mp.memoryHeapCount; ++i)
    if ((mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
        int64_t(mp.memoryHeaps[i].size) > d.local_bytes) {
      d.local_bytes = int64_t(mp.memoryHeaps[i].size);
      d.local_heap = i;
    }
  d.memory_budget = has_extension(h, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(h, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(h, &nq, qf.data());
  bool has_compute = false;
  for (uint32_t i = 0; i < nq && !has_compute; ++i)
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      d.queue_family = i;
      has_compute = true;
    }
  if (VK_API_VERSION_MAJOR(d.api_version) == 1 && VK_API_VERSION_MINOR(d.api_version) < 2) {
    d.unusable = "Vulkan 1.2 or newer needed (the driver has " +
                 std::to_string(VK_API_VERSION_MINOR(d.api_version)) + ".x)";
    return d;
  }
  auto f12 = vk_struct<VkPhysicalDeviceVulkan12Features>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  // The extension's own feature struct (the instance is Vulkan 1.2, so not Vulkan13Features).
  auto fdot = vk_struct<VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR);
  if (dot_ext) f12.pNext = &fdot;
  auto f = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  f.pNext = &f12;
  vkGetPhysicalDeviceFeatures2(h, &f);
  d.float16 = f12.shaderFloat16;
  d.int8_dot = dot_ext && fdot.shaderIntegerDotProduct;
  d.int8_dot_accelerated = d.int8_dot && dotp.integerDotProduct4x8BitPackedSignedAccelerated;
  d.float64 = f.features.shaderFloat64;
  if (!has_compute)
    d.unusable = "no compute queue";
  else if (!f12.bufferDeviceAddress)
    d.unusable =
        "no bufferDeviceAddress (kvrun's Vulkan backend addresses buffers by device "
        "address)";
  return d;
}

}  // namespace

int64_t heap_budget_free(const PhysicalDevice& pd) {
  if (!pd.memory_budget || pd.local_bytes < 0) return -1;
  auto budget = vk_struct<VkPhysicalDeviceMemoryBudgetPropertiesEXT>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT);
  auto mp = vk_struct<VkPhysicalDeviceMemoryProperties2>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2);
  mp.pNext = &budget;
  vkGetPhysicalDeviceMemoryProperties2(pd.handle, &mp);
  const int64_t b = int64_t(budget.heapBudget[pd.local_heap]);
  const int64_t u = int64_t(budget.heapUsage[pd.local_heap]);
  return b > 0 ? std::max<int64_t>(0, b - u) : -1;
}

const std::vector<PhysicalDevice>& physical_devices() {
  static const std::vector<PhysicalDevice> devs = [] {
    std::vector<PhysicalDevice> out;
    const VkInstance inst = instance();
    if (!inst) return out;
    uint32_t n = 0;
    if (vkEnumeratePhysicalDevices(inst, &n, nullptr) != VK_SUCCESS) return out;
    std::vector<VkPhysicalDevice> hs(n);
    if (vkEnumeratePhysicalDevices(inst, &n, hs.data()) != VK_SUCCESS) return out;
    for (VkPhysicalDevice h : hs) out.push_back(describe(h));
    return out;
  }();
  return devs;
}

// ---- Context ----

Context::Context(const PhysicalDevice& pd) : pd_(pd) {
  if (!pd.unusable.empty()) throw VulkanError("Vulkan device " + pd.name + ": " + pd.unusable);
  const float prio = 1.0f;
  auto qci = vk_struct<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  qci.queueFamilyIndex = pd.queue_family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &prio;
  auto f12 = vk_struct<VkPhysicalDeviceVulkan12Features>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  f12.bufferDeviceAddress = VK_TRUE;
  f12.shaderFloat16 = pd.float16 ? VK_TRUE : VK_FALSE;
  auto fdot = vk_struct<VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR);
  fdot.shaderIntegerDotProduct = VK_TRUE;
  std::vector<const char*> exts;
  if (pd.int8_dot) {
    f12.pNext = &fdot;
    exts.push_back(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
  }
  if (pd.memory_budget) exts.push_back(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  VkPhysicalDeviceFeatures core{};
  core.shaderFloat64 = pd.float64 ? VK_TRUE : VK_FALSE;
  auto ci = vk_struct<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  ci.pNext = &f12;
  ci.enabledExtensionCount = uint32_t(exts.size());
  ci.ppEnabledExtensionNames = exts.data();
  ci.pEnabledFeatures = &core;
  ci.queueCreateInfoCount = 1;
  ci.pQueueCreateInfos = &qci;
  check(vkCreateDevice(pd.handle, &ci, nullptr, &device_), "vkCreateDevice");
  vkGetDeviceQueue(device_, pd.queue_family, 0, &queue_);
  vkGetPhysicalDeviceMemoryProperties(pd.handle, &mem_props_);
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
  auto lci = vk_struct<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
  lci.pushConstantRangeCount = 1;
  lci.pPushConstantRanges = &range;
  check(vkCreatePipelineLayout(device_, &lci, nullptr, &layout_), "vkCreatePipelineLayout");
  auto pcci = vk_struct<VkPipelineCacheCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO);
  check(vkCreatePipelineCache(device_, &pcci, nullptr, &cache_), "vkCreatePipelineCache");
}

Context::~Context() {
  vkDeviceWaitIdle(device_);
  for (auto& [name, p] : pipelines_) vkDestroyPipeline(device_, p, nullptr);
  for (auto& [addr, a] : by_address_) {
    vkDestroyBuffer(device_, a->buffer, nullptr);
    vkFreeMemory(device_, a->memory, nullptr);
    delete a;
  }
  vkDestroyPipelineCache(device_, cache_, nullptr);
  vkDestroyPipelineLayout(device_, layout_, nullptr);
  vkDestroyDevice(device_, nullptr);
}

uint32_t Context::memory_type(uint32_t bits, Kind kind) const {
  const VkMemoryPropertyFlags host =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  if (kind == Kind::kHostTier) {  // host-visible coherent; best: not device-local, host-cached
    int best = -1, best_score = -1;
    for (uint32_t i = 0; i < mem_props_.memoryTypeCount; ++i) {
      const VkMemoryPropertyFlags f = mem_props_.memoryTypes[i].propertyFlags;
      if (!(bits & (1u << i)) || (f & host) != host) continue;
      const int score = (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT ? 0 : 2) +
                        (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT ? 1 : 0);
      if (score > best_score) {
        best = int(i);
        best_score = score;
      }
    }
    if (best >= 0) return uint32_t(best);
    throw VulkanError("Vulkan: no host-visible coherent memory type for the KV host tier on " +
                      pd_.name);
  }
  const VkMemoryPropertyFlags want =
      kind == Kind::kStaging ? host : VkMemoryPropertyFlags(VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  for (uint32_t i = 0; i < mem_props_.memoryTypeCount; ++i)
    if ((bits & (1u << i)) && (mem_props_.memoryTypes[i].propertyFlags & want) == want) return i;
  if (kind == Kind::kDeviceLocal)  // no device-local type for this buffer: any type it allows
    for (uint32_t i = 0; i < mem_props_.memoryTypeCount; ++i)
      if (bits & (1u << i)) return i;
  throw VulkanError("Vulkan: no suitable memory type on " + pd_.name);
}

Allocation* Context::allocate(size_t bytes, bool host_visible) {
  return allocate_kind(bytes, host_visible ? Kind::kStaging : Kind::kDeviceLocal);
}

Allocation* Context::allocate_host_tier(size_t bytes) {
  return allocate_kind(bytes, Kind::kHostTier);
}

Allocation* Context::allocate_kind(size_t bytes, Kind kind) {
  const bool host_visible = kind != Kind::kDeviceLocal;
  auto a = std::make_unique<Allocation>();
  a->size = std::max<size_t>(bytes, 4);
  auto bci = vk_struct<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  bci.size = (a->size + 3) / 4 * 4;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
              VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(vkCreateBuffer(device_, &bci, nullptr, &a->buffer), "vkCreateBuffer");
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, a->buffer, &req);
  auto flags = vk_struct<VkMemoryAllocateFlagsInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO);
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  auto mai = vk_struct<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  mai.pNext = &flags;
  mai.allocationSize = req.size;
  try {
    mai.memoryTypeIndex = memory_type(req.memoryTypeBits, kind);
    check(vkAllocateMemory(device_, &mai, nullptr, &a->memory), "vkAllocateMemory");
    check(vkBindBufferMemory(device_, a->buffer, a->memory, 0), "vkBindBufferMemory");
    if (host_visible)
      check(vkMapMemory(device_, a->memory, 0, VK_WHOLE_SIZE, 0, &a->mapped), "vkMapMemory");
    else
      a->device_bytes = size_t(req.size);
  } catch (...) {
    vkDestroyBuffer(device_, a->buffer, nullptr);
    if (a->memory) vkFreeMemory(device_, a->memory, nullptr);
    throw;
  }
  auto ai = vk_struct<VkBufferDeviceAddressInfo>(VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO);
  ai.buffer = a->buffer;
  a->address = vkGetBufferDeviceAddress(device_, &ai);
  std::lock_guard<std::mutex> lock(mu_);
  by_address_[a->address] = a.get();
  device_bytes_ += int64_t(a->device_bytes);
  return a.release();
}

void Context::add_stream(Stream* s) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.push_back(s);
}

void Context::remove_stream(Stream* s) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.erase(std::find(streams_.begin(), streams_.end(), s));
}

void Context::flush_streams() {
  std::vector<Stream*> streams;
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    streams = streams_;
  }
  for (Stream* s : streams) s->try_flush();
}

void Context::release(Allocation* a) {
  if (!a) return;
  flush_streams();  // recorded work may still use `a`
  {
    std::lock_guard<std::mutex> lock(mu_);
    by_address_.erase(a->address);
    device_bytes_ -= int64_t(a->device_bytes);
  }
  vkDestroyBuffer(device_, a->buffer, nullptr);
  vkFreeMemory(device_, a->memory, nullptr);
  delete a;
}

std::pair<const Allocation*, size_t> Context::locate(uint64_t addr, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_address_.upper_bound(addr);
  if (it != by_address_.begin()) {
    --it;
    const Allocation* a = it->second;
    if (addr - a->address + bytes <= a->size) return {a, size_t(addr - a->address)};
  }
  throw VulkanError("Vulkan: address range of " + std::to_string(bytes) +
                    " bytes is not inside one buffer of " + pd_.name);
}

VkPipeline Context::pipeline(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = pipelines_.find(name); it != pipelines_.end()) return it->second;
  const Spirv* s = find_spirv(name);
  if (!s) throw VulkanError("Vulkan: no shader named " + name + " in this build");
  auto mci = vk_struct<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
  mci.codeSize = s->bytes;
  mci.pCode = s->words;
  VkShaderModule mod;
  check(vkCreateShaderModule(device_, &mci, nullptr, &mod), "vkCreateShaderModule");
  auto pci = vk_struct<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  pci.stage = vk_struct<VkPipelineShaderStageCreateInfo>(
      VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO);
  pci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  pci.stage.module = mod;
  pci.stage.pName = "main";
  pci.layout = layout_;
  VkPipeline p;
  const VkResult r = vkCreateComputePipelines(device_, cache_, 1, &pci, nullptr, &p);
  vkDestroyShaderModule(device_, mod, nullptr);
  check(r, ("vkCreateComputePipelines(" + name + ")").c_str());
  pipelines_[name] = p;
  return p;
}

void Context::submit_and_wait(VkCommandBuffer cb, VkFence fence) {
  auto si = vk_struct<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    check(vkQueueSubmit(queue_, 1, &si, fence), "vkQueueSubmit");
  }
  check(vkWaitForFences(device_, 1, &fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  check(vkResetFences(device_, 1, &fence), "vkResetFences");
}

// ---- Stream ----

Stream::Stream(Context& ctx) : ctx_(ctx) {
  auto pci = vk_struct<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = ctx.physical().queue_family;
  check(vkCreateCommandPool(ctx.device(), &pci, nullptr, &pool_), "vkCreateCommandPool");
  auto ai = vk_struct<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
  ai.commandPool = pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  check(vkAllocateCommandBuffers(ctx.device(), &ai, &cb_), "vkAllocateCommandBuffers");
  auto fci = vk_struct<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
  check(vkCreateFence(ctx.device(), &fci, nullptr, &fence_), "vkCreateFence");
  arena_ = ctx.allocate(size_t(4) << 20, true);
  ctx.add_stream(this);
}

Stream::~Stream() {
  // Work recorded since the last flush is dropped, not submitted: a destructor may run in the
  // process's exit handlers, when the driver may already be tearing itself down.
  ctx_.remove_stream(this);
  if (recording_) vkEndCommandBuffer(cb_);
  recording_ = false;
  ctx_.release(arena_);
  vkDestroyFence(ctx_.device(), fence_, nullptr);
  vkDestroyCommandPool(ctx_.device(), pool_, nullptr);
}

VkCommandBuffer Stream::recording() {
  if (!recording_) {
    auto bi = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(vkBeginCommandBuffer(cb_, &bi), "vkBeginCommandBuffer");
    recording_ = true;
  }
  return cb_;
}

void Stream::barrier() {
  auto mb = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                     VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cb_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT |
                           VK_PIPELINE_STAGE_HOST_BIT,
                       0, 1, &mb, 0, nullptr, 0, nullptr);
}

void Stream::dispatch(const std::string& name, const void* push, uint32_t push_bytes, uint32_t gx,
                      uint32_t gy, uint32_t gz) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (gx == 0 || gy == 0 || gz == 0) return;
  const VkPipeline p = ctx_.pipeline(name);
  VkCommandBuffer cb = recording();
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p);
  vkCmdPushConstants(cb, ctx_.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
  vkCmdDispatch(cb, gx, gy, gz);
  barrier();
}

size_t Stream::reserve(size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const size_t need = (bytes + 255) / 256 * 256;
  if (arena_used_ + need > arena_->size) {
    flush();
    if (need > arena_->size) {
      const size_t grown = std::max(need, arena_->size * 2);
      ctx_.release(arena_);
      arena_ = nullptr;
      arena_ = ctx_.allocate(grown, true);
    }
  }
  const size_t off = arena_used_;
  arena_used_ += need;
  return off;
}

uint64_t Stream::stage(const void* host, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const size_t off = reserve(bytes);
  std::memcpy(static_cast<char*>(arena_->mapped) + off, host, bytes);
  return arena_->address + off;
}

void Stream::upload(uint64_t dst, const void* host, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (bytes == 0) return;
  const auto [a, off] = ctx_.locate(dst, bytes);
  const size_t src = reserve(bytes);
  std::memcpy(static_cast<char*>(arena_->mapped) + src, host, bytes);
  const VkBufferCopy region{src, off, bytes};
  vkCmdCopyBuffer(recording(), arena_->buffer, a->buffer, 1, &region);
  barrier();
}

void Stream::download(void* host, uint64_t src, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ctx_.flush_streams();  // first the writes recorded on other streams (and on this one)
  if (bytes == 0) return;
  const auto [a, off] = ctx_.locate(src, bytes);
  const size_t dst = reserve(bytes);
  const VkBufferCopy region{off, dst, bytes};
  vkCmdCopyBuffer(recording(), a->buffer, arena_->buffer, 1, &region);
  barrier();
  const Allocation* arena = arena_;  // flush keeps the arena (it only resets the offset)
  flush();
  std::memcpy(host, static_cast<const char*>(arena->mapped) + dst, bytes);
}

void Stream::copy(uint64_t dst, uint64_t src, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (bytes == 0) return;
  const auto [sa, soff] = ctx_.locate(src, bytes);
  const auto [da, doff] = ctx_.locate(dst, bytes);
  const VkBufferCopy region{soff, doff, bytes};
  vkCmdCopyBuffer(recording(), sa->buffer, da->buffer, 1, &region);
  barrier();
}

void Stream::fill(uint64_t dst, uint32_t value, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (bytes == 0) return;
  const auto [a, off] = ctx_.locate(dst, bytes);
  vkCmdFillBuffer(recording(), a->buffer, off, bytes, value);
  barrier();
}

void Stream::try_flush() {
  std::unique_lock<std::recursive_mutex> lock(mu_, std::try_to_lock);
  if (lock.owns_lock()) flush();
}

void Stream::flush() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (recording_) {
    check(vkEndCommandBuffer(cb_), "vkEndCommandBuffer");
    recording_ = false;
    ctx_.submit_and_wait(cb_, fence_);
    check(vkResetCommandBuffer(cb_, 0), "vkResetCommandBuffer");
  }
  arena_used_ = 0;
}

}  // namespace kvrun::vulkan
