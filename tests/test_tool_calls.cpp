// test_tool_calls.cpp — tool-call and reasoning parsing of chat replies (src/text/tool_calls.h):
// per format, hand-written model outputs in each family's documented syntax give the expected
// calls, whole and fed in 1-byte chunks (the same calls and the same text either way); text that
// is not a call is left as content; the format is chosen from the real chat templates.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "text/tool_calls.h"

namespace kvrun {
namespace {

using json = nlohmann::json;

/// A whole parse, joined.
ChatDelta whole(ToolCallFormat f, const std::string& text, bool thinking_open = false,
                ReasoningFormat r = ReasoningFormat::kDeepseek) {
  return ChatOutputParser(f, r, thinking_open).parse_all(text);
}

/// The same text fed one byte at a time, deltas joined.
ChatDelta bytewise(ToolCallFormat f, const std::string& text, bool thinking_open = false,
                   ReasoningFormat r = ReasoningFormat::kDeepseek) {
  ChatOutputParser p(f, r, thinking_open);
  ChatDelta out;
  auto add = [&](ChatDelta d) {
    out.content += d.content;
    out.reasoning += d.reasoning;
    for (auto& c : d.calls) out.calls.push_back(c);
  };
  for (char c : text) add(p.feed(std::string(1, c)));
  add(p.finish());
  return out;
}

struct Call {
  std::string name;
  json args;
};

/// Expects `d` to hold exactly `calls` (arguments compared as JSON), `content` and `reasoning`.
void expect_delta(const ChatDelta& d, const std::vector<Call>& calls, const std::string& content,
                  const std::string& reasoning = "") {
  EXPECT_EQ(d.content, content);
  EXPECT_EQ(d.reasoning, reasoning);
  ASSERT_EQ(d.calls.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(d.calls[i].name, calls[i].name);
    EXPECT_EQ(json::parse(d.calls[i].arguments), calls[i].args) << d.calls[i].arguments;
  }
}

/// Both ways of feeding give `calls`, `content` and `reasoning`.
void expect_parse(ToolCallFormat f, const std::string& text, const std::vector<Call>& calls,
                  const std::string& content, const std::string& reasoning = "",
                  bool thinking_open = false) {
  SCOPED_TRACE(std::string(tool_call_format_name(f)) + ": " + text);
  expect_delta(whole(f, text, thinking_open), calls, content, reasoning);
  expect_delta(bytewise(f, text, thinking_open), calls, content, reasoning);
}

const json kParis = {{"city", "Paris"}, {"unit", "celsius"}};

TEST(ToolCalls, Hermes) {
  expect_parse(ToolCallFormat::kHermes,
               "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
               "\"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
               {{"get_weather", kParis}}, "Let me check.\n");
  expect_parse(ToolCallFormat::kHermes,
               "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
               "{\"name\": \"b\", \"arguments\": {\"q\": \"x </tool_call> y\"}}\n</tool_call>",
               {{"a", json::object()}, {"b", {{"q", "x </tool_call> y"}}}}, "\n");
}

TEST(ToolCalls, HermesWithQwen3CoderXmlAndGlmBodies) {
  expect_parse(ToolCallFormat::kHermes,
               "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
               "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
               {{"get_weather", {{"city", "Paris"}, {"days", 3}}}}, "");
  expect_parse(ToolCallFormat::kHermes,
               "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
               "<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>",
               {{"get_weather", kParis}}, "");
}

TEST(ToolCalls, Llama3) {
  expect_parse(ToolCallFormat::kLlama3,
               "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": "
               "\"celsius\"}}",
               {{"get_weather", kParis}}, "");
  expect_parse(ToolCallFormat::kLlama3,
               "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"query\": \"a {b}\"}}",
               {{"search", {{"query", "a {b}"}}}}, "");
  // A JSON reply that is not a call stays content; so does text that merely mentions braces.
  expect_parse(ToolCallFormat::kLlama3, "{\"answer\": 42}", {}, "{\"answer\": 42}");
  expect_parse(ToolCallFormat::kLlama3, "Use {x} here.", {}, "Use {x} here.");
}

TEST(ToolCalls, Mistral) {
  expect_parse(ToolCallFormat::kMistral,
               "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
               "\"unit\": \"celsius\"}}, {\"name\": \"search\", \"arguments\": {\"query\": "
               "\"rain\"}}]",
               {{"get_weather", kParis}, {"search", {{"query", "rain"}}}}, "");
  expect_parse(ToolCallFormat::kMistral,
               "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"celsius\"}",
               {{"get_weather", kParis}}, "Sure.");
}

TEST(ToolCalls, DeepSeek) {
  const std::string b = "<\xef\xbd\x9ctool\xe2\x96\x81", e = "\xef\xbd\x9c>";
  const std::string calls_begin = b +
                                  "calls\xe2\x96\x81"
                                  "begin" +
                                  e,
                    calls_end = b +
                                "calls\xe2\x96\x81"
                                "end" +
                                e,
                    call_begin = b +
                                 "call\xe2\x96\x81"
                                 "begin" +
                                 e,
                    call_end = b +
                               "call\xe2\x96\x81"
                               "end" +
                               e,
                    sep = b + "sep" + e;
  // V3 / R1: "function", the name, fenced JSON.
  expect_parse(ToolCallFormat::kDeepSeek,
               "<think>Weather needed.</think>\n\n" + calls_begin + call_begin + "function" + sep +
                   "get_weather\n```json\n{\"city\": \"Paris\", \"unit\": \"celsius\"}\n```" +
                   call_end + calls_end,
               {{"get_weather", kParis}}, "", "Weather needed.");
  // V3.1: name<sep>arguments; two calls.
  expect_parse(ToolCallFormat::kDeepSeek,
               "ok" + calls_begin + call_begin + "a" + sep + "{}" + call_end + call_begin + "b" +
                   sep + "{\"x\": [1, 2]}" + call_end + calls_end,
               {{"a", json::object()}, {"b", {{"x", {1, 2}}}}}, "ok");
}

TEST(ToolCalls, GraniteCommandRFunctionary) {
  expect_parse(ToolCallFormat::kGranite,
               "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
               "\"unit\": \"celsius\"}}]",
               {{"get_weather", kParis}}, "");
  expect_parse(ToolCallFormat::kCommandR,
               "I will look it up.<|START_ACTION|>[\n{\"tool_call_id\": \"0\", \"tool_name\": "
               "\"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": "
               "\"celsius\"}}\n]<|END_ACTION|>",
               {{"get_weather", kParis}}, "I will look it up.");
  expect_parse(ToolCallFormat::kFunctionaryV31,
               "<function=get_weather>{\"city\": \"Paris\", \"unit\": \"celsius\"}</function>",
               {{"get_weather", kParis}}, "");
}

TEST(ToolCalls, KimiK2) {
  expect_parse(ToolCallFormat::kKimiK2,
               "On it.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
               "<|tool_call_argument_begin|>{\"city\": \"Paris\", \"unit\": \"celsius\"}"
               "<|tool_call_end|><|tool_call_begin|>functions.search:1<|tool_call_argument_begin|>"
               "{\"query\": \"rain\"}<|tool_call_end|><|tool_calls_section_end|>",
               {{"get_weather", kParis}, {"search", {{"query", "rain"}}}}, "On it.");
}

// gpt-oss: analysis is reasoning, final is content, a message to functions.N is a call.
TEST(ToolCalls, Harmony) {
  expect_parse(ToolCallFormat::kHarmony,
               "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant"
               "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
               "{\"city\": \"Paris\", \"unit\": \"celsius\"}<|call|>",
               {{"get_weather", kParis}}, "", "Need the weather.");
  expect_parse(ToolCallFormat::kHarmony,
               "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final"
               "<|message|>Paris is <b>sunny</b>.<|return|>",
               {}, "Paris is <b>sunny</b>.", "Think.");
  // The recipient in the role part; the end tokens themselves may be missing (stripped EOG).
  expect_parse(ToolCallFormat::kHarmony,
               "<|channel|>final<|message|>Calling.<|end|><|start|>assistant to=functions.search"
               "<|channel|>commentary json<|message|>{\"query\": \"x\"}",
               {{"search", {{"query", "x"}}}}, "Calling.");
  // Text without harmony headers is content.
  expect_parse(ToolCallFormat::kHarmony, "plain text", {}, "plain text");
}

// functionary v3.2: the prompt ends with ">>>"; segments name their recipient.
TEST(ToolCalls, FunctionaryV32) {
  expect_parse(ToolCallFormat::kFunctionaryV32,
               "all\nLet me check.>>>get_weather\n{\"city\": \"Paris\", \"unit\": \"celsius\"}"
               ">>>search\n{\"query\": \"rain\"}",
               {{"get_weather", kParis}, {"search", {{"query", "rain"}}}}, "Let me check.");
  expect_parse(ToolCallFormat::kFunctionaryV32, "all\nJust text, 2 > 1.", {}, "Just text, 2 > 1.");
  expect_parse(ToolCallFormat::kFunctionaryV32, "get_weather\nnot json", {},
               ">>>get_weather\nnot json");
}

TEST(ToolCalls, ReasoningGoesToReasoningContent) {
  expect_parse(ToolCallFormat::kNone, "<think>\nHmm.\n</think>\n\nParis.", {}, "Paris.",
               "\nHmm.\n");
  // The prompt opened <think>: the reply starts inside it.
  expect_parse(ToolCallFormat::kHermes,
               "Need a tool.</think>\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n"
               "</tool_call>",
               {{"a", json::object()}}, "", "Need a tool.", true);
  // --reasoning-format none: everything is content.
  const std::string text = "<think>x</think>y";
  const ChatDelta d = whole(ToolCallFormat::kNone, text, false, ReasoningFormat::kNone);
  EXPECT_EQ(d.content, text);
  EXPECT_EQ(d.reasoning, "");
  // A <think> after the reply started is content.
  expect_parse(ToolCallFormat::kNone, "a <think>b</think>", {}, "a <think>b</think>");
}

TEST(ToolCalls, MalformedCallsStayContent) {
  expect_parse(ToolCallFormat::kHermes, "<tool_call>not json</tool_call> after", {},
               "<tool_call>not json</tool_call> after");
  expect_parse(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"a\", \"arguments\": {", {},
               "<tool_call>{\"name\": \"a\", \"arguments\": {");
  expect_parse(ToolCallFormat::kMistral, "[TOOL_CALLS] oops", {}, "[TOOL_CALLS] oops");
  expect_parse(ToolCallFormat::kNone, "<tool_call>{\"name\": \"a\"}</tool_call>", {},
               "<tool_call>{\"name\": \"a\"}</tool_call>");
  // A partial marker at the very end is released at finish.
  expect_parse(ToolCallFormat::kHermes, "text <tool_ca", {}, "text <tool_ca");
}

// While a marker may be starting, nothing is released; the rest streams at once.
TEST(ToolCalls, StreamingHoldsBackOnlyPossibleMarkers) {
  ChatOutputParser p(ToolCallFormat::kHermes, ReasoningFormat::kDeepseek, false);
  EXPECT_EQ(p.feed("Hello ").content, "Hello ");
  EXPECT_EQ(p.feed("wor").content, "wor");
  EXPECT_EQ(p.feed("ld <tool").content, "ld ");
  EXPECT_EQ(p.feed("_call>{\"name\": \"f\", \"arguments\": {}}").content, "");
  const ChatDelta d = p.feed("</tool_call>");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "f");
  EXPECT_TRUE(p.finish().empty());
}

std::string read_template(const std::string& name) {
  std::ifstream f(test::fixture("templates/" + name + ".jinja"), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ToolCalls, FormatIsChosenFromTheTemplate) {
  KVRUN_REQUIRE_FIXTURE("templates");
  const std::vector<std::pair<const char*, ToolCallFormat>> cases = {
      {"Qwen-Qwen2.5-7B-Instruct", ToolCallFormat::kHermes},
      {"Qwen-Qwen3-0.6B", ToolCallFormat::kHermes},
      {"Qwen3-Coder", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolCallFormat::kHermes},
      {"GLM-4.6", ToolCallFormat::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.3-70B-Instruct", ToolCallFormat::kLlama3},
      {"mistralai-Mistral-Nemo-Instruct-2407", ToolCallFormat::kMistral},
      {"Mistral-Small-3.2-24B-Instruct-2506", ToolCallFormat::kMistral},
      {"deepseek-ai-DeepSeek-V3.1", ToolCallFormat::kDeepSeek},
      {"llama-cpp-deepseek-r1", ToolCallFormat::kDeepSeek},
      {"ibm-granite-granite-3.3-2B-Instruct", ToolCallFormat::kGranite},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", ToolCallFormat::kCommandR},
      {"meetkai-functionary-medium-v3.1", ToolCallFormat::kFunctionaryV31},
      {"meetkai-functionary-medium-v3.2", ToolCallFormat::kFunctionaryV32},
      {"moonshotai-Kimi-K2", ToolCallFormat::kKimiK2},
      {"Kimi-K2-Thinking", ToolCallFormat::kKimiK2},
      {"openai-gpt-oss-120b", ToolCallFormat::kHarmony},
      {"google-gemma-2-2b-it", ToolCallFormat::kNone},
  };
  for (const auto& [name, want] : cases)
    EXPECT_EQ(tool_call_format_name(detect_tool_call_format(read_template(name))),
              std::string(tool_call_format_name(want)))
        << name;
}

}  // namespace
}  // namespace kvrun
