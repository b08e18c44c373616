// kv_sequence.cpp — one session's block table over a KvCache (KvSequence): reserve, commit,
// prefix matching, truncation, sliding-window release. Design and invariants: docs/kv-cache.md.
//
// Writing into a block that was once full: a sequence that truncates into the middle of a block
// keeps that block (its rows before the cut are still valid), and the block keeps its hash in the
// pool because its content is unchanged and may be shared with, or later matched by, others.
// The next reserve() is the point where the block is about to be written: if it is shared (ref >
// 1) the sequence copies it to a fresh block first (copy-on-write) and the original stays intact
// for its other holders; if the sequence owns it alone, its hash is dropped (clear_hash) since its
// content is about to diverge.
//
// Window tables: every table entry from n_win_released_ on holds the block's windowed-layer rows
// too (KvCache::Impl::win_hold); release_window_before gives those back behind the window.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kv/kv_cache.h"
#include "kv/kv_cache_impl.h"

namespace kvrun {
namespace {

/// The end of KvCacheFull's hint for a cache with parameters `p`: which slow tier to add or
/// raise.
std::string raise_hint(const KvCacheParams& p, bool rows_on_host) {
  if (p.host_tier) return " or --kv-host-max)";
  if (!p.offload_dir.empty()) return " or --kv-offload-max)";
  return rows_on_host ? ", or add --kv-offload-dir)" : ", or add --kv-host-tier)";
}

}  // namespace

KvSequence::KvSequence(KvCache& cache) : cache_(cache) { cache_.attach(this); }

KvSequence::~KvSequence() {
  clear();
  cache_.detach(this);
}

int64_t KvSequence::n_tokens() const { return static_cast<int64_t>(tokens_.size()); }

const std::vector<int32_t>& KvSequence::block_table() const { return table_; }

int64_t KvSequence::bytes_held() const {
  return (static_cast<int64_t>(table_.size()) - n_released_) * cache_.bytes_per_block() +
         n_window_blocks() * cache_.window_bytes_per_block();
}

int64_t KvSequence::n_window_blocks() const {
  return cache_.window() > 0 ? int64_t(table_.size()) - n_win_released_ : 0;
}

int64_t KvSequence::release_window_before(int64_t pos) {
  if (cache_.window() <= 0) return 0;
  const int64_t bs = cache_.block_size();
  const int64_t until = std::min<int64_t>(
      std::max<int64_t>(0, pos) / bs, std::min<int64_t>(n_tokens() / bs, int64_t(table_.size())));
  const int64_t n = std::max<int64_t>(0, until - n_win_released_);
  for (int64_t b = n_win_released_; b < until; ++b)  // kept while the slot is not needed
    cache_.impl_->win_drop(table_[size_t(b)], true);
  n_win_released_ = std::max(n_win_released_, until);
  return n;
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
                      raise_hint(cache_.params(), cache_.rows_on_host()));
  KvCache::Impl& c = *cache_.impl_;
  if (c.win.window > 0 && n_take > c.win_available())
    throw KvCacheFull("KV cache full: " + std::to_string(n_take) +
                      " more windowed-layer blocks needed, " + std::to_string(c.win_available()) +
                      " of " + std::to_string(c.win.n_slots) + " available (raise --kv-mem)");
  std::vector<int32_t> taken;
  taken.reserve(static_cast<size_t>(n_take));
  for (int64_t i = 0; i < n_take; ++i) {
    std::optional<int32_t> b = cache_.take_block();
    if (!b) {  // a device with no memory left to back the block (KvCache::take_block)
      for (int32_t t : taken) cache_.unref_block(t);
      throw KvCacheFull(
          "KV cache full: the device holding the KV rows has no memory for more blocks (lower "
          "--kv-mem or -c, or use -nkvo)");
    }
    taken.push_back(*b);
  }
  if (c.win.window > 0)
    for (int32_t t : taken) c.win_hold(t);  // (checked above: cannot run out)
  size_t next = 0;
  if (cow) {
    const int32_t shared = table_[last];
    cache_.copy_block(taken[0], shared);
    table_[last] = taken[next++];
    if (c.win.window > 0) c.win_drop(shared, pool.hashed(shared));
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
  if (cache_.window() > 0) attach_window_rows();
  const size_t n = table_.size() * bs;
  tokens_.assign(tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(n));
  cache_.add_reused(static_cast<int64_t>(n));
  if (n > 0) cache_.rebalance();  // cached blocks found in the slow tier come back if room
  return static_cast<int64_t>(n);
}

void KvSequence::attach_window_rows() {
  KvCache::Impl& c = *cache_.impl_;
  const int64_t bs = cache_.block_size(), w = c.win.window;
  // The first computed position of a k-block match is k·bs; its window starts at k·bs − w + 1.
  auto first = [&](int64_t k) { return std::max<int64_t>(0, k * bs - w + 1) / bs; };
  int64_t k = int64_t(table_.size());
  for (; k > 0; --k) {
    bool all = true;
    for (int64_t i = first(k); i < k && all; ++i) all = c.win_has(table_[size_t(i)]);
    if (all) break;
  }
  while (int64_t(table_.size()) > k) {
    cache_.unref_block(table_.back());
    table_.pop_back();
    hashes_.pop_back();
  }
  for (int64_t i = first(k); i < k; ++i) c.win_hold(table_[size_t(i)]);
  n_win_released_ = first(k);
}

bool KvSequence::has_window_rows(int64_t n) const {
  const int64_t w = cache_.window(), bs = cache_.block_size();
  if (w <= 0 || n <= 0) return true;
  const int64_t end = std::min<int64_t>(n_win_released_, (n + bs - 1) / bs);
  for (int64_t i = std::max<int64_t>(0, n - w + 1) / bs; i < end; ++i)
    if (table_[size_t(i)] < 0 || !cache_.impl_->win_has(table_[size_t(i)])) return false;
  return true;
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
  const int64_t w = cache_.window();
  if (!has_window_rows(n))
    throw std::logic_error("KvSequence::truncate: the window of position " + std::to_string(n) +
                           " needs windowed-layer rows given back by release_window_before");
  // Window tables: blocks of that window given back but still kept are held again.
  const int64_t first = w > 0 && n > 0 ? std::max<int64_t>(0, n - w + 1) / bs : n_win_released_;
  const int64_t rehold_end = std::min<int64_t>(n_win_released_, int64_t(keep));
  const bool released = table_.size() > keep;
  while (table_.size() > keep) {
    const int32_t b = table_.back();
    if (w > 0 && int64_t(table_.size()) > n_win_released_)  // a full block keeps its rows
      cache_.impl_->win_drop(b, cache_.pool().hashed(b));
    if (b >= 0) cache_.unref_block(b);
    table_.pop_back();
  }
  n_released_ = std::min(n_released_, static_cast<int64_t>(keep));
  for (int64_t i = first; i < rehold_end; ++i) cache_.impl_->win_hold(table_[size_t(i)]);
  n_win_released_ = std::min({n_win_released_, first, static_cast<int64_t>(keep)});
  tokens_.resize(static_cast<size_t>(n));
  if (synthetic_from_ >= n) synthetic_from_ = -1;  // no synthetic position left
  hashes_.resize(std::min(hashes_.size(), static_cast<size_t>(n / bs)));
  reserved_ = 0;
  if (released) cache_.rebalance();
}

void KvSequence::clear() { truncate(0); }

}  // namespace kvrun
