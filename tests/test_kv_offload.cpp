// test_kv_offload.cpp — the KV cache's two tiers (src/kv/kv_cache.h, src/kv/kv_offload_file.h): the
// offload file (0600, removed on exit, stale files of killed processes removed at start), the
// placement policy (cached prefix blocks dropped first, then the oldest blocks of the largest
// sequence moved out, the decode window kept fast, blocks moving back when a session ends), and
// attention over a context split across tiers against the same context in one tier (bit for
// bit: the kernel reads each block where it lies). End to end through the binary: greedy tokens
// with a fast budget of a few blocks equal those of an unlimited run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cpu/paged_attention.h"
#include "cpu/thread_pool.h"
#include "kv/kv_cache.h"
#include "kv/kv_offload_file.h"
#include "kv_layout.h"
#include "test_util.h"

namespace kvrun {
namespace {

namespace fs = std::filesystem;

Hparams shape() {
  Hparams hp;
  hp.arch = "llama";
  hp.n_layer = 2;
  hp.n_embd = 64;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = 16;
  hp.head_dim_v = 16;
  return hp;
}

/// A cache of `n_fast` fast blocks and, with `dir`, `n_slow` slow ones.
KvCacheParams tier_params(DType tk, DType tv, int64_t bs, int64_t n_fast, int64_t n_slow,
                          const std::string& dir) {
  const Hparams hp = shape();
  KvCacheParams p;
  p.type_k = tk;
  p.type_v = tv;
  p.block_size = bs;
  const int64_t per_block =
      bs * kv_bytes_per_token(tk, tv, hp.n_layer, hp.n_head_kv, hp.head_dim, hp.head_dim_v);
  p.mem_bytes = n_fast * per_block;
  if (!dir.empty()) {
    p.offload_dir = dir;
    p.offload_max = n_slow * per_block;
  }
  return p;
}

cpu::PagedAttnParams attn_params(bool flash) {
  const Hparams hp = shape();
  cpu::PagedAttnParams p;
  p.attn = {hp.n_head, hp.n_head_kv, hp.head_dim, hp.head_dim_v,
            float(1.0 / std::sqrt(double(hp.head_dim)))};
  p.flash = flash;
  return p;
}

/// The K/V rows of position `pos` in layer `il` (deterministic, random-looking, never zero).
std::vector<float> rows_at(int64_t pos, int64_t il, bool is_k) {
  const Hparams hp = shape();
  return test::random_floats(size_t(hp.n_head_kv * hp.head_dim),
                             uint32_t(pos * 4 + il * 2 + (is_k ? 1 : 0) + 7));
}

/// Appends `n` positions to `seq` as a forward pass does: reserve, store every layer, commit
/// (token ids from `salt`, so sequences with different salts share no prefix).
void append(KvCache& c, KvSequence& seq, int64_t n, int32_t salt = 0) {
  const int64_t pos0 = seq.n_tokens();
  seq.reserve(n);
  const cpu::PagedSeq ps{seq.block_table().data(), pos0, 0, n};
  for (int64_t il = 0; il < c.n_layer(); ++il) {
    std::vector<float> k, v;
    for (int64_t i = 0; i < n; ++i) {
      const auto kr = rows_at(pos0 + i, il, true), vr = rows_at(pos0 + i, il, false);
      k.insert(k.end(), kr.begin(), kr.end());
      v.insert(v.end(), vr.begin(), vr.end());
    }
    cpu::paged_kv_store(c.layer(il), attn_params(true), &ps, 1, k.data(), v.data());
  }
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t((pos0 + i + salt) % 997);
  seq.commit(ids);
}

/// Attention of 8 fixed random query rows at the last 8 positions of `seq`, every layer.
std::vector<float> attend(const KvCache& c, const KvSequence& seq, bool flash) {
  const Hparams hp = shape();
  const int64_t n_q = 8;
  const std::vector<float> q = test::random_floats(size_t(n_q * hp.n_head * hp.head_dim), 4242);
  const cpu::PagedSeq ps{seq.block_table().data(), seq.n_tokens() - n_q, 0, n_q};
  cpu::ThreadPool pool(2);
  std::vector<float> out;
  for (int64_t il = 0; il < c.n_layer(); ++il) {
    std::vector<float> o(size_t(n_q * hp.n_head * hp.head_dim_v), NAN);
    cpu::paged_attention(pool, c.layer(il), attn_params(flash), &ps, 1, q.data(), o.data());
    out.insert(out.end(), o.begin(), o.end());
  }
  return out;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (float x : a) ASSERT_TRUE(std::isfinite(x));
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

std::string offload_file_of(const test::TempDir& dir, long pid) {
  return (dir / ("kvrun-offload-" + std::to_string(pid) + ".kv")).string();
}

// ---- the offload file ---------------------------------------------------------------------------

TEST(OffloadFile, PrivateSizedAndRemoved) {
  test::TempDir dir;
  std::string path;
  {
    OffloadFile f(dir.path().string(), 123457);
    path = f.path();
    EXPECT_EQ(path, offload_file_of(dir, getpid()));
    struct stat st {};
    ASSERT_EQ(0, stat(path.c_str(), &st));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ(st.st_size, 123457);
    f.data()[0] = 1;
    f.data()[123456] = 2;  // the whole mapping is writable
    EXPECT_EQ(f.data()[123456], 2);
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(OffloadFile, ClearErrors) {
  test::TempDir dir;
  try {
    OffloadFile f((dir / "missing").string(), 4096);
    FAIL() << "no error for a missing directory";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
  EXPECT_THROW(OffloadFile(dir.path().string(), 0), std::invalid_argument);
  // A budget below one block is a parameter error; so is an unreadable directory.
  KvCacheParams p = tier_params(DType::F16, DType::F16, 16, 4, 1, dir.path().string());
  p.offload_max = 10;
  EXPECT_THROW(KvCache(shape(), p), std::invalid_argument);
  p = tier_params(DType::F16, DType::F16, 16, 4, 4, (dir / "missing").string());
  EXPECT_THROW(KvCache(shape(), p), std::runtime_error);
}

TEST(OffloadFile, StaleFilesOfKilledProcessesAreRemovedAtStart) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  // A process that dies by SIGKILL while holding an offload file leaves it behind.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    KvCache c(shape(), tier_params(DType::F16, DType::F16, 16, 2, 8, d));
    raise(SIGKILL);
    _exit(1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  const std::string stale = offload_file_of(dir, child);
  ASSERT_TRUE(fs::exists(stale)) << "the killed process left no file to clean up";
  // Files of live processes and files that are not offload files stay.
  const std::string live = offload_file_of(dir, getppid());
  std::ofstream(live) << "x";
  std::ofstream(dir / "notes.txt") << "x";
  std::ofstream(dir / "kvrun-offload-12ab.kv") << "x";
  {
    KvCache c(shape(), tier_params(DType::F16, DType::F16, 16, 2, 8, d));
    EXPECT_FALSE(fs::exists(stale));
    EXPECT_TRUE(fs::exists(live));
    EXPECT_TRUE(fs::exists(dir / "notes.txt"));
    EXPECT_TRUE(fs::exists(dir / "kvrun-offload-12ab.kv"));
    EXPECT_EQ(c.offload_path(), offload_file_of(dir, getpid()));
    EXPECT_TRUE(fs::exists(c.offload_path()));
  }
  EXPECT_FALSE(fs::exists(offload_file_of(dir, getpid())));  // removed on exit
  EXPECT_EQ(remove_stale_offload_files(d).size(), 0u);
}

// ---- policy -------------------------------------------------------------------------------------

TEST(KvTiers, CapacitiesAndStats) {
  test::TempDir dir;
  KvCache c(shape(), tier_params(DType::Q8_0, DType::FP8_E4M3, 16, 5, 11, dir.path().string()));
  EXPECT_EQ(c.n_blocks(), 16);
  EXPECT_EQ(c.pool().n_blocks(), 16);
  const KvTierStats t = c.tier_stats();
  EXPECT_EQ(t.n_fast, 5);
  EXPECT_EQ(t.n_slow, 11);
  EXPECT_EQ(fs::file_size(c.offload_path()), uintmax_t(11 * c.bytes_per_block()));
  // Without a directory there is one tier and a full pool is an error naming the way out.
  KvCache one(shape(), tier_params(DType::F16, DType::F16, 16, 2, 0, ""));
  EXPECT_EQ(one.tier_stats().n_slow, 0);
  EXPECT_EQ(one.offload_path(), "");
  KvSequence s(one);
  try {
    s.reserve(33);
    FAIL() << "no KvCacheFull";
  } catch (const KvCacheFull& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-offload-dir"), std::string::npos) << e.what();
  }
}

TEST(KvTiers, DecodeWindowStaysFastAndOldBlocksMoveOut) {
  test::TempDir dir;
  KvCache c(shape(), tier_params(DType::F16, DType::F16, 4, 3, 64, dir.path().string()));
  KvSequence s(c);
  append(c, s, 9);  // prefill: 3 blocks
  for (int step = 0; step < 120; ++step) {
    append(c, s, 1);  // decode
    const auto& t = s.block_table();
    ASSERT_TRUE(c.in_fast_tier(t.back())) << "step " << step;
    if (t.size() >= 2) {
      ASSERT_TRUE(c.in_fast_tier(t[t.size() - 2])) << "step " << step;
    }
  }
  const KvTierStats ts = c.tier_stats();
  EXPECT_EQ(ts.used_fast, 3);
  EXPECT_EQ(ts.used_slow, int64_t(s.block_table().size()) - 3);
  EXPECT_EQ(ts.moves_out, ts.used_slow);  // one move per block that left the fast tier
  EXPECT_EQ(ts.moves_in, 0);
  for (size_t i = 0; i + 3 < s.block_table().size(); ++i)
    EXPECT_FALSE(c.in_fast_tier(s.block_table()[i])) << "the oldest blocks went out first";
}

TEST(KvTiers, CachedPrefixBlocksAreDroppedBeforeUsedBlocksMove) {
  test::TempDir dir;
  KvCache c(shape(), tier_params(DType::F16, DType::F16, 4, 4, 16, dir.path().string()));
  {
    KvSequence a(c);
    append(c, a, 12);  // three full blocks, hashed: cached in the fast tier once `a` ends
  }
  EXPECT_EQ(c.pool().stats().n_cached, 3);
  KvSequence b(c);
  for (int i = 0; i < 16; ++i) append(c, b, 1, 500);  // 4 blocks: the free one, then 3 dropped
  EXPECT_EQ(c.tier_stats().dropped, 3);
  EXPECT_EQ(c.tier_stats().moves_out, 0);
  EXPECT_EQ(c.pool().stats().n_cached, 0);
  append(c, b, 8, 500);  // 2 more blocks: now used blocks move out
  EXPECT_EQ(c.tier_stats().moves_out, 2);
  EXPECT_EQ(c.tier_stats().used_slow, 2);
}

// ---- attention across tiers ---------------------------------------------------------------------

struct TierCase {
  DType k, v;
};

class KvTiersAttention : public ::testing::TestWithParam<TierCase> {};

TEST_P(KvTiersAttention, EqualsOneTierAndBlocksMoveBothWays) {
  const TierCase tc = GetParam();
  test::TempDir dir;
  const int64_t bs = 16;
  KvCache ref(shape(), tier_params(tc.k, tc.v, bs, 64, 0, ""));
  KvCache tiered(shape(), tier_params(tc.k, tc.v, bs, 6, 64, dir.path().string()));
  KvSequence ra(ref), ta(tiered);
  auto grow = [&](int64_t n) {
    append(ref, ra, n);
    append(tiered, ta, n);
  };
  grow(150);                             // prefill chunk
  for (int i = 0; i < 2; ++i) grow(64);  // more chunks
  for (int i = 0; i < 40; ++i) grow(1);  // decode
  ASSERT_GT(tiered.tier_stats().used_slow, 0);
  ASSERT_GT(tiered.tier_stats().moves_out, 0);
  for (bool flash : {true, false}) {
    SCOPED_TRACE(flash ? "flash" : "exact");
    ASSERT_NO_FATAL_FAILURE(expect_same_bits(attend(ref, ra, flash), attend(tiered, ta, flash)));
  }
  {
    // A second session pushes more of the first one out, then ends: blocks come back.
    KvSequence rb(ref), tb(tiered);
    append(ref, rb, 60);
    append(tiered, tb, 60);
    const int64_t slow_before = tiered.tier_stats().used_slow;
    tb.truncate(0);
    EXPECT_GT(tiered.tier_stats().moves_in, 0);
    EXPECT_LT(tiered.tier_stats().used_slow, slow_before);
  }
  grow(5);
  for (bool flash : {true, false}) {
    SCOPED_TRACE(flash ? "flash, after moves in" : "exact, after moves in");
    ASSERT_NO_FATAL_FAILURE(expect_same_bits(attend(ref, ra, flash), attend(tiered, ta, flash)));
  }
  // The session ends with blocks in both tiers: everything is given back.
  ASSERT_GT(tiered.tier_stats().used_slow, 0);
  ASSERT_GT(tiered.tier_stats().used_fast, 0);
  ta.clear();
  EXPECT_EQ(tiered.tier_stats().used_fast, 0);
  EXPECT_EQ(tiered.tier_stats().used_slow, 0);
  EXPECT_EQ(tiered.pool().stats().n_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Types, KvTiersAttention,
                         ::testing::Values(TierCase{DType::F16, DType::F16},
                                           TierCase{DType::FP8_E4M3, DType::F16},
                                           TierCase{DType::Q8_0, DType::Q4_0},
                                           TierCase{DType::NVFP4, DType::BF16}));

// ---- the host tier (KV rows on a GPU; tested with one in test_vulkan_paged, test_gpu_e2e) -------

TEST(KvHostTier, RefusedWithoutAGpuAndWithTheFile) {
  test::TempDir dir;
  KvCacheParams p = tier_params(DType::F16, DType::F16, 16, 4, 4, dir.path().string());
  p.offload_dir.clear();
  p.host_tier = true;
  auto message = [&](const KvCacheParams& q) {
    try {
      KvCache c(shape(), q);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // Every layer's rows on the CPU: the host tier is for a GPU's rows.
  EXPECT_NE(message(p).find("--kv-host-tier needs KV rows on a GPU"), std::string::npos)
      << message(p);
  p.offload_dir = dir.path().string();
  EXPECT_NE(message(p).find("--kv-host-tier and --kv-offload-dir cannot be combined"),
            std::string::npos)
      << message(p);
}

TEST(KvHostTierCli, FlagCombinationsThatCannotWorkAreRefused) {
  const std::string model = "models/stories260K-F32.gguf";
  KVRUN_REQUIRE_FIXTURE(model);
  test::TempDir dir;
  const std::string base = test::kvrun_binary() + " -m " + test::fixture(model).string() +
                           " -p 'Once upon a time' -c 64 -n 4 --temp 0 -t 2 ";
  const std::pair<std::string, std::string> cases[] = {
      {"--kv-host-max 1G", "--kv-host-max needs --kv-host-tier"},
      {"--kv-host-tier -nkvo", "--kv-host-tier: -nkvo"},
      {"--kv-host-tier --kv-offload-dir " + dir.path().string(),
       "--kv-host-tier and --kv-offload-dir cannot be combined"},
      {"--kv-host-tier --kv-host-max 0", "--kv-host-max must be positive"},
      {"--kv-host-tier", "--kv-host-tier needs KV rows on a GPU"},  // -ngl 0: rows on the CPU
  };
  for (const auto& [flags, want] : cases) {
    const auto r = test::run_command(base + flags);
    EXPECT_NE(r.exit_code, 0) << flags;
    EXPECT_NE(r.err.find(want), std::string::npos) << flags << ": " << r.err;
  }
}

// ---- end to end ---------------------------------------------------------------------------------

TEST(KvTiersCli, GreedyTokensEqualAnUnlimitedRun) {
  const std::string model = "models/stories260K-pad-F32.gguf";
  KVRUN_REQUIRE_FIXTURE(model);
  test::TempDir dir;
  const std::string base = test::kvrun_binary() + " -m " + test::fixture(model).string() +
                           " -p 'Once upon a time, there was a big red ball. It liked to'" +
                           " -c 512 -n 160 --temp 0 -ctk fp8 -t 2 --json";
  const auto plain = test::run_command(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto a = nlohmann::json::parse(plain.out);
  // 4 blocks of 16 tokens fast, the rest of the 177 tokens in the offload file.
  const int64_t fast_bytes = 4 * a.at("kv").at("block_size").get<int64_t>() *
                             a.at("kv").at("bytes_per_token").get<int64_t>();
  const auto off = test::run_command(base + " --kv-mem " + std::to_string(fast_bytes) +
                                     " --kv-offload-dir " + dir.path().string());
  ASSERT_EQ(off.exit_code, 0) << off.err;
  const auto b = nlohmann::json::parse(off.out);
  ASSERT_EQ(a.at("tokens").size(), 160u);
  EXPECT_EQ(a.at("tokens"), b.at("tokens"));
  const auto& kv = b.at("kv");
  EXPECT_EQ(kv.at("blocks_fast").get<int64_t>(), 4) << kv.dump();
  EXPECT_GT(kv.at("blocks_slow").get<int64_t>(), 0) << kv.dump();
  EXPECT_GT(kv.at("moves_out").get<int64_t>(), 0) << kv.dump();
  EXPECT_EQ(kv.at("blocks_fast").get<int64_t>() + kv.at("blocks_slow").get<int64_t>(),
            kv.at("blocks").get<int64_t>());
  EXPECT_TRUE(fs::is_empty(dir.path())) << "the offload file was not removed on exit";
}

}  // namespace
}  // namespace kvrun
