// test_serve_window.cpp — `kvrun serve` with a model mixing windowed and global layers
// (tiny-gemma3: 5 windowed layers of window 32, 1 global): GET /stats and /metrics count the
// global layers' blocks (the pool, kv.tiers) and the windowed layers' group (kv.window) with the
// sizes of docs/kv-cache.md ("Windowed layers"), and the windowed blocks come back when the
// requests end.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "serve_process.h"
#include "synth_util.h"
#include "test_util.h"
#include "tools/synth/synth.h"

namespace kvrun::serve_test {
namespace {

using json = nlohmann::json;

TEST(ServeWindowTables, StatsCountBothGroups) {
  test::TempDir dir;
  const std::string path = test::synth_model(dir, "tiny-gemma3", SynthFileType::F32);
  ServerProcess srv({"-c", "256", "--parallel", "2", "-b", "64"}, path);
  ASSERT_TRUE(srv.ok()) << srv.log();
  auto c = srv.client();
  const auto r =
      c->Post("/completion",
              R"({"prompt": "The sky is", "n_predict": 100, "ignore_eos": true, "temperature": 0})",
              "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json kv;
  for (int i = 0; i < 50; ++i) {  // the session's blocks go back right after the reply
    const auto s = c->Get("/stats");
    ASSERT_TRUE(s);
    kv = json::parse(s->body)["kv"];
    if (kv["window"]["blocks_used"] == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(kv.contains("window")) << kv.dump();
  const json& w = kv["window"];
  EXPECT_EQ(w["n_swa"], 32);
  EXPECT_EQ(w["layers"], 5);
  // One global layer in a pool block, five windowed ones in a window block.
  EXPECT_EQ(w["bytes_per_block"].get<int64_t>(), 5 * kv["bytes_per_block"].get<int64_t>());
  // Per session: min(ceil(256 / 16) + 1, ceil((32 − 1 + 64) / 16) + 2) = 8 blocks.
  const int64_t per_seq = std::min<int64_t>(256 / 16 + 1, (31 + 64 + 15) / 16 + 2);
  EXPECT_EQ(w["blocks"].get<int64_t>(), 2 * per_seq);
  EXPECT_EQ(w["bytes"].get<int64_t>(),
            w["blocks"].get<int64_t>() * w["bytes_per_block"].get<int64_t>());
  EXPECT_EQ(w["blocks_used"], 0);
  EXPECT_EQ(kv["bytes_used"], 0);
  const auto m = c->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("kvrun_kv_window_blocks{state=\"total\"} " + std::to_string(2 * per_seq)),
            std::string::npos)
      << m->body;
}

}  // namespace
}  // namespace kvrun::serve_test
