// test_serve_grammar.cpp — `kvrun serve` with constrained output (tools/serve_grammar.cpp):
// llama.cpp's "grammar" and "json_schema" on /completion, OpenAI's "response_format"
// (json_object, json_schema) on /v1/chat/completions and /v1/completions, streamed and whole,
// several constrained requests at once, and the 400s for bad grammars and unsupported schema
// keywords. Outputs are sampled at a high temperature from the stories260K fixture; each must be
// a sentence of its grammar (checked by parsing the JSON and its fields here).
#include <gtest/gtest.h>
#include <httplib.h>

#include <cctype>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "serve_process.h"
#include "test_util.h"

namespace kvrun {
namespace {

using nlohmann::json;
using namespace serve_test;

const json kPerson = json::parse(R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"},
    "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 3}},
    "required": ["name", "age", "pets"], "additionalProperties": false})");

/// `text` is a JSON object of kPerson's shape.
void expect_person(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  ASSERT_TRUE(j.is_object()) << text;
  EXPECT_EQ(j.size(), 3u) << text;
  ASSERT_TRUE(j.contains("name") && j["name"].is_string()) << text;
  EXPECT_LE(j["name"].get<std::string>().size(), 10u * 4) << text;
  ASSERT_TRUE(j.contains("age") && j["age"].is_number_integer()) << text;
  ASSERT_TRUE(j.contains("pets") && j["pets"].is_array()) << text;
  EXPECT_LE(j["pets"].size(), 3u) << text;
  for (const auto& p : j["pets"]) EXPECT_TRUE(p == "cat" || p == "dog") << text;
}

json hot(json body) {  // high temperature over the whole distribution
  body["temperature"] = 2.0;
  body["top_p"] = 1.0;
  body["seed"] = 7;
  return body;
}

TEST(ServeGrammar, CompletionGrammarAndJsonSchema) {
  START_SERVER(srv, "-c", "512", "-np", "4");
  auto c = srv.client();
  json body = hot({{"prompt", "Once upon a time"},
                   {"n_predict", 64},
                   {"top_k", 0},
                   {"min_p", 0.0},
                   {"grammar", "root ::= (\"yes\" | \"no\") \" \" [0-9]{2}"}});
  json j = post_json(*c, "/completion", body, 200);
  const std::string text = j["content"];
  const bool yes = text.rfind("yes ", 0) == 0, no = text.rfind("no ", 0) == 0;
  EXPECT_TRUE((yes && text.size() == 6) || (no && text.size() == 5)) << text;
  EXPECT_TRUE(std::isdigit(text.back()) && std::isdigit(text[text.size() - 2])) << text;
  EXPECT_EQ(j["stop_type"], "eos") << j.dump();

  body.erase("grammar");
  body["n_predict"] = 400;
  body["json_schema"] = kPerson;
  j = post_json(*c, "/completion", body, 200);
  EXPECT_EQ(j["stop_type"], "eos") << j.dump();
  expect_person(j["content"]);
  expect_clean_exit(srv);
}

TEST(ServeGrammar, ResponseFormatOnTheOpenAiEndpoints) {
  START_SERVER(srv, "-c", "512", "-np", "4");
  auto c = srv.client();
  const json msgs = json::array({{{"role", "user"}, {"content", "Describe a person."}}});
  json body =
      hot({{"messages", msgs},
           {"max_tokens", 400},
           {"response_format",
            {{"type", "json_schema"},
             {"json_schema", {{"name", "person"}, {"strict", true}, {"schema", kPerson}}}}}});
  json j = post_json(*c, "/v1/chat/completions", body, 200);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop") << j.dump();
  expect_person(j["choices"][0]["message"]["content"]);

  body["response_format"] = {{"type", "json_object"}};
  body["max_tokens"] = 2000;
  j = post_json(*c, "/v1/chat/completions", body, 200);
  if (j["choices"][0]["finish_reason"] == "stop") {
    const json obj =
        json::parse(j["choices"][0]["message"]["content"].get<std::string>(), nullptr, false);
    EXPECT_TRUE(obj.is_object()) << j.dump();
  }

  json comp = hot({{"prompt", "Once"}, {"max_tokens", 400}});
  comp["response_format"] = body["response_format"];
  comp["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"schema", kPerson}}}};
  j = post_json(*c, "/v1/completions", comp, 200);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop") << j.dump();
  expect_person(j["choices"][0]["text"]);

  // {"type": "text"} is no constraint.
  comp["response_format"] = {{"type", "text"}};
  comp["max_tokens"] = 8;
  post_json(*c, "/v1/completions", comp, 200);
  expect_clean_exit(srv);
}

TEST(ServeGrammar, StreamedAndConcurrent) {
  START_SERVER(srv, "-c", "512", "-np", "4");
  // Four constrained streams at once (one trie shared, a grammar state each) and one free one.
  std::vector<std::string> texts(5);
  std::vector<std::thread> threads;
  for (int i = 0; i < 5; ++i)
    threads.emplace_back([&, i] {
      auto c = srv.client();
      json body = hot({{"prompt", "Once upon a time"}, {"n_predict", 400}, {"stream", true}});
      body["seed"] = 100 + i;
      if (i < 4) body["json_schema"] = kPerson;
      std::string raw;
      post_stream(*c, "/completion", body.dump(), [&](const char* d, size_t n) {
        raw.append(d, n);
        return true;
      });
      for (size_t at = 0; (at = raw.find("data: ", at)) != std::string::npos;) {
        const size_t eol = raw.find('\n', at);
        const json ev = json::parse(raw.substr(at + 6, eol - at - 6), nullptr, false);
        if (ev.is_object() && ev.contains("content")) texts[size_t(i)] += ev["content"];
        at = eol;
      }
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    expect_person(texts[size_t(i)]);
  }
  expect_clean_exit(srv);
}

TEST(ServeGrammar, BadGrammarsAre400NamingTheField) {
  START_SERVER(srv, "-c", "256");
  auto c = srv.client();
  const auto error_of = [&](const std::string& path, const json& body) -> json {
    const json j = post_json(*c, path, body, 400);
    return j.contains("error") ? j["error"] : json();
  };
  json e = error_of("/completion", {{"prompt", "x"}, {"grammar", "root ::= \"a\" item"}});
  EXPECT_EQ(e["message"],
            "'grammar' is not a valid grammar: line 1, column 14: undefined rule 'item'");
  EXPECT_EQ(e["param"], "grammar");
  e = error_of("/completion",
               {{"prompt", "x"}, {"json_schema", {{"type", "integer"}, {"minimum", 1}}}});
  EXPECT_EQ(e["message"], "'json_schema': unsupported keyword 'minimum' at #");
  e = error_of("/v1/chat/completions", json::parse(R"({"messages": [{"role": "user",
      "content": "hi"}], "response_format": {"type": "json_schema",
      "json_schema": {"schema": {"type": "string", "format": "email"}}}})"));
  EXPECT_EQ(e["message"],
            "'response_format.json_schema.schema': unsupported string format '\"email\"' at #");
  EXPECT_EQ(e["param"], "response_format.json_schema.schema");
  e = error_of("/v1/completions", {{"prompt", "x"}, {"response_format", {{"type", "xml"}}}});
  EXPECT_EQ(e["message"],
            "'response_format' type must be text, json_object or json_schema, not 'xml'");
  e = error_of("/v1/completions",
               {{"prompt", "x"}, {"response_format", {{"type", "json_schema"}}}});
  EXPECT_EQ(e["param"], "response_format");
  e = error_of(
      "/completion",
      {{"prompt", "x"}, {"grammar", "root ::= \"a\""}, {"json_schema", {{"type", "integer"}}}});
  EXPECT_EQ(e["message"], "give only one of 'grammar', 'json_schema' and 'response_format'");
  e = error_of("/completion", {{"prompt", "x"}, {"grammar", 5}});
  EXPECT_EQ(e["message"], "'grammar' must be a string");
  expect_clean_exit(srv);
}

}  // namespace
}  // namespace kvrun
