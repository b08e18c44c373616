// test_bench.cpp — `kvrun bench` end to end: the tests it runs, its JSON fields and table, and
// its errors. No timing assertions: speeds are only checked to be positive.
#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "gguf.h"
#include "test_util.h"

namespace kvrun {
namespace {

const char* const kModel = "models/stories260K-F32.gguf";

test::CommandResult bench(const std::string& args) {
  return test::run_command(test::kvrun_binary() + " bench -m " + test::fixture(kModel).string() +
                           " -t 1 " + args);
}

TEST(BenchCli, JsonHasEveryTestWithPositiveSpeeds) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const auto r = bench("-p 16 -n 8 -d 0,32 -r 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 4u);  // per depth: pp16, tg8
  const char* tests[] = {"pp16", "tg8", "pp16 @ d32", "tg8 @ d32"};
  const int64_t depth[] = {0, 0, 32, 32};
  for (size_t i = 0; i < 4; ++i) {
    const auto& t = j[i];
    EXPECT_EQ(t["test"], tests[i]);
    EXPECT_EQ(t["n_depth"], depth[i]);
    EXPECT_EQ(t["n_prompt"], i % 2 == 0 ? 16 : 0);
    EXPECT_EQ(t["n_gen"], i % 2 == 0 ? 0 : 8);
    EXPECT_GE(t["n_ctx"].get<int64_t>(), depth[i] + 16);  // d + max(p, n)
    EXPECT_GT(t["avg_ts"].get<double>(), 0.0);
    EXPECT_GE(t["stddev_ts"].get<double>(), 0.0);
    EXPECT_GT(t["avg_ns"].get<double>(), 0.0);
    EXPECT_EQ(t["samples_ns"].size(), 2u);
    EXPECT_EQ(t["samples_ts"].size(), 2u);
    EXPECT_GT(t["kv_bytes"].get<int64_t>(), 0);
    EXPECT_EQ(t["kv_tokens"], depth[i] + (i % 2 == 0 ? 16 : 8));
    EXPECT_EQ(t["type_k"], "f16");
    EXPECT_EQ(t["n_threads"], 1);
    EXPECT_GT(t["model_n_params"].get<int64_t>(), 0);
  }
}

TEST(BenchCli, BandwidthShareUsesTheBytesADecodeStepReads) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const auto r = bench("-p 0 -n 8 -d 0,32 -r 1 --bandwidth --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  // Weights a decode step reads: every tensor but the token embedding (stories260K has its own
  // output.weight); KV: 640 bytes per token (5 layers × K and V × 4 heads × 8 × f16) over the
  // mean context, depth + (8 + 1) / 2 positions.
  const gguf::File f = gguf::File::open(test::fixture(kModel).string());
  int64_t weights = 0, embd = 0;
  bool has_output = false;
  for (const auto& t : f.tensors()) {
    weights += int64_t(t.n_bytes);
    if (t.name == "token_embd.weight") embd = int64_t(t.n_bytes);
    has_output = has_output || t.name == "output.weight";
  }
  ASSERT_TRUE(has_output);
  weights -= embd;
  for (size_t i = 0; i < 2; ++i) {
    const int64_t depth = i == 0 ? 0 : 32;
    EXPECT_EQ(j[i]["bytes_read_per_token"], weights + 640 * (depth + 4)) << j[i].dump();
    const double bw = j[i]["stream_triad_bytes_per_s"];
    EXPECT_GT(bw, 1e8);  // any machine streams more than 100 MB/s
    EXPECT_NEAR(j[i]["bandwidth_share"].get<double>(),
                j[i]["bytes_read_per_token"].get<double>() * j[i]["avg_ts"].get<double>() / bw,
                1e-9);
  }
  const auto t = bench("-p 0 -n 8 -r 1 --bandwidth");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("memory bandwidth (STREAM triad, 1 threads)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("read per token"), std::string::npos) << t.out;
}

TEST(BenchCli, TableNamesTheTests) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const auto r = bench("-p 16 -n 8 -d 0,32 -r 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s :
       {"| model", "t/s", "stories260K-F32", "pp16 ", "tg8 ", "pp16 @ d32", "tg8 @ d32", " ± "})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

// KVRUN_PROFILE=1: the CPU backend's per-op table on stderr (backends/cpu/op_profile.h), its
// rows the ops a llama step runs with their weight / KV types, the total line the sum of the
// rows' calls; without the variable, no table.
TEST(BenchCli, ProfileTablePerOpOnStderr) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const std::string cmd = test::kvrun_binary() + " bench -m " + test::fixture(kModel).string() +
                          " -t 1 -p 16 -n 8 -r 1";
  const auto r = test::run_command("KVRUN_PROFILE=1 " + cmd);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t head = r.err.find("op (KVRUN_PROFILE)");
  ASSERT_NE(head, std::string::npos) << r.err;
  std::istringstream in(r.err.substr(head));
  std::string line;
  std::getline(in, line);  // the header
  std::map<std::string, int64_t> calls;
  int64_t sum = 0, total = -1;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string op, detail;
    f >> op;
    if (op == "total") {
      f >> total;
      break;
    }
    // "op detail calls ..." or "op calls ...": the detail is not a number.
    std::string second;
    f >> second;
    int64_t n = 0;
    if (!second.empty() && std::isdigit(static_cast<unsigned char>(second[0]))) {
      n = std::stoll(second);
    } else {
      detail = second;
      f >> n;
    }
    calls[op + (detail.empty() ? "" : " " + detail)] = n;
    sum += n;
  }
  EXPECT_EQ(total, sum) << r.err;
  for (const char* op :
       {"matmul f32", "paged_attention f16/f16", "kv_store f16/f16", "rms_norm", "rope", "glu"})
    EXPECT_GT(calls[op], 0) << op << "\n" << r.err;
  // 5 layers: RMSNorm twice per layer and once at the end, per step, in every step.
  EXPECT_EQ(calls["rms_norm"] % 11, 0) << r.err;
  const auto quiet = test::run_command(cmd);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err.find("KVRUN_PROFILE"), std::string::npos) << quiet.err;
}

TEST(BenchCli, DepthThatDoesNotFitIsAnError) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const auto r = bench("-p 16 -n 8 -d 0,32 -c 40");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("kvrun: error: depth 32"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("does not fit"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");  // refused before anything ran
}

TEST(BenchCli, FixedContextThatFitsRuns) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const auto r = bench("-p 16 -n 0 -d 16 -c 48 -r 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["n_ctx"], 48);
  EXPECT_EQ(j[0]["test"], "pp16 @ d16");
}

TEST(BenchCli, FixedContextServesEveryDepthInAnyOrder) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  // One context: 64 is filled, 32 truncates it, 96 extends it.
  const auto r = bench("-p 0 -n 8 -d 64,32,96 -c 112 -r 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u);
  const int64_t depth[] = {64, 32, 96};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(j[i]["n_ctx"], 112);
    EXPECT_EQ(j[i]["n_depth"], depth[i]);
    EXPECT_EQ(j[i]["kv_tokens"], depth[i] + 8);
    EXPECT_GT(j[i]["avg_ts"].get<double>(), 0.0);
  }
}

TEST(BenchCli, QuantizedKvHoldsWholeBlocksAndBadRunsAreRefused) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  auto r = bench("-p 16 -n 8 -d 0,20 -r 1 -ctk q4_0 -ctv q8_0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // stories260K: 5 layers, 4 KV heads × head_dim 8 = one 32-value block per row: q4_0 18 bytes,
  // q8_0 34 bytes; 16-token blocks.
  const int64_t per_block = 16 * 5 * (18 + 34);
  for (const auto& t : nlohmann::json::parse(r.out)) {
    const int64_t tokens = t["kv_tokens"];
    EXPECT_EQ(t["kv_bytes"].get<int64_t>(), (tokens + 15) / 16 * per_block) << t.dump();
  }
  r = bench("-p 16 -n 8 -ctk nope");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown KV cache type 'nope'"), std::string::npos) << r.err;
  r = bench("-p 0 -n 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("nothing to measure"), std::string::npos) << r.err;
}

TEST(BenchCli, SyntheticDepthFillIsReportedAndHoldsWhatAPrefillHolds) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const auto syn = bench("-p 0 -n 2 -d 64 -r 1 --depth-fill synthetic --json");
  ASSERT_EQ(syn.exit_code, 0) << syn.err;
  const auto pre = bench("-p 0 -n 2 -d 64 -r 1 --json");
  ASSERT_EQ(pre.exit_code, 0) << pre.err;
  const auto s = nlohmann::json::parse(syn.out), p = nlohmann::json::parse(pre.out);
  ASSERT_EQ(s.size(), 1u);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(s[0]["depth_fill"], "synthetic");
  EXPECT_EQ(p[0]["depth_fill"], "prefill");
  EXPECT_EQ(s[0]["test"], "tg2 @ d64");
  EXPECT_EQ(s[0]["kv_tokens"], 66);
  EXPECT_EQ(s[0]["kv_bytes"], p[0]["kv_bytes"]);  // the same blocks as a prefill
  EXPECT_GT(s[0]["avg_ts"].get<double>(), 0.0);
  // One fixed context: 96 filled synthetically, truncated to 32, then extended to 80.
  const auto c = bench("-p 4 -n 2 -d 96,32,80 -c 112 -r 1 --depth-fill synthetic --json");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  for (const auto& t : nlohmann::json::parse(c.out)) EXPECT_GT(t["avg_ts"].get<double>(), 0.0);
  const auto table = bench("-p 0 -n 2 -d 64 -r 1 --depth-fill synthetic");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("tg2 @ d64"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("filled synthetically"), std::string::npos) << table.out;
  const auto bad = bench("-p 0 -n 2 --depth-fill maybe");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--depth-fill"), std::string::npos) << bad.err;
}

// --kernels: the order is reported in the JSON (exact by default) and the table's backend, and a
// value other than exact or fast is refused with one line (exit 2) by every command that takes it.
// The packed-weight model runs its prefill through the fast kernels where the level has them.
TEST(BenchCli, KernelsSwitchIsReportedAndBadValuesAreRefused) {
  const char* const packed = "models/stories260K-pad-Q8_0.gguf";
  KVRUN_REQUIRE_FIXTURE(packed);
  const std::string base = test::kvrun_binary() + " bench -m " + test::fixture(packed).string() +
                           " -t 1 -p 16 -n 0 -r 1";
  const auto exact = test::run_command(base + " --json");
  ASSERT_EQ(exact.exit_code, 0) << exact.err;
  EXPECT_EQ(nlohmann::json::parse(exact.out)[0]["kernels"], "exact");
  const auto fast = test::run_command(base + " --json --kernels fast");
  ASSERT_EQ(fast.exit_code, 0) << fast.err;
  EXPECT_EQ(nlohmann::json::parse(fast.out)[0]["kernels"], "fast");
  const auto table = test::run_command(base + " --kernels fast");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find(" fast"), std::string::npos) << table.out;
  const auto info = test::run_command(test::kvrun_binary() + " info -m " +
                                      test::fixture(packed).string() + " --json --kernels fast");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_EQ(nlohmann::json::parse(info.out)["kernels"], "fast");
  for (const std::string cmd : {" bench", " info", " serve", " batch -i /dev/null -o /dev/null",
                                " perplexity -f /dev/null", ""}) {
    const auto bad = test::run_command(test::kvrun_binary() + cmd + " -m " +
                                       test::fixture(packed).string() + " --kernels quick");
    EXPECT_EQ(bad.exit_code, 2) << cmd << ": " << bad.err;
    EXPECT_NE(bad.err.find("--kernels quick: expected exact or fast"), std::string::npos)
        << cmd << ": " << bad.err;
  }
}

// --thp: on by default, reported in bench's and info's JSON; off is taken; another value is
// refused with one line (exit 2).
TEST(BenchCli, ThpSwitchIsReportedAndBadValuesAreRefused) {
  const char* const packed = "models/stories260K-pad-Q8_0.gguf";
  KVRUN_REQUIRE_FIXTURE(packed);
  const std::string model = " -m " + test::fixture(packed).string();
  const std::string bench =
      test::kvrun_binary() + " bench" + model + " -t 1 -p 16 -n 0 -r 1 --json";
  const auto on = test::run_command(bench);
  ASSERT_EQ(on.exit_code, 0) << on.err;
  EXPECT_EQ(nlohmann::json::parse(on.out)[0]["thp"], true);
  const auto off = test::run_command(bench + " --thp off");
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(nlohmann::json::parse(off.out)[0]["thp"], false);
  const auto info = test::run_command(test::kvrun_binary() + " info" + model + " --json --thp off");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_EQ(nlohmann::json::parse(info.out)["thp"], false);
  const auto bad = test::run_command(test::kvrun_binary() + " bench" + model + " --thp yes");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--thp yes: expected on or off"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace kvrun
