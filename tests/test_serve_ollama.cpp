// test_serve_ollama.cpp — ollama's /api/generate and /api/chat on `kvrun serve`
// (tools/serve_ollama.h):
//  * end to end through the official `ollama` npm client (tests/serve/ollama_client.cjs) on the
//    stories260K fixture: chat and generate streamed and whole give the same greedy text, the
//    final object's counters, num_predict, format (a JSON Schema; "json"), a tool-call history,
//    generate's `context` given back and continued, and the errors (mirostat, template, another
//    model, a bad context);
//  * over plain HTTP: the NDJSON framing (content type, one object per line, the last one done),
//    ollama's {"error": "..."} objects naming the field, and the options kvrun refuses; suffix
//    gives what /infill gives for the same prefix and suffix; `context` returned (the prompt's
//    and the reply's ids) and continued from, as /completion with those ids does;
//  * in process: a Hermes reply with a call, streamed a byte at a time through the NDJSON chunks,
//    adds up to the whole message; tool-call arguments are objects.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "serve_chat.h"
#include "serve_ollama.h"
#include "serve_process.h"
#include "test_util.h"

namespace kvrun {
namespace {

using nlohmann::json;
using namespace serve_test;

constexpr const char* kQwen25 = "templates/Qwen-Qwen2.5-7B-Instruct.jinja";

TEST(ServeOllama, OfficialNodeClient) {
  // A template with tool calls (Hermes), so that the tool-call history renders.
  KVRUN_REQUIRE_FIXTURE(kQwen25);
  START_SERVER(srv, "-c", "1024", "-np", "2", "--chat-template", test::fixture(kQwen25).string());
  const std::string node_modules = KVRUN_NODE_MODULES;
  if (test::run_command("command -v node").exit_code != 0) GTEST_SKIP() << "node is not installed";
  if (!std::filesystem::exists(std::filesystem::path(node_modules) / "ollama"))
    GTEST_SKIP() << "the ollama npm package is not installed in " << node_modules;
  const auto r = test::run_command("NODE_PATH='" + node_modules + "' node '" +
                                   std::string(KVRUN_SERVE_SCRIPTS) + "/ollama_client.cjs' '" +
                                   srv.url() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err << "\n" << srv.log();
  const json j = json::parse(r.out);
  EXPECT_EQ(j["model"], "stories260K-F32:latest");  // /api/tags's name, used by the client
  EXPECT_FALSE(j["chat_whole"].get<std::string>().empty()) << j;
  EXPECT_EQ(j["chat_streamed"], j["chat_whole"]);  // greedy: the same text both ways
  EXPECT_GT(j["chat_parts"].get<int>(), 1) << j;
  EXPECT_EQ(j["gen_streamed"], j["gen_whole"]);
  EXPECT_GT(j["gen_parts"].get<int>(), 1) << j;
  for (const char* key : {"chat_whole_final", "chat_stream_final", "gen_stream_final"}) {
    const json& f = j[key];
    EXPECT_EQ(f["done"], true) << key << j;
    EXPECT_TRUE(f["done_reason"] == "stop" || f["done_reason"] == "length") << key << j;
    EXPECT_GE(f["eval_count"].get<int>(), 1) << key << j;
    EXPECT_LE(f["eval_count"].get<int>(), 24) << key << j;
    EXPECT_GT(f["prompt_eval_count"].get<int>(), 1) << key << j;
    EXPECT_GE(f["total_duration"].get<int64_t>(), f["eval_duration"].get<int64_t>()) << key << j;
  }
  EXPECT_EQ(j["chat_whole_final"]["eval_count"], j["chat_stream_final"]["eval_count"]);
  EXPECT_EQ(j["short"]["eval_count"], 5) << j;  // num_predict
  EXPECT_EQ(j["short"]["done_reason"], "length") << j;
  // format as a schema: a finished reply is an object of that shape.
  EXPECT_EQ(j["schema_done_reason"], "stop") << j;
  const json person = json::parse(j["schema_content"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(person.is_object()) << j;
  EXPECT_TRUE(person["name"].is_string() && person["age"].is_number_integer()) << person;
  // format "json": an object (when it ended within num_predict), else its start.
  const std::string obj = j["json_response"];
  if (j["json_done_reason"] == "stop")
    EXPECT_TRUE(json::parse(obj, nullptr, false).is_object()) << obj;
  else
    EXPECT_EQ(obj.rfind('{', 0), 0u) << obj;
  EXPECT_EQ(j["tools_reply"]["role"], "assistant");
  // context: prompt + reply ids, then the next call's context begins with it and holds its
  // prompt and reply too.
  const json& cx = j["context"];
  const auto first = cx["first"].get<std::vector<int32_t>>();
  EXPECT_EQ(first.size(),
            cx["first_prompt_eval_count"].get<size_t>() + cx["first_eval_count"].get<size_t>())
      << cx;
  const auto next = cx["next"].get<std::vector<int32_t>>();
  ASSERT_GT(next.size(), first.size()) << cx;
  EXPECT_EQ(std::vector<int32_t>(next.begin(), next.begin() + long(first.size())), first);
  EXPECT_GT(cx["next_prompt_eval_count"].get<size_t>(), first.size()) << cx;
  EXPECT_EQ(j["bad_context"]["status"], 400) << j;
  EXPECT_EQ(j["bad_context"]["error"], "'context' holds token id -1 outside [0, 512)") << j;
  EXPECT_EQ(j["mirostat"]["status"], 400) << j;
  EXPECT_NE(j["mirostat"]["error"].get<std::string>().find("options.mirostat"), std::string::npos);
  EXPECT_EQ(j["template"]["status"], 400) << j;
  EXPECT_EQ(j["unknown"]["status"], 404) << j;
  expect_clean_exit(srv);
}

/// The NDJSON lines of a streamed POST.
std::vector<json> ndjson_lines(httplib::Client& c, const std::string& path, const json& body,
                               std::string* content_type) {
  std::string raw;
  auto r = post_stream(c, path, body.dump(), [&](const char* d, size_t n) {
    raw.append(d, n);
    return true;
  });
  EXPECT_TRUE(r);
  if (!r) return {};
  EXPECT_EQ(r->status, 200) << raw;
  *content_type = r->get_header_value("Content-Type");
  std::vector<json> out;
  for (size_t at = 0, eol; (eol = raw.find('\n', at)) != std::string::npos; at = eol + 1) {
    out.push_back(json::parse(raw.substr(at, eol - at), nullptr, false));
    EXPECT_TRUE(out.back().is_object()) << raw.substr(at, eol - at);
  }
  EXPECT_EQ(raw.back(), '\n');
  return out;
}

TEST(ServeOllama, NdjsonFramingAndErrors) {
  START_SERVER(srv, "-c", "256", "-np", "1");
  auto c = srv.client();
  std::string type;
  const json gen = {{"model", "stories260K-F32:latest"},
                    {"prompt", "Once upon a time"},
                    {"options", {{"temperature", 0}, {"num_predict", 12}}}};  // stream: default
  const auto lines = ndjson_lines(*c, "/api/generate", gen, &type);
  EXPECT_EQ(type, "application/x-ndjson");
  ASSERT_GE(lines.size(), 2u);
  std::string text;
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["model"], "stories260K-F32:latest");  // the request's name
    EXPECT_EQ(lines[i]["done"], i + 1 == lines.size()) << lines[i];
    EXPECT_TRUE(lines[i]["created_at"].get<std::string>().ends_with("Z")) << lines[i];
    text += lines[i]["response"].get<std::string>();
  }
  EXPECT_EQ(lines.back()["eval_count"], 12);
  json whole = gen;
  whole["stream"] = false;
  json j = post_json(*c, "/api/generate", whole, 200);
  EXPECT_EQ(j["response"], text);
  EXPECT_EQ(j["done_reason"], "length");
  // num_predict 0: the prompt only; no prompt: ollama's "load" answer.
  whole["options"]["num_predict"] = 0;
  j = post_json(*c, "/api/generate", whole, 200);
  EXPECT_EQ(j["response"], "");
  EXPECT_EQ(j["eval_count"], 0);
  j = post_json(*c, "/api/generate", {{"model", "stories260K-F32"}}, 200);
  EXPECT_EQ(j["done_reason"], "load");

  auto error_of = [&](const std::string& path, json body, int status) {
    body["stream"] = false;
    const json e = post_json(*c, path, body, status);
    EXPECT_TRUE(e["error"].is_string()) << e;  // ollama's form: a string, not an object
    return e["error"].is_string() ? e["error"].get<std::string>() : std::string();
  };
  const json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  EXPECT_EQ(error_of("/api/chat", {{"model", "other"}, {"messages", msgs}}, 404),
            "model 'other' not found (this server has stories260K-F32)");
  EXPECT_EQ(
      error_of("/api/generate",
               {{"model", "stories260K-F32"}, {"prompt", "x"}, {"options", {{"num_ctx", 4096}}}},
               400),
      "'options.num_ctx' is larger than the server's context (n_ctx = 256; start it with a "
      "larger -c)");
  EXPECT_EQ(
      error_of("/api/generate",
               {{"model", "stories260K-F32"}, {"prompt", "x"}, {"options", {{"foo", 1}}}}, 400),
      "'options.foo' is not an option kvrun knows");
  EXPECT_EQ(error_of("/api/generate",
                     {{"model", "stories260K-F32"}, {"prompt", "x"}, {"format", "xml"}}, 400),
            "'format' must be \"json\" or a JSON Schema object");
  EXPECT_EQ(error_of("/api/chat",
                     {{"model", "stories260K-F32"},
                      {"messages", msgs},
                      {"format", {{"type", "string"}, {"format", "email"}}}},
                     400)
                .rfind("'format'", 0),
            0u);
  EXPECT_EQ(
      error_of("/api/generate",
               {{"model", "stories260K-F32"}, {"prompt", "x"}, {"images", json::array({"aGk="})}},
               400),
      "'images' is not supported by kvrun");
  // stories260K has no FIM tokens: suffix is refused, naming it.
  EXPECT_EQ(error_of("/api/generate",
                     {{"model", "stories260K-F32"}, {"prompt", "x"}, {"suffix", "y"}}, 400)
                .rfind("'suffix' needs a model with fill-in-the-middle tokens", 0),
            0u);
  // Ignored options are accepted; the off values of samplers kvrun lacks too.
  j = post_json(*c, "/api/generate",
                {{"model", "stories260K-F32"},
                 {"prompt", "x"},
                 {"stream", false},
                 {"keep_alive", "5m"},
                 {"options",
                  {{"num_thread", 8},
                   {"num_gpu", 99},
                   {"typical_p", 1.0},
                   {"mirostat", 0},
                   {"num_predict", 2},
                   {"num_ctx", 256}}}},
                200);
  EXPECT_EQ(j["eval_count"], 2) << j;
  expect_clean_exit(srv);
}

TEST(ServeOllama, SuffixIsTheInfillPrompt) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  const auto fim_model = (dir / "fim.gguf").string();
  write_fim_fixture(fim_model);
  ServerProcess srv({"-c", "128"}, fim_model);
  ASSERT_TRUE(srv.ok()) << srv.log();
  auto c = srv.client();
  // The reference: llama.cpp's /infill with the same prefix and suffix, greedy.
  const json ref = post_json(*c, "/infill",
                             {{"input_prefix", "Once upon"},
                              {"input_suffix", "the end."},
                              {"n_predict", 6},
                              {"temperature", 0}},
                             200);
  const json j = post_json(*c, "/api/generate",
                           {{"model", "fim"},
                            {"prompt", "Once upon"},
                            {"suffix", "the end."},
                            {"stream", false},
                            {"options", {{"num_predict", 6}, {"temperature", 0}}}},
                           200);
  EXPECT_GT(j["eval_count"].get<int>(), 0) << j;
  EXPECT_EQ(j["response"], ref["content"]);
  EXPECT_EQ(j["prompt_eval_count"], ref["tokens_evaluated"]);
  EXPECT_EQ(j["eval_count"], ref["tokens_predicted"]);
  expect_clean_exit(srv);
}

TEST(ServeOllama, ContextContinuesAGeneration) {
  START_SERVER(srv, "-c", "256", "-np", "1");
  auto c = srv.client();
  const auto ids = [&](const std::string& text, bool bos) {
    return post_json(*c, "/tokenize", {{"content", text}, {"add_special", bos}}, 200)["tokens"]
        .get<std::vector<int32_t>>();
  };
  const json greedy = {{"temperature", 0}, {"num_predict", 8}};
  const json g1 = post_json(*c, "/api/generate",
                            {{"model", "stories260K-F32"},
                             {"prompt", "Once upon a time"},
                             {"stream", false},
                             {"options", greedy}},
                            200);
  // `context`: the prompt's ids, then the generated ones (llama.cpp's /completion: the same
  // greedy tokens).
  const json ref1 = post_json(*c, "/completion",
                              {{"prompt", "Once upon a time"},
                               {"n_predict", 8},
                               {"temperature", 0},
                               {"return_tokens", true}},
                              200);
  std::vector<int32_t> want = ids("Once upon a time", true);
  for (const auto& t : ref1["tokens"]) want.push_back(t.get<int32_t>());
  const auto ctx1 = g1["context"].get<std::vector<int32_t>>();
  EXPECT_EQ(ctx1, want) << g1.dump();
  // The next call continues from it: its prompt (without BOS) after the context, streamed; the
  // final line carries the longer context.
  std::string type;
  const auto lines = ndjson_lines(*c, "/api/generate",
                                  {{"model", "stories260K-F32"},
                                   {"prompt", " The end"},
                                   {"context", ctx1},
                                   {"options", greedy}},
                                  &type);
  ASSERT_FALSE(lines.empty());
  std::string text;
  for (const auto& l : lines) text += l["response"].get<std::string>();
  std::vector<int32_t> prompt2 = ctx1;
  for (int32_t id : ids(" The end", false)) prompt2.push_back(id);
  const json ref2 = post_json(*c, "/completion",
                              {{"prompt", prompt2}, {"n_predict", 8}, {"temperature", 0}}, 200);
  EXPECT_EQ(text, ref2["content"]);
  EXPECT_EQ(lines.back()["prompt_eval_count"], prompt2.size());
  const auto ctx2 = lines.back()["context"].get<std::vector<int32_t>>();
  ASSERT_GT(ctx2.size(), prompt2.size());
  EXPECT_EQ(std::vector<int32_t>(ctx2.begin(), ctx2.begin() + long(prompt2.size())), prompt2);
  // raw: no context returned (as ollama); a bad context is a 400 naming it.
  json j = post_json(*c, "/api/generate",
                     {{"model", "stories260K-F32"},
                      {"prompt", "Once"},
                      {"raw", true},
                      {"stream", false},
                      {"options", {{"num_predict", 2}}}},
                     200);
  EXPECT_FALSE(j.contains("context")) << j;
  j = post_json(
      *c, "/api/generate",
      {{"model", "stories260K-F32"}, {"prompt", "x"}, {"stream", false}, {"context", {1, 512}}},
      400);
  EXPECT_EQ(j["error"], "'context' holds token id 512 outside [0, 512)");
  j = post_json(*c, "/api/generate",
                {{"model", "stories260K-F32"},
                 {"prompt", "x"},
                 {"stream", false},
                 {"context", std::vector<int32_t>(255, 5)}},
                400);
  EXPECT_EQ(j["error"].get<std::string>().rfind("'context' (255 tokens) and the prompt", 0), 0u)
      << j;
  j = post_json(*c, "/api/chat",
                {{"model", "stories260K-F32"},
                 {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                 {"stream", false},
                 {"context", {1}}},
                400);
  EXPECT_EQ(j["error"], "'context' belongs to /api/generate (a chat continues with its messages)");
  expect_clean_exit(srv);
}

// ---- in process: a reply with a call, streamed and whole ----

TEST(ServeOllama, StreamedChatChunksAddUpToTheWholeMessage) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const Tokenizer tok = Tokenizer::from_gguf(gguf::File::open(test::fixture(kModel).string()));
  tools::ApiContext ctx;
  ctx.chat = ChatTemplate::parse(
      "{% for m in messages %}{{ m.content }}{% endfor %}{% if tools %}<tool_call>{% endif %}", "t",
      {});
  ctx.model_name = "m";
  ctx.n_ctx = 4096;
  ctx.tok = &tok;
  const json body = json::parse(R"({"model": "m", "messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
        "arguments": {"city": "Rome"}}}]},
      {"role": "tool", "content": "18", "tool_name": "get_weather"}],
    "tools": [{"type": "function", "function": {"name": "get_weather"}}],
    "options": {"temperature": 0, "top_k": 5, "stop": ["END"], "num_predict": 9}})");
  tools::ApiRequest whole_req = tools::parse_ollama_chat(body, ctx);
  EXPECT_TRUE(whole_req.stream);  // ollama's default
  EXPECT_EQ(whole_req.params.sampling.temp, 0.0f);
  EXPECT_EQ(whole_req.params.sampling.top_k, 5);
  EXPECT_EQ(whole_req.params.n_predict, 9);
  EXPECT_EQ(whole_req.params.stop, std::vector<std::string>{"END"});

  const std::string reply =
      "Checking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  RequestResult res;
  res.text = reply;
  res.finish = FinishReason::kEog;
  res.n_prompt = 7;
  res.tokens = {1, 2, 3};
  res.gen_ms = 2.5;
  const json whole = tools::response_json(whole_req, res, {}, ctx, "id", 0);
  EXPECT_EQ(whole["message"]["content"], "Checking.");
  ASSERT_EQ(whole["message"]["tool_calls"].size(), 1u) << whole;
  EXPECT_EQ(whole["message"]["tool_calls"][0]["function"],
            json({{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}));
  EXPECT_EQ(whole["done_reason"], "stop");
  EXPECT_EQ(whole["eval_count"], 3);
  EXPECT_EQ(whole["prompt_eval_count"], 7);
  EXPECT_EQ(whole["eval_duration"], 2500000);

  tools::ApiRequest s = tools::parse_ollama_chat(body, ctx);
  std::string content;
  json calls = json::array();
  auto take = [&](const json& line) {
    content += line["message"]["content"].get<std::string>();
    for (const json& c : line["message"].value("tool_calls", json::array())) calls.push_back(c);
  };
  for (char ch : reply) {
    TokenEvent ev;
    ev.text = std::string(1, ch);
    if (auto line = tools::stream_chunk_json(s, ev, ctx, "id", 0)) {
      EXPECT_EQ((*line)["done"], false);
      take(*line);
    }
  }
  RequestResult end = res;
  end.tail.clear();
  const auto last = tools::stream_end_json(s, end, ctx, "id", 0);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0]["done"], true);
  take(last[0]);
  EXPECT_EQ(content, whole["message"]["content"]);
  EXPECT_EQ(calls, whole["message"]["tool_calls"]);
}

}  // namespace
}  // namespace kvrun
