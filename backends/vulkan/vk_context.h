// vk_context.h — the Vulkan plumbing under the backend (vulkan_backend.h): the process's
// instance and physical devices, one logical device per used GPU (memory, buffers, pipelines)
// and streams of recorded work (command buffer, staging arena, submit and wait).
//
// Pointers across the seam are buffer device addresses (Vulkan 1.2 bufferDeviceAddress; shaders
// read them through GL_EXT_buffer_reference): a DeviceBuffer's data() is its VkBuffer's device
// address, so the model's pointer arithmetic (row offsets, scratch slices) works unchanged, and
// the shaders need no descriptor sets, only push constants. Copies find the VkBuffer holding an
// address in the context's allocation map. docs/vulkan.md has the whole design.
#pragma once

#include <vulkan/vulkan.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvrun::vulkan {

/// Every Vulkan failure (a VkResult other than success, a missing feature, an address outside
/// every buffer).
class VulkanError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What enumeration found about one physical device.
struct PhysicalDevice {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  std::string name;            ///< VkPhysicalDeviceProperties::deviceName
  bool software = false;       ///< VK_PHYSICAL_DEVICE_TYPE_CPU (Mesa's lavapipe)
  uint32_t api_version = 0;    ///< VK_MAKE_API_VERSION of the driver
  uint32_t subgroup_size = 0;  ///< queried; no shader assumes a value
  uint32_t max_shared = 0;     ///< maxComputeSharedMemorySize in bytes
  int64_t local_bytes = -1;    ///< the largest device-local heap
  uint32_t local_heap = 0;     ///< its index
  bool memory_budget = false;  ///< VK_EXT_memory_budget listed (enabled when listed)
  uint32_t queue_family = 0;   ///< a queue family with compute
  /// shaderFloat16 reported: enabled when reported (the fp16-arithmetic tiled matmul and f16
  /// matvec, matmul_tiled.comp / matvec.comp with -DFP16)
  bool float16 = false;
  /// VK_KHR_shader_integer_dot_product with shaderIntegerDotProduct: enabled when reported (the
  /// q8_0 / q4_0 decode matvec, matvec_dot.comp)
  bool int8_dot = false;
  bool int8_dot_accelerated = false;  ///< integerDotProduct4x8BitPackedSignedAccelerated
  bool float64 = false;               ///< shaderFloat64: enabled when reported (the nvfp4 KV store)
  std::string unusable;               ///< empty when usable, else why (e.g. no bufferDeviceAddress)
};

/// The bytes the driver says this process may still allocate in `pd`'s largest device-local
/// heap: VK_EXT_memory_budget's heapBudget − heapUsage (every process's use of the heap
/// counted), or −1 when the device lacks the extension.
int64_t heap_budget_free(const PhysicalDevice& pd);

/// The physical devices of the process's Vulkan instance, made on the first call (an empty list
/// when there is no loader, no driver or no device). Thread-safe.
const std::vector<PhysicalDevice>& physical_devices();

/// One VkBuffer and its own memory, with its device address (and host mapping when host
/// visible).
struct Allocation {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  uint64_t address = 0;     ///< vkGetBufferDeviceAddress
  size_t size = 0;          ///< bytes
  void* mapped = nullptr;   ///< host pointer (host-visible allocations only)
  size_t device_bytes = 0;  ///< the memory's size when device-local (counted in device_bytes())
};

/// Bytes a push-constant block may hold (Vulkan's guaranteed minimum).
constexpr uint32_t kPushBytes = 128;

/// One logical device with a compute queue: allocations, pipelines (one per embedded shader,
/// made on first use) and the queue. Thread-safe for allocation and pipeline lookup.
class Context {
 public:
  /// Creates the logical device. Throws VulkanError when `pd` is unusable or creation fails.
  explicit Context(const PhysicalDevice& pd);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  /// `bytes` (≥ 1) in device-local memory, or host-visible coherent memory when `host_visible`.
  /// Throws DeviceOutOfMemory (backend.h) when the driver says the device is out of memory,
  /// std::bad_alloc when the host is.
  Allocation* allocate(size_t bytes, bool host_visible);
  /// `bytes` (≥ 1) of host memory for the KV cache's host tier, mapped (Allocation::mapped) and
  /// read and written in place by the shaders through its device address: a host-visible,
  /// host-coherent memory type, preferring one that is not device-local (system RAM, not a
  /// BAR window of VRAM) and host-cached (the host copies blocks out of it). Not counted in
  /// device_bytes(). Throws std::bad_alloc when out of memory, VulkanError when the device has
  /// no host-visible coherent type for a buffer.
  Allocation* allocate_host_tier(size_t bytes);
  /// Bytes of the live device-local allocations (host_visible false) of this context.
  int64_t device_bytes() const { return device_bytes_; }
  /// Frees an allocation of this context (null is ignored). Work recorded on any of the
  /// context's streams is submitted and waited for first (it may use the allocation), as
  /// cudaFree waits for the device.
  void release(Allocation* a);
  /// The allocation holding device addresses [addr, addr + bytes) and addr's offset in it.
  /// Throws VulkanError when no single allocation holds the range.
  std::pair<const Allocation*, size_t> locate(uint64_t addr, size_t bytes) const;

  /// The compute pipeline of the embedded shader `name` (vk_shaders.h). Throws VulkanError when
  /// the build has no such shader.
  VkPipeline pipeline(const std::string& name);
  VkPipelineLayout layout() const { return layout_; }
  VkDevice device() const { return device_; }
  const PhysicalDevice& physical() const { return pd_; }

  /// Submits `cb` and waits for it (the queue is shared by the context's streams).
  void submit_and_wait(VkCommandBuffer cb, VkFence fence);
  /// The streams release() and flush_streams() flush (a Stream registers itself for its
  /// lifetime).
  void add_stream(class Stream* s);
  void remove_stream(class Stream* s);
  /// Submits and waits for the work recorded on every stream of the context (those another
  /// thread holds right now excepted: their work is their own buffers').
  void flush_streams();

 private:
  /// What an allocation's memory is for: memory_type's choice.
  enum class Kind { kDeviceLocal, kStaging, kHostTier };
  uint32_t memory_type(uint32_t bits, Kind kind) const;
  Allocation* allocate_kind(size_t bytes, Kind kind);

  PhysicalDevice pd_;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  VkPhysicalDeviceMemoryProperties mem_props_{};
  mutable std::mutex mu_;
  std::map<uint64_t, Allocation*> by_address_;
  std::atomic<int64_t> device_bytes_{0};
  std::unordered_map<std::string, VkPipeline> pipelines_;
  std::mutex queue_mu_;
  std::mutex streams_mu_;
  std::vector<Stream*> streams_;
};

/// One stream of work on a Context: ops are recorded into a command buffer (each followed by a
/// full memory barrier, so they run in issue order) and submitted by flush(). Host bytes go
/// through a host-visible staging arena that is reused after each flush. Destroying a stream
/// drops the work recorded since its last flush. One thread issues a stream's work; another
/// may flush it (Context::release), so the methods lock the stream, and an op that stages host
/// bytes and then dispatches holds hold() across both.
class Stream {
 public:
  explicit Stream(Context& ctx);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Context& context() const { return ctx_; }
  /// Records shader `name` with `push` (≤ kPushBytes) over gx × gy × gz workgroups.
  void dispatch(const std::string& name, const void* push, uint32_t push_bytes, uint32_t gx,
                uint32_t gy = 1, uint32_t gz = 1);
  /// Host → device: `host` is copied into the arena now; the device copy is recorded.
  void upload(uint64_t dst, const void* host, size_t bytes);
  /// Device → host: records the copy, flushes every stream of the context (so it sees what
  /// another stream, e.g. the engine's, wrote), and copies out of the arena.
  void download(void* host, uint64_t src, size_t bytes);
  /// Device → device (recorded).
  void copy(uint64_t dst, uint64_t src, size_t bytes);
  /// Fills `bytes` (a multiple of 4) at `dst` with the 32-bit `value` (recorded).
  void fill(uint64_t dst, uint32_t value, size_t bytes);
  /// Copies `bytes` of host memory into the arena and returns their device address, readable by
  /// the ops recorded until the next flush.
  uint64_t stage(const void* host, size_t bytes);
  /// Submits what was recorded and waits for it.
  void flush();
  /// flush() unless another thread holds the stream (its work is its own buffers').
  void try_flush();
  /// Holds the stream (recursive) until the returned lock goes.
  std::unique_lock<std::recursive_mutex> hold() { return std::unique_lock(mu_); }

 private:
  VkCommandBuffer recording();
  void barrier();
  /// Room for `bytes` in the arena (flushing or growing it): the offset.
  size_t reserve(size_t bytes);

  Context& ctx_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cb_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  bool recording_ = false;
  Allocation* arena_ = nullptr;
  size_t arena_used_ = 0;
  std::recursive_mutex mu_;
};

}  // namespace kvrun::vulkan
