// kv_cache_impl.h — KvCache's private state, shared by kv_cache.cpp (storage, tiers) and
// kv_sequence.cpp (block tables). Not part of the cache's interface: include kv/kv_cache.h.
//
// Storage: the fast tier is one anonymous private mapping reserved with MAP_NORESERVE (untouched
// pages cost no RAM). Each pool layer's K rows come first, then its V rows:
//   [layer 0: K[n_fast][block_size][k_row] V[n_fast][block_size][v_row]] [layer 1: ...] ...
// The slow tier (--kv-offload-dir) is an OffloadFile with the same layout over n_slow slots.
// Block ids map to slots through slot_of (id_at is its inverse); slots [0, n_fast) are fast.
//
// Window tables (docs/kv-cache.md, "Windowed layers"): for a model mixing windowed and global
// layers, the pool's blocks hold the global layers only; the windowed layers' rows of a block id
// are in a WindowGroup slot (win.slot_of[id], −1: none), in a mapping of their own with the same
// per-layer layout over win.n_slots slots. The attention kernels of a windowed layer get
// win.slot_of as their KvLayer::slot_of, so block tables and the step's PageTable stay the same
// for every layer; a kernel never reads a block before its window, where the slot is −1.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "kv/kv_cache.h"
#include "kv/kv_offload_file.h"

namespace kvrun {

/// The windowed layers' storage of a cache with window tables. A slot is free, held (win.ref of
/// its block > 0: the block is in some sequence's window) or keeps the rows of a block no window
/// holds (a cached prefix block's; taken back when a free slot is needed).
struct WindowGroup {
  int64_t window = 0;           // Hparams::n_swa; 0: no window tables
  std::vector<bool> layer;      // [n_layer] the layer's rows are here
  int64_t n_layers = 0;         // windowed layers
  int64_t n_slots = 0;          // capacity in blocks
  int64_t bytes_per_block = 0;  // block_size × the windowed layers' K and V rows
  uint8_t* base = nullptr;      // the mapping
  size_t map_bytes = 0;
  std::vector<int32_t> slot_of;  // [n_blocks] block id → slot (−1: none)
  std::vector<int32_t> id_at;    // [n_slots] slot → block id (−1: free)
  std::vector<int32_t> ref;      // [n_blocks] sequences holding the block in their window
  std::vector<int32_t> free;     // free slots (a stack: the last freed is reused first)
  int64_t live = 0;              // slots whose block has ref > 0
  // (slot, block id) of rows kept for prefix reuse, oldest first: reused in that order when no
  // slot is free. Entries whose slot was held again or reused since are skipped.
  std::deque<std::pair<int32_t, int32_t>> kept;

  WindowGroup() = default;
  WindowGroup(const WindowGroup&) = delete;
  WindowGroup& operator=(const WindowGroup&) = delete;
  ~WindowGroup() {
    if (base) munmap(base, map_bytes);
  }
  /// True when `e` still names a slot keeping the rows of a block no window holds.
  bool still_kept(std::pair<int32_t, int32_t> e) const {
    return slot_of[size_t(e.second)] == e.first && ref[size_t(e.second)] == 0;
  }
};

struct KvCache::Impl {
  KvCacheParams params;
  int64_t n_layer = 0;
  int64_t n_head_kv = 0, head_dim = 0, head_dim_v = 0;
  int64_t k_row = 0;            // bytes of one K row
  int64_t v_row = 0;            // bytes of one V row (0: MLA, no V rows)
  int64_t v_off = -1;           // MLA: byte offset of the latent (V) in a K row; −1 otherwise
  int64_t bytes_per_token = 0;  // every layer
  int64_t bytes_per_block = 0;  // a pool block: block_size × its layers' (the global ones') rows
  int64_t n_blocks = 0;         // n_fast + n_slow
  int64_t n_fast = 0;
  int64_t n_slow = 0;
  uint8_t* base = nullptr;  // the fast tier's mapping (layers on the host device)
  size_t map_bytes = 0;
  std::vector<uint8_t*> layer_base;                   // [n_layer] fast-tier rows of each layer
  std::vector<std::unique_ptr<DeviceBuffer>> device;  // rows of layers on other devices
  std::unique_ptr<OffloadFile> slow;  // the file slow tier (null without --kv-offload-dir)
  // --kv-host-tier: each pool layer's slow-tier rows in a BufferUse::kKvHost buffer of its
  // device (the host CPU's for a layer on the host)
  std::vector<std::unique_ptr<DeviceBuffer>> host_tier;
  // [n_layer] a pool layer's slow-tier K rows as its device addresses them (V rows follow after
  // n_slow K blocks), and as the host addresses them (the same but for a GPU's host tier on
  // Vulkan); empty without a slow tier
  std::vector<uint8_t*> slow_dev, slow_host;
  std::vector<int32_t> slot_of;   // [n_blocks] block id → slot
  std::vector<int32_t> id_at;     // [n_blocks] slot → block id
  KvTierStats ts;                 // use and move counters (capacities filled on read)
  std::vector<KvSequence*> seqs;  // live sequences (the victim policy reads their tables)
  int64_t cursor = 0;             // where the next scan of the fast slots starts
  BlockPool pool{0};
  int64_t computed = 0;
  int64_t reused = 0;
  std::unique_ptr<PrefixStore> store;  // --kv-cache-dir
  std::vector<uint8_t> payload;        // one block's rows, for the store
  // Window tables (KvCacheParams::window_tables on a mixed model): win.window > 0, and every
  // windowed layer's rows are in `win`'s storage; the pool's blocks hold the global layers.
  std::vector<int64_t> gidx;  // [n_layer] the layer's index in its group (the pool's, or win's)
  WindowGroup win;

  // [n_layer] for rows the host cannot address: a backend of their device that copies them
  // (copy-on-write); else null. `copiers` owns those backends, one per such device.
  std::vector<Backend*> copier;
  std::vector<std::unique_ptr<Backend>> copiers;
  // Fast-tier slots below this are committed in every `device` buffer (DeviceBuffer::commit:
  // a device that backs its KV address range as blocks come into use).
  int64_t committed = 0;
  bool commit_warned = false;  // the out-of-memory line was printed

  int64_t kb() const { return params.block_size * k_row; }  // K bytes of one block, one layer
  int64_t vb() const { return params.block_size * v_row; }

  /// Splits the layers into the pool's group and (window tables) the windowed group, and the
  /// budget `total` (bytes) between them: the windowed group's blocks first (params
  /// .window_blocks, else as many as the pool gets), the pool's fast tier from the rest. Sets
  /// gidx, win's shape, bytes_per_block and n_fast; throws std::invalid_argument when either
  /// gets no block.
  void plan_groups(const Hparams& hp, int64_t total);
  /// Reserves the windowed group's mapping (all slots free); std::bad_alloc when it cannot.
  void map_window_group();
  /// n_slow from the slow tier's budget (params.offload_max; for the file tier 90% of the
  /// directory's free space, at most 64 GiB, when 0). Throws std::invalid_argument naming the
  /// budget's flag when it is smaller than one block, or the host tier has none.
  void plan_slow_tier();
  /// Makes the slow tier's storage (after place_layers): the --kv-offload-dir file, or every
  /// pool layer's host-tier buffer (BufferUse::kKvHost of its device, the host CPU's for a
  /// layer on the host); sets slow_dev and slow_host. No-op without a slow tier.
  void make_slow_tier(const std::vector<Device*>& kv_devices);
  ~Impl() {
    if (base) munmap(base, map_bytes);
  }
  bool windowed(int64_t il) const { return win.window > 0 && win.layer[size_t(il)]; }
  uint8_t* layer_k(int64_t il) const { return layer_base[size_t(il)]; }
  uint8_t* layer_v(int64_t il) const {
    return layer_k(il) + (windowed(il) ? win.n_slots : n_fast) * kb();
  }
  uint8_t* slow_k(int64_t il) const { return slow_dev[size_t(il)]; }
  uint8_t* slow_v(int64_t il) const { return slow_k(il) + n_slow * kb(); }
  /// Layer il's K / V rows of storage slot s (a pool layer: windowed layers are not in tiers),
  /// as the layer's device addresses them.
  uint8_t* k_at(int64_t il, int64_t s) const {
    return s < n_fast ? layer_k(il) + s * kb() : slow_k(il) + (s - n_fast) * kb();
  }
  uint8_t* v_at(int64_t il, int64_t s) const {
    return s < n_fast ? layer_v(il) + s * vb() : slow_v(il) + (s - n_fast) * vb();
  }
  /// The layer's copier backend (rows the host cannot address), else null.
  Backend* copier_of(int64_t il) const { return copier.empty() ? nullptr : copier[size_t(il)]; }
  /// The same rows as the host addresses them; null for a GPU's fast tier (device memory).
  uint8_t* k_host(int64_t il, int64_t s) const {
    if (s >= n_fast) return slow_host[size_t(il)] + (s - n_fast) * kb();
    return copier_of(il) ? nullptr : k_at(il, s);
  }
  uint8_t* v_host(int64_t il, int64_t s) const {
    if (s >= n_fast) return slow_host[size_t(il)] + n_slow * kb() + (s - n_fast) * vb();
    return copier_of(il) ? nullptr : v_at(il, s);
  }

  bool fast(int32_t id) const { return slot_of[size_t(id)] < n_fast; }

  /// A block just taken from the pool (ref 1): counted as used, given a fast slot if one can be
  /// made (make_fast), that slot committed. False, the block given back, when a device cannot
  /// back the slot. (kv_cache.cpp)
  bool settle(int32_t b);

  /// Commits the fast-tier slots below `end` in every device buffer of the layers (their K rows
  /// at s·kb, their V rows after n_fast K blocks), before rows are first written there. Returns
  /// false when a device has no memory for them (a line on stderr, once): the slot cannot be
  /// used now, as if the pool were full. Slots stay committed once they are.
  bool commit_slots(int64_t end) {
    if (end <= committed || device.empty()) return true;
    const size_t from = size_t(committed), n = size_t(end - committed);
    try {
      for (const auto& b : device) {
        b->commit(from * size_t(kb()), n * size_t(kb()));
        b->commit(size_t(n_fast * kb()) + from * size_t(vb()), n * size_t(vb()));
      }
    } catch (const DeviceOutOfMemory& e) {
      if (!commit_warned)
        std::fprintf(stderr, "kvrun: the KV cache stops at %lld blocks: %s\n", (long long)committed,
                     e.what());
      commit_warned = true;
      return false;
    }
    committed = end;
    return true;
  }

  /// Commits block `block`'s fast-tier slot (commit_slots) where it is not yet: take_block
  /// commits the blocks it hands out, but read_block_rows / write_block_rows (persist_block,
  /// restore_block, saved context state) take any block id, and a device's uncommitted range
  /// faults when touched (CUDA: an unmapped address). Throws KvCacheFull, naming `who`, when the
  /// device has no memory for it. (kv_cache.cpp)
  void back_block(int32_t block, const char* who);

  /// Points every layer's fast-tier rows into the host mapping (at the offsets of a single
  /// mapping) or, for a layer placed on another device, into a buffer of that device.
  void place_layers(const std::vector<Device*>& kv_devices) {
    layer_base.resize(size_t(n_layer));
    const size_t layer_bytes = size_t(n_fast * (kb() + vb()));
    for (int64_t il = 0; il < n_layer; ++il) {
      const size_t g = size_t(gidx[size_t(il)]);
      if (windowed(il)) {  // (window tables need every layer on the host)
        layer_base[size_t(il)] = win.base + g * size_t(win.n_slots * (kb() + vb()));
        continue;
      }
      Device* d = kv_devices.empty() ? nullptr : kv_devices[size_t(il)];
      if (!d || d == &cpu_device()) {
        layer_base[size_t(il)] = base + g * layer_bytes;
        continue;
      }
      device.push_back(d->alloc(layer_bytes, BufferUse::kKv));
      layer_base[size_t(il)] = static_cast<uint8_t*>(device.back()->data());
      if (d->host_memory()) continue;
      copier.resize(size_t(n_layer), nullptr);
      for (size_t j = 0; j < size_t(il) && !copier[size_t(il)]; ++j)
        if (kv_devices[j] == d) copier[size_t(il)] = copier[j];
      if (!copier[size_t(il)]) {
        copiers.push_back(d->make_backend(1));
        copier[size_t(il)] = copiers.back().get();
      }
    }
  }

  /// Copies `n` bytes of one layer's rows: dst / src as the device addresses them (dd, sd) and
  /// as the host does (dh, sh; null where it cannot). Host to host by memcpy; otherwise
  /// through the layer's copier backend `be`: an upload from a host-tier block, a download
  /// into one, or device to device through `tmp`.
  static void copy_rows(Backend* be, uint8_t* dd, uint8_t* dh, const uint8_t* sd, const uint8_t* sh,
                        size_t n, std::vector<uint8_t>& tmp) {
    if (dh && sh) {
      std::memcpy(dh, sh, n);
    } else if (sh) {
      be->upload(dd, sh, n);
    } else if (dh) {
      be->download(dh, sd, n);
    } else {
      tmp.resize(n);
      be->download(tmp.data(), sd, n);
      be->upload(dd, tmp.data(), n);
    }
  }

  /// Copies every pool layer's K and V rows of slot `src` to slot `dst`: in place where the host
  /// addresses both (host rows, a host tier), else through the layer's device backend (a block
  /// moving between a GPU's memory and its host tier, copy-on-write in its memory). The engine's
  /// backends finish every step before the next one reserves blocks, so the rows are written.
  void copy_slot(int64_t dst, int64_t src) {
    std::vector<uint8_t> tmp;
    if (!copier.empty())  // (never reallocated under a pending upload)
      tmp.reserve(size_t(std::max(kb(), vb())));
    for (int64_t il = 0; il < n_layer; ++il) {
      if (windowed(il)) continue;  // (copy_block copies those: win_copy)
      Backend* be = copier_of(il);
      copy_rows(be, k_at(il, dst), k_host(il, dst), k_at(il, src), k_host(il, src), size_t(kb()),
                tmp);
      copy_rows(be, v_at(il, dst), v_host(il, dst), v_at(il, src), v_host(il, src), size_t(vb()),
                tmp);
      if (be) be->synchronize();  // (an upload from the host tier may still be reading it)
    }
  }
  /// Writes `bytes` from host memory at byte `off` of slot s's K (v false) or V rows of layer
  /// il: in place when the host addresses them, else through the layer's copier backend
  /// (asynchronously: `src` must stay valid until its synchronize()).
  void write_rows(int64_t il, int64_t s, bool v, int64_t off, const uint8_t* src, size_t bytes) {
    if (uint8_t* h = v ? v_host(il, s) : k_host(il, s))
      std::memcpy(h + off, src, bytes);
    else
      copier_of(il)->upload((v ? v_at(il, s) : k_at(il, s)) + off, src, bytes);
  }

  void swap_slots(int32_t a, int32_t b) {
    std::swap(slot_of[size_t(a)], slot_of[size_t(b)]);
    id_at[size_t(slot_of[size_t(a)])] = a;
    id_at[size_t(slot_of[size_t(b)])] = b;
  }
  /// Counts a block becoming used (d = +1) or unused (d = −1) in its tier.
  void count_used(int32_t id, int64_t d) { (fast(id) ? ts.used_fast : ts.used_slow) += d; }

  /// A block id with ref 0 whose slot is fast — a free one if any, else a cached one (whose
  /// prefix content is then dropped) — or -1. Scans the fast slots from the cursor.
  int32_t unused_fast_block() {
    if (ts.used_fast >= n_fast) return -1;
    int32_t cached = -1;
    for (int64_t i = 0; i < n_fast; ++i) {
      const int64_t s = (cursor + i) % n_fast;
      const int32_t id = id_at[size_t(s)];
      if (pool.refcount(id) != 0) continue;
      if (!pool.hashed(id)) {
        cursor = (s + 1) % n_fast;
        return id;
      }
      if (cached < 0) cached = id;
    }
    if (cached >= 0) {
      pool.drop(cached);
      ++ts.dropped;
    }
    return cached;
  }

  /// The oldest fast block of the largest sequence outside its last two blocks, or -1.
  int32_t victim() const {
    std::vector<const KvSequence*> order(seqs.begin(), seqs.end());
    std::sort(order.begin(), order.end(), [](const KvSequence* a, const KvSequence* b) {
      return a->n_tokens() > b->n_tokens();
    });
    for (const KvSequence* q : order) {
      const std::vector<int32_t>& t = q->block_table();
      const int64_t end =
          std::min<int64_t>(int64_t(t.size()), q->n_tokens() / params.block_size - 1);
      for (int64_t i = 0; i < end; ++i)  // (−1: given back by release_before)
        if (t[size_t(i)] >= 0 && fast(t[size_t(i)])) return t[size_t(i)];
    }
    return -1;
  }

  /// Gives used block `b` (new: its rows are not yet written) a fast slot if one can be made.
  void make_fast(int32_t b) {
    if (const int32_t u = unused_fast_block(); u >= 0) {
      swap_slots(b, u);  // b's rows are not written yet: nothing to copy
      --ts.used_slow;
      ++ts.used_fast;
      return;
    }
    if (const int32_t v = victim(); v >= 0) {
      copy_slot(slot_of[size_t(b)], slot_of[size_t(v)]);  // v's rows into b's slow slot
      swap_slots(b, v);
      ++ts.moves_out;
      return;
    }
    ++ts.placed_slow;
  }

  // ---- the windowed group (window tables) ----

  /// Windowed rows of slot s, windowed layer il.
  uint8_t* wk_at(int64_t il, int64_t s) const { return layer_k(il) + s * kb(); }
  uint8_t* wv_at(int64_t il, int64_t s) const { return layer_v(il) + s * vb(); }
  /// Slots not in any sequence's window (free, or holding a cached block's rows).
  int64_t win_available() const { return win.n_slots - win.live; }
  /// A windowed slot for new rows: a free one (the most recently freed: its pages are touched
  /// already), else the one that has kept a block's rows longest (detached from it). -1 when
  /// none.
  int32_t win_take_slot() {
    if (!win.free.empty()) {
      const int32_t s = win.free.back();
      win.free.pop_back();
      return s;
    }
    while (!win.kept.empty()) {
      const auto e = win.kept.front();
      win.kept.pop_front();
      if (!win.still_kept(e)) continue;
      win.slot_of[size_t(e.second)] = -1;
      win.id_at[size_t(e.first)] = -1;
      return e.first;
    }
    return -1;
  }
  /// A sequence holds block `id` in its window: its windowed rows get a slot if they have none
  /// (the caller checked win_available()). Throws KvCacheFull when no slot is left.
  void win_hold(int32_t id) {
    if (win.ref[size_t(id)]++ > 0) return;
    ++win.live;
    if (win.slot_of[size_t(id)] >= 0) return;  // a cached block's rows, reused
    const int32_t s = win_take_slot();
    if (s < 0) {
      --win.ref[size_t(id)];
      --win.live;
      throw KvCacheFull("KV cache full: no windowed-layer block left");
    }
    win.slot_of[size_t(id)] = s;
    win.id_at[size_t(s)] = id;
  }
  /// A sequence no longer holds block `id` in its window. At no holder left the slot is freed,
  /// or, with `keep` (a full, hashed block a later prefix match may take), keeps its rows until
  /// its slot is needed (oldest kept first).
  void win_drop(int32_t id, bool keep) {
    if (--win.ref[size_t(id)] > 0) return;
    --win.live;
    const int32_t s = win.slot_of[size_t(id)];
    if (keep) {
      win.kept.emplace_back(s, id);
      if (win.kept.size() > size_t(4 * win.n_slots + 16)) {  // drop the stale entries
        std::deque<std::pair<int32_t, int32_t>> live_entries;
        for (const auto& e : win.kept)
          if (win.still_kept(e)) live_entries.push_back(e);
        win.kept.swap(live_entries);
      }
      return;
    }
    win.slot_of[size_t(id)] = -1;
    win.id_at[size_t(s)] = -1;
    win.free.push_back(s);
  }
  bool win_has(int32_t id) const { return win.slot_of[size_t(id)] >= 0; }
  /// Copies block src's windowed rows to block dst's (both hold slots).
  void win_copy(int32_t dst, int32_t src) {
    const int64_t sd = win.slot_of[size_t(dst)], ss = win.slot_of[size_t(src)];
    for (int64_t il = 0; il < n_layer; ++il) {
      if (!windowed(il)) continue;
      std::memcpy(wk_at(il, sd), wk_at(il, ss), size_t(kb()));
      std::memcpy(wv_at(il, sd), wv_at(il, ss), size_t(vb()));
    }
  }
};

}  // namespace kvrun
