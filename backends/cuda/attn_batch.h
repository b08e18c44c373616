// attn_batch.h — one forward step's paged-KV description on the GPU: which cache cell each
// query row writes and which blocks it reads. Built once per step on the host, uploaded in one
// copy, and read by kv_store and paged_attention of every layer (the CSR page table of
// FlashInfer's paged_kv_t; shared/DESIGN.md's AttnBatch). Plain C++ header.
#pragma once

#include <cstdint>
#include <vector>

#include "backend.h"
#include "cuda/cuda_context.h"
#include "dtype.h"

namespace kvrun::cuda {

/// One sequence's rows in the step: the seam's PagedSeq (backend.h).
using SeqRows = kvrun::PagedSeq;

/// One layer's K and V storage: the seam's KvLayer (backend.h) with k / v in device memory,
/// slot s holding block_size rows (the device sees slots: AttnBatch maps ids); slots from
/// n_fast on are in the host tier at k_slow / v_slow (pinned, mapped host memory: the device
/// pointers of a BufferUse::kKvHost buffer), which the kernels read and write in place
/// (kv_format.cuh KvRows).
using PagedKvLayer = kvrun::KvLayer;

/// Attention shapes: the seam's AttnParams (n_head, n_head_kv, head_dim, head_dim_v, scale;
/// flat aggregate initialization still works) and the --kv-rotate flag.
struct AttnShape : kvrun::AttnParams {
  bool rotate = false;  ///< --kv-rotate: K stored Hadamard-rotated along head_dim, Q rotated
  /// Sliding window (0 = none): a row at position p sees positions p − window < j ≤ p only
  /// (PagedAttnParams::window); blocks wholly before it are never read and may be −1.
  int64_t window = 0;
  float softcap = 0;  ///< scores s ← softcap · tanh(s / softcap) after scaling; 0 = off
};

/// The step's rows and page tables in device memory.
class AttnBatch {
 public:
  /// Builds and uploads the description of `n_seqs` sequences whose rows together are
  /// 0 … n_rows−1, each row exactly once. Block ids are mapped to storage slots with `slot_of`
  /// (host [n_blocks] id → slot, as KvLayer::slot_of; null: slot = id), so the device
  /// sees slots. A block id of −1 (a block a sliding window gave back) stays −1; attention must
  /// not read it (AttnShape::window). Throws std::invalid_argument when the rows do not tile
  /// 0 … n_rows−1, a row's own block is −1 or a slot is negative, CudaError on failure.
  void set(Context& ctx, const SeqRows* seqs, int64_t n_seqs, int64_t block_size,
           const int32_t* slot_of = nullptr);

  int64_t n_rows() const { return n_rows_; }
  int64_t block_size() const { return block_size_; }
  /// The longest context any row sees (its position + 1).
  int64_t max_ctx() const { return max_ctx_; }
  /// Device [n_rows] position of each row (also RoPE's positions).
  const int32_t* positions() const { return pos_; }
  /// Device [n_rows] offset into tables() of the row's sequence's slot table.
  const int32_t* row_tables() const { return row_tab_; }
  /// Device: the sequences' slot tables, concatenated.
  const int32_t* tables() const { return tables_; }
  /// Device [n_rows] cache cell each row writes: slot · block_size + position % block_size.
  const int64_t* cells() const { return cells_; }
  /// Host copies of positions() and row_tables() (valid until the next set), for launch
  /// decisions that depend on how the rows group into sequences (prefill_attention.cuh).
  const int32_t* host_positions() const {
    return reinterpret_cast<const int32_t*>(host_.data() + n_rows_ * 8);  // set()'s layout
  }
  const int32_t* host_row_tables() const { return host_positions() + n_rows_; }

 private:
  DeviceBuffer buf_;
  std::vector<uint8_t> host_;
  int64_t n_rows_ = 0, block_size_ = 0, max_ctx_ = 0;
  const int32_t* pos_ = nullptr;
  const int32_t* row_tab_ = nullptr;
  const int32_t* tables_ = nullptr;
  const int64_t* cells_ = nullptr;
};

}  // namespace kvrun::cuda
