// kv_cache.h — the paged KV cache: the block pool's storage for every layer (KvCache) and one
// session's block table (KvSequence). Design, memory math and invariants: docs/kv-cache.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend.h"
#include "dtype.h"
#include "kv/block_pool.h"
#include "kv/prefix_store.h"
#include "models/hparams.h"

namespace kvrun {

/// The pool has no block left for a session (every block is in use). Nothing was changed.
class KvCacheFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// How to build a KvCache.
struct KvCacheParams {
  DType type_k = DType::F16;  ///< -ctk: any of kKvCacheTypes
  DType type_v = DType::F16;  ///< -ctv: any of kKvCacheTypes
  int64_t block_size = 16;    ///< --kv-block-size: tokens per block (≥ 1)
  int64_t mem_bytes = 0;      ///< --kv-mem: pool budget in bytes (0: half the available RAM)
  bool prefix_cache = true;   ///< false: --no-prefix-cache (no hashing, no reuse)
  bool rotate = false;        ///< --kv-rotate: Hadamard-rotate K (and Q) along head_dim
  /// --kv-cache-dir: persist full prefix blocks there and find them again in later processes
  /// ("" = off; needs prefix_cache). See prefix_store.h.
  std::string cache_dir;
  int64_t cache_dir_max = int64_t(8) << 30;  ///< --kv-cache-dir-max: the directory's budget (bytes)
  uint64_t model_id = 0;                     ///< model_file_id() of the model (with cache_dir)
  /// --kv-offload-dir: the slow tier's file goes there ("" = no slow tier: a full fast tier is
  /// KvCacheFull). See kv_offload_file.h.
  std::string offload_dir;
  /// --kv-host-tier: the slow tier is host memory instead of a file, for caches whose rows are
  /// (partly) on a GPU: a layer on a device whose memory the host cannot address gets its slow
  /// tier in that device's BufferUse::kKvHost memory (pinned, mapped host RAM the GPU's kernels
  /// read and write in place), a layer on the host an anonymous mapping. Its budget is
  /// offload_max (required here; make_context_cache fills it in). Excludes offload_dir; needs a
  /// layer on such a device. See docs/kv-cache.md, "Tiers".
  bool host_tier = false;
  /// --kv-host-attn cpu: attention over the host tier's blocks runs on the CPU, reading the
  /// pinned rows in place, and is merged by log-sum-exp with the device's attention over its
  /// VRAM blocks (Backend::paged_attention_part / attn_merge; models/llama.cpp kv_attention).
  /// false (gpu): the device reads the host blocks over PCIe. Needs host_tier.
  bool host_attn_cpu = false;
  /// --kv-offload-max / --kv-host-max: the slow tier's budget in bytes (0: for make_context_cache
  /// the whole context, as mem_bytes (with host_tier: what the fast tier leaves of it); KvCache
  /// itself then takes 90% of the offload directory's free space, at most 64 GiB, and refuses
  /// host_tier).
  int64_t offload_max = 0;
  /// Per-layer block tables (docs/kv-cache.md, "Windowed layers"): for a model whose layers mix
  /// sliding-window and global attention (gemma2, gemma3), the windowed layers' rows live in a
  /// group of their own, given back once wholly before the window; the global layers keep every
  /// position. false: every layer's rows in one block (the uniform layout). Models whose every
  /// layer is windowed, or none, always use the uniform layout.
  bool window_tables = true;
  /// Blocks the windowed group holds (with window tables), taken from mem_bytes before the
  /// global layers' blocks; 0: as many as the global layers get (the budget split per block).
  int64_t window_blocks = 0;
};

/// Where a KvCache's blocks are (docs/kv-cache.md, "Tiers"). Block counts; bytes are counts ×
/// bytes_per_block().
struct KvTierStats {
  int64_t n_fast = 0;     ///< fast-tier capacity: --kv-mem ÷ bytes per block
  int64_t n_slow = 0;     ///< slow-tier capacity: --kv-offload-max (--kv-host-max) ÷ bytes per
                          ///< block (0: none)
  int64_t used_fast = 0;  ///< used blocks (referenced by a sequence) in the fast tier
  int64_t used_slow = 0;  ///< used blocks in the slow tier
  int64_t moves_out = 0;  ///< blocks moved fast → slow so far
  int64_t moves_in = 0;   ///< blocks moved slow → fast so far
  int64_t dropped = 0;    ///< unreferenced prefix-cache blocks dropped to free a fast block
  /// New blocks placed in the slow tier because every fast block was in a decode window.
  int64_t placed_slow = 0;
};

class KvSequence;

/// Pool + per-layer storage, shared by every session of a process. Storage is reserved as
/// virtual memory (touched when written), so an unused budget costs no RAM.
///
/// Tiers: with an offload directory or the host tier the pool has n_fast + n_slow blocks. Block ids
/// are stable (block tables and prefix hashes never change when a block moves); a slot map says
/// where each block's rows are. New blocks go to the fast tier; when it is full, the fast tier is
/// made room in by dropping an unreferenced prefix-cache block, else by moving the oldest block of
/// the largest sequence out (its last two blocks — the decode window and the block being written —
/// stay). Blocks move back when a sequence shrinks or ends (rebalance). Attention reads every
/// block where it lies, so the result is the same, bit for bit, as with one tier.
///
/// Window tables (KvCacheParams::window_tables, a model mixing windowed and global layers): the
/// pool's blocks hold the global layers' rows; each block id a sequence holds in its window also
/// has the windowed layers' rows in a slot of a second, smaller group (always in RAM), given back
/// by KvSequence::release_window_before. Block tables are the same for every layer: a windowed
/// layer's KvLayer maps block ids to its group's slots through KvLayer::slot_of.
class KvCache {
 public:
  /// Throws std::invalid_argument (a type that is not a KV cache type, block_size < 1, rotate
  /// with a head_dim that is not a power of two, a budget smaller than one block) or
  /// std::bad_alloc (the budget cannot be reserved).
  /// `kv_devices` [n_layer] (Placement::kv) says where each layer's rows live: layers on the
  /// host CPU device (or all, when empty) share one host mapping; a layer on another device gets
  /// its rows from that device (Device::alloc, BufferUse::kKv). A device whose memory the host
  /// cannot address (a GPU) keeps its rows there: copy-on-write and moves between the tiers
  /// copy them through a backend of that device (download / upload); its slow tier is the host
  /// tier (params.host_tier: BufferUse::kKvHost memory the kernels address in place), and the
  /// prefix store (--kv-cache-dir) reads and writes its blocks through that backend too (the
  /// bytes are every backend's, so block files move between CPU and GPU runs). With such a
  /// device, --kv-offload-dir (the file tier, whose rows the host reads in place) throws
  /// std::invalid_argument naming the flag; so do window tables with such a device or with
  /// --kv-cache-dir (make_context_cache turns window tables off there instead), and host_tier
  /// with offload_dir, without such a device, with a device that lacks Op::kKvHostTier or
  /// without a budget (offload_max).
  /// Blocks move between tiers only between engine steps (take_block, rebalance): every
  /// backend's work on the rows must be finished then, as the engine's steps ensure.
  KvCache(const Hparams& hp, const KvCacheParams& params,
          const std::vector<Device*>& kv_devices = {});
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvCacheParams& params() const;
  /// Layer `il`'s storage as the attention kernels see it.
  KvLayer layer(int64_t il) const;
  /// Layer `il`'s host tier as the CPU addresses it (--kv-host-attn cpu): layer(il) with k_slow
  /// and v_slow at the host tier's host addresses and no fast tier (k, v null: only blocks of
  /// the slow tier may be read through it). k_slow null when the layer has no host tier (no
  /// params.host_tier, a windowed layer, or MLA).
  KvLayer host_tier_layer(int64_t il) const;
  /// True when every layer's rows are in host-addressable memory (no layer has a device
  /// backend copying its rows).
  bool rows_on_host() const;
  int64_t n_layer() const;
  int64_t block_size() const;
  int64_t n_blocks()
      const;  ///< capacity of the pool (the global layers' blocks with window tables)
  /// K and V bytes of one position over every layer: kv_bytes_per_token(type_k, type_v, ...).
  int64_t bytes_per_token() const;
  /// Bytes of one pool block: block_size × the K and V rows of the layers it holds (every layer;
  /// with window tables the global layers only).
  int64_t bytes_per_block() const;
  /// The sliding window (Hparams::n_swa) of the windowed layers when they have blocks of their
  /// own (window tables on a mixed model), else 0.
  int64_t window() const;
  /// True when layer `il`'s rows are in the windowed group (window() > 0 and il windowed).
  bool windowed_layer(int64_t il) const;
  /// Layers in the windowed group (0 without window tables).
  int64_t n_window_layers() const;
  /// Windowed-group blocks the cache can hold (0 without window tables).
  int64_t window_blocks() const;
  /// Windowed-group blocks in some sequence's window now (the rest are free or keep the rows
  /// of a cached prefix block, reusable).
  int64_t window_blocks_used() const;
  /// Bytes of one windowed-group block: block_size × the windowed layers' K and V rows (0
  /// without window tables).
  int64_t window_bytes_per_block() const;
  BlockPool& pool();
  const BlockPool& pool() const;
  /// Copies block `src`'s rows (every layer, K and V; with window tables the windowed layers'
  /// rows too, both blocks holding them) to block `dst` (copy-on-write).
  void copy_block(int32_t dst, int32_t src);
  /// Writes synthetic K and V rows, every layer, at positions pos0 … pos0+n−1 of the block table
  /// `table` (blocks already taken; table[p / block_size] holds position p): random values
  /// (normal, sd 1, from `seed` and the layer) encoded by kv_encode_row in the cache's K/V types,
  /// so every row decodes to finite values. One block's worth of rows is encoded per layer and
  /// position p gets its row p % block_size. Host rows (the mapping, a host device's buffer, the
  /// slow tier) are written in place; rows the host cannot address go through Backend::upload of
  /// their device, in runs of consecutive slots. What Context::fill_synthetic writes (decode
  /// speed at a depth does not depend on the rows' values). Throws std::out_of_range when a
  /// position has no block in `table` (or a given-back one), std::invalid_argument for n < 0.
  void write_synthetic_rows(std::span<const int32_t> table, int64_t pos0, int64_t n, uint64_t seed);
  /// Copies `bytes` from byte `off` of block `block`'s K rows (v false) or V rows (v true) of
  /// layer `il` into host memory `dst`: by memcpy where the host addresses them, else through the
  /// layer's device backend (a download, finished when it returns). The rows of positions j …
  /// of a block start at off = j · row bytes (KvLayer). Throws std::out_of_range for a layer,
  /// block or byte range outside the cache. Between engine steps only (the rows are written).
  void read_block_rows(int64_t il, int32_t block, bool v, int64_t off, void* dst,
                       size_t bytes) const;
  /// The inverse of read_block_rows: writes `bytes` from host memory `src`; an upload through
  /// the device backend is finished when it returns (the next step, on another stream, reads it).
  void write_block_rows(int64_t il, int32_t block, bool v, int64_t off, const void* src,
                        size_t bytes);

  /// Takes a block for new rows (ref 1) in the fast tier, making room there as the class
  /// comment says; in the slow tier only when no fast block can be freed. Its slot's rows are
  /// committed first in device buffers that back their memory lazily (DeviceBuffer::commit).
  /// nullopt when the pool has no block left (nothing changed), or when a device has no memory
  /// to back the block's rows (the block goes back; a line on stderr, once).
  std::optional<int32_t> take_block();
  /// pool().ref / pool().unref, keeping the per-tier counts. Sequences use these.
  void ref_block(int32_t block);
  void unref_block(int32_t block);
  /// Moves used slow-tier blocks into unused fast blocks — the newest blocks of the smallest
  /// sequences first — while both exist. Called when a sequence shrinks or ends.
  void rebalance();
  /// True when block `block`'s rows are in the fast tier.
  bool in_fast_tier(int32_t block) const;
  /// Capacities, use and move counters of the two tiers.
  KvTierStats tier_stats() const;
  /// Where the slow tier is: its file (--kv-offload-dir), "host memory (--kv-host-tier)", or ""
  /// without a slow tier.
  std::string offload_path() const;
  /// Tokens whose K/V were computed (prefill + decode) and tokens taken from the prefix cache
  /// instead, over the cache's lifetime: counters for tests and /stats.
  int64_t n_tokens_computed() const;
  int64_t n_tokens_reused() const;
  void add_computed(int64_t n);
  void add_reused(int64_t n);

  /// The persistent prefix cache (--kv-cache-dir), or null when off.
  const PrefixStore* prefix_store() const;
  /// Writes used block `block` (every layer's K and V rows) to the persistent prefix cache under
  /// its chained hash, with its token ids; no-op without one. Rows in a GPU's memory are
  /// downloaded through the layer's copier backend: the step that wrote them must have finished
  /// (llama_forward returns synchronized).
  void persist_block(int32_t block, uint64_t hash, std::span<const int32_t> tokens);
  /// Fills block `block` from the persistent prefix cache; false (block untouched) on a miss or
  /// an untrusted file, or without a cache.
  bool restore_block(int32_t block, uint64_t hash, std::span<const int32_t> tokens);

 private:
  friend class KvSequence;  // registers itself (the victim policy reads the block tables)
  void attach(KvSequence* seq);
  void detach(KvSequence* seq);
  /// write_block_rows less its final synchronize: an upload through the layer's copier backend
  /// is only queued (restore_block synchronizes once after every layer's rows).
  void put_block_rows(int64_t il, int32_t block, bool v, int64_t off, const void* src,
                      size_t bytes);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The layers whose rows a KvCache of `p` for a model of `hp` keeps in its windowed group: the
/// windowed layers (Hparams::is_swa) when p.window_tables is on and the model mixes windowed
/// and global layers (gemma2: every other layer; gemma3: 5 of 6), else 0 (the uniform layout).
int64_t kv_window_table_layers(const Hparams& hp, const KvCacheParams& p);

/// MemAvailable from /proc/meminfo in bytes (what the machine can give without swapping); -1
/// when it cannot be read. Half of it is KvCache's budget when none is given.
int64_t mem_available_bytes();

/// The prefix hash of one full block (docs/kv-cache.md, invariant 3): XXH3-64 of the parent
/// block's hash (kKvRootHash for block 0), the K and V types and the block's token ids.
uint64_t kv_block_hash(uint64_t parent, std::span<const int32_t> tokens, DType type_k,
                       DType type_v);
/// The parent hash of a sequence's first block.
inline constexpr uint64_t kKvRootHash = 0x6b7672756e4b5630ull;  // "kvrunKV0"

/// One session's logical → physical block table over a KvCache (which must outlive it). The
/// destructor gives every block back.
class KvSequence {
 public:
  explicit KvSequence(KvCache& cache);
  ~KvSequence();
  KvSequence(const KvSequence&) = delete;
  KvSequence& operator=(const KvSequence&) = delete;

  /// Tokens whose K/V the sequence holds (positions 0 … n_tokens()−1).
  int64_t n_tokens() const;
  /// [ceil(n_tokens / block_size)] physical block ids (more while a reserve() is pending); the
  /// first n_released() are −1 (given back by release_before).
  const std::vector<int32_t>& block_table() const;
  /// Bytes of the blocks the table holds: (ceil(S / block_size) − n_released()) ×
  /// bytes_per_block, plus n_window_blocks() × window_bytes_per_block with window tables.
  int64_t bytes_held() const;
  /// With window tables: leading table entries whose windowed-layer rows were given back
  /// (release_window_before); 0 otherwise.
  int64_t n_window_released() const { return n_win_released_; }
  /// With window tables: entries whose windowed-layer rows the sequence holds (the table's
  /// entries from n_window_released() on); 0 otherwise.
  int64_t n_window_blocks() const;
  /// With window tables (KvCache::window() > 0): gives back the windowed layers' rows of every
  /// block wholly before position `pos` (no later query of a windowed layer reads them); the
  /// global layers keep them, so the table, n_tokens(), tokens() and the prefix hashes are
  /// unchanged. Returns the blocks whose windowed rows this call gave back (0 without window
  /// tables). Engine steps call it after each commit with pos = n_tokens() − window + 1. The
  /// rows stay in their slots until the group needs them (oldest first), so a truncate or a
  /// prefix match shortly behind may still find them.
  int64_t release_window_before(int64_t pos);
  /// Blocks of the table whose rows are in the cache's fast tier (the rest of bytes_held() is in
  /// the slow tier: --kv-offload-dir).
  int64_t n_fast_blocks() const;
  /// Gives back to the pool every block wholly before position `pos` (sliding-window attention:
  /// no later query reads them; the attention kernel never touches a block before its window).
  /// Their table entries become −1; n_tokens(), tokens() and the prefix hashes are unchanged
  /// (a released full block stays in the pool's prefix cache for other sequences). Returns the
  /// number of blocks given back by this call.
  int64_t release_before(int64_t pos);
  /// With window tables: whether the window of position n (n ≤ n_tokens()) has its windowed
  /// rows, held or given back but still kept (truncate(n) holds those again); always true
  /// without window tables or for n = 0.
  bool has_window_rows(int64_t n) const;
  /// Leading blocks given back by release_before (a truncate into them lowers it).
  int64_t n_released() const { return n_released_; }

  /// Makes positions n_tokens() … n_tokens()+n−1 writable: takes the blocks they need and copies
  /// a shared partial last block first (copy-on-write). Throws KvCacheFull with nothing changed.
  void reserve(int64_t n);
  /// Declares those n positions written with `tokens` (their ids; size n): n_tokens() grows by n,
  /// and blocks that became full get their prefix hash (when the prefix cache is on). Adds n to
  /// the cache's computed counter. n may be less than reserved (the rest stays reserved).
  void commit(std::span<const int32_t> tokens);
  /// Declares the next n reserved positions written with rows that no token computed
  /// (KvCache::write_synthetic_rows, Context::fill_synthetic): n_tokens() grows by n and tokens()
  /// gets kSyntheticToken for them. Their blocks, and every later block of the sequence (whose
  /// rows attend to them), are never hashed, so the prefix cache never offers them to anyone; a
  /// truncate to a position at or before the first synthetic one lifts that. Not counted as
  /// computed. Throws std::logic_error when fewer than n positions are reserved.
  void commit_synthetic(int64_t n);
  /// The token id tokens() holds for synthetic positions.
  static constexpr int32_t kSyntheticToken = 0;
  /// With n_tokens() == 0: takes the cached blocks matching the longest full-block prefix of
  /// `tokens`, leaving at least the last token to compute — blocks in the pool first, then blocks
  /// read from the persistent prefix cache (--kv-cache-dir) into free blocks; returns the tokens
  /// reused (a multiple of block_size, 0 without a match or with the prefix cache off; with
  /// window tables the match also needs the windowed rows of the blocks in the window of its
  /// first computed position, and is shortened until they are there) and adds
  /// them to the cache's reused counter. The sequence then holds those tokens (n_tokens() == the
  /// return value).
  int64_t attach_prefix(std::span<const int32_t> tokens);
  /// Forgets positions n … n_tokens()−1 (0 ≤ n ≤ n_tokens()), giving back blocks past them and
  /// any pending reservation (cancellation). A block left partial keeps its content (and its
  /// hash in the pool, still valid for other holders); the next reserve() copies it first when
  /// shared, or drops its hash when this sequence owns it alone. Throws std::logic_error when
  /// position n − 1 is in a released block, or (window tables) when !has_window_rows(n)
  /// (n = 0 is always allowed).
  void truncate(int64_t n);
  /// truncate(0).
  void clear();
  /// The token ids at positions 0 … n_tokens()−1.
  const std::vector<int32_t>& tokens() const;

 private:
  /// attach_prefix with window tables: shortens the match until every block in the window of
  /// its first computed position has windowed rows, and holds those.
  void attach_window_rows();
  KvCache& cache_;
  std::vector<int32_t> table_;
  std::vector<int32_t> tokens_;
  std::vector<uint64_t> hashes_;  // [full blocks] prefix hash chain
  int64_t reserved_ = 0;          // positions reserved beyond n_tokens()
  int64_t n_released_ = 0;        // leading table entries given back (−1)
  int64_t synthetic_from_ = -1;   // first synthetic position (−1: none); no block from it hashed
  int64_t n_win_released_ = 0;    // leading entries whose windowed rows were given back
};

}  // namespace kvrun
