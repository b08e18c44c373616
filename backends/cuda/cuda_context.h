// cuda_context.h — one GPU and one stream: the object every CUDA backend op runs on.
//
// Plain C++ header (no CUDA types): the stream, the cuBLAS handle and the ops' scratch memory are
// behind a pimpl (cuda_context_impl.cuh). Ops enqueue work on the context's stream and return
// without waiting; results are visible to the host after DeviceBuffer::download or
// Context::synchronize. A context is used by one host thread at a time.
#pragma once

#include <cstddef>
#include <memory>

namespace kvrun::cuda {

class DeviceBuffer;

/// A device and a non-blocking stream on it, plus the scratch memory and library handles the
/// ops share. Move-only.
class Context {
 public:
  /// Selects device `device` (an index into devices()) and creates a stream on it. Throws
  /// CudaError when there is no such device or the CUDA runtime fails.
  explicit Context(int device = 0);
  ~Context();
  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  /// The device index this context runs on.
  int device() const;
  /// Compute capability as major·10 + minor (90 = Hopper, 89 = Ada, 80 = Ampere).
  int compute_capability() const;
  /// Number of streaming multiprocessors (sizes the split of long attention contexts).
  int sm_count() const;

  /// Blocks the calling thread until every op enqueued so far has finished; throws CudaError
  /// when one of them failed.
  void synchronize();

  struct Impl;
  /// The CUDA-side state (only .cu files see its definition).
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// Device memory owned by one object (cudaMalloc / cudaFree). Move-only; an empty buffer has a
/// null data().
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// Allocates `bytes` on the context's device. Throws kvrun::DeviceOutOfMemory (backend.h) when
  /// the device has no room, CudaError when the allocation fails otherwise.
  DeviceBuffer(Context& ctx, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// The device address (never dereference it on the host); null for an empty buffer.
  void* data() { return ptr_; }
  const void* data() const { return ptr_; }
  /// Bytes allocated.
  size_t size() const { return bytes_; }
  /// data() as a typed device pointer.
  template <typename T>
  T* as() {
    return static_cast<T*>(ptr_);
  }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(ptr_);
  }

  /// Copies `bytes` from host memory `src` to offset `offset` of the buffer, in stream order;
  /// returns once `src` may be reused. Throws std::out_of_range past the end, CudaError on failure.
  void upload(Context& ctx, const void* src, size_t bytes, size_t offset = 0);
  /// Copies `bytes` from offset `offset` to host memory `dst` after all work enqueued on the
  /// context's stream so far; returns when `dst` holds them. Throws as upload.
  void download(Context& ctx, void* dst, size_t bytes, size_t offset = 0) const;
  /// Sets every byte to `value` in stream order (tests poison outputs with 0xFF: NaN floats).
  void fill_bytes(Context& ctx, int value);

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kvrun::cuda
