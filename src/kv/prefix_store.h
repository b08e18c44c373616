// prefix_store.h — the persistent prefix cache (--kv-cache-dir): full KV blocks written to a
// directory, one file per block, and found again by a later process with the same model file,
// K/V types and block size, so a restarted server or a second run with the same long system
// prompt skips that prefill. Design: docs/kv-cache.md, "Persistent prefix cache".
//
// A block's file is named by its key (16 hex digits + ".kvb"), the XXH3-64 of the model id, the
// K/V types, the block size and the block's chained prefix hash (kv_block_hash). Content:
//   header (64 bytes: magic "KVRUNPB1", version, key, model id, chained hash, types, block size,
//   n_layer, K and V row bytes, payload bytes), the block's token ids (block_size × int32),
//   the payload (per layer: the block's K rows, then its V rows), XXH3-64 of all of the above.
// A file is trusted only when its size, every header field, its token ids and its checksum match
// what the reader expects; anything else is counted as rejected, removed and treated as a miss.
// Files are written to a temporary name (0600) and renamed, so a crash never leaves a partial
// file under a block name; stale temporary files are removed when a store opens the directory.
// The directory's size is kept under a budget by removing the least recently used files
// (modification time, refreshed on every hit).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "dtype.h"

namespace kvrun {

/// What a block file must match to be used.
struct PrefixStoreLayout {
  uint64_t model_id = 0;  ///< model_file_id() of the model file
  DType type_k = DType::F16;
  DType type_v = DType::F16;
  int64_t block_size = 16;  ///< tokens per block
  int64_t n_layer = 0;      ///< layers (payload = n_layer × block_size × (k_row + v_row))
  int64_t k_row_bytes = 0;  ///< bytes of one K row
  int64_t v_row_bytes = 0;  ///< bytes of one V row
  int64_t payload_bytes() const { return n_layer * block_size * (k_row_bytes + v_row_bytes); }
};

/// Counters of one store over its lifetime.
struct PrefixStoreStats {
  int64_t n_files = 0;     ///< block files in the directory now
  int64_t bytes = 0;       ///< their total size
  int64_t n_saved = 0;     ///< blocks written
  int64_t n_loaded = 0;    ///< blocks read back (hits)
  int64_t n_rejected = 0;  ///< files found but not trusted (corrupt, truncated, mismatched)
  int64_t n_evicted = 0;   ///< files removed to stay within the budget
};

/// One process's view of a --kv-cache-dir directory. Not thread-safe (its KvCache serialises).
class PrefixStore {
 public:
  /// Opens (creating it 0700 when missing) `dir`, removes stale temporary files, indexes the
  /// block files and trims them to `max_bytes` (> 0). Throws std::runtime_error when the
  /// directory cannot be created or read, std::invalid_argument for a bad layout or budget.
  PrefixStore(const std::string& dir, int64_t max_bytes, const PrefixStoreLayout& layout);
  ~PrefixStore();
  PrefixStore(const PrefixStore&) = delete;
  PrefixStore& operator=(const PrefixStore&) = delete;

  /// Whether a file for the block with chained hash `hash` exists (it may still be rejected).
  bool contains(uint64_t hash) const;
  /// Writes the block: `tokens` (block_size ids) and `payload` (layout.payload_bytes()). An I/O
  /// error (disk full, permissions) is reported once on stderr and the block is skipped: the
  /// cache is an optimisation, never a reason to fail a request. Evicts LRU files past the budget.
  void save(uint64_t hash, std::span<const int32_t> tokens, std::span<const uint8_t> payload);
  /// Reads the block with chained hash `hash` into `payload` (layout.payload_bytes()) when its
  /// file exists and matches `tokens` and the layout and its checksum; returns false otherwise
  /// (a mismatching file is removed and counted as rejected).
  bool load(uint64_t hash, std::span<const int32_t> tokens, std::span<uint8_t> payload);

  PrefixStoreStats stats() const;
  const std::string& dir() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A 64-bit identity of a model file for the store's keys: XXH3-64 over the file size, its first
/// 4 MiB (the GGUF header, metadata and tensor table, and the start of the data) and 64 chunks of
/// 64 KiB spread evenly over the rest. A sample, not a full-file hash: reading a multi-GB file
/// at every start would cost seconds; two different model files agreeing on every sampled byte
/// is not a practical risk (re-quantized or fine-tuned weights differ throughout). Throws
/// std::runtime_error when the file cannot be read.
uint64_t model_file_id(const std::string& path);

}  // namespace kvrun
