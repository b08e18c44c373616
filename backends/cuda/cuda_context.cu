// cuda_context.cu — Context and DeviceBuffer (see cuda_context.h).
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "backend.h"
#include "cuda/cuda_check.cuh"
#include "cuda/cuda_context_impl.cuh"

namespace kvrun::cuda {
namespace {

/// cudaMalloc of `bytes` (≥ 1) into `ptr`. Throws kvrun::DeviceOutOfMemory (backend.h: the
/// engine may run the step again with fewer rows) when the device has no room
/// (cudaErrorMemoryAllocation, which is not sticky: it is cleared), CudaError for other failures.
void device_malloc(void** ptr, size_t bytes, const char* what) {
  const cudaError_t e = cudaMalloc(ptr, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw DeviceOutOfMemory(std::string(what) + ": out of memory allocating " +
                            std::to_string(bytes) + " bytes");
  }
  check(e, what);
}

std::atomic<uint64_t> g_scratch_generation{0};

}  // namespace

Scratch::~Scratch() { cudaFree(ptr_); }

uint64_t Scratch::generation() { return g_scratch_generation.load(); }

void* Scratch::get(cudaStream_t stream, size_t bytes) {
  if (bytes <= bytes_ && ptr_) return ptr_;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capturing), "cudaStreamIsCapturing");
  if (capturing != cudaStreamCaptureStatusNone)
    throw CudaError(
        "scratch memory must grow during graph capture: run the step once eagerly "
        "before capturing it");
  check(cudaStreamSynchronize(stream), "scratch: cudaStreamSynchronize");
  cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
  device_malloc(&ptr_, bytes, "scratch: cudaMalloc");
  bytes_ = bytes;
  ++g_scratch_generation;
  return ptr_;
}

cublasHandle_t Context::Impl::blas() {
  if (!cublas) {
    activate();
    if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) throw CudaError("cublasCreate failed");
    if (cublasSetStream(cublas, stream) != CUBLAS_STATUS_SUCCESS)
      throw CudaError("cublasSetStream failed");
  }
  return cublas;
}

void Context::Impl::activate() const {
  if (keying)
    throw KeyPassError(
        "a CUDA op enqueued work during a decode step's key pass (cuda_backend.cu: every op "
        "that launches must return after keyed())");
  check(cudaSetDevice(device), "cudaSetDevice");
}

Context::Context(int device) : impl_(std::make_unique<Impl>()) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    throw CudaError("no CUDA device (no driver or no GPU)");
  }
  if (device < 0 || device >= n)
    throw CudaError("CUDA device " + std::to_string(device) + " does not exist (" +
                    std::to_string(n) + " visible)");
  impl_->device = device;
  impl_->activate();
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  impl_->cc = prop.major * 10 + prop.minor;
  impl_->sm_count = prop.multiProcessorCount;
  const char* mv = std::getenv("KVRUN_CUDA_MATVEC");
  impl_->act_q8_matvec = !(mv && std::string(mv) == "f32");
  const char* sk = std::getenv("KVRUN_CUDA_SPLIT_K");
  impl_->split_k_quants = sk && std::string(sk) == "1";
  const char* fm = std::getenv("KVRUN_CUDA_FUSED_MATVEC");
  impl_->fused_matvec = !(fm && std::string(fm) == "0");
  const char* at = std::getenv("KVRUN_CUDA_ATTN_TYPED");
  impl_->attn_typed = at && std::string(at) == "1";
  const char* sh = std::getenv("KVRUN_CUDA_ATTN_SPLIT_HEADS");
  impl_->attn_split_heads = sh && std::string(sh) == "1";
  const char* ap = std::getenv("KVRUN_CUDA_ATTN_PREFILL");
  impl_->attn_prefill_tiled = ap && std::string(ap) == "tiled";
  const char* av = std::getenv("KVRUN_CUDA_ATTN_V");
  if (av && std::string(av) == "vec") impl_->attn_v = Impl::AttnV::kVec;
  if (av && std::string(av) == "pair") impl_->attn_v = Impl::AttnV::kPair;
  if (av && std::string(av) == "pair-elem") impl_->attn_v = Impl::AttnV::kPairElem;
  check(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
}

Context::Impl::~Impl() {
  cudaSetDevice(device);
  if (cublas) cublasDestroy(cublas);
  if (stream) {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
}

Context::~Context() = default;

Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;

int Context::device() const { return impl_->device; }
int Context::compute_capability() const { return impl_->cc; }
int Context::sm_count() const { return impl_->sm_count; }

void Context::synchronize() {
  impl_->activate();
  check(cudaStreamSynchronize(impl_->stream), "cudaStreamSynchronize");
}

DeviceBuffer::DeviceBuffer(Context& ctx, size_t bytes) : bytes_(bytes) {
  ctx.impl().activate();
  device_malloc(&ptr_, bytes ? bytes : 1, "cudaMalloc");
}

DeviceBuffer::~DeviceBuffer() { cudaFree(ptr_); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

namespace {
void check_range(size_t bytes, size_t offset, size_t size, const char* what) {
  if (offset > size || bytes > size - offset)
    throw std::out_of_range(std::string(what) + ": " + std::to_string(bytes) + " bytes at " +
                            std::to_string(offset) + " past a buffer of " + std::to_string(size));
}
}  // namespace

void DeviceBuffer::upload(Context& ctx, const void* src, size_t bytes, size_t offset) {
  check_range(bytes, offset, bytes_, "DeviceBuffer::upload");
  if (bytes == 0) return;
  cudaStream_t s = ctx.impl().stream;
  check(cudaMemcpyAsync(static_cast<char*>(ptr_) + offset, src, bytes, cudaMemcpyHostToDevice, s),
        "cudaMemcpyAsync H2D");
  check(cudaStreamSynchronize(s), "upload: cudaStreamSynchronize");
}

void DeviceBuffer::download(Context& ctx, void* dst, size_t bytes, size_t offset) const {
  check_range(bytes, offset, bytes_, "DeviceBuffer::download");
  cudaStream_t s = ctx.impl().stream;
  if (bytes)
    check(cudaMemcpyAsync(dst, static_cast<const char*>(ptr_) + offset, bytes,
                          cudaMemcpyDeviceToHost, s),
          "cudaMemcpyAsync D2H");
  check(cudaStreamSynchronize(s), "download: cudaStreamSynchronize");
}

void DeviceBuffer::fill_bytes(Context& ctx, int value) {
  check(cudaMemsetAsync(ptr_, value, bytes_, ctx.impl().stream), "cudaMemsetAsync");
}

}  // namespace kvrun::cuda
