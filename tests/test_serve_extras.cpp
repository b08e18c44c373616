// test_serve_extras.cpp — `kvrun serve` around generation: the embeddings endpoints (against
// the library's embed_tokens on the same model), CORS (preflight, allowed and refused origins,
// with --api-key), request logging (text, JSON, file, off), GET /props and llama.cpp's metric
// names.
#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/evp.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/embed.h"
#include "engine/model.h"
#include "serve_process.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace kvrun {
namespace {

using nlohmann::json;
using namespace serve_test;

json post_json(ServerProcess& s, const std::string& path, const json& body, int want = 200) {
  auto r = s.client()->Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(r) << path;
  if (!r) return json();
  EXPECT_EQ(r->status, want) << path << ": " << r->body;
  return json::parse(r->body, nullptr, false);
}

/// The library's embedding of `text` (mean pooling, Euclidean), the reference for the server's.
std::vector<float> reference(const std::string& text, Pooling pooling = Pooling::kMean) {
  const Model m = Model::load(test::fixture(kModel).string());
  const Tokenizer tok = Tokenizer::from_gguf(m.file());
  ContextParams cp;
  cp.n_ctx = 128;
  cp.n_threads = 1;
  cp.embeddings = true;
  Context ctx(m, cp);
  return embed_tokens(ctx, tok.tokenize(text, true, false), pooling);
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << i;
}

std::vector<float> from_base64(const std::string& b64) {
  std::vector<unsigned char> raw(b64.size());
  const int n = EVP_DecodeBlock(raw.data(), reinterpret_cast<const unsigned char*>(b64.data()),
                                int(b64.size()));
  int pad = 0;
  for (size_t i = b64.size(); i > 0 && b64[i - 1] == '='; --i) ++pad;
  std::vector<float> v(size_t(n - pad) / 4);
  std::memcpy(v.data(), raw.data(), v.size() * 4);
  return v;
}

TEST(ServeEmbeddings, OpenAiLlamaAndOllamaShapesEqualTheLibrary) {
  START_SERVER(s);
  const std::vector<float> a = reference("Once upon a time"), b = reference("The cat sat.");
  json j = post_json(s, "/v1/embeddings", {{"input", {"Once upon a time", "The cat sat."}}});
  ASSERT_EQ(j["data"].size(), 2u);
  expect_near(j["data"][0]["embedding"].get<std::vector<float>>(), a);
  expect_near(j["data"][1]["embedding"].get<std::vector<float>>(), b);
  EXPECT_EQ(j["object"], "list");
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 5);
  j = post_json(s, "/v1/embeddings",
                {{"input", "Once upon a time"}, {"encoding_format", "base64"}});
  expect_near(from_base64(j["data"][0]["embedding"].get<std::string>()), a);
  // Token ids in, the same vector out.
  const Model m = Model::load(test::fixture(kModel).string());
  const auto ids = Tokenizer::from_gguf(m.file()).tokenize("Once upon a time", true, false);
  j = post_json(s, "/v1/embeddings", {{"input", ids}});
  expect_near(j["data"][0]["embedding"].get<std::vector<float>>(), a);
  j = post_json(s, "/embedding", {{"content", "Once upon a time"}});
  expect_near(j[0]["embedding"][0].get<std::vector<float>>(), a);
  j = post_json(s, "/api/embed", {{"model", "m"}, {"input", {"Once upon a time"}}});
  expect_near(j["embeddings"][0].get<std::vector<float>>(), a);
  EXPECT_EQ(j["model"], "m");
  // Bad requests name the field.
  for (const json& bad : {json{{"model", "m"}}, json{{"input", 5}}, json{{"input", json::array()}},
                          json{{"input", "x"}, {"encoding_format", "int8"}},
                          json{{"input", "x"}, {"dimensions", 8}}, json{{"input", {100000}}}}) {
    const json e = post_json(s, "/v1/embeddings", bad, 400);
    EXPECT_TRUE(e.contains("error")) << bad.dump();
  }
  std::string long_text;
  for (int i = 0; i < 200; ++i) long_text += "Once upon a time ";
  EXPECT_NE(post_json(s, "/v1/embeddings", {{"input", long_text}}, 400)["error"]["message"]
                .get<std::string>()
                .find("context"),
            std::string::npos);
  expect_clean_exit(s);
}

TEST(ServeEmbeddings, PoolingNoneGivesARowPerTokenOnlyOnLlamasEndpoint) {
  START_SERVER(s, "--pooling", "none");
  const json j = post_json(s, "/embedding", {{"content", "Once upon a time"}});
  const std::vector<float> rows = reference("Once upon a time", Pooling::kNone);
  ASSERT_EQ(j[0]["embedding"].size() * 64, rows.size());
  expect_near(j[0]["embedding"][1].get<std::vector<float>>(),
              std::vector<float>(rows.begin() + 64, rows.begin() + 128));
  post_json(s, "/v1/embeddings", {{"input", "x"}}, 400);
  const json e = post_json(s, "/api/embed", {{"input", "x"}}, 400);
  EXPECT_TRUE(e["error"].is_string()) << e.dump();  // ollama's shape, not OpenAI's object
}

TEST(ServeCors, PreflightAndOriginsAsConfigured) {
  {
    START_SERVER(s);  // default: same-origin only, no CORS headers at all
    httplib::Headers h = {{"Origin", "http://localhost:3000"},
                          {"Access-Control-Request-Method", "POST"}};
    auto r = s.client()->Options("/v1/chat/completions", h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 204);
    EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
    r = s.client()->Get("/health", h);
    EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  }
  START_SERVER(s, "--cors-origin", "http://localhost:3000", "--api-key", "k");
  httplib::Headers ok = {{"Origin", "http://localhost:3000"}};
  auto r = s.client()->Options("/v1/embeddings", ok);  // no key in a preflight: still answered
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
  EXPECT_NE(r->get_header_value("Access-Control-Allow-Headers").find("Authorization"),
            std::string::npos);
  ok.emplace("Authorization", "Bearer k");
  r = s.client()->Get("/props", ok);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
  r = s.client()->Get("/props", {{"Origin", "http://evil.example"}, {"Authorization", "Bearer k"}});
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  r = s.client()->Get("/props", {{"Origin", "http://localhost:3000"}});  // no key: 401, with CORS
  EXPECT_EQ(r->status, 401);
}

TEST(ServeLog, TextJsonFileAndOff) {
  {
    START_SERVER(s);
    post_json(s, "/v1/embeddings", {{"input", "hi"}});
    s.client()->Get("/nope");
    s.stop();
    EXPECT_NE(s.log().find("kvrun: POST /v1/embeddings 200 "), std::string::npos) << s.log();
    EXPECT_NE(s.log().find("kvrun: GET /nope 404 "), std::string::npos) << s.log();
  }
  test::TempDir dir;
  const std::string file = (dir / "requests.log").string();
  {
    START_SERVER(s, "--log-format", "json", "--log-file", file);
    s.client()->Get("/health");
    s.stop();
    std::ifstream in(file);
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    const json j = json::parse(line);
    EXPECT_EQ(j["method"], "GET");
    EXPECT_EQ(j["path"], "/health");
    EXPECT_EQ(j["status"], 200);
    EXPECT_TRUE(j["ms"].is_number());
    EXPECT_EQ(s.log().find("/health"), std::string::npos) << "to the file only";
  }
  START_SERVER(s, "--log-disable");
  s.client()->Get("/health");
  s.stop();
  EXPECT_EQ(s.log().find("GET /health"), std::string::npos) << s.log();
}

TEST(ServeProps, PropsAndLlamaCppMetricNames) {
  START_SERVER(s, "-ctk", "q8_0");
  auto r = s.client()->Get("/props");
  ASSERT_TRUE(r);
  const json p = json::parse(r->body);
  EXPECT_EQ(p["total_slots"], 4);
  EXPECT_EQ(p["default_generation_settings"]["n_ctx"], 128);
  EXPECT_EQ(p["kv_cache"]["type_k"], "q8_0");
  EXPECT_EQ(p["kv_cache"]["type_v"], "f16");
  EXPECT_EQ(p["n_embd"], 64);
  EXPECT_TRUE(p.contains("chat_template"));
  post_json(s, "/completion", {{"prompt", "Once"}, {"n_predict", 3}, {"ignore_eos", true}});
  // The scheduler counts a request's last step just after its reply: wait for it.
  for (int i = 0; i < 100; ++i) {
    r = s.client()->Get("/metrics");
    ASSERT_TRUE(r);
    if (r->body.find("kvrun_requests_finished_total 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(r->body.find("llamacpp:tokens_predicted_total 3"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("llamacpp:kv_cache_usage_ratio"), std::string::npos);
  EXPECT_NE(r->body.find("kvrun_generated_tokens_total 3"), std::string::npos);
}

TEST(ServeOllama, TagsShowVersionAndPs) {
  START_SERVER(s);
  auto r = s.client()->Get("/api/tags");
  ASSERT_TRUE(r);
  const json tags = json::parse(r->body);
  ASSERT_EQ(tags["models"].size(), 1u);
  const json& m = tags["models"][0];
  EXPECT_EQ(m["name"], "stories260K-F32:latest");
  EXPECT_EQ(m["size"], std::filesystem::file_size(test::fixture(kModel)));
  EXPECT_EQ(m["details"]["family"], "llama");
  EXPECT_EQ(m["details"]["quantization_level"], "F32");
  const json show = post_json(s, "/api/show", {{"model", "stories260K-F32:latest"}});
  EXPECT_EQ(show["model_info"]["llama.embedding_length"], 64);
  EXPECT_EQ(show["model_info"]["llama.context_length"], 128);
  EXPECT_EQ(show["model_info"]["general.architecture"], "llama");
  EXPECT_EQ(post_json(s, "/api/show", {{"model", "stories260K-F32"}})["details"], m["details"]);
  // Errors in ollama's shape {"error": "..."}, as ollama's clients read them.
  const json missing = post_json(s, "/api/show", {{"model", "llama3"}}, 404);
  EXPECT_TRUE(missing["error"].is_string()) << missing.dump();
  EXPECT_NE(missing["error"].get<std::string>().find("llama3"), std::string::npos);
  EXPECT_TRUE(post_json(s, "/api/show", json::object(), 400)["error"].is_string());
  r = s.client()->Get("/api/version");
  EXPECT_TRUE(json::parse(r->body)["version"].is_string());
  r = s.client()->Get("/api/ps");
  EXPECT_EQ(json::parse(r->body)["models"][0]["name"], "stories260K-F32:latest");
}

}  // namespace
}  // namespace kvrun
