// block_pool.cpp — the KV block allocator (see block_pool.h and docs/kv-cache.md).
//
// Per-block metadata lives in one array. Free and cached blocks are threaded on two intrusive
// doubly-linked lists over block indices, each with a sentinel node past the last block: the
// free list (ref 0, no hash; taken LIFO so recently touched pages are reused first) and the LRU
// list of cached blocks (ref 0, hash set; the head is the least recently released, the next to
// be evicted). Used blocks are on no list. A hash map from prefix hash to block index makes
// find() O(1).
#include "kv/block_pool.h"

#include <stdexcept>
#include <string>
#include <unordered_map>

namespace kvrun {

namespace {

/// Per-block metadata.
struct Node {
  int32_t ref = 0;    // reference count
  int32_t prev = -1;  // list links (valid while free or cached)
  int32_t next = -1;
  bool hashed = false;  // `hash` is meaningful (the block is in the map)
  uint64_t hash = 0;
};

}  // namespace

struct BlockPool::Impl {
  int32_t n = 0;
  std::vector<Node> nodes;  // [n + 2]: blocks, then the free and LRU sentinels
  std::unordered_map<uint64_t, int32_t> map;
  BlockPoolStats st;

  int32_t free_head() const { return n; }
  int32_t lru_head() const { return n + 1; }

  /// Makes `s` an empty circular list.
  void init_list(int32_t s) { nodes[s].prev = nodes[s].next = s; }
  bool list_empty(int32_t s) const { return nodes[s].next == s; }

  /// Inserts `b` right after `at`.
  void insert_after(int32_t at, int32_t b) {
    const int32_t nx = nodes[at].next;
    nodes[b].prev = at;
    nodes[b].next = nx;
    nodes[nx].prev = b;
    nodes[at].next = b;
  }
  /// Unlinks `b` from whichever list holds it.
  void unlink(int32_t b) {
    nodes[nodes[b].prev].next = nodes[b].next;
    nodes[nodes[b].next].prev = nodes[b].prev;
    nodes[b].prev = nodes[b].next = -1;
  }
  void push_free(int32_t b) { insert_after(free_head(), b); }            // LIFO
  void push_lru(int32_t b) { insert_after(nodes[lru_head()].prev, b); }  // tail: newest

  /// Forgets `b`'s hash (and the map entry when it points at `b`).
  void drop_hash(int32_t b) {
    Node& nd = nodes[b];
    if (!nd.hashed) return;
    auto it = map.find(nd.hash);
    if (it != map.end() && it->second == b) map.erase(it);
    nd.hashed = false;
    nd.hash = 0;
  }

  /// Throws std::out_of_range unless 0 ≤ b < n.
  void check(int32_t b, const char* op) const {
    if (b < 0 || b >= n)
      throw std::out_of_range(std::string("BlockPool::") + op + ": block " + std::to_string(b) +
                              " out of range [0, " + std::to_string(n) + ")");
  }
};

BlockPool::BlockPool(int64_t n_blocks) : impl_(std::make_unique<Impl>()) {
  if (n_blocks < 0 || n_blocks > INT32_MAX - 2)
    throw std::invalid_argument("BlockPool: n_blocks " + std::to_string(n_blocks) +
                                " out of range");
  Impl& p = *impl_;
  p.n = static_cast<int32_t>(n_blocks);
  p.nodes.resize(static_cast<size_t>(n_blocks) + 2);
  p.init_list(p.free_head());
  p.init_list(p.lru_head());
  // Pushed in reverse so block 0 is taken first.
  for (int32_t b = p.n - 1; b >= 0; --b) p.push_free(b);
  p.st.n_blocks = n_blocks;
  p.st.n_free = n_blocks;
}

BlockPool::~BlockPool() = default;
BlockPool::BlockPool(BlockPool&&) noexcept = default;
BlockPool& BlockPool::operator=(BlockPool&&) noexcept = default;

std::optional<int32_t> BlockPool::take() {
  Impl& p = *impl_;
  if (p.list_empty(p.free_head())) return take_cached();
  const int32_t b = p.nodes[p.free_head()].next;
  p.unlink(b);
  --p.st.n_free;
  p.nodes[b].ref = 1;
  ++p.st.n_used;
  return b;
}

std::optional<int32_t> BlockPool::take_cached() {
  Impl& p = *impl_;
  if (p.list_empty(p.lru_head())) return std::nullopt;
  const int32_t b = p.nodes[p.lru_head()].next;  // least recently cached
  p.unlink(b);
  p.drop_hash(b);
  --p.st.n_cached;
  ++p.st.n_evicted;
  p.nodes[b].ref = 1;
  ++p.st.n_used;
  return b;
}

void BlockPool::ref(int32_t block) {
  Impl& p = *impl_;
  p.check(block, "ref");
  Node& nd = p.nodes[block];
  if (nd.ref == 0) {
    if (!nd.hashed) throw std::logic_error("BlockPool::ref: block is free");
    p.unlink(block);  // cached → used
    --p.st.n_cached;
    ++p.st.n_used;
  }
  ++nd.ref;
}

void BlockPool::unref(int32_t block) {
  Impl& p = *impl_;
  p.check(block, "unref");
  Node& nd = p.nodes[block];
  if (nd.ref <= 0) throw std::logic_error("BlockPool::unref: block is not in use");
  if (--nd.ref > 0) return;
  --p.st.n_used;
  if (nd.hashed) {
    p.push_lru(block);
    ++p.st.n_cached;
  } else {
    p.push_free(block);
    ++p.st.n_free;
  }
}

int32_t BlockPool::refcount(int32_t block) const {
  impl_->check(block, "refcount");
  return impl_->nodes[block].ref;
}

bool BlockPool::hashed(int32_t block) const {
  impl_->check(block, "hashed");
  return impl_->nodes[block].hashed;
}

void BlockPool::set_hash(int32_t block, uint64_t hash) {
  Impl& p = *impl_;
  p.check(block, "set_hash");
  if (p.nodes[block].ref <= 0) throw std::logic_error("BlockPool::set_hash: block is not in use");
  if (p.nodes[block].hashed && p.nodes[block].hash == hash) return;
  p.drop_hash(block);
  auto [it, inserted] = p.map.try_emplace(hash, block);
  if (!inserted) {
    // Another block holds the same content: it loses its hash (a cached one becomes free).
    const int32_t old = it->second;
    Node& on = p.nodes[old];
    on.hashed = false;
    on.hash = 0;
    if (on.ref == 0) {
      p.unlink(old);
      p.push_free(old);
      --p.st.n_cached;
      ++p.st.n_free;
    }
    it->second = block;
  }
  p.nodes[block].hashed = true;
  p.nodes[block].hash = hash;
}

void BlockPool::clear_hash(int32_t block) {
  Impl& p = *impl_;
  p.check(block, "clear_hash");
  if (p.nodes[block].ref <= 0) throw std::logic_error("BlockPool::clear_hash: block is not in use");
  p.drop_hash(block);
}

void BlockPool::drop(int32_t block) {
  Impl& p = *impl_;
  p.check(block, "drop");
  Node& nd = p.nodes[block];
  if (nd.ref > 0) throw std::logic_error("BlockPool::drop: block is in use");
  if (!nd.hashed) return;
  p.unlink(block);
  p.drop_hash(block);
  p.push_free(block);
  --p.st.n_cached;
  ++p.st.n_free;
  ++p.st.n_evicted;
}

std::optional<int32_t> BlockPool::find(uint64_t hash) const {
  auto it = impl_->map.find(hash);
  if (it == impl_->map.end()) return std::nullopt;
  return it->second;
}

void BlockPool::clear_hashes() {
  Impl& p = *impl_;
  while (!p.list_empty(p.lru_head())) {
    const int32_t b = p.nodes[p.lru_head()].next;
    p.unlink(b);
    p.push_free(b);
    --p.st.n_cached;
    ++p.st.n_free;
  }
  for (const auto& [hash, b] : p.map) {  // exactly the hashed blocks
    p.nodes[b].hashed = false;
    p.nodes[b].hash = 0;
  }
  p.map.clear();
}

BlockPoolStats BlockPool::stats() const { return impl_->st; }

int64_t BlockPool::n_blocks() const { return impl_->n; }

}  // namespace kvrun
