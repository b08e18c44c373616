// tensor.h — a non-owning tensor view and an owning byte buffer.
//
// Shapes follow ggml's convention: ne[0] is the innermost (contiguous) dimension, i.e. the row
// length; nb[i] is the stride of dimension i in bytes. For block types nb[0] is the block size
// in bytes and ne[0] must be a multiple of the block's element count; nb[1] = bytes of one row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "dtype.h"

namespace kvrun {

class Device;  // backends/backend.h: where a tensor's bytes live

constexpr int kMaxDims = 4;

/// A view of typed data: never owns `data`. A 1-D tensor has ne = {n, 1, 1, 1}.
struct Tensor {
  DType type = DType::F32;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};  ///< elements per dimension, ne[0] innermost
  size_t nb[kMaxDims] = {0, 0, 0, 0};   ///< stride per dimension in bytes
  void* data = nullptr;
  /// A copy of a weight matrix's rows in a backend's interleaved layout (backends/cpu/pack.h:
  /// the same values, 16 rows per group), or null. Not owned: whoever packed it (the model)
  /// keeps it alive as long as the view. Kernels that do not know the layout read `data`.
  /// On the CUDA device, packed == data marks a q4_0 / q8_0 matrix uploaded in the split layout
  /// (backends/cuda/matmul.h), which `data` then holds.
  const void* packed = nullptr;
  /// The device whose memory `data` (and `packed`) are in (backends/backend.h); null: host
  /// memory that no device owns (a mapped file, the heap).
  Device* device = nullptr;

  /// A contiguous view of `data` with shape ne0 × ne1 × ne2 × ne3 (ne0 a multiple of the
  /// type's block size). Throws std::invalid_argument otherwise.
  static Tensor contiguous(DType type, void* data, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1,
                           int64_t ne3 = 1);

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  /// Bytes spanned by the view when contiguous (nb[3] * ne[3]).
  size_t n_bytes() const { return nb[3] * size_t(ne[3]); }
  /// True when rows are packed with no gaps.
  bool is_contiguous() const;
  /// Pointer to row (i1, i2, i3).
  void* row(int64_t i1, int64_t i2 = 0, int64_t i3 = 0) const {
    return static_cast<char*>(data) + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
  }
  /// Decodes row (i1, i2, i3) into `dst` (ne[0] floats) with the type's reference codec.
  void row_to_float(float* dst, int64_t i1, int64_t i2 = 0, int64_t i3 = 0) const;
};

/// Whether a Buffer of at least kHugePageBytes asks the kernel for transparent huge pages: its
/// start is aligned to 2 MiB and the range madvise(MADV_HUGEPAGE)d before it is first written,
/// so Linux backs every whole 2 MiB of it with one page table entry (kernel documentation,
/// admin-guide/mm/transhuge.rst: with THP "madvise", the default of many distributions, only
/// madvised ranges get them; without free huge pages the kernel falls back to 4 KiB pages, so
/// this never fails an allocation). Decode streams the packed weights once per token: with 4 KiB
/// pages each page costs a TLB miss (a two-level walk in a VM), and llama3.2-1b decode ran
/// 1.04–1.20× as fast with it on a 2-core Zen 4 VM (MoE decode unchanged; docs/benchmarks.md).
/// Process-wide, default on (`--thp off`, tools/device_options.h); set before the model is
/// loaded; no-op where madvise has no MADV_HUGEPAGE.
void set_huge_pages(bool on);
/// The current set_huge_pages setting.
bool huge_pages();
/// Buffers of at least this many bytes get transparent huge pages (2 MiB, x86-64 and arm64's
/// usual PMD size).
inline constexpr size_t kHugePageBytes = size_t(2) << 20;

/// Owning, 64-byte aligned, zero-initialised memory; from kHugePageBytes up, 2 MiB aligned and
/// on transparent huge pages while huge_pages() is on. Movable, not copyable.
class Buffer {
 public:
  Buffer() = default;
  /// Allocates `n_bytes`, zeroed; throws std::bad_alloc when it cannot.
  explicit Buffer(size_t n_bytes);
  /// Allocates `n_bytes` without writing them (their contents are indeterminate; the padding
  /// past n_bytes up to the next multiple of 64 is zeroed), for a caller that writes every byte
  /// itself — from several threads, so that the first-touch page faults (the kernel's zeroing)
  /// are spread over them too. Throws std::bad_alloc when it cannot.
  static Buffer uninitialized(size_t n_bytes);
  void* data() { return ptr_.get(); }
  const void* data() const { return ptr_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  Buffer(size_t n_bytes, bool zero);
  std::unique_ptr<void, Free> ptr_;
  size_t size_ = 0;
};

}  // namespace kvrun
