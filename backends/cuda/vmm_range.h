// vmm_range.h — device memory whose address range is reserved at once and backed as it comes
// into use, through CUDA's virtual memory management (the driver API's cuMemAddressReserve,
// cuMemCreate, cuMemMap, cuMemSetAccess; CUDA Driver API reference, "Virtual Memory
// Management"). The KV cache's buffers use it (BufferUse::kKv, DeviceBuffer::commit): `-c
// 131072` reserves addresses for every block, and VRAM is taken only for the blocks in use.
//
// The driver functions are looked up at run time (cudaGetDriverEntryPointByVersion), so the
// backend does not link libcuda; a driver or device without virtual memory management makes
// VmmRange::reserve return null and the caller falls back to cudaMalloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace kvrun::cuda {

/// A reserved range of device addresses on one GPU, backed by device memory granule by granule
/// (the driver's minimum allocation granularity, 2 MiB on current GPUs) where commit() asks.
/// Not thread-safe (its KV cache serialises commits).
class VmmRange {
 public:
  /// Reserves at least `bytes` (rounded up to the granularity) of addresses on CUDA device
  /// `device` (its ordinal), nothing backed yet. Null when the driver lacks the VMM entry points,
  /// the device does not support virtual memory management, or KVRUN_CUDA_VMM=0 is set. Throws
  /// CudaError when the reservation itself fails.
  static std::unique_ptr<VmmRange> reserve(int device, size_t bytes);
  ~VmmRange();
  VmmRange(const VmmRange&) = delete;
  VmmRange& operator=(const VmmRange&) = delete;

  /// First byte of the range (a device address).
  void* data() const;
  /// Bytes reserved (a multiple of granularity()).
  size_t size() const;
  size_t granularity() const;
  /// Backs bytes [offset, offset + bytes) with device memory: every granule they touch that is
  /// not backed yet gets its own allocation, mapped read-write for the device. Idempotent.
  /// Throws DeviceOutOfMemory (backend.h) when the device has no memory for a granule (the
  /// range stays as it was before that granule), CudaError for another driver failure,
  /// std::out_of_range past the end.
  void commit(size_t offset, size_t bytes);
  /// Bytes backed so far.
  size_t committed() const;

 private:
  VmmRange() = default;
  int device_ = 0;
  uint64_t base_ = 0;  // CUdeviceptr
  size_t size_ = 0;
  size_t granule_ = 0;
  std::vector<uint64_t> handles_;  // [granules] CUmemGenericAllocationHandle where backed
  std::vector<bool> backed_;       // [granules]
  size_t committed_ = 0;
};

}  // namespace kvrun::cuda
