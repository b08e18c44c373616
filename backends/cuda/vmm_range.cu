// vmm_range.cu — see vmm_range.h.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "backend.h"
#include "cuda/cuda_error.h"
#include "cuda/vmm_range.h"

namespace kvrun::cuda {
namespace {

/// The driver functions VmmRange calls, looked up once (null members: not available).
struct Driver {
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*granularity)(size_t*, const CUmemAllocationProp*,
                          CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*address_free)(CUdeviceptr, size_t) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*error_string)(CUresult, const char**) = nullptr;
  bool ok = false;
};

template <typename F>
bool lookup(const char* symbol, F& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  // 12000: the entry points as CUDA 12.0 defined them (unchanged since 10.2 for these).
  if (cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !p) {
    cudaGetLastError();
    return false;
  }
  fn = reinterpret_cast<F>(p);
  return true;
}

const Driver& driver() {
  static const Driver d = [] {
    Driver r;
    r.ok = lookup("cuDeviceGet", r.device_get) && lookup("cuDeviceGetAttribute", r.attribute) &&
           lookup("cuMemGetAllocationGranularity", r.granularity) &&
           lookup("cuMemAddressReserve", r.reserve) && lookup("cuMemAddressFree", r.address_free) &&
           lookup("cuMemCreate", r.create) && lookup("cuMemRelease", r.release) &&
           lookup("cuMemMap", r.map) && lookup("cuMemUnmap", r.unmap) &&
           lookup("cuMemSetAccess", r.set_access) && lookup("cuGetErrorString", r.error_string);
    return r;
  }();
  return d;
}

std::string message(CUresult e, const char* what) {
  const char* s = nullptr;
  if (driver().error_string) driver().error_string(e, &s);
  return std::string(what) + ": " + (s ? s : "CUDA driver error " + std::to_string(int(e)));
}

void check(CUresult e, const char* what) {
  if (e != CUDA_SUCCESS) throw CudaError(message(e, what));
}

/// Device memory on `device`, pinned (not migratable), as cuMemCreate takes it.
CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp p;
  std::memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  return p;
}

}  // namespace

std::unique_ptr<VmmRange> VmmRange::reserve(int device, size_t bytes) {
  if (const char* e = std::getenv("KVRUN_CUDA_VMM"); e && std::strcmp(e, "0") == 0) return nullptr;
  const Driver& d = driver();
  if (!d.ok) return nullptr;
  CUdevice dev = 0;
  int vmm = 0;
  if (d.device_get(&dev, device) != CUDA_SUCCESS ||
      d.attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) !=
          CUDA_SUCCESS ||
      !vmm)
    return nullptr;
  const CUmemAllocationProp prop = device_prop(device);
  size_t g = 0;
  check(d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        "cuMemGetAllocationGranularity");
  std::unique_ptr<VmmRange> r(new VmmRange());
  r->device_ = device;
  r->granule_ = g;
  r->size_ = (std::max<size_t>(bytes, 1) + g - 1) / g * g;
  CUdeviceptr base = 0;
  check(d.reserve(&base, r->size_, g, 0, 0), "cuMemAddressReserve");
  r->base_ = uint64_t(base);
  r->handles_.assign(r->size_ / g, 0);
  r->backed_.assign(r->size_ / g, false);
  return r;
}

VmmRange::~VmmRange() {
  // Kernels of any stream may still read the rows: wait for the device first, as cudaFree
  // (the buffer this replaces) does by itself; cuMemUnmap does not.
  if (cudaSetDevice(device_) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
    cudaGetLastError();
  const Driver& d = driver();
  for (size_t i = 0; i < handles_.size(); ++i) {
    if (!backed_[i]) continue;
    d.unmap(CUdeviceptr(base_ + i * granule_), granule_);
    d.release(CUmemGenericAllocationHandle(handles_[i]));
  }
  if (base_) d.address_free(CUdeviceptr(base_), size_);
}

void* VmmRange::data() const { return reinterpret_cast<void*>(base_); }
size_t VmmRange::size() const { return size_; }
size_t VmmRange::granularity() const { return granule_; }
size_t VmmRange::committed() const { return committed_; }

void VmmRange::commit(size_t offset, size_t bytes) {
  if (bytes == 0) return;
  if (offset > size_ || bytes > size_ - offset)
    throw std::out_of_range("VmmRange::commit: bytes past the reserved range");
  const Driver& d = driver();
  const CUmemAllocationProp prop = device_prop(device_);
  CUmemAccessDesc access;
  std::memset(&access, 0, sizeof access);
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (size_t i = offset / granule_; i <= (offset + bytes - 1) / granule_; ++i) {
    if (backed_[i]) continue;
    CUmemGenericAllocationHandle h = 0;
    const CUresult e = d.create(&h, granule_, &prop, 0);
    if (e == CUDA_ERROR_OUT_OF_MEMORY)
      throw DeviceOutOfMemory("CUDA" + std::to_string(device_) + ": out of memory for KV blocks (" +
                              std::to_string(committed_ >> 20) + " MiB of the " +
                              std::to_string(size_ >> 20) + " MiB reserved are in use)");
    check(e, "cuMemCreate");
    const CUdeviceptr at = CUdeviceptr(base_ + i * granule_);
    CUresult m = d.map(at, granule_, 0, h, 0);
    if (m == CUDA_SUCCESS) {
      m = d.set_access(at, granule_, &access, 1);
      if (m != CUDA_SUCCESS) d.unmap(at, granule_);
    }
    if (m != CUDA_SUCCESS) {
      d.release(h);
      check(m, "cuMemMap / cuMemSetAccess");
    }
    handles_[i] = uint64_t(h);
    backed_[i] = true;
    committed_ += granule_;
  }
}

}  // namespace kvrun::cuda
