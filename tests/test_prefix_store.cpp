// test_prefix_store.cpp — the persistent prefix cache (--kv-cache-dir): block files round-trip,
// untrusted files (corrupt, truncated, renamed, other layout) are rejected and removed, the
// budget evicts least recently used files, stale temporary files are cleaned up, a new KvCache
// over the same directory (a restart) reattaches a prefix with identical bytes, and through the
// binary a second run computes only the tokens after the cached prefix with identical output.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "kv/kv_cache.h"
#include "kv/prefix_store.h"
#include "test_util.h"
#include "cpu/paged_attention.h"  // cpu::PagedKvLayer (the seam's KvLayer)

namespace kvrun {
namespace {

namespace fs = std::filesystem;

PrefixStoreLayout layout(uint64_t model_id = 0x1234) {
  PrefixStoreLayout L;
  L.model_id = model_id;
  L.type_k = DType::FP8_E4M3;
  L.type_v = DType::F16;
  L.block_size = 4;
  L.n_layer = 2;
  L.k_row_bytes = 36;
  L.v_row_bytes = 64;
  return L;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

std::vector<fs::path> block_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".kvb") out.push_back(e.path());
  return out;
}

TEST(PrefixStore, RoundTripAndPermissions) {
  test::TempDir tmp;
  const fs::path dir = tmp / "cache";
  const PrefixStoreLayout L = layout();
  PrefixStore st(dir.string(), 1 << 20, L);
  EXPECT_EQ(fs::status(dir).permissions() & fs::perms::all, fs::perms::owner_all);
  const std::vector<int32_t> tok{5, 6, 7, 8};
  const auto payload = random_bytes(size_t(L.payload_bytes()), 1);
  EXPECT_FALSE(st.contains(42));
  st.save(42, tok, payload);
  EXPECT_TRUE(st.contains(42));
  const auto files = block_files(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(fs::status(files[0]).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  std::vector<uint8_t> back(payload.size(), 0);
  ASSERT_TRUE(st.load(42, tok, back));
  EXPECT_EQ(back, payload);
  // Wrong tokens for the hash: not trusted.
  const std::vector<int32_t> other{5, 6, 7, 9};
  EXPECT_FALSE(st.load(42, other, back));
  EXPECT_EQ(st.stats().n_rejected, 1);
  EXPECT_FALSE(st.contains(42)) << "a rejected file is removed";
}

TEST(PrefixStore, AnotherProcessFindsTheBlockButNotWithAnotherLayout) {
  test::TempDir tmp;
  const PrefixStoreLayout L = layout();
  const std::vector<int32_t> tok{1, 2, 3, 4};
  const auto payload = random_bytes(size_t(L.payload_bytes()), 2);
  { PrefixStore(tmp.path().string(), 1 << 20, L).save(7, tok, payload); }
  PrefixStore again(tmp.path().string(), 1 << 20, L);
  std::vector<uint8_t> back(payload.size());
  ASSERT_TRUE(again.load(7, tok, back));
  EXPECT_EQ(back, payload);
  PrefixStoreLayout other_model = L;
  other_model.model_id = 0x9999;
  PrefixStore m(tmp.path().string(), 1 << 20, other_model);
  EXPECT_FALSE(m.contains(7));
  PrefixStoreLayout other_type = L;
  other_type.type_k = DType::Q8_0;
  EXPECT_FALSE(PrefixStore(tmp.path().string(), 1 << 20, other_type).contains(7));
}

/// Damages the only block file of `dir` with `damage` and checks a fresh store rejects it.
template <typename Damage>
void expect_rejected(Damage damage) {
  test::TempDir tmp;
  const PrefixStoreLayout L = layout();
  const std::vector<int32_t> tok{1, 2, 3, 4};
  const auto payload = random_bytes(size_t(L.payload_bytes()), 3);
  { PrefixStore(tmp.path().string(), 1 << 20, L).save(11, tok, payload); }
  const auto files = block_files(tmp.path());
  ASSERT_EQ(files.size(), 1u);
  damage(files[0]);
  PrefixStore st(tmp.path().string(), 1 << 20, L);
  std::vector<uint8_t> back(payload.size(), 0);
  EXPECT_FALSE(st.load(11, tok, back));
  EXPECT_EQ(st.stats().n_rejected, 1);
  EXPECT_EQ(st.stats().n_loaded, 0);
  EXPECT_TRUE(block_files(tmp.path()).empty()) << "an untrusted file is removed";
}

TEST(PrefixStore, FlippedByteIsRejected) {
  for (size_t where : {size_t(3), size_t(70), size_t(200), size_t(400)}) {
    SCOPED_TRACE(where);
    expect_rejected([where](const fs::path& p) {
      std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(std::streamoff(where));
      char c = 0;
      f.read(&c, 1);
      c = char(c ^ 0x10);
      f.seekp(std::streamoff(where));
      f.write(&c, 1);
    });
  }
}

TEST(PrefixStore, TruncatedFileIsRejected) {
  expect_rejected([](const fs::path& p) { fs::resize_file(p, fs::file_size(p) - 9); });
}

TEST(PrefixStore, FileUnderAnotherKeyIsRejected) {
  test::TempDir tmp;
  const PrefixStoreLayout L = layout();
  const std::vector<int32_t> tok{1, 2, 3, 4};
  const auto payload = random_bytes(size_t(L.payload_bytes()), 4);
  fs::path first;
  {
    PrefixStore st(tmp.path().string(), 1 << 20, L);
    st.save(1, tok, payload);
    first = block_files(tmp.path())[0];
    st.save(2, tok, payload);
  }
  // Replace block 2's file with block 1's (same tokens, other chained hash).
  for (const auto& p : block_files(tmp.path()))
    if (p != first) fs::copy_file(first, p, fs::copy_options::overwrite_existing);
  PrefixStore st(tmp.path().string(), 1 << 20, L);
  std::vector<uint8_t> back(payload.size());
  EXPECT_TRUE(st.load(1, tok, back));
  EXPECT_FALSE(st.load(2, tok, back));
  EXPECT_EQ(st.stats().n_rejected, 1);
}

TEST(PrefixStore, BudgetEvictsLeastRecentlyUsed) {
  test::TempDir tmp;
  const PrefixStoreLayout L = layout();
  const std::vector<int32_t> tok{1, 2, 3, 4};
  const auto payload = random_bytes(size_t(L.payload_bytes()), 5);
  const int64_t file = 64 + 16 + L.payload_bytes() + 8;
  PrefixStore st(tmp.path().string(), 3 * file, L);
  st.save(1, tok, payload);
  st.save(2, tok, payload);
  st.save(3, tok, payload);
  std::vector<uint8_t> back(payload.size());
  ASSERT_TRUE(st.load(1, tok, back));  // 1 is now the most recent
  st.save(4, tok, payload);            // evicts 2
  st.save(5, tok, payload);            // evicts 3
  EXPECT_TRUE(st.contains(1));
  EXPECT_FALSE(st.contains(2));
  EXPECT_FALSE(st.contains(3));
  EXPECT_TRUE(st.contains(4));
  EXPECT_TRUE(st.contains(5));
  EXPECT_EQ(st.stats().n_files, 3);
  EXPECT_EQ(st.stats().n_evicted, 2);
  EXPECT_EQ(st.stats().bytes, 3 * file);
  EXPECT_EQ(block_files(tmp.path()).size(), 3u);
  // A smaller budget at the next start trims at once.
  PrefixStore small(tmp.path().string(), file, L);
  EXPECT_EQ(small.stats().n_files, 1);
}

TEST(PrefixStore, StaleTemporaryFilesAreRemovedAtStart) {
  test::TempDir tmp;
  std::ofstream(tmp / ".tmp-00000000000000aa-999") << "half a block";
  std::ofstream(tmp / "unrelated.txt") << "kept";
  PrefixStore st(tmp.path().string(), 1 << 20, layout());
  EXPECT_FALSE(fs::exists(tmp / ".tmp-00000000000000aa-999"));
  EXPECT_TRUE(fs::exists(tmp / "unrelated.txt"));
  EXPECT_EQ(st.stats().n_files, 0);
}

TEST(PrefixStore, BadArgumentsThrow) {
  test::TempDir tmp;
  EXPECT_THROW(PrefixStore(tmp.path().string(), 0, layout()), std::invalid_argument);
  std::ofstream(tmp / "file") << "x";
  EXPECT_THROW(PrefixStore((tmp / "file").string(), 1 << 20, layout()), std::runtime_error);
  PrefixStore st(tmp.path().string(), 1 << 20, layout());
  const std::vector<int32_t> short_tok{1, 2};
  std::vector<uint8_t> payload(size_t(layout().payload_bytes()));
  EXPECT_THROW(st.save(1, short_tok, payload), std::invalid_argument);
}

Hparams small_hparams() {
  Hparams hp;
  hp.arch = "llama";
  hp.n_layer = 3;
  hp.n_embd = 32;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = 8;
  hp.head_dim_v = 8;
  return hp;
}

/// Fills the rows of `seq`'s blocks in every layer with bytes derived from their token ids.
void write_rows(KvCache& cache, const KvSequence& seq) {
  for (int64_t il = 0; il < cache.n_layer(); ++il) {
    const cpu::PagedKvLayer l = cache.layer(il);
    for (size_t b = 0; b < seq.block_table().size(); ++b) {
      const int64_t phys = seq.block_table()[b];
      const auto k = random_bytes(size_t(l.block_size * l.k_row_bytes), uint32_t(il * 1000 + b));
      const auto v =
          random_bytes(size_t(l.block_size * l.v_row_bytes), uint32_t(il * 1000 + b + 1));
      std::memcpy(l.k_block(phys), k.data(), k.size());
      std::memcpy(l.v_block(phys), v.data(), v.size());
    }
  }
}

/// The rows of logical block b of `seq`, every layer, K then V.
std::vector<uint8_t> block_rows(const KvCache& cache, const KvSequence& seq, size_t b) {
  std::vector<uint8_t> out;
  for (int64_t il = 0; il < cache.n_layer(); ++il) {
    const cpu::PagedKvLayer l = cache.layer(il);
    const int64_t phys = seq.block_table()[b];
    const uint8_t* k = l.k_block(phys);
    const uint8_t* v = l.v_block(phys);
    out.insert(out.end(), k, k + l.block_size * l.k_row_bytes);
    out.insert(out.end(), v, v + l.block_size * l.v_row_bytes);
  }
  return out;
}

TEST(PrefixStore, RestartedCacheReattachesThePrefix) {
  test::TempDir tmp;
  KvCacheParams p;
  p.type_k = DType::FP8_E4M3;
  p.type_v = DType::Q8_0;
  p.block_size = 16;
  p.mem_bytes = 64 << 20;
  p.cache_dir = (tmp / "kv").string();
  p.model_id = 77;
  const Hparams hp = small_hparams();
  std::vector<int32_t> tokens(40);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 7 % 50);
  std::vector<std::vector<uint8_t>> want;
  {
    KvCache cache(hp, p);
    KvSequence seq(cache);
    seq.reserve(40);
    write_rows(cache, seq);
    seq.commit(tokens);
    for (size_t b = 0; b < 2; ++b) want.push_back(block_rows(cache, seq, b));
    ASSERT_NE(cache.prefix_store(), nullptr);
    EXPECT_EQ(cache.prefix_store()->stats().n_saved, 2) << "two full blocks of 16";
  }
  {
    KvCache cache(hp, p);  // a new process: empty pool, same directory
    KvSequence seq(cache);
    std::vector<int32_t> next = tokens;
    next.push_back(3);
    EXPECT_EQ(seq.attach_prefix(next), 32);
    EXPECT_EQ(cache.n_tokens_reused(), 32);
    EXPECT_EQ(cache.prefix_store()->stats().n_loaded, 2);
    for (size_t b = 0; b < 2; ++b) EXPECT_EQ(block_rows(cache, seq, b), want[b]) << "block " << b;
    // The restored blocks are now ordinary cached blocks of the pool: another session shares
    // them without touching the disk.
    KvSequence other(cache);
    EXPECT_EQ(other.attach_prefix(next), 32);
    EXPECT_EQ(cache.prefix_store()->stats().n_loaded, 2);
  }
  {
    KvCacheParams q = p;
    q.model_id = 78;  // another model file: nothing matches
    KvCache cache(hp, q);
    KvSequence seq(cache);
    EXPECT_EQ(seq.attach_prefix(tokens), 0);
  }
  {
    KvCacheParams q = p;
    q.prefix_cache = false;  // --no-prefix-cache wins over --kv-cache-dir
    KvCache cache(hp, q);
    EXPECT_EQ(cache.prefix_store(), nullptr);
  }
}

TEST(PrefixStore, SecondRunComputesOnlyTheNewTokens) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-pad-F32.gguf");
  test::TempDir tmp;
  const std::string prompt_file = (tmp / "prompt.txt").string();
  {
    std::ifstream in(test::fixture("text/tinystories_style_kvrun.txt"));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(prompt_file) << text.substr(0, 900);
  }
  const std::string base = test::kvrun_binary() + " -m '" +
                           test::fixture("models/stories260K-pad-F32.gguf").string() + "' -f '" +
                           prompt_file + "' -n 24 --temp 0 --json -c 1024 -t 2 -ctk q8_0";
  const std::string with_dir = base + " --kv-cache-dir '" + (tmp / "kv").string() + "'";
  auto run = [](const std::string& cmd) {
    const auto r = test::run_command(cmd);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out);
  };
  const nlohmann::json plain = run(base);
  const nlohmann::json first = run(with_dir);
  const nlohmann::json second = run(with_dir);
  const int64_t n_prompt = int64_t(plain["prompt_tokens"].size());
  ASSERT_GT(n_prompt, 300);
  EXPECT_EQ(first["kv"]["prompt_tokens_reused"], 0);
  EXPECT_EQ(first["timings"]["prompt_n"], n_prompt);
  const int64_t reused = (n_prompt - 1) / 16 * 16;
  EXPECT_EQ(second["kv"]["prompt_tokens_reused"], reused);
  EXPECT_EQ(second["timings"]["prompt_n"], n_prompt - reused) << "only the tokens after the prefix";
  EXPECT_EQ(first["tokens"], plain["tokens"]);
  EXPECT_EQ(second["tokens"], plain["tokens"]);
  EXPECT_EQ(second["text"], plain["text"]);
  // Another cache type never reads those blocks.
  const nlohmann::json other = run(with_dir + " -ctv q8_0");
  EXPECT_EQ(other["kv"]["prompt_tokens_reused"], 0);
}

}  // namespace
}  // namespace kvrun
