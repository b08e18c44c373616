// block_pool.h — the KV block allocator: fixed-size blocks identified by index, reference counts,
// a hash → block map for prefix reuse and an LRU list of cached-but-unreferenced blocks.
//
// Every block is in exactly one state (docs/kv-cache.md, "Invariants"): free (ref 0, no hash),
// cached (ref 0, hash set, on the LRU list) or used (ref ≥ 1, hash optional). take() prefers a
// free block and otherwise evicts the least recently cached one (dropping its hash). All
// operations are O(1) (hash map lookups amortised). Not thread-safe: one owner (the KvCache)
// serialises access. Freed blocks keep their hash until reused, so a released prefix can be found
// again.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace kvrun {

/// Counts of blocks per state.
struct BlockPoolStats {
  int64_t n_blocks = 0;   ///< capacity
  int64_t n_free = 0;     ///< ref 0, no reusable content
  int64_t n_cached = 0;   ///< ref 0, hashed content kept for prefix reuse
  int64_t n_used = 0;     ///< ref ≥ 1
  int64_t n_evicted = 0;  ///< cached blocks evicted by take() so far
};

class BlockPool {
 public:
  /// A pool of `n_blocks` blocks (≥ 0), all free.
  explicit BlockPool(int64_t n_blocks);
  ~BlockPool();
  BlockPool(BlockPool&&) noexcept;
  BlockPool& operator=(BlockPool&&) noexcept;

  /// Takes a block (ref 1, no hash): a free one, else the least recently cached one (evicted).
  /// Returns nullopt when every block is used; nothing changes then.
  std::optional<int32_t> take();
  /// Takes the least recently cached block (ref 1, its content and hash dropped, counted as
  /// evicted) even when free blocks remain; nullopt when none is cached. (The KV cache's way
  /// to a block whose rows are already backed when a free one's cannot be.)
  std::optional<int32_t> take_cached();
  /// Adds a reference to a used or cached block (a cached block becomes used again).
  void ref(int32_t block);
  /// Drops a reference; at 0 the block becomes cached (if hashed) or free.
  void unref(int32_t block);
  /// Reference count of `block`.
  int32_t refcount(int32_t block) const;
  /// True when `block` has a prefix hash (used or cached).
  bool hashed(int32_t block) const;

  /// Gives a used block a prefix hash (replacing an older block with the same hash in the map).
  void set_hash(int32_t block, uint64_t hash);
  /// Drops a used block's hash (no-op without one): its content is about to change. (Used by
  /// KvSequence before writing into an exclusively owned block that was once full.)
  void clear_hash(int32_t block);
  /// The block holding content with `hash` (used or cached), if any. Does not change refs.
  std::optional<int32_t> find(uint64_t hash) const;
  /// Forgets a cached block's content: it becomes free (counted as evicted). No-op for a free
  /// block; throws std::logic_error for a used one. (The KV cache drops unreferenced prefix
  /// blocks this way to make room in its fast tier.)
  void drop(int32_t block);
  /// Forgets every hash (cached blocks become free); for --no-prefix-cache and tests.
  void clear_hashes();

  BlockPoolStats stats() const;
  int64_t n_blocks() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvrun
