// test_block_pool.cpp — the KV block allocator (src/kv/block_pool.h): states, reference counts,
// the hash map, LRU eviction, checked against a straightforward reference model after every
// operation of random operation mixes (fixed seeds).
#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "kv/block_pool.h"

namespace kvrun {
namespace {

TEST(BlockPool, NewPoolIsAllFree) {
  BlockPool pool(8);
  const BlockPoolStats st = pool.stats();
  EXPECT_EQ(st.n_blocks, 8);
  EXPECT_EQ(st.n_free, 8);
  EXPECT_EQ(st.n_cached, 0);
  EXPECT_EQ(st.n_used, 0);
  EXPECT_EQ(st.n_evicted, 0);
  EXPECT_EQ(pool.n_blocks(), 8);
  for (int32_t b = 0; b < 8; ++b) EXPECT_EQ(pool.refcount(b), 0);
}

TEST(BlockPool, TakeGivesDistinctBlocksThenNullopt) {
  BlockPool pool(5);
  std::set<int32_t> seen;
  for (int i = 0; i < 5; ++i) {
    std::optional<int32_t> b = pool.take();
    ASSERT_TRUE(b.has_value());
    EXPECT_GE(*b, 0);
    EXPECT_LT(*b, 5);
    EXPECT_TRUE(seen.insert(*b).second);
    EXPECT_EQ(pool.refcount(*b), 1);
  }
  EXPECT_FALSE(pool.take().has_value());
  EXPECT_EQ(pool.stats().n_used, 5);
  EXPECT_EQ(pool.stats().n_free, 0);
  pool.unref(*seen.begin());
  EXPECT_EQ(pool.stats().n_free, 1);
  EXPECT_EQ(pool.take(), *seen.begin());
}

TEST(BlockPool, EmptyPoolNeverGivesABlock) {
  BlockPool pool(0);
  EXPECT_FALSE(pool.take().has_value());
  EXPECT_EQ(pool.stats().n_blocks, 0);
}

TEST(BlockPool, RefcountsAndStates) {
  BlockPool pool(3);
  const int32_t b = *pool.take();
  pool.ref(b);
  pool.ref(b);
  EXPECT_EQ(pool.refcount(b), 3);
  pool.unref(b);
  pool.unref(b);
  EXPECT_EQ(pool.refcount(b), 1);
  EXPECT_EQ(pool.stats().n_used, 1);
  pool.unref(b);
  EXPECT_EQ(pool.refcount(b), 0);
  EXPECT_EQ(pool.stats().n_free, 3);  // no hash: free, not cached
  EXPECT_THROW(pool.unref(b), std::logic_error);
  EXPECT_THROW(pool.ref(b), std::logic_error);  // a free block has no content to share
  EXPECT_THROW(pool.set_hash(b, 1), std::logic_error);
  EXPECT_THROW(pool.refcount(3), std::out_of_range);
  EXPECT_THROW(pool.ref(-1), std::out_of_range);
}

TEST(BlockPool, HashedBlockIsCachedAndRevivable) {
  BlockPool pool(2);
  const int32_t b = *pool.take();
  pool.set_hash(b, 42);
  EXPECT_EQ(pool.find(42), b);
  pool.unref(b);
  EXPECT_EQ(pool.stats().n_cached, 1);
  EXPECT_EQ(pool.stats().n_free, 1);
  EXPECT_EQ(pool.find(42), b);  // released content can be found again
  pool.ref(b);                  // cached → used
  EXPECT_EQ(pool.refcount(b), 1);
  EXPECT_EQ(pool.stats().n_cached, 0);
  EXPECT_EQ(pool.stats().n_used, 1);
  // A revived block is no longer evictable: the other block is taken, then nothing.
  const int32_t other = *pool.take();
  EXPECT_NE(other, b);
  EXPECT_FALSE(pool.take().has_value());
  EXPECT_EQ(pool.find(42), b);
}

TEST(BlockPool, EvictsLeastRecentlyCachedFirst) {
  BlockPool pool(4);
  std::vector<int32_t> b(4);
  for (int i = 0; i < 4; ++i) {
    b[i] = *pool.take();
    pool.set_hash(b[i], 100 + i);
  }
  for (int i : {2, 0, 3, 1}) pool.unref(b[i]);  // release order = LRU order
  EXPECT_EQ(pool.stats().n_cached, 4);
  EXPECT_EQ(pool.stats().n_free, 0);
  int64_t evicted = 0;
  for (int i : {2, 0, 3, 1}) {
    EXPECT_EQ(pool.take(), b[i]);
    EXPECT_FALSE(pool.find(100 + i).has_value());
    EXPECT_EQ(pool.stats().n_evicted, ++evicted);
  }
  EXPECT_FALSE(pool.take().has_value());
}

TEST(BlockPool, FreeBlocksAreTakenBeforeCachedOnes) {
  BlockPool pool(3);
  const int32_t a = *pool.take(), c = *pool.take();
  pool.set_hash(a, 7);
  pool.unref(a);  // cached
  pool.unref(c);  // free
  EXPECT_EQ(pool.take(), c);
  const int32_t third = *pool.take();  // the never-used one
  EXPECT_NE(third, a);
  EXPECT_EQ(pool.stats().n_evicted, 0);
  EXPECT_EQ(pool.take(), a);  // only now is the cached block evicted
  EXPECT_EQ(pool.stats().n_evicted, 1);
  EXPECT_FALSE(pool.find(7).has_value());
}

// take_cached evicts the least recently cached block although free ones remain (the KV cache's
// way to a block whose rows a device has backed), and gives nothing when none is cached.
TEST(BlockPool, TakeCachedEvictsEvenWithFreeBlocks) {
  BlockPool pool(4);
  EXPECT_FALSE(pool.take_cached().has_value());
  const int32_t a = *pool.take(), c = *pool.take();
  pool.set_hash(a, 7);
  pool.set_hash(c, 8);
  pool.unref(c);  // cached first
  pool.unref(a);
  EXPECT_EQ(pool.stats().n_free, 2);
  EXPECT_EQ(pool.take_cached(), c);
  EXPECT_EQ(pool.refcount(c), 1);
  EXPECT_FALSE(pool.hashed(c));
  EXPECT_FALSE(pool.find(8).has_value());
  EXPECT_EQ(pool.find(7), a);
  const BlockPoolStats st = pool.stats();
  EXPECT_EQ(st.n_evicted, 1);
  EXPECT_EQ(st.n_cached, 1);
  EXPECT_EQ(st.n_used, 1);
  EXPECT_EQ(st.n_free, 2);
}

TEST(BlockPool, SetHashReplacesTheOlderHolder) {
  BlockPool pool(3);
  const int32_t a = *pool.take(), b = *pool.take();
  pool.set_hash(a, 9);
  pool.unref(a);  // cached under 9
  pool.set_hash(b, 9);
  EXPECT_EQ(pool.find(9), b);
  EXPECT_EQ(pool.stats().n_cached, 0);  // a lost its hash: free now
  EXPECT_EQ(pool.stats().n_free, 2);
  pool.set_hash(b, 10);  // rehash: the old key goes
  EXPECT_FALSE(pool.find(9).has_value());
  EXPECT_EQ(pool.find(10), b);
  pool.clear_hash(b);
  EXPECT_FALSE(pool.find(10).has_value());
  pool.unref(b);
  EXPECT_EQ(pool.stats().n_free, 3);
}

TEST(BlockPool, ClearHashesFreesCachedBlocks) {
  BlockPool pool(4);
  const int32_t a = *pool.take(), b = *pool.take();
  pool.set_hash(a, 1);
  pool.set_hash(b, 2);
  pool.unref(a);
  pool.clear_hashes();
  EXPECT_FALSE(pool.find(1).has_value());
  EXPECT_FALSE(pool.find(2).has_value());
  EXPECT_EQ(pool.stats().n_cached, 0);
  EXPECT_EQ(pool.stats().n_free, 3);
  pool.unref(b);  // lost its hash: becomes free, not cached
  EXPECT_EQ(pool.stats().n_free, 4);
}

TEST(BlockPool, MoveKeepsState) {
  BlockPool pool(2);
  const int32_t a = *pool.take();
  pool.set_hash(a, 5);
  BlockPool moved(std::move(pool));
  EXPECT_EQ(moved.find(5), a);
  EXPECT_EQ(moved.refcount(a), 1);
  BlockPool other(1);
  other = std::move(moved);
  EXPECT_EQ(other.n_blocks(), 2);
  EXPECT_EQ(other.stats().n_used, 1);
}

// ---- model-based random mixes ----------------------------------------------------------------

/// A plain reference model of the pool's observable behaviour.
struct Model {
  explicit Model(int32_t n) : ref(n, 0), hash(n) {}
  std::vector<int32_t> ref;
  std::vector<std::optional<uint64_t>> hash;
  std::list<int32_t> lru;  // cached blocks, front = least recently released
  std::map<uint64_t, int32_t> map;
  int64_t evicted = 0;

  bool is_free(int32_t b) const { return ref[b] == 0 && !hash[b]; }
  void drop(int32_t b) {
    if (!hash[b]) return;
    auto it = map.find(*hash[b]);
    if (it != map.end() && it->second == b) map.erase(it);
    hash[b].reset();
  }
};

/// Checks every observable against the model.
void expect_matches(const BlockPool& pool, const Model& m) {
  const BlockPoolStats st = pool.stats();
  int64_t n_free = 0, n_cached = 0, n_used = 0;
  for (size_t b = 0; b < m.ref.size(); ++b) {
    ASSERT_EQ(pool.refcount(int32_t(b)), m.ref[b]) << "block " << b;
    if (m.ref[b] > 0)
      ++n_used;
    else if (m.hash[b])
      ++n_cached;
    else
      ++n_free;
  }
  ASSERT_EQ(st.n_free + st.n_cached + st.n_used, st.n_blocks);
  ASSERT_EQ(st.n_free, n_free);
  ASSERT_EQ(st.n_cached, n_cached);
  ASSERT_EQ(st.n_used, n_used);
  ASSERT_EQ(st.n_cached, int64_t(m.lru.size()));
  ASSERT_EQ(st.n_evicted, m.evicted);
  for (const auto& [h, b] : m.map) ASSERT_EQ(pool.find(h), b) << "hash " << h;
}

/// One random operation on both the pool and the model.
void random_step(BlockPool& pool, Model& m, std::mt19937& rng) {
  const int32_t n = int32_t(m.ref.size());
  auto pick = [&](auto pred) -> std::optional<int32_t> {
    std::vector<int32_t> c;
    for (int32_t b = 0; b < n; ++b)
      if (pred(b)) c.push_back(b);
    if (c.empty()) return std::nullopt;
    return c[rng() % c.size()];
  };
  const uint64_t h = rng() % 24;  // a small key space: collisions and re-hashes happen
  switch (rng() % 16) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 4: {  // take
      const bool any_free = pick([&](int32_t b) { return m.is_free(b); }).has_value();
      std::optional<int32_t> got = pool.take();
      if (any_free) {
        ASSERT_TRUE(got.has_value());
        ASSERT_TRUE(m.is_free(*got)) << "took a non-free block while free ones remain";
      } else if (!m.lru.empty()) {
        ASSERT_EQ(got, m.lru.front()) << "did not evict the least recently cached block";
        const uint64_t old = *m.hash[*got];
        m.lru.pop_front();
        m.drop(*got);
        ++m.evicted;
        ASSERT_FALSE(pool.find(old).has_value()) << "evicted block still found";
      } else {
        ASSERT_FALSE(got.has_value()) << "take succeeded with every block used";
        return;
      }
      m.ref[*got] = 1;
      break;
    }
    case 5:
    case 6:
    case 7:
    case 8: {  // unref a used block
      auto b = pick([&](int32_t x) { return m.ref[x] > 0; });
      if (!b) return;
      pool.unref(*b);
      if (--m.ref[*b] == 0 && m.hash[*b]) m.lru.push_back(*b);
      break;
    }
    case 9:
    case 10: {  // ref a used or cached block
      auto b = pick([&](int32_t x) { return m.ref[x] > 0 || m.hash[x].has_value(); });
      if (!b) return;
      pool.ref(*b);
      if (m.ref[*b]++ == 0) m.lru.remove(*b);
      break;
    }
    case 11:
    case 12: {  // set_hash on a used block
      auto b = pick([&](int32_t x) { return m.ref[x] > 0; });
      if (!b) return;
      pool.set_hash(*b, h);
      if (m.hash[*b] == h) break;
      m.drop(*b);
      if (auto it = m.map.find(h); it != m.map.end()) {
        const int32_t old = it->second;
        m.hash[old].reset();
        if (m.ref[old] == 0) m.lru.remove(old);
      }
      m.map[h] = *b;
      m.hash[*b] = h;
      break;
    }
    case 13: {  // find
      auto it = m.map.find(h);
      ASSERT_EQ(pool.find(h), it == m.map.end() ? std::nullopt : std::optional(it->second));
      break;
    }
    case 14: {  // clear_hash on a used block
      auto b = pick([&](int32_t x) { return m.ref[x] > 0; });
      if (!b) return;
      pool.clear_hash(*b);
      m.drop(*b);
      break;
    }
    case 15:  // clear_hashes, rarely
      if (rng() % 8 != 0) return;
      pool.clear_hashes();
      for (int32_t b = 0; b < n; ++b) m.hash[b].reset();
      m.map.clear();
      m.lru.clear();
      break;
  }
}

class BlockPoolRandom : public ::testing::TestWithParam<std::tuple<int32_t, uint32_t>> {};

TEST_P(BlockPoolRandom, MatchesReferenceModelAfterEveryOperation) {
  const auto [n, seed] = GetParam();
  BlockPool pool(n);
  Model m(n);
  std::mt19937 rng(seed);
  for (int step = 0; step < 4000; ++step) {
    ASSERT_NO_FATAL_FAILURE(random_step(pool, m, rng)) << "step " << step;
    ASSERT_NO_FATAL_FAILURE(expect_matches(pool, m)) << "after step " << step;
  }
  // Release everything: nothing stays used.
  for (int32_t b = 0; b < n; ++b)
    while (m.ref[b] > 0) {
      pool.unref(b);
      --m.ref[b];
    }
  EXPECT_EQ(pool.stats().n_used, 0);
  EXPECT_EQ(pool.stats().n_free + pool.stats().n_cached, n);
}

INSTANTIATE_TEST_SUITE_P(Seeds, BlockPoolRandom,
                         ::testing::Combine(::testing::Values(1, 2, 5, 16, 64),
                                            ::testing::Values(1u, 7u, 1234u)));

}  // namespace
}  // namespace kvrun
