// test_serve_bert.cpp — `kvrun serve` with an encoder (bert) model: the embeddings endpoints
// answer with ik_llama.cpp's embedding (tests/data/bert_refs, as test_bert) and the library's,
// and every generation endpoint answers 501 not_supported_error naming the reason; several
// inputs in one request give what each gives alone; the unused generation pool is one block.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve_process.h"
#include "synth_util.h"
#include "test_util.h"

namespace kvrun {
namespace {

using nlohmann::json;
using namespace serve_test;

TEST(ServeBert, EmbeddingsWorkAndGenerationAnswers501) {
  std::ifstream rf(test::test_data("bert_refs/tiny-bert-F32.json"));
  const json ref = json::parse(rf, nullptr, false);
  ASSERT_TRUE(ref.is_object()) << "tests/data/bert_refs/tiny-bert-F32.json is missing";
  test::TempDir dir;
  const std::string model = test::synth_model(dir, "tiny-bert", SynthFileType::F32);
  ServerProcess s({"-np", "1"}, model);
  ASSERT_TRUE(s.ok()) << s.log();
  const json& item = ref["items"][1];
  auto r = s.client()->Post("/v1/embeddings", json{{"input", item["prompt"]}}.dump(),
                            "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  const auto got = j["data"][0]["embedding"].get<std::vector<float>>();
  const auto want = item["embedding"].get<std::vector<float>>();
  ASSERT_EQ(got.size(), want.size());
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < got.size(); ++i)
    ab += double(got[i]) * want[i], aa += double(got[i]) * got[i], bb += double(want[i]) * want[i];
  EXPECT_GE(ab / std::sqrt(aa * bb), 0.9999);
  EXPECT_EQ(j["usage"]["prompt_tokens"], item["tokens"].size());
  const std::vector<std::pair<std::string, json>> generation = {
      {"/v1/completions", {{"prompt", "hello"}, {"max_tokens", 4}}},
      {"/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}}},
      {"/completion", {{"prompt", "hello"}, {"n_predict", 4}}},
      {"/api/generate", {{"model", "m"}, {"prompt", "hello"}, {"stream", false}}}};
  for (const auto& [path, body] : generation) {
    auto g = s.client()->Post(path.c_str(), body.dump(), "application/json");
    ASSERT_TRUE(g) << path;
    EXPECT_EQ(g->status, 501) << path << ": " << g->body;
    const json e = json::parse(g->body, nullptr, false);
    const std::string text = e.is_object() && e.contains("error") ? e["error"].dump() : g->body;
    EXPECT_NE(text.find("embedding (encoder-only) model"), std::string::npos) << path << text;
  }
  // Several inputs (one step on the server's embeddings context): each as when sent alone.
  json many = json::array();
  for (const json& it : ref["items"]) many.push_back(it["prompt"]);
  r = s.client()->Post("/v1/embeddings", json{{"input", many}}.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json batched = json::parse(r->body);
  ASSERT_EQ(batched["data"].size(), many.size());
  for (size_t i = 0; i < many.size(); ++i) {
    auto one =
        s.client()->Post("/v1/embeddings", json{{"input", many[i]}}.dump(), "application/json");
    ASSERT_TRUE(one);
    const auto a = json::parse(one->body)["data"][0]["embedding"].get<std::vector<float>>();
    const auto b = batched["data"][i]["embedding"].get<std::vector<float>>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(a[k], b[k], 1e-5) << i << " " << k;
  }
  // The generation scheduler of an encoder holds one KV block, not -np × -c positions.
  r = s.client()->Get("/stats");
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["kv"]["tiers"]["ram"]["blocks"], 1) << r->body;
  // The server still embeds after the refusals.
  r = s.client()->Post("/embedding", json{{"content", "the sky"}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

}  // namespace
}  // namespace kvrun
