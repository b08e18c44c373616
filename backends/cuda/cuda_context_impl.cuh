// cuda_context_impl.cuh — the CUDA-side state behind Context (see cuda_context.h): stream,
// device properties, the cuBLAS handle (created on first use) and grow-only scratch buffers.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "cuda/cuda_context.h"

namespace kvrun::cuda {

/// Grow-only device scratch memory: get(n) returns at least n bytes, reallocating (after a
/// stream synchronization, so no queued kernel still reads the old memory) when it must grow;
/// growing while the stream is being captured into a graph throws CudaError, a device without
/// room kvrun::DeviceOutOfMemory.
class Scratch {
 public:
  ~Scratch();
  void* get(cudaStream_t stream, size_t bytes);
  /// How many times any Scratch of the process has (re)allocated: a recorded graph whose
  /// kernels read scratch memory is stale once this has changed (cuda_backend.cu's step key).
  static uint64_t generation();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// What Context::Impl::activate() throws while `keying`: an op enqueued work during a decode
/// step's key pass (a bug in the CUDA backend; it then turns graphs off and says so).
class KeyPassError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

struct Context::Impl {
  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  /// Destroys the cuBLAS handle and the stream (after the stream's work has finished).
  ~Impl();

  int device = 0;
  int cc = 0;        ///< compute capability, major·10 + minor
  int sm_count = 0;  ///< multiprocessors
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;  ///< created by blas() on first use
  Scratch staging;                  ///< small host→device inputs of ops (ids, positions)
  Scratch weights;                  ///< matmul: dequantized weight tiles
  Scratch acts;                     ///< matmul: activations converted for cuBLAS
  Scratch act_q8;                   ///< matmul: activations quantized for the integer matvec
  /// Decode matmuls of split q4_0 / q8_0 / q6_K weights quantize the activations to int8 blocks
  /// and use integer dot products (the CPU's arithmetic for q4_0 / q8_0); false
  /// (KVRUN_CUDA_MATVEC=f32) keeps them in f32 (for side-by-side measurement).
  bool act_q8_matvec = true;
  /// matmul_many of one activation row over 2–3 weights of one split type (q, k, v; gate, up)
  /// launches one kernel for all of them (matmul.cu k_matvec_q8_1_fused; the same sums);
  /// false (KVRUN_CUDA_FUSED_MATVEC=0) launches one per weight (for side-by-side measurement).
  bool fused_matvec = true;
  /// KVRUN_CUDA_SPLIT_K=1: the backend uploads q4_K / q5_K matrices in the split layout too
  /// (split_rows.cuh SplitRowsK: 16-byte loads and the integer decode matmul), as it does
  /// q4_0 / q8_0 / q6_K. Off by default until run on a GPU.
  bool split_k_quants = false;
  /// How paged attention reads each lane's V values of a row (paged_attention.cu v_values):
  /// kVec with one vector load where the type and alignment allow, kElem value by value. The
  /// default (kElem) measured faster for every KV type on an H200 (docs/cuda.md);
  /// KVRUN_CUDA_ATTN_V=vec picks the vector loads for side-by-side measurement on other GPUs.
  /// kPair / kPairElem (KVRUN_CUDA_ATTN_V=pair / pair-elem): each half-warp reads its own rows,
  /// twice the values a lane, with vector loads / value by value (paged_attention.cu
  /// v_accumulate_pairs; head sizes up to 128).
  enum class AttnV { kVec, kElem, kPair, kPairElem };
  AttnV attn_v = AttnV::kElem;
  /// KVRUN_CUDA_ATTN_TYPED=1: paged attention over f16, q8_0, fp8_e4m3 or nvfp4 K and V of one
  /// type (V value by value) runs a kernel with that type compiled in (paged_attention.cu
  /// TypedPair) instead of the run-time formats. Off by default until timed on a GPU.
  bool attn_typed = false;
  /// KVRUN_CUDA_ATTN_SPLIT_HEADS=1: paged attention over a short context (one segment, few
  /// blocks) splits the GQA group's query heads over a block's warps instead of the positions
  /// (paged_attention.cu k_attn SPLIT). Off by default until timed on a GPU.
  bool attn_split_heads = false;
  /// KVRUN_CUDA_ATTN_PREFILL=tiled: paged attention over a prefill batch runs the kernel tiled
  /// over query rows (prefill_attention.cu: a chunk of K/V rows decoded once into shared memory
  /// for a tile of rows) where prefill_tiles_wanted accepts the batch. Off by default: written
  /// and compiled, not yet run on a GPU.
  bool attn_prefill_tiled = false;
  Scratch partials;  ///< paged attention: per-segment (m, l, acc)
  Scratch rotated;   ///< --kv-rotate: the rotated K (kv_store) or Q (attention)

  /// Set by the CUDA backend while a decode step's ops only append their arguments to its step
  /// key (cuda_backend.cu run_graph): activate(), which every op calls before it enqueues work,
  /// then throws KeyPassError, so an op that forgot to return after keying is caught before it
  /// launches anything.
  bool keying = false;

  /// The cuBLAS handle bound to `stream` (created on first use; throws CudaError).
  cublasHandle_t blas();
  /// Makes this context's device current for the calling thread. Throws KeyPassError while
  /// `keying`, CudaError on failure.
  void activate() const;
};

}  // namespace kvrun::cuda
