// test_serve_chat.cpp — the chat side of `kvrun serve` (tools/serve_chat.h):
//  * end to end on the real binary: POST /apply-template equals Python jinja2 rendering the same
//    conversation (system, user, an assistant tool call, a tool result, tools) with the model's
//    chat template file; a tool round trip through /v1/chat/completions (200, also through the
//    official `openai` npm client, streamed and whole); tool_choice "required", bad fields and a
//    template that raises are 400 with the message; no template: /apply-template is 400;
//  * in process: a hand-written Hermes reply with two calls and reasoning, streamed a byte at a
//    time through stream_chunk_json/stream_end_json, gives OpenAI's delta.tool_calls chunks that
//    add up to the whole response's message.tool_calls, with finish_reason "tool_calls".
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "serve_chat.h"
#include "serve_process.h"
#include "test_util.h"

namespace kvrun {
namespace {

using nlohmann::json;
using namespace serve_test;

constexpr const char* kLlama31 = "templates/meta-llama-Llama-3.1-8B-Instruct.jinja";

/// A conversation with a tool call and its result (arguments as the API sends them: a string).
json tool_conversation() {
  return json::parse(R"({
    "messages": [
      {"role": "system", "content": "Use the tools."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 18}"}],
    "tools": [{"type": "function", "function": {"name": "get_weather",
      "description": "Current weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]})");
}

/// jinja2's rendering of `body` with the template at `path` (tool-call arguments as objects, as
/// llama.cpp passes them), or the error text.
std::string oracle(const std::string& path, const json& body, const std::string& bos,
                   const std::string& eos) {
  json ctx = {{"messages", body["messages"]},
              {"tools", body["tools"]},
              {"add_generation_prompt", true},
              {"bos_token", bos},
              {"eos_token", eos}};
  for (json& m : ctx["messages"])
    if (m.contains("tool_calls"))
      for (json& c : m["tool_calls"])
        c["function"]["arguments"] = json::parse(c["function"]["arguments"].get<std::string>());
  test::TempDir dir;
  std::ofstream(dir / "c.json") << json::array({ctx}).dump();
  const auto r =
      test::run_command("/usr/bin/python3 '" + test::test_data("render_jinja.py").string() + "' '" +
                        path + "' '" + (dir / "c.json").string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const json out = json::parse(r.out, nullptr, false);
  if (!out.is_array() || out.empty() || !out[0]["ok"].get<bool>()) return "ORACLE FAILED: " + r.out;
  return out[0]["text"];
}

bool have_jinja2() {
  return test::run_command("/usr/bin/python3 -c 'import jinja2'").exit_code == 0;
}

TEST(ServeChat, ApplyTemplateMatchesJinja2AndToolsRoundTrip) {
  KVRUN_REQUIRE_FIXTURE(kLlama31);
  const std::string tmpl = test::fixture(kLlama31).string();
  START_SERVER(srv, "-c", "2048", "--chat-template", tmpl);
  auto c = srv.client();
  const json body = tool_conversation();
  const json applied = post_json(*c, "/apply-template", body, 200);
  ASSERT_TRUE(applied["prompt"].is_string()) << applied;
  const std::string prompt = applied["prompt"];
  EXPECT_NE(prompt.find("\"city\": \"Paris\""), std::string::npos) << prompt;  // parsed arguments
  if (have_jinja2()) {
    const Tokenizer tok = Tokenizer::from_gguf(gguf::File::open(test::fixture(kModel).string()));
    EXPECT_EQ(prompt, oracle(tmpl, body, tok.token_text(tok.bos()), tok.token_text(tok.eos())));
  }
  // add_generation_prompt false drops the assistant header at the end.
  json no_gen = body;
  no_gen["add_generation_prompt"] = false;
  const std::string p2 = post_json(*c, "/apply-template", no_gen, 200)["prompt"];
  EXPECT_LT(p2.size(), prompt.size());
  EXPECT_EQ(prompt.rfind(p2, 0), 0u);

  // The tool round trip generates (the tiny model writes no call: content, finish stop/length).
  json req = body;
  req["max_tokens"] = 8;
  req["temperature"] = 0;
  req["tool_choice"] = "auto";
  req["parallel_tool_calls"] = false;
  const json res = post_json(*c, "/v1/chat/completions", req, 200);
  EXPECT_EQ(res["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(res["choices"][0]["message"]["content"].is_string()) << res;
  EXPECT_NE(res["choices"][0]["finish_reason"], "tool_calls");

  auto expect_400 = [&](const std::string& path, const json& b, const std::string& words) {
    const json e = post_json(*c, path, b, 400);
    EXPECT_NE(e["error"]["message"].get<std::string>().find(words), std::string::npos) << e;
  };
  // tool_choice "required" / named: the reply is one call by grammar (Llama 3's JSON form here),
  // whatever the model would have said; sampled, so several seeds.
  json required = req;
  required["tools"][0]["function"]["parameters"]["properties"]["city"]["enum"] = {"Paris", "Rome"};
  required["max_tokens"] = 64;
  required["temperature"] = 1.0;
  for (const json& choice :
       {json("required"), json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}})
    for (int seed = 1; seed <= 3; ++seed) {
      required["tool_choice"] = choice;
      required["seed"] = seed;
      const json r = post_json(*c, "/v1/chat/completions", required, 200);
      const json& msg = r["choices"][0]["message"];
      ASSERT_TRUE(msg.contains("tool_calls")) << r;
      EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r;
      EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather") << r;
      const json args =
          json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>());
      EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Rome") << r;
    }
  required["tool_choice"] = {{"type", "function"}, {"function", {{"name", "nope"}}}};
  expect_400("/v1/chat/completions", required, "not in tools");
  required["tool_choice"] = "required";
  required["response_format"] = {{"type", "json_object"}};
  expect_400("/v1/chat/completions", required, "cannot be combined");
  json bad = req;
  bad["chat_template_kwargs"] = "x";
  expect_400("/v1/chat/completions", bad, "chat_template_kwargs");
  bad = req;
  bad["tools"] = json::array({{{"type", "function"}}});
  expect_400("/apply-template", bad, "tools");
  bad = req;
  bad["messages"][2]["tool_calls"][0]["function"].erase("name");
  expect_400("/v1/chat/completions", bad, "function.name");
  // Llama 3.1's template raises on two tool calls in one message: a 400 with its message.
  bad = req;
  bad["messages"][2]["tool_calls"].push_back(bad["messages"][2]["tool_calls"][0]);
  expect_400("/v1/chat/completions", bad, "only supports single tool-calls");
  expect_400("/apply-template", bad, "chat template error: line ");
  expect_clean_exit(srv);
}

TEST(ServeChat, TemplateErrorsAndNoTemplate) {
  {  // a built-in that raises on a system message; kwargs reach the template
    START_SERVER(srv, "-c", "256", "--chat-template", "gemma2");
    auto c = srv.client();
    const json msgs = json::parse(R"([{"role": "system", "content": "s"},
                                      {"role": "user", "content": "hi"}])");
    const json e = post_json(*c, "/v1/chat/completions", {{"messages", msgs}}, 400);
    EXPECT_NE(e["error"]["message"].get<std::string>().find("does not support a system message"),
              std::string::npos)
        << e;
    post_json(*c, "/apply-template", {{"messages", msgs}}, 400);
    const json ok = post_json(*c, "/apply-template", {{"messages", json::array({msgs[1]})}}, 200);
    EXPECT_NE(ok["prompt"].get<std::string>().find("<start_of_turn>user\nhi"), std::string::npos);
    expect_clean_exit(srv);
  }
  {  // a template file that uses a kwarg
    test::TempDir dir;
    const std::string path = (dir / "t.jinja").string();
    std::ofstream(path)
        << "{% for m in messages %}{{ m.role }}:{{ m.content }}\n{% endfor %}"
           "{% if enable_thinking is defined %}think={{ enable_thinking }}{% endif %}";
    START_SERVER(srv, "-c", "256", "--chat-template", path, "--chat-template-kwargs",
                 R"({"enable_thinking": true})");
    auto c = srv.client();
    const json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
    EXPECT_EQ(post_json(*c, "/apply-template", {{"messages", msgs}}, 200)["prompt"],
              "user:hi\nthink=True");
    EXPECT_EQ(
        post_json(*c, "/apply-template",
                  {{"messages", msgs}, {"chat_template_kwargs", {{"enable_thinking", false}}}},
                  200)["prompt"],
        "user:hi\nthink=False");
    expect_clean_exit(srv);
  }
  {  // the fixture model has no chat template
    START_SERVER(srv, "-c", "256");
    auto c = srv.client();
    post_json(*c, "/apply-template",
              {{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}}, 400);
    expect_clean_exit(srv);
  }
}

TEST(ServeChat, OpenAiNodeClientSendsToolsAndToolResults) {
  KVRUN_REQUIRE_FIXTURE(kLlama31);
  START_SERVER(srv, "-c", "2048", "--chat-template", test::fixture(kLlama31).string());
  const std::string node_modules = KVRUN_NODE_MODULES;
  if (test::run_command("command -v node").exit_code != 0) GTEST_SKIP() << "node is not installed";
  if (!std::filesystem::exists(std::filesystem::path(node_modules) / "openai"))
    GTEST_SKIP() << "the openai npm package is not installed in " << node_modules;
  const auto r = test::run_command("NODE_PATH='" + node_modules + "' node '" +
                                   std::string(KVRUN_SERVE_SCRIPTS) + "/openai_tools.cjs' '" +
                                   srv.url() + "/v1'");
  ASSERT_EQ(r.exit_code, 0) << r.err << "\n" << srv.log();
  const json j = json::parse(r.out);
  EXPECT_EQ(j["streamed"], j["whole"]);  // greedy: the same text both ways
  EXPECT_EQ(j["finish_stream"], j["finish_whole"]);
  EXPECT_EQ(j["forced_name"], "get_weather");  // tool_choice "required": a call, by grammar
  EXPECT_TRUE(j["forced_args"]["city"] == "Paris" || j["forced_args"]["city"] == "Rome") << j;
  EXPECT_EQ(j["forced_finish"], "tool_calls");
  EXPECT_TRUE(j["round_trip_finish"].is_string());  // the tool result went back: a reply
  EXPECT_EQ(j["bad_status"], 400);                  // a named function that is not in tools
  expect_clean_exit(srv);
}

// ---- in process: the streamed and whole shapes of a reply with calls ----

using tools::ApiContext;
using tools::ApiRequest;

/// A chat request over a template whose source writes Hermes <tool_call> tags.
ApiRequest hermes_request(ApiContext& ctx) {
  ctx.chat = ChatTemplate::parse(
      "{% for m in messages %}{{ m.content }}{% endfor %}{% if tools %}<tool_call>{% endif %}"
      "<think>\n",
      "t", {});
  ctx.model_name = "m";
  ApiRequest r;
  r.api = tools::Api::kChat;
  json body = tool_conversation();
  tools::render_chat_body(body, ctx, &r.chat_reply);
  return r;
}

const std::string kReply =
    "I should call.</think>\n\nChecking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
    "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
    "{}}\n</tool_call>";

TEST(ServeChat, StreamedToolCallDeltasAddUpToTheWholeMessage) {
  ApiContext ctx;
  ApiRequest r = hermes_request(ctx);
  RequestResult res;
  res.text = kReply;
  res.finish = FinishReason::kEog;
  const json whole = tools::response_json(r, res, {}, ctx, "id", 0);
  const json& msg = whole["choices"][0]["message"];
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(msg["reasoning_content"], "I should call.");  // the prompt ended inside <think>
  EXPECT_EQ(msg["content"], "Checking.\n");  // the newline between the two calls is content
  ASSERT_EQ(msg["tool_calls"].size(), 2u) << msg;
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}}));
  EXPECT_EQ(msg["tool_calls"][1]["function"]["name"], "get_time");
  EXPECT_NE(msg["tool_calls"][0]["id"], msg["tool_calls"][1]["id"]);

  // The same reply streamed one byte per token event.
  ApiRequest s = hermes_request(ctx);
  std::string content, reasoning;
  json calls = json::array();
  auto take = [&](const json& chunk) {
    const json& d = chunk["choices"][0]["delta"];
    content += d.value("content", "");
    reasoning += d.value("reasoning_content", "");
    for (const json& c : d.value("tool_calls", json::array())) {
      EXPECT_EQ(c["index"].get<size_t>(), calls.size()) << c;
      json copy = c;
      copy.erase("index");
      calls.push_back(copy);
    }
  };
  for (char ch : kReply) {
    TokenEvent ev;
    ev.text = std::string(1, ch);
    if (auto chunk = tools::stream_chunk_json(s, ev, ctx, "id", 0)) take(*chunk);
  }
  RequestResult end;
  end.finish = FinishReason::kEog;
  const auto last = tools::stream_end_json(s, end, ctx, "id", 0);
  ASSERT_FALSE(last.empty());
  take(last[0]);
  EXPECT_EQ(last[0]["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(content, msg["content"]);
  EXPECT_EQ(reasoning, msg["reasoning_content"]);
  ASSERT_EQ(calls.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(calls[i]["function"], msg["tool_calls"][i]["function"]);
    EXPECT_EQ(calls[i]["type"], "function");
  }
}

TEST(ServeChat, ParallelToolCallsFalseKeepsTheFirstAndToolChoiceNoneParsesNone) {
  ApiContext ctx;
  ApiRequest r = hermes_request(ctx);
  r.chat_reply->parallel = false;
  RequestResult res;
  res.text = kReply;
  res.finish = FinishReason::kEog;
  json whole = tools::response_json(r, res, {}, ctx, "id", 0);
  EXPECT_EQ(whole["choices"][0]["message"]["tool_calls"].size(), 1u);
  // tool_choice none: the calls stay text.
  json body = tool_conversation();
  body["tool_choice"] = "none";
  ApiRequest n;
  n.api = tools::Api::kChat;
  tools::render_chat_body(body, ctx, &n.chat_reply);
  whole = tools::response_json(n, res, {}, ctx, "id", 0);
  EXPECT_FALSE(whole["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop");
  EXPECT_NE(whole["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>"),
            std::string::npos);
}

}  // namespace
}  // namespace kvrun
