// kv_cache.cpp — the paged KV cache's storage (KvCache) and per-session block tables
// (KvSequence). Design and invariants: docs/kv-cache.md.
//
// The fast tier is one anonymous private mapping reserved with MAP_NORESERVE: untouched pages
// cost no RAM. Layer il's K rows come first, then its V rows:
//   [layer 0: K[n_fast][block_size][k_row] V[n_fast][block_size][v_row]] [layer 1: ...] ...
// so the mapping is exactly n_fast × bytes_per_block bytes. The slow tier (--kv-offload-dir) is
// an OffloadFile with the same layout over n_slow slots. Block ids map to slots through slot_of
// (id_at is its inverse); slots [0, n_fast) are fast. Moving a block copies its rows between two
// slots and swaps the two ids' slots, so block tables and prefix hashes never change.
//
// Writing into a block that was once full: a sequence that truncates into the middle of a block
// keeps that block (its rows before the cut are still valid), and the block keeps its hash in the
// pool because its content is unchanged and may be shared with, or later matched by, others.
// The next reserve() is the point where the block is about to be written: if it is shared (ref >
// 1) the sequence copies it to a fresh block first (copy-on-write) and the original stays intact
// for its other holders; if the sequence owns it alone, its hash is dropped (clear_hash) since its
// content is about to diverge.
#include "kv/kv_cache.h"

#include <sys/mman.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <random>
#include <sstream>
#include <string>

#include "kv/kv_offload_file.h"
#include "kv_layout.h"

namespace kvrun {

namespace {

/// Half of MemAvailable; 1 GiB when it cannot be read.
int64_t default_budget() {
  const int64_t avail = mem_available_bytes();
  return avail > 0 ? avail / 2 : int64_t(1) << 30;
}

bool is_kv_type(DType t) {
  return std::find(std::begin(kKvCacheTypes), std::end(kKvCacheTypes), t) !=
         std::end(kKvCacheTypes);
}

bool is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

/// `reps` copies of `n_rows` rows of n_head_kv × head_dim normal(0, 1) values from `rng`,
/// encoded in `type` (one after the other: row r of copy i at (i · n_rows + r) · row bytes).
void random_rows(DType type, int64_t n_head_kv, int64_t head_dim, int64_t n_rows, int64_t reps,
                 std::mt19937_64& rng, std::vector<uint8_t>& out) {
  const size_t row = size_t(kv_row_bytes(type, n_head_kv, head_dim));
  const size_t one = size_t(n_rows) * row;
  out.resize(one * size_t(reps));
  std::vector<float> x(size_t(n_head_kv * head_dim));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (float& v : x) v = normal(rng);
    kv_encode_row(type, n_head_kv, head_dim, x.data(), out.data() + size_t(r) * row);
  }
  for (int64_t i = 1; i < reps; ++i) std::memcpy(out.data() + size_t(i) * one, out.data(), one);
}

/// Throws std::invalid_argument for parameters the cache cannot be built with.
void validate(const Hparams& hp, const KvCacheParams& p) {
  if (!is_kv_type(p.type_k) || !is_kv_type(p.type_v))
    throw std::invalid_argument(
        "KV cache: type_k / type_v must be one of " +
        std::string("f32, f16, bf16, q8_0, q4_0, fp8_e4m3, fp8_e5m2, nvfp4"));
  if (p.block_size < 1)
    throw std::invalid_argument("KV cache: block size must be >= 1 (got " +
                                std::to_string(p.block_size) + ")");
  if (p.mem_bytes < 0) throw std::invalid_argument("KV cache: negative memory budget");
  if (hp.n_layer < 1 || hp.n_head_kv < 1 || hp.head_dim < 1 || hp.head_dim_v < 1)
    throw std::invalid_argument("KV cache: n_layer, n_head_kv, head_dim, head_dim_v must be >= 1");
  // --kv-rotate Hadamard-rotates K and Q along head_dim (V is not rotated).
  if (p.rotate && !is_pow2(hp.head_dim))
    throw std::invalid_argument("KV cache: --kv-rotate needs a power-of-two head_dim (got " +
                                std::to_string(hp.head_dim) + ")");
}

}  // namespace

int64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream ss(line.substr(13));
    int64_t kib = 0;
    if (ss >> kib && kib > 0) return kib * 1024;
    break;
  }
  return -1;
}

uint64_t kv_block_hash(uint64_t parent, std::span<const int32_t> tokens, DType type_k,
                       DType type_v) {
  struct {
    uint64_t parent;
    uint32_t type_k;
    uint32_t type_v;
  } head{parent, static_cast<uint32_t>(type_k), static_cast<uint32_t>(type_v)};
  const uint64_t seed = XXH3_64bits(&head, sizeof(head));
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), seed);
}

// ---------------------------------------------------------------------------------------------
// KvCache

struct KvCache::Impl {
  KvCacheParams params;
  int64_t n_layer = 0;
  int64_t n_head_kv = 0, head_dim = 0, head_dim_v = 0;
  int64_t k_row = 0;  // bytes of one K row
  int64_t v_row = 0;  // bytes of one V row
  int64_t bytes_per_token = 0;
  int64_t bytes_per_block = 0;
  int64_t n_blocks = 0;  // n_fast + n_slow
  int64_t n_fast = 0;
  int64_t n_slow = 0;
  uint8_t* base = nullptr;  // the fast tier's mapping (layers on the host device)
  size_t map_bytes = 0;
  std::vector<uint8_t*> layer_base;                   // [n_layer] fast-tier rows of each layer
  std::vector<std::unique_ptr<DeviceBuffer>> device;  // rows of layers on other devices
  std::unique_ptr<OffloadFile> slow;  // the slow tier (null without --kv-offload-dir)
  std::vector<int32_t> slot_of;       // [n_blocks] block id → slot
  std::vector<int32_t> id_at;         // [n_blocks] slot → block id
  KvTierStats ts;                     // use and move counters (capacities filled on read)
  std::vector<KvSequence*> seqs;      // live sequences (the victim policy reads their tables)
  int64_t cursor = 0;                 // where the next scan of the fast slots starts
  BlockPool pool{0};
  int64_t computed = 0;
  int64_t reused = 0;
  std::unique_ptr<PrefixStore> store;  // --kv-cache-dir
  std::vector<uint8_t> payload;        // one block's rows, for the store

  // [n_layer] for rows the host cannot address: a backend of their device that copies them
  // (copy-on-write); else null. `copiers` owns those backends, one per such device.
  std::vector<Backend*> copier;
  std::vector<std::unique_ptr<Backend>> copiers;

  int64_t kb() const { return params.block_size * k_row; }  // K bytes of one block, one layer
  int64_t vb() const { return params.block_size * v_row; }

  uint8_t* layer_k(int64_t il) const { return layer_base[size_t(il)]; }
  uint8_t* layer_v(int64_t il) const { return layer_k(il) + n_fast * kb(); }
  uint8_t* slow_k(int64_t il) const { return slow->data() + il * n_slow * (kb() + vb()); }
  uint8_t* slow_v(int64_t il) const { return slow_k(il) + n_slow * kb(); }
  /// Layer il's K / V rows of storage slot s.
  uint8_t* k_at(int64_t il, int64_t s) const {
    return s < n_fast ? layer_k(il) + s * kb() : slow_k(il) + (s - n_fast) * kb();
  }
  uint8_t* v_at(int64_t il, int64_t s) const {
    return s < n_fast ? layer_v(il) + s * vb() : slow_v(il) + (s - n_fast) * vb();
  }

  bool fast(int32_t id) const { return slot_of[size_t(id)] < n_fast; }

  /// Points every layer's fast-tier rows into the host mapping (at the offsets of a single
  /// mapping) or, for a layer placed on another device, into a buffer of that device.
  void place_layers(const std::vector<Device*>& kv_devices) {
    layer_base.resize(size_t(n_layer));
    const size_t layer_bytes = size_t(n_fast * (kb() + vb()));
    for (int64_t il = 0; il < n_layer; ++il) {
      Device* d = kv_devices.empty() ? nullptr : kv_devices[size_t(il)];
      if (!d || d == &cpu_device()) {
        layer_base[size_t(il)] = base + size_t(il) * layer_bytes;
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

  /// Copies every layer's K and V rows of slot `src` to slot `dst` (through the host for rows
  /// the host cannot address: the engine's backends finish every step before the next one
  /// reserves blocks, so the rows are written).
  void copy_slot(int64_t dst, int64_t src) {
    std::vector<uint8_t> tmp;
    for (int64_t il = 0; il < n_layer; ++il) {
      Backend* be = copier.empty() ? nullptr : copier[size_t(il)];
      if (!be) {
        std::memcpy(k_at(il, dst), k_at(il, src), size_t(kb()));
        std::memcpy(v_at(il, dst), v_at(il, src), size_t(vb()));
        continue;
      }
      tmp.resize(size_t(std::max(kb(), vb())));
      be->download(tmp.data(), k_at(il, src), size_t(kb()));
      be->upload(k_at(il, dst), tmp.data(), size_t(kb()));
      be->download(tmp.data(), v_at(il, src), size_t(vb()));  // waits for the K upload too
      be->upload(v_at(il, dst), tmp.data(), size_t(vb()));
      be->synchronize();
    }
  }
  /// Writes `bytes` from host memory to `dst` in layer il's rows: in place when the host
  /// addresses them, else through the layer's copier backend (asynchronously: `src` must stay
  /// valid until its synchronize()).
  void write_rows(int64_t il, uint8_t* dst, const uint8_t* src, size_t bytes) {
    Backend* be = copier.empty() ? nullptr : copier[size_t(il)];
    if (be)
      be->upload(dst, src, bytes);
    else
      std::memcpy(dst, src, bytes);
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

  /// Copies block b's rows of every layer to (to_store) or from the payload buffer.
  void block_io(int32_t b, bool to_store) {
    const int64_t s = slot_of[size_t(b)];
    uint8_t* p = payload.data();
    for (int64_t il = 0; il < n_layer; ++il) {
      uint8_t* k = k_at(il, s);
      uint8_t* v = v_at(il, s);
      if (to_store) {
        std::memcpy(p, k, size_t(kb()));
        std::memcpy(p + kb(), v, size_t(vb()));
      } else {
        std::memcpy(k, p, size_t(kb()));
        std::memcpy(v, p + kb(), size_t(vb()));
      }
      p += kb() + vb();
    }
  }
};

KvCache::KvCache(const Hparams& hp, const KvCacheParams& params,
                 const std::vector<Device*>& kv_devices)
    : impl_(std::make_unique<Impl>()) {
  validate(hp, params);
  if (!kv_devices.empty() && int64_t(kv_devices.size()) != hp.n_layer)
    throw std::invalid_argument("KV cache: one device per layer expected");
  for (const Device* d : kv_devices) {
    if (!d || d->host_memory()) continue;
    if (!params.offload_dir.empty())
      throw std::invalid_argument("KV cache: --kv-offload-dir with KV rows on " + d->name() +
                                  " (not host memory) is not supported yet (or use -nkvo)");
    if (!params.cache_dir.empty() && params.prefix_cache)
      throw std::invalid_argument("KV cache: --kv-cache-dir with KV rows on " + d->name() +
                                  " (not host memory) is not supported yet (or use -nkvo)");
  }
  Impl& c = *impl_;
  c.params = params;
  c.n_layer = hp.n_layer;
  c.n_head_kv = hp.n_head_kv;
  c.head_dim = hp.head_dim;
  c.head_dim_v = hp.head_dim_v;
  c.k_row = kv_row_bytes(params.type_k, hp.n_head_kv, hp.head_dim);
  c.v_row = kv_row_bytes(params.type_v, hp.n_head_kv, hp.head_dim_v);
  c.bytes_per_token = kv_bytes_per_token(params.type_k, params.type_v, hp.n_layer, hp.n_head_kv,
                                         hp.head_dim, hp.head_dim_v);
  c.bytes_per_block = params.block_size * c.bytes_per_token;
  const int64_t budget = params.mem_bytes > 0 ? params.mem_bytes : default_budget();
  c.n_fast = std::min<int64_t>(budget / c.bytes_per_block, INT32_MAX - 2);
  if (c.n_fast < 1)
    throw std::invalid_argument("KV cache: budget of " + std::to_string(budget) +
                                " bytes is smaller than one block (" +
                                std::to_string(c.bytes_per_block) + " bytes)");
  if (!params.offload_dir.empty()) {
    for (const std::string& f : remove_stale_offload_files(params.offload_dir))
      std::fprintf(stderr, "kvrun: removed %s, left by a process that no longer runs\n", f.c_str());
    int64_t slow_budget = params.offload_max;
    if (slow_budget <= 0) {
      const int64_t free = offload_dir_free_bytes(params.offload_dir);
      slow_budget = std::min<int64_t>(free / 10 * 9, int64_t(64) << 30);
    }
    c.n_slow = std::min<int64_t>(slow_budget / c.bytes_per_block, INT32_MAX - 2 - c.n_fast);
    if (c.n_slow < 1)
      throw std::invalid_argument("KV cache: offload budget of " + std::to_string(slow_budget) +
                                  " bytes is smaller than one block (" +
                                  std::to_string(c.bytes_per_block) + " bytes)");
    c.slow = std::make_unique<OffloadFile>(params.offload_dir, c.n_slow * c.bytes_per_block);
  }
  c.n_blocks = c.n_fast + c.n_slow;
  c.map_bytes = static_cast<size_t>(c.n_fast * c.bytes_per_block);
  void* p = mmap(nullptr, c.map_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  c.base = static_cast<uint8_t*>(p);
  c.place_layers(kv_devices);
  c.pool = BlockPool(c.n_blocks);
  c.slot_of.resize(size_t(c.n_blocks));
  c.id_at.resize(size_t(c.n_blocks));
  for (int64_t i = 0; i < c.n_blocks; ++i) c.slot_of[size_t(i)] = c.id_at[size_t(i)] = int32_t(i);
  if (!params.cache_dir.empty() && params.prefix_cache) {
    PrefixStoreLayout L;
    L.model_id = params.model_id;
    L.type_k = params.type_k;
    L.type_v = params.type_v;
    L.block_size = params.block_size;
    L.n_layer = c.n_layer;
    L.k_row_bytes = c.k_row;
    L.v_row_bytes = c.v_row;
    try {
      c.store = std::make_unique<PrefixStore>(params.cache_dir, params.cache_dir_max, L);
    } catch (...) {
      munmap(c.base, c.map_bytes);
      c.base = nullptr;
      throw;
    }
    c.payload.resize(size_t(L.payload_bytes()));
  }
}

KvCache::~KvCache() {
  if (impl_ && impl_->base) munmap(impl_->base, impl_->map_bytes);
}

const KvCacheParams& KvCache::params() const { return impl_->params; }

KvLayer KvCache::layer(int64_t il) const {
  const Impl& c = *impl_;
  if (il < 0 || il >= c.n_layer)
    throw std::out_of_range("KvCache::layer: layer " + std::to_string(il) + " out of range");
  KvLayer l;
  l.k_type = c.params.type_k;
  l.v_type = c.params.type_v;
  l.k_row_bytes = c.k_row;
  l.v_row_bytes = c.v_row;
  l.block_size = c.params.block_size;
  l.k = c.layer_k(il);
  l.v = c.layer_v(il);
  if (c.slow) {
    l.slot_of = c.slot_of.data();
    l.n_fast = c.n_fast;
    l.k_slow = c.slow_k(il);
    l.v_slow = c.slow_v(il);
  }
  return l;
}

bool KvCache::rows_on_host() const { return impl_->copier.empty(); }

int64_t KvCache::n_layer() const { return impl_->n_layer; }
int64_t KvCache::block_size() const { return impl_->params.block_size; }
int64_t KvCache::n_blocks() const { return impl_->n_blocks; }
int64_t KvCache::bytes_per_token() const { return impl_->bytes_per_token; }
int64_t KvCache::bytes_per_block() const { return impl_->bytes_per_block; }
BlockPool& KvCache::pool() { return impl_->pool; }
const BlockPool& KvCache::pool() const { return impl_->pool; }

void KvCache::copy_block(int32_t dst, int32_t src) {
  const Impl& c = *impl_;
  if (dst < 0 || dst >= c.n_blocks || src < 0 || src >= c.n_blocks)
    throw std::out_of_range("KvCache::copy_block: block out of range");
  if (dst == src) return;
  impl_->copy_slot(c.slot_of[size_t(dst)], c.slot_of[size_t(src)]);
}

namespace {

/// Positions [p0, p1) whose blocks sit in consecutive slots of one tier, from slot `slot` on:
/// their rows are contiguous in every layer's K (and V) storage.
struct SlotRun {
  int64_t p0, p1, slot;
};

}  // namespace

void KvCache::write_synthetic_rows(std::span<const int32_t> table, int64_t pos0, int64_t n,
                                   uint64_t seed) {
  Impl& c = *impl_;
  if (n < 0 || pos0 < 0)
    throw std::invalid_argument("KvCache::write_synthetic_rows: negative position or count");
  if (n == 0) return;
  const int64_t bs = c.params.block_size, last = (pos0 + n - 1) / bs;
  if (last >= int64_t(table.size()))
    throw std::out_of_range("KvCache::write_synthetic_rows: position " +
                            std::to_string(pos0 + n - 1) + " has no block in the table");
  for (int64_t b = pos0 / bs; b <= last; ++b)
    if (table[size_t(b)] < 0 || table[size_t(b)] >= c.n_blocks)
      throw std::out_of_range("KvCache::write_synthetic_rows: block " + std::to_string(b) +
                              " of the table is given back or out of range");
  // One copy per run of consecutive slots, at most run_max blocks (8 MiB of staging) each.
  const int64_t run_max = std::max<int64_t>(1, (int64_t(8) << 20) / std::max(c.kb(), c.vb()) - 1);
  std::vector<SlotRun> runs;
  int64_t longest = 1;
  for (int64_t p = pos0; p < pos0 + n;) {
    const int64_t b = p / bs, s = c.slot_of[size_t(table[size_t(b)])];
    int64_t nb = 1;
    while (b + nb <= last && nb < run_max && c.slot_of[size_t(table[size_t(b + nb)])] == s + nb &&
           (s + nb < c.n_fast) == (s < c.n_fast))
      ++nb;
    const int64_t end = std::min(pos0 + n, (b + nb) * bs);
    runs.push_back({p, end, s});
    longest = std::max(longest, nb);
    p = end;
  }
  // Position p gets pattern row p % bs: a run starting at p0 reads the staging from row p0 % bs.
  std::vector<uint8_t> stage_k, stage_v;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    std::mt19937_64 rng(seed ^ (0x9e3779b97f4a7c15ull * uint64_t(il + 1)));
    random_rows(c.params.type_k, c.n_head_kv, c.head_dim, bs, longest + 1, rng, stage_k);
    random_rows(c.params.type_v, c.n_head_kv, c.head_dim_v, bs, longest + 1, rng, stage_v);
    for (const SlotRun& r : runs) {
      const int64_t off = r.p0 % bs, len = r.p1 - r.p0;
      c.write_rows(il, c.k_at(il, r.slot) + off * c.k_row, stage_k.data() + off * c.k_row,
                   size_t(len * c.k_row));
      c.write_rows(il, c.v_at(il, r.slot) + off * c.v_row, stage_v.data() + off * c.v_row,
                   size_t(len * c.v_row));
    }
    if (!c.copier.empty() && c.copier[size_t(il)]) c.copier[size_t(il)]->synchronize();
  }
}

std::optional<int32_t> KvCache::take_block() {
  Impl& c = *impl_;
  const std::optional<int32_t> b = c.pool.take();
  if (!b) return b;
  c.count_used(*b, +1);
  if (!c.fast(*b)) c.make_fast(*b);
  return b;
}

void KvCache::ref_block(int32_t block) {
  Impl& c = *impl_;
  const bool was_unused = c.pool.refcount(block) == 0;
  c.pool.ref(block);
  if (was_unused) c.count_used(block, +1);
}

void KvCache::unref_block(int32_t block) {
  Impl& c = *impl_;
  c.pool.unref(block);
  if (c.pool.refcount(block) == 0) c.count_used(block, -1);
}

void KvCache::rebalance() {
  Impl& c = *impl_;
  if (c.ts.used_slow == 0 || c.ts.used_fast >= c.n_fast) return;
  std::vector<const KvSequence*> order(c.seqs.begin(), c.seqs.end());
  std::sort(order.begin(), order.end(),
            [](const KvSequence* a, const KvSequence* b) { return a->n_tokens() < b->n_tokens(); });
  for (const KvSequence* q : order) {
    const std::vector<int32_t>& t = q->block_table();
    for (size_t i = t.size(); i-- > 0;) {
      const int32_t id = t[i];
      if (id < 0 || c.fast(id)) continue;  // (−1: given back by release_before)
      const int32_t u = c.unused_fast_block();
      if (u < 0) return;
      c.copy_slot(c.slot_of[size_t(u)], c.slot_of[size_t(id)]);
      c.swap_slots(id, u);
      --c.ts.used_slow;
      ++c.ts.used_fast;
      ++c.ts.moves_in;
      if (c.ts.used_slow == 0) return;
    }
  }
}

bool KvCache::in_fast_tier(int32_t block) const {
  if (block < 0 || block >= impl_->n_blocks)
    throw std::out_of_range("KvCache::in_fast_tier: block out of range");
  return impl_->fast(block);
}

KvTierStats KvCache::tier_stats() const {
  KvTierStats t = impl_->ts;
  t.n_fast = impl_->n_fast;
  t.n_slow = impl_->n_slow;
  return t;
}

std::string KvCache::offload_path() const { return impl_->slow ? impl_->slow->path() : ""; }

void KvCache::attach(KvSequence* seq) { impl_->seqs.push_back(seq); }

void KvCache::detach(KvSequence* seq) {
  auto& v = impl_->seqs;
  v.erase(std::remove(v.begin(), v.end(), seq), v.end());
}

int64_t KvCache::n_tokens_computed() const { return impl_->computed; }
int64_t KvCache::n_tokens_reused() const { return impl_->reused; }
void KvCache::add_computed(int64_t n) { impl_->computed += n; }
void KvCache::add_reused(int64_t n) { impl_->reused += n; }

const PrefixStore* KvCache::prefix_store() const { return impl_->store.get(); }

void KvCache::persist_block(int32_t block, uint64_t hash, std::span<const int32_t> tokens) {
  Impl& c = *impl_;
  if (!c.store || c.store->contains(hash)) return;
  c.block_io(block, true);
  c.store->save(hash, tokens, c.payload);
}

bool KvCache::restore_block(int32_t block, uint64_t hash, std::span<const int32_t> tokens) {
  Impl& c = *impl_;
  if (!c.store || !c.store->load(hash, tokens, c.payload)) return false;
  c.block_io(block, false);
  return true;
}

// ---------------------------------------------------------------------------------------------
// KvSequence

KvSequence::KvSequence(KvCache& cache) : cache_(cache) { cache_.attach(this); }

KvSequence::~KvSequence() {
  clear();
  cache_.detach(this);
}

int64_t KvSequence::n_tokens() const { return static_cast<int64_t>(tokens_.size()); }

const std::vector<int32_t>& KvSequence::block_table() const { return table_; }

int64_t KvSequence::bytes_held() const {
  return (static_cast<int64_t>(table_.size()) - n_released_) * cache_.bytes_per_block();
}

int64_t KvSequence::n_fast_blocks() const {
  int64_t n = 0;
  for (int32_t b : table_)
    if (b >= 0) n += cache_.in_fast_tier(b);  // (−1: given back, sliding window)
  return n;
}

int64_t KvSequence::release_before(int64_t pos) {
  const int64_t bs = cache_.block_size();
  const int64_t until = std::min<int64_t>(
      std::max<int64_t>(0, pos) / bs, std::min<int64_t>(n_tokens() / bs, int64_t(table_.size())));
  const int64_t n = std::max<int64_t>(0, until - n_released_);
  for (int64_t b = n_released_; b < until; ++b) {
    cache_.unref_block(table_[size_t(b)]);
    table_[size_t(b)] = -1;
  }
  n_released_ = std::max(n_released_, until);
  if (n > 0) cache_.rebalance();  // fast slots freed: slow blocks may come back
  return n;
}

const std::vector<int32_t>& KvSequence::tokens() const { return tokens_; }

void KvSequence::reserve(int64_t n) {
  if (n < 0) throw std::invalid_argument("KvSequence::reserve: negative count");
  if (n == 0) return;
  BlockPool& pool = cache_.pool();
  const int64_t bs = cache_.block_size();
  const int64_t n_tok = n_tokens();
  const int64_t need_table = (n_tok + n + bs - 1) / bs;
  const int64_t n_new = std::max<int64_t>(0, need_table - static_cast<int64_t>(table_.size()));
  // The partial last block is written next: copy it when shared, un-hash it when ours alone.
  // (With reserved_ > 0 an earlier reserve() already did this.)
  const bool partial = n_tok % bs != 0 && reserved_ == 0;
  const int64_t last = n_tok / bs;
  const bool cow = partial && pool.refcount(table_[last]) > 1;
  const int64_t n_take = n_new + (cow ? 1 : 0);

  const BlockPoolStats st = pool.stats();
  if (n_take > st.n_free + st.n_cached)
    throw KvCacheFull("KV cache full: " + std::to_string(n_take) + " more blocks needed, " +
                      std::to_string(st.n_free + st.n_cached) + " of " +
                      std::to_string(st.n_blocks) + " available (raise --kv-mem" +
                      (cache_.params().offload_dir.empty() ? ", or add --kv-offload-dir)"
                                                           : " or --kv-offload-max)"));
  std::vector<int32_t> taken;
  taken.reserve(static_cast<size_t>(n_take));
  for (int64_t i = 0; i < n_take; ++i) {
    std::optional<int32_t> b = cache_.take_block();
    if (!b) {  // cannot happen after the check above; stay all-or-nothing anyway
      for (int32_t t : taken) cache_.unref_block(t);
      throw KvCacheFull("KV cache full");
    }
    taken.push_back(*b);
  }
  size_t next = 0;
  if (cow) {
    const int32_t shared = table_[last];
    cache_.copy_block(taken[0], shared);
    table_[last] = taken[next++];
    cache_.unref_block(shared);
  } else if (partial) {
    pool.clear_hash(table_[last]);
  }
  for (; next < taken.size(); ++next) table_.push_back(taken[next]);
  reserved_ = std::max(reserved_, n);
}

void KvSequence::commit(std::span<const int32_t> tokens) {
  const int64_t m = static_cast<int64_t>(tokens.size());
  if (m > reserved_)
    throw std::logic_error("KvSequence::commit: " + std::to_string(m) + " tokens but only " +
                           std::to_string(reserved_) + " positions reserved");
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  reserved_ -= m;
  cache_.add_computed(m);
  if (!cache_.params().prefix_cache) return;
  const size_t bs = static_cast<size_t>(cache_.block_size());
  const DType tk = cache_.params().type_k, tv = cache_.params().type_v;
  BlockPool& pool = cache_.pool();
  // (Blocks from the first synthetic position on are never hashed: commit_synthetic.)
  const size_t hash_end =
      synthetic_from_ < 0 ? tokens_.size() : std::min(tokens_.size(), size_t(synthetic_from_));
  while ((hashes_.size() + 1) * bs <= hash_end) {
    const size_t i = hashes_.size();
    const uint64_t parent = i == 0 ? kKvRootHash : hashes_[i - 1];
    const uint64_t h =
        kv_block_hash(parent, std::span<const int32_t>(tokens_).subspan(i * bs, bs), tk, tv);
    pool.set_hash(table_[i], h);
    hashes_.push_back(h);
    cache_.persist_block(table_[i], h, std::span<const int32_t>(tokens_).subspan(i * bs, bs));
  }
}

void KvSequence::commit_synthetic(int64_t n) {
  if (n < 0 || n > reserved_)
    throw std::logic_error("KvSequence::commit_synthetic: " + std::to_string(n) +
                           " positions but only " + std::to_string(reserved_) + " reserved");
  if (n == 0) return;
  if (synthetic_from_ < 0) synthetic_from_ = n_tokens();
  tokens_.insert(tokens_.end(), size_t(n), kSyntheticToken);
  reserved_ -= n;
}

int64_t KvSequence::attach_prefix(std::span<const int32_t> tokens) {
  if (!tokens_.empty() || !table_.empty())
    throw std::logic_error("KvSequence::attach_prefix: the sequence is not empty");
  if (!cache_.params().prefix_cache || tokens.empty()) return 0;
  const size_t bs = static_cast<size_t>(cache_.block_size());
  const size_t n_full = (tokens.size() - 1) / bs;  // the last token is always computed
  const DType tk = cache_.params().type_k, tv = cache_.params().type_v;
  BlockPool& pool = cache_.pool();
  uint64_t parent = kKvRootHash;
  for (size_t i = 0; i < n_full; ++i) {
    const uint64_t h = kv_block_hash(parent, tokens.subspan(i * bs, bs), tk, tv);
    const std::optional<int32_t> b = pool.find(h);
    if (!b) break;
    cache_.ref_block(*b);
    table_.push_back(*b);
    hashes_.push_back(h);
    parent = h;
  }
  // Then the persistent prefix cache: each further block read into a block of the pool.
  for (size_t i = table_.size(); cache_.prefix_store() && i < n_full; ++i) {
    const std::span<const int32_t> blk = tokens.subspan(i * bs, bs);
    const uint64_t h = kv_block_hash(parent, blk, tk, tv);
    if (!cache_.prefix_store()->contains(h)) break;
    const std::optional<int32_t> b = cache_.take_block();
    if (!b) break;
    if (!cache_.restore_block(*b, h, blk)) {
      cache_.unref_block(*b);
      break;
    }
    pool.set_hash(*b, h);
    table_.push_back(*b);
    hashes_.push_back(h);
    parent = h;
  }
  const size_t n = table_.size() * bs;
  tokens_.assign(tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(n));
  cache_.add_reused(static_cast<int64_t>(n));
  if (n > 0) cache_.rebalance();  // cached blocks found in the slow tier come back if room
  return static_cast<int64_t>(n);
}

void KvSequence::truncate(int64_t n) {
  if (n < 0 || n > n_tokens())
    throw std::out_of_range("KvSequence::truncate: " + std::to_string(n) + " not in [0, " +
                            std::to_string(n_tokens()) + "]");
  const int64_t bs = cache_.block_size();
  const size_t keep = static_cast<size_t>((n + bs - 1) / bs);
  if (n > 0 && (n - 1) / bs < n_released_)
    throw std::logic_error("KvSequence::truncate: position " + std::to_string(n - 1) +
                           " is in a block given back by release_before");
  const bool released = table_.size() > keep;
  while (table_.size() > keep) {
    if (table_.back() >= 0) cache_.unref_block(table_.back());
    table_.pop_back();
  }
  n_released_ = std::min(n_released_, static_cast<int64_t>(keep));
  tokens_.resize(static_cast<size_t>(n));
  if (synthetic_from_ >= n) synthetic_from_ = -1;  // no synthetic position left
  hashes_.resize(std::min(hashes_.size(), static_cast<size_t>(n / bs)));
  reserved_ = 0;
  if (released) cache_.rebalance();
}

void KvSequence::clear() { truncate(0); }

}  // namespace kvrun
