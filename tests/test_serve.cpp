// test_serve.cpp — `kvrun serve` end to end: each test starts the real binary on a free loopback
// port (--port 0; the port is read from its "listening on" line) and talks HTTP to it.
//
// Covers: greedy /completion against llama.cpp's references (alone: every token and the
// first-step logprobs; six at once through the batched forward: every token up to a near-tie);
// a streamed chat through the official `openai` npm client; every kind of bad input and its
// status (400, 401, 404, 413, 503 + Retry-After, 504 on --timeout); 32 concurrent streaming
// clients with some disconnecting early (the others complete, every KV block returns to the
// pool, checked through /metrics); the prefix cache on a second chat turn; /infill's FIM prompt
// (on a copy of the fixture with FIM token ids added); the small endpoints.
// The server must exit 0 on SIGTERM (also under AddressSanitizer: scripts/asan_serve.sh).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gguf.h"
#include "serve_process.h"
#include "test_util.h"

namespace kvrun {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using namespace serve_test;

/// The value of metric `line_prefix` (e.g. "kvrun_kv_blocks{tier=\"ram\",state=\"used\"}").
double metric(const std::string& text, const std::string& line_prefix) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(line_prefix + " ", 0) == 0) return std::stod(line.substr(line_prefix.size()));
  ADD_FAILURE() << "no metric " << line_prefix << " in\n" << text;
  return -1;
}

/// Waits (bounded) until no request is active or queued; returns the /metrics text.
std::string idle_metrics(httplib::Client& c) {
  std::string text;
  for (int i = 0; i < 200; ++i) {
    auto r = c.Get("/metrics");
    if (r && r->status == 200) {
      text = r->body;
      if (metric(text, "kvrun_requests_active") == 0 && metric(text, "kvrun_requests_queued") == 0)
        return text;
    }
    std::this_thread::sleep_for(50ms);
  }
  ADD_FAILURE() << "the server did not become idle:\n" << text;
  return text;
}

void expect_all_blocks_returned(const std::string& m) {
  const double used = metric(m, "kvrun_kv_blocks{tier=\"ram\",state=\"used\"}") +
                      metric(m, "kvrun_kv_blocks{tier=\"offload\",state=\"used\"}");
  const double free_ = metric(m, "kvrun_kv_blocks{state=\"free\"}");
  const double cached = metric(m, "kvrun_kv_blocks{state=\"cached\"}");
  const double total = metric(m, "kvrun_kv_blocks_total{tier=\"ram\"}") +
                       metric(m, "kvrun_kv_blocks_total{tier=\"offload\"}");
  EXPECT_EQ(used, 0) << m;
  EXPECT_EQ(free_ + cached, total) << m;
  EXPECT_GT(total, 0);
}

struct Ref {
  std::string prompt;
  std::vector<int32_t> prompt_tokens, greedy;
  json top10;
};

std::vector<Ref> load_refs() {
  std::vector<Ref> out;
  const auto dir = test::fixture("refs/kv_f16");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("stories260K-F32__", 0) == 0) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    const json j = json::parse(slurp(f));
    out.push_back(
        {j["prompt"], j["prompt_tokens"], j["greedy_tokens"], j["first_step_top10_logprobs"]});
  }
  return out;
}

json ref_request(const Ref& r) {
  return {{"prompt", r.prompt}, {"n_predict", 64},       {"temperature", 0.0},    {"top_k", 1},
          {"seed", 42},         {"cache_prompt", false}, {"return_tokens", true}, {"n_probs", 10}};
}

TEST(Serve, GreedyCompletionMatchesLlamaCppReferences) {
  KVRUN_REQUIRE_FIXTURE("refs/kv_f16");
  // -fa off: the exact attention scheme, the one llama.cpp made these references with.
  START_SERVER(srv, "-c", "128", "-np", "6", "-fa", "off");
  const auto refs = load_refs();
  ASSERT_EQ(refs.size(), 6u);
  auto c = srv.client();
  // One at a time: a batch of one sequence computes exactly what `kvrun -p` does.
  for (const Ref& ref : refs) {
    SCOPED_TRACE(ref.prompt);
    const json j = post_json(*c, "/completion", ref_request(ref), 200);
    ASSERT_EQ(j["tokens"].get<std::vector<int32_t>>(), ref.greedy) << j.dump();
    EXPECT_EQ(j["tokens_evaluated"], ref.prompt_tokens.size());
    EXPECT_EQ(j["stop_type"], "limit");
    const json& first = j["completion_probabilities"][0]["top_logprobs"];
    for (const auto& e : ref.top10) {
      auto it = std::find_if(first.begin(), first.end(),
                             [&](const json& p) { return p["id"] == e["id"]; });
      ASSERT_NE(it, first.end()) << "token " << e["id"] << " not in the top 10";
      EXPECT_NEAR((*it)["logprob"].get<double>(), e["logprob"].get<double>(), 1e-3);
    }
  }
  // All six at once: one batched forward per step over six sequences. The exact attention sums
  // in another order then, so tokens must agree up to the first near-tie (top-2 within 0.05).
  std::vector<json> got(refs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < refs.size(); ++i)
    threads.emplace_back([&, i] {
      auto ci = srv.client();
      auto r = ci->Post("/completion", ref_request(refs[i]).dump(), "application/json");
      if (r && r->status == 200) got[i] = json::parse(r->body, nullptr, false);
    });
  for (auto& t : threads) t.join();
  int checked = 0;
  for (size_t i = 0; i < refs.size(); ++i) {
    SCOPED_TRACE(refs[i].prompt);
    ASSERT_TRUE(got[i].is_object()) << "request " << i << " failed";
    const auto toks = got[i]["tokens"].get<std::vector<int32_t>>();
    const json& probs = got[i]["completion_probabilities"];
    ASSERT_EQ(toks.size(), refs[i].greedy.size());
    for (size_t k = 0; k < toks.size(); ++k) {
      const double gap = probs[k]["top_logprobs"][0]["logprob"].get<double>() -
                         probs[k]["top_logprobs"][1]["logprob"].get<double>();
      if (gap < 0.05) break;
      ASSERT_EQ(toks[k], refs[i].greedy[k]) << "token " << k;
      ++checked;
    }
  }
  EXPECT_GT(checked, 64 * 3) << "too few tokens checked in the batched run";
  expect_all_blocks_returned(idle_metrics(*c));
  expect_clean_exit(srv);
}

TEST(Serve, OpenAiNodeClientStreamsAChat) {
  START_SERVER(srv, "-c", "128", "--api-key", "sk-kvrun-test");
  const std::string node_modules = KVRUN_NODE_MODULES;
  if (test::run_command("command -v node").exit_code != 0) GTEST_SKIP() << "node is not installed";
  if (!std::filesystem::exists(std::filesystem::path(node_modules) / "openai"))
    GTEST_SKIP() << "the openai npm package is not installed in " << node_modules
                 << " (ctest installs it with npm: test serve_npm_install_openai)";
  const auto r = test::run_command("NODE_PATH='" + node_modules + "' node '" +
                                   std::string(KVRUN_SERVE_SCRIPTS) + "/openai_stream.cjs' '" +
                                   srv.url() + "/v1' sk-kvrun-test");
  ASSERT_EQ(r.exit_code, 0) << r.err << "\n" << srv.log();
  const json j = json::parse(r.out);
  const std::string streamed = j["streamed"];
  EXPECT_FALSE(streamed.empty());
  EXPECT_EQ(streamed, j["whole"].get<std::string>());  // greedy: the same text both ways
  EXPECT_GT(j["chunks"].get<int>(), 3);                // really streamed, not one blob
  EXPECT_EQ(j["finish_stream"], j["finish_whole"]);
  EXPECT_GT(j["usage"]["completion_tokens"].get<int>(), 0);
  // The same request through plain HTTP gives that text too.
  auto c = srv.client();
  c->set_bearer_token_auth("sk-kvrun-test");
  const json whole = post_json(
      *c, "/v1/chat/completions",
      {{"messages",
        {{{"role", "user"}, {"content", "Once upon a time, there was a little dog named Max."}}}},
       {"max_tokens", 40},
       {"temperature", 0}},
      200);
  EXPECT_EQ(whole["choices"][0]["message"]["content"], streamed);
  expect_clean_exit(srv);
}

TEST(Serve, BadInputGetsTheStatedStatus) {
  START_SERVER(srv, "-c", "128", "--max-body", "4K", "--api-key", "k3y");
  auto c = srv.client();
  // No key: 401 everywhere but /health.
  auto r = c->Post("/completion", R"({"prompt": "x"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "authentication_error");
  r = c->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  c->set_bearer_token_auth("wrong");
  r = c->Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  c->set_bearer_token_auth("k3y");

  auto expect_400 = [&](const std::string& path, const std::string& body, const char* what) {
    auto res = c->Post(path.c_str(), body, "application/json");
    ASSERT_TRUE(res) << what;
    EXPECT_EQ(res->status, 400) << what << ": " << res->body;
    const json e = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(e.is_object()) << what << ": " << res->body;
    EXPECT_TRUE(e["error"]["message"].is_string()) << what;
    EXPECT_EQ(e["error"]["type"], "invalid_request_error") << what;
  };
  expect_400("/v1/completions", "{\"prompt\": \"Once", "malformed JSON");
  expect_400("/v1/completions", "[1, 2]", "not an object");
  expect_400("/v1/completions", R"({"prompt": "a", "temperature": "hot"})", "wrong type");
  expect_400("/v1/completions", R"({"prompt": "a", "temperature": 5})", "out of range");
  expect_400("/v1/completions", R"({"prompt": "a", "max_tokens": -3})", "out of range");
  expect_400("/v1/completions", R"({"prompt": "a", "top_p": 1.5})", "out of range");
  expect_400("/v1/completions", R"({"prompt": "a", "n": 2})", "n > 1");
  expect_400("/v1/completions", R"({"temperature": 0})", "no prompt");
  expect_400("/v1/chat/completions", R"({"messages": []})", "no messages");
  expect_400("/v1/chat/completions", R"({"messages": [{"role": "pirate", "content": "a"}]})",
             "bad role");
  expect_400("/completion", R"({"prompt": [1, 99999]})", "token id out of range");
  expect_400("/completion", R"({"prompt": "a", "n_probs": 1000})", "out of range");
  expect_400("/detokenize", R"({"tokens": [1, -5]})", "bad token id");
  expect_400("/tokenize", R"({"content": 5})", "wrong type");
  expect_400("/infill", R"({"input_prefix": "int f(", "input_suffix": "}"})",
             "model without FIM tokens");
  json ids = json::array();
  for (int i = 0; i < 200; ++i) ids.push_back(300 + i % 100);  // 200 tokens > n_ctx 128
  expect_400("/completion", json{{"prompt", ids}}.dump(), "prompt longer than the context");
  std::string long_text;
  for (int i = 0; i < 60; ++i) long_text += "dog cat ";
  expect_400("/v1/completions", json{{"prompt", long_text}}.dump(), "prompt longer than context");

  // Over --max-body: 413.
  r = c->Post("/v1/completions", json{{"prompt", std::string(10000, 'a')}}.dump(),
              "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  // Unknown endpoint: 404 with an error object.
  r = c->Get("/v2/nothing");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(json::parse(r->body, nullptr, false).contains("error")) << r->body;
  // The server still works after all of it.
  const json ok =
      post_json(*c, "/completion", {{"prompt", "The little dog"}, {"n_predict", 8}}, 200);
  EXPECT_EQ(ok["tokens_predicted"], 8);
  expect_all_blocks_returned(idle_metrics(*c));
  expect_clean_exit(srv);
}

TEST(Serve, QueueFullGets503AndTimeoutEndsTheRequest) {
  // One session, no queue, long generations, half a second per request.
  START_SERVER(srv, "-c", "4096", "-np", "1", "--max-queue", "0", "--timeout", "0.5");
  auto c1 = srv.client();
  std::atomic<int> chunks{0};
  std::string body1;
  std::atomic<bool> second_done{false};
  int second_status = 0;
  std::string retry_after;
  std::thread second;
  const json long_req = {
      {"prompt", "Once upon a time"}, {"n_predict", 4000}, {"ignore_eos", true}, {"stream", true}};
  auto res = post_stream(*c1, "/completion", long_req.dump(), [&](const char* data, size_t n) {
    body1.append(data, n);
    if (chunks++ == 0)  // the first request is generating: a second one finds no room
      second = std::thread([&] {
        auto c2 = srv.client();
        auto r2 = c2->Post("/completion", R"({"prompt": "x", "n_predict": 2})", "application/json");
        if (r2) {
          second_status = r2->status;
          retry_after = r2->get_header_value("Retry-After");
        }
        second_done = true;
      });
    return true;
  });
  if (second.joinable()) second.join();
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_TRUE(second_done);
  EXPECT_EQ(second_status, 503);
  EXPECT_EQ(retry_after, "1");
  // The stream ended with the timeout's error event, well before 4000 tokens.
  EXPECT_NE(body1.find("timeout_error"), std::string::npos) << body1.substr(0, 500);
  // Not streamed: 504.
  auto c3 = srv.client();
  auto r3 = c3->Post("/completion", R"({"prompt": "Once", "n_predict": 4000, "ignore_eos": true})",
                     "application/json");
  ASSERT_TRUE(r3);
  EXPECT_EQ(r3->status, 504) << r3->body;
  const std::string m = idle_metrics(*c3);
  EXPECT_EQ(metric(m, "kvrun_requests_timeout_total"), 2);
  EXPECT_EQ(metric(m, "kvrun_requests_rejected_total"), 1);
  expect_all_blocks_returned(m);
  expect_clean_exit(srv);
}

TEST(Serve, ThirtyTwoStreamingClientsSomeDisconnecting) {
  START_SERVER(srv, "-c", "1024", "-np", "8", "--max-queue", "64");
  constexpr int kClients = 32;
  std::vector<int> finished(kClients, 0), done_marker(kClients, 0);
  std::vector<std::string> outcome(kClients);  // HTTP status or client error, for messages
  std::vector<std::string> texts(kClients);
  std::vector<std::thread> threads;
  auto is_quitter = [](int i) { return i % 4 == 1; };
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      auto c = srv.client();
      std::string buf;
      int events = 0;
      json body;
      if (is_quitter(i))  // long generations, dropped after a few tokens
        body = {{"prompt", "Once upon a time"},
                {"n_predict", 1000},
                {"ignore_eos", true},
                {"stream", true}};
      else if (i % 2 == 0)
        body = {{"messages",
                 {{{"role", "user"}, {"content", "Tom went to the park " + std::to_string(i)}}}},
                {"max_tokens", 24},
                {"temperature", 0.8},
                {"seed", i},
                {"stream", true}};
      else
        body = {{"prompt", "The little dog " + std::to_string(i)},
                {"max_tokens", 24},
                {"temperature", 0.8},
                {"seed", i},
                {"stream", true}};
      const char* path =
          is_quitter(i) ? "/completion" : (i % 2 == 0 ? "/v1/chat/completions" : "/v1/completions");
      auto r = post_stream(*c, path, body.dump(), [&](const char* data, size_t n) {
        buf.append(data, n);
        for (size_t p; (p = buf.find("\n\n")) != std::string::npos;) {
          const std::string ev = buf.substr(0, p);
          buf.erase(0, p + 2);
          ++events;
          if (ev == "data: [DONE]") {
            done_marker[i] = 1;
            continue;
          }
          const json j = json::parse(ev.substr(6), nullptr, false);
          if (j.is_discarded()) continue;
          if (j.contains("choices") && !j["choices"].empty()) {
            const json& ch = j["choices"][0];
            if (ch.contains("delta") && ch["delta"].contains("content"))
              texts[i] += ch["delta"]["content"].get<std::string>();
            if (ch.contains("text")) texts[i] += ch["text"].get<std::string>();
            if (ch["finish_reason"].is_string()) finished[i] = 1;
          }
        }
        return !(is_quitter(i) && events >= 3);  // hang up
      });
      outcome[i] = r ? "HTTP " + std::to_string(r->status) + " " + buf.substr(0, 300)
                     : "client error " + httplib::to_string(r.error());
    });
  for (auto& t : threads) t.join();
  int n_quit = 0;
  for (int i = 0; i < kClients; ++i) {
    if (is_quitter(i)) {
      ++n_quit;
      continue;
    }
    EXPECT_TRUE(finished[i]) << "client " << i << " got no finish_reason: " << outcome[i];
    EXPECT_TRUE(done_marker[i]) << "client " << i << " got no [DONE]";
    EXPECT_FALSE(texts[i].empty()) << "client " << i;
  }
  auto c = srv.client();
  const std::string m = idle_metrics(*c);
  EXPECT_EQ(metric(m, "kvrun_requests_cancelled_total"), n_quit) << m;
  EXPECT_EQ(metric(m, "kvrun_requests_finished_total"), kClients);
  expect_all_blocks_returned(m);
  expect_clean_exit(srv);
}

/// Two chat turns; returns the second turn's usage.
json second_turn_usage(ServerProcess& srv) {
  auto c = srv.client();
  const std::string first =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her friends. One day, she saw a big red ball.";
  json msgs = {{{"role", "user"}, {"content", first}}};
  const json t1 = post_json(*c, "/v1/chat/completions",
                            {{"messages", msgs}, {"max_tokens", 24}, {"temperature", 0}}, 200);
  EXPECT_EQ(t1["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  msgs.push_back({{"role", "assistant"}, {"content", t1["choices"][0]["message"]["content"]}});
  msgs.push_back({{"role", "user"}, {"content", "Then Lily went home."}});
  const json t2 = post_json(*c, "/v1/chat/completions",
                            {{"messages", msgs}, {"max_tokens", 8}, {"temperature", 0}}, 200);
  return t2["usage"];
}

TEST(Serve, SecondChatTurnReusesTheFirstTurnsKv) {
  START_SERVER(srv, "-c", "256");
  const json u = second_turn_usage(srv);
  const int cached = u["prompt_tokens_details"]["cached_tokens"];
  const int prompt = u["prompt_tokens"];
  EXPECT_GE(cached, 32) << u.dump();  // the first turn's whole blocks (16 tokens each)
  EXPECT_EQ(cached % 16, 0);
  EXPECT_LT(cached, prompt);
  expect_clean_exit(srv);

  START_SERVER(off, "-c", "256", "--no-prefix-cache");
  EXPECT_EQ(second_turn_usage(off)["prompt_tokens_details"]["cached_tokens"], 0);
  expect_clean_exit(off);
}

TEST(Serve, SmallEndpoints) {
  START_SERVER(srv, "-c", "128");
  auto c = srv.client();
  const json t =
      post_json(*c, "/tokenize", {{"content", "The little dog"}, {"add_special", true}}, 200);
  const auto ids = t["tokens"].get<std::vector<int32_t>>();
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);  // BOS
  const json d = post_json(*c, "/detokenize",
                           {{"tokens", std::vector<int32_t>(ids.begin() + 1, ids.end())}}, 200);
  EXPECT_EQ(d["content"], " The little dog");
  auto r = c->Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["data"][0]["id"], "stories260K-F32");
  r = c->Get("/slots");
  ASSERT_TRUE(r);
  EXPECT_TRUE(json::parse(r->body)["active"].is_array());
  // Stop strings end the text before them; logprobs come per token.
  const json s = post_json(*c, "/v1/completions",
                           {{"prompt", "Once upon a time"},
                            {"max_tokens", 40},
                            {"temperature", 0},
                            {"stop", "Lily"},
                            {"logprobs", 2}},
                           200);
  // The greedy continuation is ", there was a little girl named Lily. ..." (refs/kv_f16).
  EXPECT_EQ(s["choices"][0]["text"], ", there was a little girl named ");
  EXPECT_EQ(s["choices"][0]["finish_reason"], "stop");
  const json& lp = s["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), lp["token_logprobs"].size());
  EXPECT_GT(lp["tokens"].size(), 0u);
  for (const auto& x : lp["token_logprobs"]) EXPECT_LE(x.get<double>(), 0.0);
  r = c->Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(metric(r->body, "kvrun_requests_total"), 1);
  EXPECT_GT(metric(r->body, "kvrun_generated_tokens_total"), 0);
  expect_clean_exit(srv);
}

/// Greedy /completion texts of four prompts sent at once, in prompt order.
std::vector<std::string> four_greedy_completions(const ServerProcess& srv) {
  const std::vector<std::string> prompts = {"Once upon a time", "One day, Lily met a",
                                            "The little dog",
                                            "Tom and his sister went to the park"};
  std::vector<std::string> out(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i)
    threads.emplace_back([&, i] {
      auto c = srv.client();
      const json r = post_json(
          *c, "/completion",
          {{"prompt", prompts[i]}, {"n_predict", 200}, {"temperature", 0}, {"top_k", 1}}, 200);
      out[i] = r.value("content", "");
    });
  for (auto& t : threads) t.join();
  return out;
}

// Four sessions of ~210 tokens need ~56 blocks of 16; the fast tier holds 8 (f16 KV of
// stories260K: 640 bytes per token, 10240 per block). The texts equal a server without a budget.
TEST(Serve, OffloadTierKeepsServingAndReportsTiers) {
  test::TempDir dir;
  START_SERVER(plain, "-c", "256", "-np", "4");
  const std::vector<std::string> want = four_greedy_completions(plain);
  expect_clean_exit(plain);
  START_SERVER(srv, "-c", "256", "-np", "4", "--kv-mem", "81920", "--kv-offload-dir",
               dir.path().string());
  const std::vector<std::string> got = four_greedy_completions(srv);
  EXPECT_EQ(got, want);
  for (const auto& t : got) EXPECT_GT(t.size(), 200u);
  auto c = srv.client();
  // The stats are published between scheduler steps: wait until every request has ended.
  const std::string m = idle_metrics(*c);
  auto r = c->Get("/stats");
  ASSERT_TRUE(r);
  const json st = json::parse(r->body);
  const json& kv = st["kv"];
  EXPECT_EQ(kv["tiers"]["ram"]["blocks"], 8) << r->body;
  EXPECT_EQ(kv["tiers"]["ram"]["bytes"], 81920) << r->body;
  EXPECT_GT(kv["tiers"]["offload"]["blocks"].get<int64_t>(), 0) << r->body;
  EXPECT_GT(kv["moves_out"].get<int64_t>(), 0) << r->body;
  EXPECT_EQ(st["requests"]["finished"], 4) << r->body;
  const std::string path = kv["tiers"]["offload"]["path"];
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_GT(metric(m, "kvrun_kv_block_moves_total{direction=\"out\"}"), 0) << m;
  expect_all_blocks_returned(m);
  expect_clean_exit(srv);
  EXPECT_FALSE(std::filesystem::exists(path)) << "the offload file outlived the server";
}

TEST(Serve, InfillPutsPrefixAndSuffixAroundTheFimTokens) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  const auto fim_model = (dir / "fim.gguf").string();
  write_fim_fixture(fim_model);
  ServerProcess srv({"-c", "256", "-b", "64"}, fim_model);  // room for extra context past -b
  ASSERT_TRUE(srv.ok()) << srv.log();
  auto c = srv.client();
  auto n_tokens = [&](const std::string& text) {
    return post_json(*c, "/tokenize", {{"content", text}}, 200)["tokens"].size();
  };
  const json j = post_json(*c, "/infill",
                           {{"input_prefix", "Once upon"},
                            {"input_suffix", "the end."},
                            {"input_extra", {{{"filename", "a.txt"}, {"text", "Lily"}}}},
                            {"n_predict", 4},
                            {"temperature", 0}},
                           200);
  // BOS, extra (no repo-level tokens: a name comment), PRE, prefix, SUF, suffix, MID.
  EXPECT_EQ(j["tokens_evaluated"],
            4 + n_tokens("// a.txt\nLily\n") + n_tokens("Once upon") + n_tokens("the end."));
  EXPECT_EQ(j["tokens_predicted"], 4);
  expect_clean_exit(srv);
}

}  // namespace
}  // namespace kvrun
