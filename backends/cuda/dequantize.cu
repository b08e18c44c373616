// dequantize.cu — per-block GPU decoders and the row-decode op (see dequantize.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <string>

#include "blocks.h"
#include "cuda/cuda_check.cuh"
#include "cuda/dequantize.h"

namespace kvrun::cuda {
namespace {

__device__ float half_bits_to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// One thread per output value; each decodes its own element from its block.
__global__ void k_f16(const uint16_t* x, float* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = half_bits_to_float(x[i]);
}

__global__ void k_bf16(const uint16_t* x, float* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __bfloat162float(__ushort_as_bfloat16(x[i]));
}

__global__ void k_q8_0(const block_q8_0* x, float* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const block_q8_0& b = x[i / QK8_0];
  y[i] = half_bits_to_float(b.d) * float(b.qs[i % QK8_0]);
}

__global__ void k_q4_0(const block_q4_0* x, float* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const block_q4_0& b = x[i / QK4_0];
  const int j = int(i % QK4_0);
  const int q = j < QK4_0 / 2 ? (b.qs[j] & 0x0f) : (b.qs[j - QK4_0 / 2] >> 4);
  y[i] = half_bits_to_float(b.d) * float(q - 8);
}

// FP8: cuda_fp8.h conversions (hardware cvt on sm_89+, emulated below that).
template <__nv_fp8_interpretation_t kFormat>
__global__ void k_fp8(const uint8_t* x, float* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(x[i]), kFormat);
  y[i] = __half2float(__half(h));
}

template <typename Kernel, typename Src>
void launch(Kernel kernel, const void* d_src, float* d_dst, int64_t n) {
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  kernel<<<unsigned(blocks), threads>>>(static_cast<const Src*>(d_src), d_dst, n);
}

}  // namespace

bool dequantize_supported(DType type) {
  switch (type) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q4_0:
    case DType::Q8_0:
    case DType::FP8_E4M3:
    case DType::FP8_E5M2:
      return true;
    default:
      return false;
  }
}

void dequantize_to_f32(DType type, const void* src, float* dst, int64_t n) {
  if (!dequantize_supported(type))
    throw std::invalid_argument(std::string("cuda dequantize: unsupported type ") +
                                traits(type).name);
  auto bytes = row_bytes(type, n);
  if (!bytes || n <= 0) throw std::invalid_argument("cuda dequantize: bad element count");
  void* d_src = nullptr;
  float* d_dst = nullptr;
  try {
    check(cudaMalloc(&d_src, size_t(*bytes)), "cudaMalloc");
    check(cudaMalloc(reinterpret_cast<void**>(&d_dst), size_t(n) * sizeof(float)), "cudaMalloc");
    check(cudaMemcpy(d_src, src, size_t(*bytes), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    switch (type) {
      case DType::F32:
        check(cudaMemcpy(d_dst, d_src, size_t(*bytes), cudaMemcpyDeviceToDevice), "cudaMemcpy");
        break;
      case DType::F16:
        launch<decltype(&k_f16), uint16_t>(k_f16, d_src, d_dst, n);
        break;
      case DType::BF16:
        launch<decltype(&k_bf16), uint16_t>(k_bf16, d_src, d_dst, n);
        break;
      case DType::Q8_0:
        launch<decltype(&k_q8_0), block_q8_0>(k_q8_0, d_src, d_dst, n);
        break;
      case DType::Q4_0:
        launch<decltype(&k_q4_0), block_q4_0>(k_q4_0, d_src, d_dst, n);
        break;
      case DType::FP8_E4M3:
        launch<decltype(&k_fp8<__NV_E4M3>), uint8_t>(k_fp8<__NV_E4M3>, d_src, d_dst, n);
        break;
      case DType::FP8_E5M2:
        launch<decltype(&k_fp8<__NV_E5M2>), uint8_t>(k_fp8<__NV_E5M2>, d_src, d_dst, n);
        break;
      default:
        break;
    }
    check(cudaGetLastError(), "kernel launch");
    check(cudaMemcpy(dst, d_dst, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost),
          "cudaMemcpy D2H");
  } catch (...) {
    cudaFree(d_src);
    cudaFree(d_dst);
    throw;
  }
  cudaFree(d_src);
  cudaFree(d_dst);
}

}  // namespace kvrun::cuda
