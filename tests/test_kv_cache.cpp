// test_kv_cache.cpp — the paged KV cache (src/kv/kv_cache.h): memory math, parameter checks,
// reserve/commit/truncate, prefix sharing, copy-on-write, KvCacheFull, and random mixes of
// sessions that must give every block back. Row contents are checked through marker bytes
// written into layer() storage, so sharing and copy-on-write are verified on the data itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "kv_layout.h"
#include "cpu/paged_attention.h"  // cpu::PagedKvLayer (the seam's KvLayer)

namespace kvrun {
namespace {

/// A small model shape: 2 layers, 2 KV heads of 8.
Hparams small_hparams(int64_t head_dim = 8) {
  Hparams hp;
  hp.arch = "llama";
  hp.n_layer = 2;
  hp.n_embd = 32;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = head_dim;
  hp.head_dim_v = head_dim;
  return hp;
}

KvCacheParams params(int64_t block_size, int64_t n_blocks, const Hparams& hp = small_hparams(),
                     DType tk = DType::F16, DType tv = DType::F16) {
  KvCacheParams p;
  p.type_k = tk;
  p.type_v = tv;
  p.block_size = block_size;
  p.mem_bytes = n_blocks * block_size *
                kv_bytes_per_token(tk, tv, hp.n_layer, hp.n_head_kv, hp.head_dim, hp.head_dim_v);
  return p;
}

/// `n` token ids from `seed` (a small vocabulary).
std::vector<int32_t> tokens_of(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % 1000);
  return t;
}

// ---- marker rows: a value that depends on the whole prefix, as real K/V do --------------------

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// markers[i] for the prefix tokens[0..i].
std::vector<uint64_t> markers_of(const std::vector<int32_t>& tokens) {
  std::vector<uint64_t> m(tokens.size());
  uint64_t h = 12345;
  for (size_t i = 0; i < tokens.size(); ++i) m[i] = h = mix(h ^ uint64_t(uint32_t(tokens[i])));
  return m;
}

uint8_t* k_row(const KvCache& c, int64_t il, int32_t block, int64_t slot) {
  const cpu::PagedKvLayer l = c.layer(il);
  return l.k_block(block) + slot * l.k_row_bytes;
}
uint8_t* v_row(const KvCache& c, int64_t il, int32_t block, int64_t slot) {
  const cpu::PagedKvLayer l = c.layer(il);
  return l.v_block(block) + slot * l.v_row_bytes;
}

/// Writes the marker of position `pos` of `seq` into every layer's K and V row.
void write_marker(const KvCache& c, const KvSequence& seq, int64_t pos, uint64_t marker) {
  const int64_t bs = c.block_size();
  const int32_t b = seq.block_table()[pos / bs];
  for (int64_t il = 0; il < c.n_layer(); ++il) {
    const uint64_t mk = marker ^ uint64_t(il), mv = ~marker ^ uint64_t(il);
    std::memcpy(k_row(c, il, b, pos % bs), &mk, 8);
    std::memcpy(v_row(c, il, b, pos % bs), &mv, 8);
  }
}

/// Expects every committed position of `seq` to hold its marker.
void expect_markers(const KvCache& c, const KvSequence& seq) {
  const std::vector<uint64_t> m = markers_of(seq.tokens());
  const int64_t bs = c.block_size();
  for (int64_t pos = 0; pos < seq.n_tokens(); ++pos) {
    const int32_t b = seq.block_table()[pos / bs];
    for (int64_t il = 0; il < c.n_layer(); ++il) {
      uint64_t k, v;
      std::memcpy(&k, k_row(c, il, b, pos % bs), 8);
      std::memcpy(&v, v_row(c, il, b, pos % bs), 8);
      ASSERT_EQ(k, m[pos] ^ uint64_t(il)) << "K row of position " << pos << " layer " << il;
      ASSERT_EQ(v, ~m[pos] ^ uint64_t(il)) << "V row of position " << pos << " layer " << il;
    }
  }
}

/// Appends `t` to `seq`: reserve, write the rows, commit (what a forward pass does).
void append(KvCache& c, KvSequence& seq, const std::vector<int32_t>& t) {
  const int64_t n0 = seq.n_tokens();
  seq.reserve(int64_t(t.size()));
  std::vector<int32_t> all = seq.tokens();
  all.insert(all.end(), t.begin(), t.end());
  const std::vector<uint64_t> m = markers_of(all);
  for (size_t i = 0; i < t.size(); ++i) write_marker(c, seq, n0 + int64_t(i), m[n0 + i]);
  seq.commit(t);
}

/// Starts `seq` on `prompt`: attach the cached prefix, compute the rest.
int64_t start(KvCache& c, KvSequence& seq, const std::vector<int32_t>& prompt) {
  const int64_t reused = seq.attach_prefix(prompt);
  append(c, seq, std::vector<int32_t>(prompt.begin() + reused, prompt.end()));
  return reused;
}

// ---- sizes and parameters ---------------------------------------------------------------------

TEST(KvCache, MemoryMath) {
  const Hparams hp = small_hparams();
  for (DType tk : kKvCacheTypes)
    for (DType tv : {DType::F16, DType::Q4_0, DType::NVFP4})
      for (int64_t bs : {1, 7, 16}) {
        KvCacheParams p = params(bs, 1, hp, tk, tv);
        p.mem_bytes = 10'000'000;
        KvCache c(hp, p);
        const int64_t bpt = kv_bytes_per_token(tk, tv, 2, 2, 8, 8);
        EXPECT_EQ(c.bytes_per_token(), bpt);
        EXPECT_EQ(c.bytes_per_block(), bs * bpt);
        EXPECT_EQ(c.n_blocks(), 10'000'000 / (bs * bpt));
        EXPECT_EQ(c.pool().n_blocks(), c.n_blocks());
        EXPECT_EQ(c.n_layer(), 2);
        EXPECT_EQ(c.block_size(), bs);
        const cpu::PagedKvLayer l = c.layer(1);
        EXPECT_EQ(l.k_row_bytes, kv_row_bytes(tk, 2, 8));
        EXPECT_EQ(l.v_row_bytes, kv_row_bytes(tv, 2, 8));
        EXPECT_EQ(l.k_type, tk);
        EXPECT_EQ(l.v_type, tv);
        EXPECT_EQ(l.block_size, bs);
      }
}

TEST(KvCache, BudgetBoundaries) {
  const Hparams hp = small_hparams();
  KvCacheParams p = params(16, 3, hp);
  KvCache exact(hp, p);
  EXPECT_EQ(exact.n_blocks(), 3);
  p.mem_bytes -= 1;
  EXPECT_EQ(KvCache(hp, p).n_blocks(), 2);
  p = params(16, 1, hp);
  p.mem_bytes -= 1;
  EXPECT_THROW(KvCache(hp, p), std::invalid_argument);
  p.mem_bytes = -5;
  EXPECT_THROW(KvCache(hp, p), std::invalid_argument);
}

TEST(KvCache, DefaultBudgetIsHalfTheAvailableMemory) {
  Hparams hp = small_hparams(128);  // big rows keep the pool's metadata small
  hp.n_layer = 32;
  hp.n_head_kv = 8;
  KvCacheParams p;  // mem_bytes 0
  KvCache c(hp, p);
  std::ifstream in("/proc/meminfo");
  std::string line;
  int64_t avail_kib = 0;
  while (std::getline(in, line))
    if (line.rfind("MemAvailable:", 0) == 0) std::istringstream(line.substr(13)) >> avail_kib;
  const int64_t budget = avail_kib > 0 ? avail_kib * 1024 / 2 : int64_t(1) << 30;
  const int64_t expected = budget / c.bytes_per_block();
  EXPECT_GE(c.n_blocks(), 1);
  // MemAvailable moves between the two reads; allow 10 %.
  EXPECT_NEAR(double(c.n_blocks()), double(expected), 0.1 * double(expected) + 1);
}

TEST(KvCache, RejectsBadParameters) {
  const Hparams hp = small_hparams();
  KvCacheParams p = params(16, 4, hp);
  p.type_k = DType::Q4_K;
  EXPECT_THROW(KvCache(hp, p), std::invalid_argument);
  p = params(16, 4, hp);
  p.type_v = DType::I32;
  EXPECT_THROW(KvCache(hp, p), std::invalid_argument);
  p = params(16, 4, hp);
  p.block_size = 0;
  EXPECT_THROW(KvCache(hp, p), std::invalid_argument);
  // --kv-rotate needs a power-of-two head_dim.
  const Hparams odd = small_hparams(12);
  p = params(16, 4, odd);
  p.rotate = true;
  EXPECT_THROW(KvCache(odd, p), std::invalid_argument);
  p.rotate = false;
  EXPECT_NO_THROW(KvCache(odd, p));
  p = params(16, 4, hp);
  p.rotate = true;
  EXPECT_NO_THROW(KvCache(hp, p));
  Hparams none = small_hparams();
  none.n_head_kv = 0;
  EXPECT_THROW(KvCache(none, params(16, 4, hp)), std::invalid_argument);
  KvCache c(hp, params(16, 4, hp));
  EXPECT_THROW(c.layer(2), std::out_of_range);
  EXPECT_THROW(c.layer(-1), std::out_of_range);
}

TEST(KvCache, LayersDoNotOverlapAndAreWritable) {
  const Hparams hp = small_hparams();
  KvCache c(hp, params(7, 5, hp, DType::F32, DType::Q8_0));
  std::vector<std::pair<uint8_t*, int64_t>> regions;
  for (int64_t il = 0; il < c.n_layer(); ++il) {
    const cpu::PagedKvLayer l = c.layer(il);
    regions.push_back({l.k, c.n_blocks() * 7 * l.k_row_bytes});
    regions.push_back({l.v, c.n_blocks() * 7 * l.v_row_bytes});
  }
  int64_t total = 0;
  for (auto [p, n] : regions) {
    std::memset(p, 0xab, size_t(n));  // every byte is writable
    total += n;
  }
  EXPECT_EQ(total, c.n_blocks() * c.bytes_per_block());
  std::sort(regions.begin(), regions.end());
  for (size_t i = 1; i < regions.size(); ++i)
    EXPECT_LE(regions[i - 1].first + regions[i - 1].second, regions[i].first);
}

TEST(KvCache, CopyBlockCopiesEveryLayer) {
  const Hparams hp = small_hparams();
  KvCache c(hp, params(4, 3, hp));
  for (int64_t il = 0; il < 2; ++il)
    for (int64_t s = 0; s < 4; ++s) {
      std::memset(k_row(c, il, 0, s), int(1 + il * 4 + s), size_t(c.layer(il).k_row_bytes));
      std::memset(v_row(c, il, 0, s), int(100 + il * 4 + s), size_t(c.layer(il).v_row_bytes));
    }
  c.copy_block(2, 0);
  for (int64_t il = 0; il < 2; ++il)
    for (int64_t s = 0; s < 4; ++s) {
      EXPECT_EQ(0, std::memcmp(k_row(c, il, 2, s), k_row(c, il, 0, s), c.layer(il).k_row_bytes));
      EXPECT_EQ(0, std::memcmp(v_row(c, il, 2, s), v_row(c, il, 0, s), c.layer(il).v_row_bytes));
    }
  EXPECT_EQ(*k_row(c, 0, 1, 0), 0);  // block 1 untouched
  EXPECT_THROW(c.copy_block(3, 0), std::out_of_range);
}

TEST(KvSequence, BytesHeldIsWholeBlocks) {
  const Hparams hp = small_hparams();
  for (int64_t bs : {1, 7, 16}) {
    KvCache c(hp, params(bs, 400, hp));
    std::vector<int64_t> sizes = {0, 1, 15, 16, 17, 32, 33, 100, 255};
    std::mt19937 rng(bs);
    for (int i = 0; i < 20; ++i) sizes.push_back(rng() % 390);
    for (int64_t s : sizes) {
      KvSequence seq(c);
      append(c, seq, tokens_of(size_t(s), uint32_t(s)));
      const int64_t blocks = (s + bs - 1) / bs;
      EXPECT_EQ(seq.n_tokens(), s);
      EXPECT_EQ(int64_t(seq.block_table().size()), blocks) << "S " << s << " bs " << bs;
      EXPECT_EQ(seq.bytes_held(), blocks * c.bytes_per_block()) << "S " << s << " bs " << bs;
      EXPECT_EQ(seq.bytes_held(), blocks * bs * c.bytes_per_token());
      EXPECT_EQ(c.pool().stats().n_used, blocks);
      ASSERT_NO_FATAL_FAILURE(expect_markers(c, seq));
    }
    EXPECT_EQ(c.pool().stats().n_used, 0);
  }
}

TEST(KvSequence, ReserveCommitTruncate) {
  const Hparams hp = small_hparams();
  KvCache c(hp, params(4, 16, hp));
  KvSequence seq(c);
  seq.reserve(6);  // positions 0..5: two blocks, taken before anything is committed
  EXPECT_EQ(seq.block_table().size(), 2u);
  EXPECT_EQ(seq.n_tokens(), 0);
  const std::vector<int32_t> t = tokens_of(6, 1);
  seq.commit(std::span(t).first(3));  // a partial commit keeps the rest reserved
  EXPECT_EQ(seq.n_tokens(), 3);
  seq.commit(std::span(t).subspan(3));
  EXPECT_EQ(seq.n_tokens(), 6);
  EXPECT_EQ(seq.tokens(), t);
  EXPECT_THROW(seq.commit(std::span(t).first(1)), std::logic_error);  // nothing reserved
  EXPECT_EQ(c.n_tokens_computed(), 6);
  seq.reserve(10);  // cancelled below: the pending blocks go back
  EXPECT_EQ(seq.block_table().size(), 4u);
  seq.truncate(6);
  EXPECT_EQ(seq.block_table().size(), 2u);
  seq.truncate(4);
  EXPECT_EQ(seq.block_table().size(), 1u);
  EXPECT_EQ(seq.n_tokens(), 4);
  EXPECT_THROW(seq.truncate(5), std::out_of_range);
  EXPECT_THROW(seq.reserve(-1), std::invalid_argument);
  seq.clear();
  EXPECT_EQ(seq.n_tokens(), 0);
  EXPECT_TRUE(seq.block_table().empty());
  EXPECT_EQ(c.pool().stats().n_used, 0);
}

// ---- prefix sharing ----------------------------------------------------------------------------

TEST(KvSequence, PrefixSharing) {
  const Hparams hp = small_hparams();
  KvCache c(hp, params(16, 200, hp));
  const std::vector<int32_t> doc = tokens_of(1000, 42);
  auto a = std::make_unique<KvSequence>(c);
  EXPECT_EQ(start(c, *a, doc), 0);
  EXPECT_EQ(c.n_tokens_computed(), 1000);

  std::vector<int32_t> longer = doc;
  const std::vector<int32_t> extra = tokens_of(24, 43);
  longer.insert(longer.end(), extra.begin(), extra.end());
  auto b = std::make_unique<KvSequence>(c);
  EXPECT_EQ(start(c, *b, longer), 992);  // floor(999 / 16) · 16
  EXPECT_EQ(c.n_tokens_reused(), 992);
  EXPECT_EQ(c.n_tokens_computed(), 1000 + 32);
  for (size_t i = 0; i < 62; ++i) {
    EXPECT_EQ(b->block_table()[i], a->block_table()[i]);
    EXPECT_EQ(c.pool().refcount(a->block_table()[i]), 2);
  }
  EXPECT_NE(b->block_table()[62], a->block_table()[62]);  // A's partial block is not shared
  ASSERT_NO_FATAL_FAILURE(expect_markers(c, *a));
  ASSERT_NO_FATAL_FAILURE(expect_markers(c, *b));
  EXPECT_EQ(c.pool().stats().n_used, 63 + 2);  // A: 63; B: 62 shared + 2 own

  {  // A different earlier token: no match from there on.
    std::vector<int32_t> other = doc;
    other[5] += 1;
    KvSequence s(c);
    EXPECT_EQ(s.attach_prefix(other), 0);
    other = doc;
    other[500] += 1;
    EXPECT_EQ(KvSequence(c).attach_prefix(other), 496);
  }
  {  // A prompt of exactly whole blocks leaves its last block to compute.
    KvSequence s(c);
    EXPECT_EQ(s.attach_prefix(std::span(doc).first(32)), 16);
    EXPECT_EQ(s.n_tokens(), 16);
    KvSequence s1(c);
    EXPECT_EQ(s1.attach_prefix(std::span(doc).first(16)), 0);
    EXPECT_EQ(s1.attach_prefix(std::span(doc).first(0)), 0);
  }
  EXPECT_THROW(a->attach_prefix(doc), std::logic_error);  // only on an empty sequence

  // After A and B end their full blocks stay cached; a third sequence still matches.
  a.reset();
  b.reset();
  const BlockPoolStats st = c.pool().stats();
  EXPECT_EQ(st.n_used, 0);
  EXPECT_EQ(st.n_cached, 64);  // 1024 / 16 full blocks (62 shared + B's 2)
  KvSequence third(c);
  std::vector<int32_t> more = longer;
  more.push_back(7);
  EXPECT_EQ(start(c, third, more), 1024);
  ASSERT_NO_FATAL_FAILURE(expect_markers(c, third));
}

TEST(KvSequence, DifferentCacheTypesNeverMatch) {
  const std::vector<int32_t> t = tokens_of(16, 3);
  const uint64_t base = kv_block_hash(kKvRootHash, t, DType::F16, DType::F16);
  EXPECT_NE(base, kv_block_hash(kKvRootHash, t, DType::Q8_0, DType::F16));
  EXPECT_NE(base, kv_block_hash(kKvRootHash, t, DType::F16, DType::Q8_0));
  EXPECT_NE(base, kv_block_hash(kKvRootHash + 1, t, DType::F16, DType::F16));
  EXPECT_EQ(base, kv_block_hash(kKvRootHash, t, DType::F16, DType::F16));

  const Hparams hp = small_hparams();
  KvCache f16(hp, params(16, 20, hp));
  KvCache q8(hp, params(16, 20, hp, DType::Q8_0, DType::F16));
  const std::vector<int32_t> doc = tokens_of(100, 9);
  KvSequence a(f16);
  start(f16, a, doc);
  // The same tokens in a cache of other types: block hashes differ, nothing is found.
  KvSequence b(q8);
  EXPECT_EQ(b.attach_prefix(doc), 0);
  const uint64_t h0 = kv_block_hash(kKvRootHash, std::span(doc).first(16), DType::F16, DType::F16);
  EXPECT_EQ(f16.pool().find(h0), a.block_table()[0]);
  EXPECT_FALSE(q8.pool().find(h0).has_value());
}

TEST(KvSequence, NoPrefixCacheMeansNoMatch) {
  const Hparams hp = small_hparams();
  KvCacheParams p = params(16, 100, hp);
  p.prefix_cache = false;
  KvCache c(hp, p);
  const std::vector<int32_t> doc = tokens_of(300, 5);
  {
    KvSequence a(c);
    start(c, a, doc);
    KvSequence b(c);
    EXPECT_EQ(b.attach_prefix(doc), 0);
  }
  EXPECT_EQ(c.pool().stats().n_cached, 0);  // nothing was hashed
  EXPECT_EQ(c.pool().stats().n_free, c.n_blocks());
  KvSequence d(c);
  EXPECT_EQ(d.attach_prefix(doc), 0);
  EXPECT_EQ(c.n_tokens_reused(), 0);
}

// ---- copy-on-write -----------------------------------------------------------------------------

TEST(KvSequence, CopyOnWriteOfASharedPartialBlock) {
  const Hparams hp = small_hparams();
  KvCache c(hp, params(16, 20, hp));
  const std::vector<int32_t> doc = tokens_of(40, 11);
  KvSequence a(c);
  start(c, a, doc);  // blocks 0, 1 full, block 2 partial
  KvSequence b(c);
  EXPECT_EQ(b.attach_prefix(std::span(doc).first(33)), 32);
  const int32_t shared = a.block_table()[1];
  EXPECT_EQ(b.block_table()[1], shared);
  b.truncate(20);  // block 1 is now partial for B and still shared with A
  EXPECT_EQ(c.pool().refcount(shared), 2);
  EXPECT_EQ(b.block_table().size(), 2u);

  const int64_t used = c.pool().stats().n_used;
  append(c, b, tokens_of(12, 12));  // writes slots 4..15 of B's block 1: copy first
  EXPECT_NE(b.block_table()[1], shared);
  EXPECT_EQ(a.block_table()[1], shared);
  EXPECT_EQ(c.pool().refcount(shared), 1);
  EXPECT_EQ(c.pool().refcount(b.block_table()[0]), 2);  // block 0 still shared
  EXPECT_EQ(c.pool().stats().n_used, used + 1);
  // A's rows are unchanged; B's copy holds A's first 4 rows and its own after.
  ASSERT_NO_FATAL_FAILURE(expect_markers(c, a));
  ASSERT_NO_FATAL_FAILURE(expect_markers(c, b));
  // A's full block keeps its hash: a new sequence on A's prompt still finds it.
  KvSequence d(c);
  EXPECT_EQ(d.attach_prefix(std::span(doc).first(33)), 32);
  EXPECT_EQ(d.block_table()[1], shared);
  // B filled its copy of block 1 with other tokens: a prefix of its own, found as such.
  std::vector<int32_t> b_prompt = b.tokens();
  b_prompt.push_back(1);
  KvSequence e(c);
  EXPECT_EQ(e.attach_prefix(b_prompt), 32);
  EXPECT_EQ(e.block_table()[1], b.block_table()[1]);
  EXPECT_EQ(e.block_table()[0], a.block_table()[0]);
}

TEST(KvSequence, RewritingAnOwnedFullBlockDropsItsHash) {
  const Hparams hp = small_hparams();
  KvCache c(hp, params(16, 20, hp));
  const std::vector<int32_t> doc = tokens_of(33, 21);
  KvSequence a(c);
  start(c, a, doc);
  const std::vector<int32_t> table = a.block_table();
  a.truncate(20);
  {  // Not yet written: the block's content and hash are still valid.
    KvSequence probe(c);
    EXPECT_EQ(probe.attach_prefix(doc), 32);
  }
  append(c, a, tokens_of(3, 22));  // written in place (owned alone), hash dropped
  EXPECT_EQ(a.block_table()[1], table[1]);
  KvSequence probe(c);
  EXPECT_EQ(probe.attach_prefix(doc), 16);
  ASSERT_NO_FATAL_FAILURE(expect_markers(c, a));
}

// ---- KvCacheFull -------------------------------------------------------------------------------

TEST(KvSequence, CacheFullChangesNothing) {
  const Hparams hp = small_hparams();
  KvCache c(hp, params(4, 6, hp));
  KvSequence a(c), b(c);
  append(c, a, tokens_of(14, 1));  // 4 blocks
  append(c, b, tokens_of(3, 2));   // 1 block; 1 left
  const std::vector<int32_t> table = b.block_table();
  const BlockPoolStats before = c.pool().stats();
  EXPECT_THROW(b.reserve(6), KvCacheFull);  // needs 2 more
  EXPECT_EQ(b.block_table(), table);
  EXPECT_EQ(b.n_tokens(), 3);
  EXPECT_EQ(c.pool().refcount(table[0]), 1);
  const BlockPoolStats after = c.pool().stats();
  EXPECT_EQ(after.n_free, before.n_free);
  EXPECT_EQ(after.n_used, before.n_used);
  KvSequence empty(c);
  EXPECT_THROW(empty.reserve(9), KvCacheFull);
  EXPECT_TRUE(empty.block_table().empty());
  // What fits still works afterwards.
  append(c, b, tokens_of(5, 3));
  EXPECT_EQ(c.pool().stats().n_free, 0);
  ASSERT_NO_FATAL_FAILURE(expect_markers(c, a));
  ASSERT_NO_FATAL_FAILURE(expect_markers(c, b));
}

TEST(KvSequence, CopyOnWriteNeedsABlockToo) {
  const Hparams hp = small_hparams();
  KvCache c(hp, params(4, 3, hp));
  const std::vector<int32_t> doc = tokens_of(9, 4);
  KvSequence a(c);
  start(c, a, doc);  // all 3 blocks
  KvSequence b(c);
  EXPECT_EQ(b.attach_prefix(doc), 8);
  b.truncate(6);  // partial shared block 1
  const std::vector<int32_t> table = b.block_table();
  EXPECT_THROW(b.reserve(1), KvCacheFull);
  EXPECT_EQ(b.block_table(), table);
  EXPECT_EQ(c.pool().refcount(table[1]), 2);
}

TEST(KvSequence, CachedBlocksAreEvictedBeforeTheError) {
  const Hparams hp = small_hparams();
  KvCache c(hp, params(16, 4, hp));
  const std::vector<int32_t> doc = tokens_of(48, 8);
  {
    KvSequence a(c);
    start(c, a, doc);
  }
  EXPECT_EQ(c.pool().stats().n_cached, 3);
  EXPECT_EQ(c.pool().stats().n_free, 1);
  KvSequence b(c);
  append(c, b, tokens_of(64, 9));  // needs all 4: evicts the 3 cached blocks
  EXPECT_EQ(c.pool().stats().n_evicted, 3);
  EXPECT_EQ(c.pool().stats().n_cached, 0);
  KvSequence d(c);
  EXPECT_EQ(d.attach_prefix(doc), 0);  // evicted content is gone
  EXPECT_THROW(d.reserve(1), KvCacheFull);
  ASSERT_NO_FATAL_FAILURE(expect_markers(c, b));
}

// ---- random session mixes ----------------------------------------------------------------------

/// Checks refcounts against the block tables and the pool's state counts.
void expect_consistent(const KvCache& c, const std::vector<std::unique_ptr<KvSequence>>& seqs) {
  std::map<int32_t, int32_t> refs;
  for (const auto& s : seqs) {
    ASSERT_EQ(int64_t(s->block_table().size()),
              (s->n_tokens() + c.block_size() - 1) / c.block_size());
    for (int32_t b : s->block_table()) ++refs[b];
  }
  const BlockPoolStats st = c.pool().stats();
  ASSERT_EQ(st.n_free + st.n_cached + st.n_used, st.n_blocks);
  ASSERT_EQ(st.n_used, int64_t(refs.size()));
  int64_t fast = 0;
  for (auto [b, n] : refs) {
    ASSERT_EQ(c.pool().refcount(b), n) << "block " << b;
    fast += c.in_fast_tier(b);
  }
  const KvTierStats ts = c.tier_stats();
  ASSERT_EQ(ts.used_fast, fast);
  ASSERT_EQ(ts.used_slow, int64_t(refs.size()) - fast);
  ASSERT_LE(ts.used_fast, ts.n_fast);
  ASSERT_LE(ts.used_slow, ts.n_slow);
  for (const auto& s : seqs) ASSERT_NO_FATAL_FAILURE(expect_markers(c, *s));
}

/// One random session operation; KvCacheFull must leave the sequence as it was.
/// What a random mix exercised.
struct MixCounts {
  int full = 0;  ///< KvCacheFull errors
  int cow = 0;   ///< appends that replaced an existing block-table entry (copy-on-write)
};

void random_session_step(KvCache& c, std::vector<std::unique_ptr<KvSequence>>& seqs,
                         const std::vector<std::vector<int32_t>>& docs, std::mt19937& rng,
                         MixCounts& counts) {
  const int op = int(rng() % 10);
  if (seqs.empty() || op == 0) {  // a new session on a document prefix (chat / shared prompt)
    if (seqs.size() >= 6) return;
    seqs.push_back(std::make_unique<KvSequence>(c));
    const auto& d = docs[rng() % docs.size()];
    const std::vector<int32_t> prompt(d.begin(), d.begin() + 1 + rng() % (d.size() - 1));
    const int64_t reused = seqs.back()->attach_prefix(prompt);
    ASSERT_EQ(reused % c.block_size(), 0);
    ASSERT_LT(reused, int64_t(prompt.size()));
    return;
  }
  KvSequence& s = *seqs[rng() % seqs.size()];
  switch (op) {
    case 1:  // destroy
      seqs.erase(std::find_if(seqs.begin(), seqs.end(), [&](auto& p) { return p.get() == &s; }));
      break;
    case 2:  // reset
      s.clear();
      break;
    case 3:
    case 4:  // truncate (regenerate / edit)
      s.truncate(int64_t(rng() % (s.n_tokens() + 1)));
      break;
    case 5:  // cancelled: reserve and write, then give the reservation back
      try {
        s.reserve(1 + rng() % 20);
        s.truncate(s.n_tokens());
      } catch (const KvCacheFull&) {
        ++counts.full;
      }
      break;
    default: {  // append tokens, mostly continuing document 0 so that prefixes repeat
      const auto& d = docs[rng() % 4 ? 0 : rng() % docs.size()];
      const bool follow = rng() % 4 != 0;
      std::vector<int32_t> t;
      const size_t n = 1 + rng() % 24;
      for (size_t i = 0; i < n; ++i)
        t.push_back(follow ? d[(s.n_tokens() + i) % d.size()] : int32_t(rng() % 1000));
      const std::vector<int32_t> table = s.block_table(), toks = s.tokens();
      try {
        append(c, s, t);
        for (size_t i = 0; i < table.size(); ++i) counts.cow += s.block_table()[i] != table[i];
      } catch (const KvCacheFull&) {
        ++counts.full;
        ASSERT_EQ(s.block_table(), table);
        ASSERT_EQ(s.tokens(), toks);
      }
    }
  }
}

/// (block size, seed, tiered): tiered mixes put a third of the blocks in the fast tier and the
/// rest in an offload file, so blocks move both ways while the markers are checked.
class KvSessionsRandom : public ::testing::TestWithParam<std::tuple<int64_t, uint32_t, bool>> {};

TEST_P(KvSessionsRandom, EveryBlockComesBack) {
  const auto [bs, seed, tiered] = GetParam();
  const Hparams hp = small_hparams();
  const int64_t n_blocks = 160 / bs + 4;
  KvCacheParams kp = params(bs, tiered ? n_blocks / 3 : n_blocks, hp, DType::F32, DType::Q4_0);
  const std::string dir = ::testing::TempDir();
  if (tiered) {
    kp.offload_dir = dir;
    kp.offload_max = kp.mem_bytes / (n_blocks / 3) * (n_blocks - n_blocks / 3);
  }
  KvCache c(hp, kp);
  ASSERT_EQ(c.n_blocks(), n_blocks);
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> docs;
  for (uint32_t i = 0; i < 3; ++i) docs.push_back(tokens_of(200, seed * 10 + i));
  std::vector<std::unique_ptr<KvSequence>> seqs;
  MixCounts counts;
  for (int step = 0; step < 1500; ++step) {
    ASSERT_NO_FATAL_FAILURE(random_session_step(c, seqs, docs, rng, counts)) << "step " << step;
    ASSERT_NO_FATAL_FAILURE(expect_consistent(c, seqs)) << "after step " << step;
  }
  // The mix did share prefixes, fill the pool, evict cached blocks and copy shared ones.
  EXPECT_GT(c.n_tokens_reused(), 0);
  EXPECT_GT(counts.full, 0);
  EXPECT_GT(c.pool().stats().n_evicted, 0);
  if (bs > 1 && !tiered) {  // (tiered mixes take other paths; most, not all, copy a block)
    EXPECT_GT(counts.cow, 0);
  }
  if (tiered) {  // blocks went out and came back, and the data moved with them
    EXPECT_GT(c.tier_stats().moves_out, 0);
    EXPECT_GT(c.tier_stats().moves_in, 0);
  }
  seqs.clear();
  const BlockPoolStats st = c.pool().stats();
  EXPECT_EQ(st.n_used, 0);
  EXPECT_EQ(st.n_free + st.n_cached, c.n_blocks());
  EXPECT_EQ(c.tier_stats().used_fast, 0);
  EXPECT_EQ(c.tier_stats().used_slow, 0);
}

INSTANTIATE_TEST_SUITE_P(Seeds, KvSessionsRandom,
                         ::testing::Combine(::testing::Values<int64_t>(1, 4, 7, 16),
                                            ::testing::Values(1u, 2u, 3u), ::testing::Bool()));

}  // namespace
}  // namespace kvrun
