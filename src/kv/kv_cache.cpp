// kv_cache.cpp — the paged KV cache's storage (KvCache): the pool, its tiers and the windowed
// group. Block tables are in kv_sequence.cpp; the shared state and its layout in
// kv_cache_impl.h. Design and invariants: docs/kv-cache.md.
//
// The mapping is exactly n_fast × bytes_per_block bytes. Moving a block between tiers copies its
// rows between two slots and swaps the two ids' slots, so block tables and prefix hashes never
// change (the windowed group's slots are keyed by block id, so they do not move either).
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

#include "kv/kv_cache_impl.h"
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
  if (hp.kv_lora_rank > 0) {  // MLA: V is read from the latent inside the K row
    if (p.rotate)
      throw std::invalid_argument(
          "KV cache: --kv-rotate is not supported with MLA (the latent in the K row is V too)");
    if (!kv_type_holds_mla(p.type_k, hp.rope.n_rot))
      throw std::invalid_argument(std::string("KV cache: -ctk ") + kv_type_name(p.type_k) +
                                  " cannot hold MLA's latent (f32, f16, bf16, q8_0 or q4_0)");
    return;
  }
  // --kv-rotate Hadamard-rotates K and Q along head_dim (V is not rotated).
  if (p.rotate && !is_pow2(hp.head_dim))
    throw std::invalid_argument("KV cache: --kv-rotate needs a power-of-two head_dim (got " +
                                std::to_string(hp.head_dim) + ")");
}

/// Throws std::invalid_argument for a cache with window tables that something cannot serve.
void check_window_tables(const KvCacheParams& p, const std::vector<Device*>& kv_devices) {
  for (const Device* d : kv_devices)
    if (d && d != &cpu_device())
      throw std::invalid_argument("KV cache: per-layer window tables with KV rows on " + d->name() +
                                  " are not supported yet (window_tables = false)");
  if (!p.cache_dir.empty() && p.prefix_cache)
    throw std::invalid_argument(
        "KV cache: --kv-cache-dir with per-layer window tables is not supported yet "
        "(window_tables = false)");
}

/// Throws std::invalid_argument naming the flag for a slow tier or prefix store the layers'
/// devices cannot have: with rows on a device whose memory the host cannot address (a GPU), the
/// --kv-offload-dir file (the host reads and writes rows there in place); --kv-host-tier with
/// --kv-offload-dir, without such a device, or with one lacking Op::kKvHostTier.
void check_devices(const KvCacheParams& p, const std::vector<Device*>& kv_devices) {
  if (p.host_tier && !p.offload_dir.empty())
    throw std::invalid_argument(
        "KV cache: --kv-host-tier and --kv-offload-dir cannot be combined (one slow tier: host "
        "memory for KV rows on a GPU, the file for KV rows on the CPU)");
  bool on_gpu = false;
  for (const Device* d : kv_devices) {
    if (!d || d->host_memory()) continue;
    on_gpu = true;
    if (!p.offload_dir.empty())
      throw std::invalid_argument("KV cache: --kv-offload-dir with KV rows on " + d->name() +
                                  " (not host memory): the slow tier of a GPU's KV rows is "
                                  "--kv-host-tier (or use -nkvo)");
    if (p.host_tier && !d->supports(Op::kKvHostTier))
      throw std::invalid_argument("KV cache: --kv-host-tier: " + d->name() +
                                  " has no host tier for KV rows (use -nkvo)");
    if (p.host_attn_cpu && !d->supports(Op::kAttnParts))
      throw std::invalid_argument("KV cache: --kv-host-attn cpu: " + d->name() +
                                  " has no attention by KV tier (use --kv-host-attn gpu)");
  }
  if (p.host_attn_cpu && !p.host_tier)
    throw std::invalid_argument("KV cache: --kv-host-attn needs --kv-host-tier");
  if (p.host_tier && !on_gpu)
    throw std::invalid_argument(
        "KV cache: --kv-host-tier needs KV rows on a GPU (-ngl N without -nkvo); the slow tier "
        "of KV rows on the CPU is --kv-offload-dir");
}

}  // namespace

int64_t kv_window_table_layers(const Hparams& hp, const KvCacheParams& p) {
  if (!p.window_tables || hp.n_swa <= 0 || hp.all_swa_window() > 0) return 0;
  int64_t n = 0;
  for (int64_t il = 0; il < hp.n_layer; ++il) n += hp.is_swa(il);
  return n;
}

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

void KvCache::Impl::plan_groups(const Hparams& hp, int64_t total) {
  int64_t budget = total;
  gidx.resize(size_t(hp.n_layer));
  if (kv_window_table_layers(hp, params) > 0) {
    win.window = hp.n_swa;
    win.layer.resize(size_t(hp.n_layer));
    for (int64_t il = 0; il < hp.n_layer; ++il) win.layer[size_t(il)] = hp.is_swa(il);
    win.n_layers = std::count(win.layer.begin(), win.layer.end(), true);
  }
  int64_t next[2] = {0, 0};  // the next index in the pool's group and in the windowed group
  for (int64_t il = 0; il < hp.n_layer; ++il) gidx[size_t(il)] = next[windowed(il)]++;
  bytes_per_block = params.block_size * (hp.n_layer - win.n_layers) * (k_row + v_row);
  win.bytes_per_block = params.block_size * win.n_layers * (k_row + v_row);
  if (win.window > 0) {  // the windowed group's blocks come out of the budget first
    win.n_slots = params.window_blocks > 0 ? params.window_blocks
                                           : budget / (bytes_per_block + win.bytes_per_block);
    win.n_slots = std::min<int64_t>(win.n_slots, INT32_MAX - 2);
    budget -= win.n_slots * win.bytes_per_block;
  }
  n_fast = std::min<int64_t>(std::max<int64_t>(0, budget) / bytes_per_block, INT32_MAX - 2);
  if (n_fast < 1 || (win.window > 0 && win.n_slots < 1))
    throw std::invalid_argument(
        "KV cache: budget of " + std::to_string(total) + " bytes is smaller than one block (" +
        std::to_string(bytes_per_block) + " bytes" +
        (win.window > 0 ? " after " + std::to_string(win.n_slots) + " windowed-layer blocks of " +
                              std::to_string(win.bytes_per_block) + " bytes"
                        : std::string()) +
        ")");
}

void KvCache::Impl::map_window_group() {
  win.map_bytes = size_t(win.n_slots * win.bytes_per_block);
  void* w = mmap(nullptr, win.map_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (w == MAP_FAILED) {
    munmap(base, map_bytes);
    base = nullptr;
    throw std::bad_alloc();
  }
  win.base = static_cast<uint8_t*>(w);
  win.id_at.assign(size_t(win.n_slots), -1);
  win.free.reserve(size_t(win.n_slots));
  for (int64_t s = win.n_slots; s-- > 0;) win.free.push_back(int32_t(s));  // slot 0 first
}

void KvCache::Impl::plan_slow_tier() {
  if (params.offload_dir.empty() && !params.host_tier) return;
  int64_t budget = params.offload_max;
  if (budget <= 0 && params.host_tier)
    throw std::invalid_argument("KV cache: --kv-host-tier needs a budget (--kv-host-max)");
  if (!params.host_tier)  // (first: their space counts as free below)
    for (const std::string& f : remove_stale_offload_files(params.offload_dir))
      std::fprintf(stderr, "kvrun: removed %s, left by a process that no longer runs\n", f.c_str());
  if (budget <= 0) {
    const int64_t free = offload_dir_free_bytes(params.offload_dir);
    budget = std::min<int64_t>(free / 10 * 9, int64_t(64) << 30);
  }
  n_slow = std::min<int64_t>(budget / bytes_per_block, INT32_MAX - 2 - n_fast);
  if (n_slow < 1)
    throw std::invalid_argument(
        std::string("KV cache: ") + (params.host_tier ? "--kv-host-max" : "--kv-offload-max") +
        " budget of " + std::to_string(budget) + " bytes is smaller than one block (" +
        std::to_string(bytes_per_block) + " bytes)");
}

void KvCache::Impl::make_slow_tier(const std::vector<Device*>& kv_devices) {
  if (n_slow == 0) return;
  slow_dev.assign(size_t(n_layer), nullptr);
  slow_host.assign(size_t(n_layer), nullptr);
  if (!params.host_tier) {
    slow = std::make_unique<OffloadFile>(params.offload_dir, n_slow * bytes_per_block);
    for (int64_t il = 0; il < n_layer; ++il)
      slow_dev[size_t(il)] = slow_host[size_t(il)] =
          slow->data() + gidx[size_t(il)] * n_slow * (kb() + vb());
    return;
  }
  // (no window tables here: the host tier needs a GPU layer, window tables refuse one)
  for (int64_t il = 0; il < n_layer; ++il) {
    Device* d =
        kv_devices.empty() || !kv_devices[size_t(il)] ? &cpu_device() : kv_devices[size_t(il)];
    host_tier.push_back(d->alloc(size_t(n_slow * (kb() + vb())), BufferUse::kKvHost));
    slow_dev[size_t(il)] = static_cast<uint8_t*>(host_tier.back()->data());
    slow_host[size_t(il)] = static_cast<uint8_t*>(host_tier.back()->host_data());
    if (!slow_host[size_t(il)])
      throw std::logic_error("KV cache: " + d->name() + "'s host-tier buffer has no host address");
  }
}

KvCache::KvCache(const Hparams& hp, const KvCacheParams& params,
                 const std::vector<Device*>& kv_devices)
    : impl_(std::make_unique<Impl>()) {
  validate(hp, params);
  if (!kv_devices.empty() && int64_t(kv_devices.size()) != hp.n_layer)
    throw std::invalid_argument("KV cache: one device per layer expected");
  check_devices(params, kv_devices);
  Impl& c = *impl_;
  c.params = params;
  c.n_layer = hp.n_layer;
  const Hparams::KvRows rows = hp.kv_rows();
  c.n_head_kv = rows.n_head_kv;
  c.head_dim = rows.head_dim;
  c.head_dim_v = rows.head_dim_v;
  c.k_row = kv_row_bytes(params.type_k, rows.n_head_kv, rows.head_dim);
  c.v_row = rows.head_dim_v > 0 ? kv_row_bytes(params.type_v, rows.n_head_kv, rows.head_dim_v) : 0;
  if (hp.kv_lora_rank > 0) c.v_off = kv_row_bytes(params.type_k, 1, hp.rope.n_rot);
  c.bytes_per_token = kv_bytes_per_token(params.type_k, params.type_v, hp.n_layer, rows.n_head_kv,
                                         rows.head_dim, rows.head_dim_v);
  if (kv_window_table_layers(hp, params) > 0) check_window_tables(params, kv_devices);
  c.plan_groups(hp, params.mem_bytes > 0 ? params.mem_bytes : default_budget());
  c.plan_slow_tier();
  c.n_blocks = c.n_fast + c.n_slow;
  c.map_bytes = static_cast<size_t>(c.n_fast * c.bytes_per_block);
  void* p = mmap(nullptr, c.map_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  c.base = static_cast<uint8_t*>(p);
  if (c.win.window > 0) c.map_window_group();
  c.place_layers(kv_devices);
  c.make_slow_tier(kv_devices);
  c.pool = BlockPool(c.n_blocks);
  c.slot_of.resize(size_t(c.n_blocks));
  c.id_at.resize(size_t(c.n_blocks));
  for (int64_t i = 0; i < c.n_blocks; ++i) c.slot_of[size_t(i)] = c.id_at[size_t(i)] = int32_t(i);
  if (c.win.window > 0) {
    c.win.slot_of.assign(size_t(c.n_blocks), -1);
    c.win.ref.assign(size_t(c.n_blocks), 0);
  }
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

KvCache::~KvCache() = default;  // (Impl unmaps the fast tier)

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
  if (c.windowed(il)) {  // block id → windowed slot (−1 before the window: never read)
    l.slot_of = c.win.slot_of.data();
    return l;
  }
  if (c.n_slow > 0) {
    l.slot_of = c.slot_of.data();
    l.n_fast = c.n_fast;
    l.k_slow = c.slow_k(il);
    l.v_slow = c.slow_v(il);
  }
  if (c.v_off >= 0) {  // MLA: V rows are the latents inside the K rows
    l.mla = true;
    l.v_type = l.k_type;
    l.v_row_bytes = l.k_row_bytes;
    l.v = l.k + c.v_off;
    l.v_slow = l.k_slow ? l.k_slow + c.v_off : nullptr;
  }
  return l;
}

KvLayer KvCache::host_tier_layer(int64_t il) const {
  KvLayer l = layer(il);
  const Impl& c = *impl_;
  if (!c.params.host_tier || !l.k_slow || l.mla) {
    l.k_slow = l.v_slow = nullptr;
    return l;
  }
  l.k = l.v = nullptr;
  l.k_slow = c.k_host(il, c.n_fast);  // (the first slot of the slow tier)
  l.v_slow = c.v_host(il, c.n_fast);
  return l;
}

bool KvCache::rows_on_host() const { return impl_->copier.empty(); }

int64_t KvCache::n_layer() const { return impl_->n_layer; }
int64_t KvCache::block_size() const { return impl_->params.block_size; }
int64_t KvCache::n_blocks() const { return impl_->n_blocks; }
int64_t KvCache::bytes_per_token() const { return impl_->bytes_per_token; }
int64_t KvCache::bytes_per_block() const { return impl_->bytes_per_block; }
int64_t KvCache::window() const { return impl_->win.window; }
bool KvCache::windowed_layer(int64_t il) const {
  return il >= 0 && il < impl_->n_layer && impl_->windowed(il);
}
int64_t KvCache::n_window_layers() const { return impl_->win.n_layers; }
int64_t KvCache::window_blocks() const { return impl_->win.n_slots; }
int64_t KvCache::window_blocks_used() const { return impl_->win.live; }
int64_t KvCache::window_bytes_per_block() const { return impl_->win.bytes_per_block; }
BlockPool& KvCache::pool() { return impl_->pool; }
const BlockPool& KvCache::pool() const { return impl_->pool; }

void KvCache::copy_block(int32_t dst, int32_t src) {
  const Impl& c = *impl_;
  if (dst < 0 || dst >= c.n_blocks || src < 0 || src >= c.n_blocks)
    throw std::out_of_range("KvCache::copy_block: block out of range");
  if (dst == src) return;
  impl_->copy_slot(c.slot_of[size_t(dst)], c.slot_of[size_t(src)]);
  if (c.win.window > 0 && impl_->win_has(dst) && impl_->win_has(src)) impl_->win_copy(dst, src);
}

namespace {

/// Positions [p0, p1) whose blocks sit in consecutive slots of one tier, from slot `slot` on:
/// their rows are contiguous in every layer's K (and V) storage.
struct SlotRun {
  int64_t p0, p1, slot;
};

}  // namespace

namespace {

/// Block `block`'s rows of layer L from byte `off`, `bytes` long, checked against the cache.
uint8_t* block_rows(const KvLayer& L, int64_t n_blocks, int32_t block, bool v, int64_t off,
                    size_t bytes, const char* who) {
  const int64_t row = v ? L.v_row_bytes : L.k_row_bytes;
  if (block < 0 || block >= n_blocks || off < 0 || int64_t(bytes) > L.block_size * row - off)
    throw std::out_of_range(std::string(who) + ": block " + std::to_string(block) + " bytes " +
                            std::to_string(off) + " + " + std::to_string(bytes) +
                            " outside the cache");
  return (v ? L.v_block(block) : L.k_block(block)) + off;
}

}  // namespace

void KvCache::Impl::back_block(int32_t block, const char* who) {
  if (!fast(block) || commit_slots(slot_of[size_t(block)] + 1)) return;
  throw KvCacheFull(std::string(who) + ": the device holding the KV rows has no memory for block " +
                    std::to_string(block) + " (lower -c or --kv-mem, or -ngl)");
}

void KvCache::read_block_rows(int64_t il, int32_t block, bool v, int64_t off, void* dst,
                              size_t bytes) const {
  const uint8_t* p =
      block_rows(layer(il), n_blocks(), block, v, off, bytes, "KvCache::read_block_rows");
  impl_->back_block(block, "KvCache::read_block_rows");
  if (Backend* be = impl_->copier_of(il))
    be->download(dst, p, bytes);
  else
    std::memcpy(dst, p, bytes);
}

void KvCache::put_block_rows(int64_t il, int32_t block, bool v, int64_t off, const void* src,
                             size_t bytes) {
  uint8_t* p = block_rows(layer(il), n_blocks(), block, v, off, bytes, "KvCache::write_block_rows");
  impl_->back_block(block, "KvCache::write_block_rows");
  if (Backend* be = impl_->copier_of(il))
    be->upload(p, src, bytes);
  else
    std::memcpy(p, src, bytes);
}

void KvCache::write_block_rows(int64_t il, int32_t block, bool v, int64_t off, const void* src,
                               size_t bytes) {
  put_block_rows(il, block, v, off, src, bytes);
  if (Backend* be = impl_->copier_of(il)) be->synchronize();
}

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
    if (table[size_t(b)] < 0 || table[size_t(b)] >= c.n_blocks ||
        (c.win.window > 0 && !c.win_has(table[size_t(b)])))
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
    if (c.v_row > 0)
      random_rows(c.params.type_v, c.n_head_kv, c.head_dim_v, bs, longest + 1, rng, stage_v);
    for (int64_t p = pos0; c.windowed(il) && p < pos0 + n;) {  // one run per block, its slot
      const int64_t b = p / bs, end = std::min(pos0 + n, (b + 1) * bs), off = p % bs;
      const int64_t s = c.win.slot_of[size_t(table[size_t(b)])];
      std::memcpy(c.wk_at(il, s) + off * c.k_row, stage_k.data() + off * c.k_row,
                  size_t((end - p) * c.k_row));
      std::memcpy(c.wv_at(il, s) + off * c.v_row, stage_v.data() + off * c.v_row,
                  size_t((end - p) * c.v_row));
      p = end;
    }
    for (const SlotRun& r : runs) {
      if (c.windowed(il)) break;
      const int64_t off = r.p0 % bs, len = r.p1 - r.p0;
      c.write_rows(il, r.slot, false, off * c.k_row, stage_k.data() + off * c.k_row,
                   size_t(len * c.k_row));
      c.write_rows(il, r.slot, true, off * c.v_row, stage_v.data() + off * c.v_row,
                   size_t(len * c.v_row));
    }
    if (!c.copier.empty() && c.copier[size_t(il)]) c.copier[size_t(il)]->synchronize();
  }
}

std::optional<int32_t> KvCache::take_block() {
  Impl& c = *impl_;
  std::optional<int32_t> b = c.pool.take();
  if (!b || c.settle(*b)) return b;
  // Its slot could not be backed (DeviceBuffer::commit) and it went back; a cached block's rows
  // were written, so are backed: evict one instead.
  b = c.pool.take_cached();
  if (!b || c.settle(*b)) return b;
  return std::nullopt;
}

bool KvCache::Impl::settle(int32_t b) {
  count_used(b, +1);
  if (!fast(b)) make_fast(b);
  if (!fast(b) || commit_slots(slot_of[size_t(b)] + 1)) return true;
  count_used(b, -1);
  pool.unref(b);
  return false;
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
      if (u < 0 || !c.commit_slots(c.slot_of[size_t(u)] + 1)) return;
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

std::string KvCache::offload_path() const {
  if (impl_->slow) return impl_->slow->path();
  return impl_->n_slow > 0 ? "host memory (--kv-host-tier)" : "";
}

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
  uint8_t* p = c.payload.data();  // per layer the block's K rows, then its V rows
  for (int64_t il = 0; il < c.n_layer; ++il, p += c.kb() + c.vb()) {
    read_block_rows(il, block, false, 0, p, size_t(c.kb()));
    if (c.vb() > 0) read_block_rows(il, block, true, 0, p + c.kb(), size_t(c.vb()));
  }
  c.store->save(hash, tokens, c.payload);
}

bool KvCache::restore_block(int32_t block, uint64_t hash, std::span<const int32_t> tokens) {
  Impl& c = *impl_;
  if (!c.store || !c.store->load(hash, tokens, c.payload)) return false;
  const uint8_t* p = c.payload.data();  // (alive until the copiers below have finished)
  for (int64_t il = 0; il < c.n_layer; ++il, p += c.kb() + c.vb()) {
    put_block_rows(il, block, false, 0, p, size_t(c.kb()));
    if (c.vb() > 0) put_block_rows(il, block, true, 0, p + c.kb(), size_t(c.vb()));
  }
  // One wait per copier, not per layer's rows: the next step (another stream) reads them.
  for (const auto& be : c.copiers) be->synchronize();
  return true;
}

}  // namespace kvrun
