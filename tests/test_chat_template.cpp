// test_chat_template.cpp — kvrun's built-in chat templates (src/text/chat_templates/*.jinja,
// rendered by kvrun's Jinja engine) checked against Jinja2 itself rendering the real templates
// they stand for (tests/data/render_chat_template.py run by Debian's /usr/bin/python3 with
// python3-jinja2, the templates in ../shared/fixtures/templates), and ChatTemplate's errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.h"
#include "text/chat_template.h"

namespace kvrun {
namespace {

namespace fs = std::filesystem;

/// What the test expects of one template file.
struct Expect {
  const char* file;           ///< file name under templates/, without ".jinja"
  const char* family;         ///< the built-in template that renders like it; "" = none
  bool needs_system = false;  ///< the built-in raises without a system message
};

/// Every template of the fixture set.
const std::vector<Expect> kExpect = {
    {"Apertus-8B-Instruct", "apertus"},
    {"Apriel-1.6-15b-Thinker-fixed", "apriel-1.6"},
    {"Bielik-11B-v3.0-Instruct", "chatml-bos"},
    {"ByteDance-Seed-OSS", "seed-oss"},
    {"Cohere2MoE", ""},
    {"CohereForAI-c4ai-command-r-plus-tool_use", ""},
    {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", ""},
    {"GLM-4.6", "glm4.6"},
    {"GLM-4.7-Flash", "glm4.7"},
    {"GLM-5.2", "glm5"},
    {"GigaChat3-10B-A1.8B", ""},
    {"GigaChat3.1-10B-A1.8B", ""},
    {"HuggingFaceTB-SmolLM3-3B", "smollm3", true},
    {"Kimi-K2-Instruct", "kimi-k2-instruct"},
    {"Kimi-K2-Thinking", "kimi-k2-thinking"},
    {"LFM2-8B-A1B", "chatml-bos"},
    {"LFM2.5-Instruct", "chatml-bos"},
    {"MiMo-VL", "mimo"},
    {"MiroThinker", ""},
    {"Mistral-Small-3.2-24B-Instruct-2506", "mistral-v7", true},
    {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nemotron3"},
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", ""},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ""},
    {"Qwen-QwQ-32B", "qwq"},
    {"Qwen-Qwen2.5-7B-Instruct", "qwen2.5"},
    {"Qwen-Qwen3-0.6B", "qwen3"},
    {"Qwen3-Coder", "chatml"},
    {"Qwen3.5-4B", "qwen3.5"},
    {"Reka-Edge", "reka"},
    {"StepFun3.5-Flash", "step3.5"},
    {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "deepseek-r1-distill"},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek-r1-distill-qwen"},
    {"deepseek-ai-DeepSeek-V3.1", "deepseek-v3.1"},
    {"deepseek-ai-DeepSeek-V3.2", "deepseek-v3.2"},
    {"deepseek-ai-DeepSeek-V4", "deepseek-v4"},
    {"fireworks-ai-llama-3-firefunction-v2", ""},
    {"google-gemma-2-2b-it", "gemma2"},
    {"google-gemma-4-31B-it-interleaved", "gemma4"},
    {"google-gemma-4-31B-it", "gemma4"},
    {"ibm-granite-granite-3.3-2B-Instruct", "granite3.3"},
    {"llama-cpp-deepseek-r1", "deepseek-r1"},
    {"llama-cpp-rwkv-world", "rwkv-world"},
    {"meetkai-functionary-medium-v3.1", "functionary-v3.1"},
    {"meetkai-functionary-medium-v3.2", "functionary-v3.2"},
    {"meta-llama-Llama-3.1-8B-Instruct", "llama3.1"},
    {"meta-llama-Llama-3.2-3B-Instruct", "llama3.2"},
    {"meta-llama-Llama-3.3-70B-Instruct", "llama3.1"},
    {"microsoft-Phi-3.5-mini-instruct", "phi3"},
    {"mistralai-Ministral-3-14B-Reasoning-2512", "mistral-v7", true},
    {"mistralai-Mistral-Nemo-Instruct-2407", "mistral-v3-tekken"},
    {"moonshotai-Kimi-K2", "kimi-k2"},
    {"openai-gpt-oss-120b", "gpt-oss"},
    {"stepfun-ai-Step-3.5-Flash", "step3.5"},
    {"unsloth-Apriel-1.5", "apriel-1.5"},
    {"unsloth-mistral-Devstral-Small-2507", "mistral-v7", true},
};

/// The BOS/EOS strings of the models that use each family ("" where the template prints none).
ChatSpecialTokens tokens_for(const std::string& family) {
  if (family.rfind("llama3", 0) == 0 || family.rfind("functionary", 0) == 0)
    return {"<|begin_of_text|>", "<|eot_id|>"};
  if (family.rfind("mistral", 0) == 0) return {"<s>", "</s>"};
  if (family.rfind("gemma", 0) == 0) return {"<bos>", "<eos>"};
  if (family.rfind("deepseek", 0) == 0)
    return {
        "<\xef\xbd\x9c"
        "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
        "<\xef\xbd\x9c"
        "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"};
  if (family == "chatml-bos") return {"<|startoftext|>", "<|im_end|>"};
  if (family == "llama2" || family == "zephyr") return {"<s>", "</s>"};
  if (family.rfind("apriel", 0) == 0 || family == "rwkv-world" || family == "apertus")
    return {"<s>", "</s>"};
  return {"<|bos|>", "<|endoftext|>"};
}

/// The fixed day both kvrun and the oracle use for templates that print today's date.
constexpr const char* kToday = "2026-11-21";

/// A conversation and whether it ends with the generation prompt.
struct Conversation {
  std::string name;
  std::vector<ChatMessage> messages;
  bool add_generation_prompt;
};

/// The sample conversations: multi-turn with and without a system message.
std::vector<Conversation> conversations() {
  const ChatMessage sys{"system", "You are a helpful assistant."};
  const ChatMessage u1{"user", "Hello! Who are you?"};
  const ChatMessage a1{"assistant", "I am an assistant. How can I help?"};
  const ChatMessage u2{"user", "What is 2 + 2?"};
  return {{"system+user+assistant+user", {sys, u1, a1, u2}, true},
          {"user+assistant+user", {u1, a1, u2}, true},
          {"system+user", {sys, u1}, true},
          {"user", {u1}, true},
          {"system+user+assistant, no generation prompt", {sys, u1, a1}, false},
          {"user+assistant+user, no generation prompt", {u1, a1, u2}, false}};
}

/// Whether the built-in is expected to raise on how `conv` ends for `family` (documented limits:
/// these templates write the end of a conversation without a generation prompt specially).
bool refuses_ending(const std::string& family, const Conversation& conv) {
  if (conv.add_generation_prompt) return false;
  if (family == "apriel-1.6") return true;
  const std::set<std::string> no_final_assistant = {"qwen3", "qwen3.5", "step3.5", "apertus",
                                                    "gpt-oss"};
  return no_final_assistant.count(family) && conv.messages.back().role == "assistant";
}

/// Why the oracle cannot run here, or "" when /usr/bin/python3 with jinja2 is available.
std::string oracle_unavailable() {
  if (!fs::exists("/usr/bin/python3")) return "/usr/bin/python3 not found";
  const auto r = test::run_command("/usr/bin/python3 -c 'import jinja2'");
  if (r.exit_code != 0) return "python3-jinja2 is not installed for /usr/bin/python3";
  return "";
}

/// Shell-quotes `s` with single quotes.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// The oracle's request for `conv` (see tests/data/render_chat_template.py).
nlohmann::json oracle_request(const Conversation& conv, const ChatSpecialTokens& tok,
                              const char* today) {
  nlohmann::json req;
  req["messages"] = nlohmann::json::array();
  for (const ChatMessage& m : conv.messages)
    req["messages"].push_back({{"role", m.role}, {"content", m.content}});
  req["add_generation_prompt"] = conv.add_generation_prompt;
  req["bos_token"] = tok.bos;
  req["eos_token"] = tok.eos;
  req["now"] = today;
  return req;
}

/// Runs the oracle script on `template_path` with the request(s) `req` (an object or a list).
test::CommandResult run_oracle(const fs::path& template_path, const nlohmann::json& req,
                               const test::TempDir& dir) {
  const fs::path req_path = dir / "request.json";
  std::ofstream(req_path) << req.dump();
  const std::string script = test::test_data("render_chat_template.py").string();
  return test::run_command("/usr/bin/python3 " + quoted(script) + " " +
                           quoted(template_path.string()) + " " + quoted(req_path.string()));
}

/// Renders `conv` with Jinja2 from `template_path`; sets `raised` when the template raises.
std::string oracle_render(const fs::path& template_path, const Conversation& conv,
                          const ChatSpecialTokens& tok, const test::TempDir& dir, bool* raised,
                          const char* today = kToday) {
  const auto r = run_oracle(template_path, oracle_request(conv, tok, today), dir);
  *raised = r.exit_code == 3;
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 3) << "oracle failed: " << r.err;
  return r.out;
}

/// One conversation rendered by the oracle: the text, or the template's error when it raised.
struct OracleResult {
  std::string text;
  bool raised = false;
};

/// oracle_render for every conversation of `convs` in one run of the oracle script (its list
/// form). Empty, with a test failure, when the oracle itself fails.
std::vector<OracleResult> oracle_render_all(const fs::path& template_path,
                                            const std::vector<Conversation>& convs,
                                            const ChatSpecialTokens& tok,
                                            const test::TempDir& dir) {
  nlohmann::json reqs = nlohmann::json::array();
  for (const Conversation& conv : convs) reqs.push_back(oracle_request(conv, tok, kToday));
  const auto r = run_oracle(template_path, reqs, dir);
  std::vector<OracleResult> out;
  if (r.exit_code != 0) {
    ADD_FAILURE() << "oracle failed: " << r.err;
    return out;
  }
  for (const nlohmann::json& j : nlohmann::json::parse(r.out)) {
    if (j.contains("error"))
      out.push_back({"TEMPLATE_ERROR: " + j["error"].get<std::string>() + "\n", true});
    else
      out.push_back({j.at("text").get<std::string>(), false});
  }
  EXPECT_EQ(out.size(), convs.size());
  return out;
}

/// kvrun's own templates (tests/data/chat_templates/NAME.jinja, written for the families no
/// fixture template covers), checked like the fixtures but not counted among them.
const std::vector<Expect> kOwnTemplates = {
    {"llama2", "llama2"},
    {"zephyr", "zephyr"},
    {"gemma3", "gemma3"},
};

/// Path of one of kvrun's own templates.
fs::path own_template(const char* name) {
  return test::test_data(std::string("chat_templates/") + name + ".jinja");
}

/// Renders `conv` with the built-in template `name` (throws jinja::JinjaError when it raises).
std::string render_builtin(const std::string& name, const Conversation& conv,
                           const ChatSpecialTokens& tok, const char* today = kToday) {
  const auto source = builtin_chat_template(name);
  if (!source) throw std::invalid_argument("no built-in template " + name);
  ChatInputs in;
  in.messages = messages_json(conv.messages);
  in.add_generation_prompt = conv.add_generation_prompt;
  in.today = today;
  return ChatTemplate::parse(std::string(*source), name, tok).render(in);
}

/// Renders every sample conversation of `e` with Jinja2 from `path` and with the built-in
/// template e.family and expects the same text (or the built-in to raise where the oracle raises
/// or where the built-in documents a limit); returns how many renders were compared.
int compare_with_oracle(const fs::path& path, const Expect& e, const test::TempDir& dir) {
  const ChatSpecialTokens tok = tokens_for(e.family);
  const std::vector<Conversation> convs = conversations();
  const std::vector<OracleResult> oracle = oracle_render_all(path, convs, tok, dir);
  if (oracle.size() != convs.size()) return 0;  // the failure is already reported
  int compared = 0;
  for (size_t k = 0; k < oracle.size(); ++k) {
    const Conversation& conv = convs[k];
    SCOPED_TRACE(std::string(e.file) + " (" + e.family + "), " + conv.name);
    const bool raised = oracle[k].raised;
    const std::string& want = oracle[k].text;
    const bool has_system = conv.messages[0].role == "system";
    if (raised || (e.needs_system && !has_system) || refuses_ending(e.family, conv)) {
      EXPECT_THROW(render_builtin(e.family, conv, tok), jinja::JinjaError) << "oracle: " << want;
      continue;
    }
    std::string got;
    try {
      got = render_builtin(e.family, conv, tok);
    } catch (const std::exception& ex) {
      ADD_FAILURE() << "the built-in template raised: " << ex.what();
      continue;
    }
    EXPECT_EQ(got, want);
    ++compared;
  }
  return compared;
}

/// The text of a template file.
std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ChatTemplate, EveryFixtureTemplateIsInTheTable) {
  KVRUN_REQUIRE_FIXTURE("templates");
  std::set<std::string> listed;
  for (const Expect& e : kExpect) listed.insert(e.file);
  size_t n = 0;
  for (const auto& entry : fs::directory_iterator(test::fixture("templates"))) {
    if (entry.path().extension() != ".jinja") continue;
    ++n;
    EXPECT_TRUE(listed.count(entry.path().stem().string())) << entry.path();
  }
  EXPECT_EQ(n, kExpect.size());
}

// Every model template of the fixture set parses as a ChatTemplate (rendering is compared with
// Jinja2 in test_jinja).
TEST(ChatTemplate, EveryFixtureTemplateParses) {
  KVRUN_REQUIRE_FIXTURE("templates");
  for (const Expect& e : kExpect) {
    const std::string jinja =
        read_file(test::fixture(std::string("templates/") + e.file + ".jinja"));
    EXPECT_NO_THROW(ChatTemplate::parse(jinja, e.file, {"<s>", "</s>"})) << e.file;
  }
}

TEST(ChatTemplate, BuiltinsRenderLikeTheRealTemplates) {
  KVRUN_REQUIRE_FIXTURE("templates");
  if (const std::string why = oracle_unavailable(); !why.empty()) GTEST_SKIP() << why;
  test::TempDir dir;
  int compared = 0;
  for (const Expect& e : kExpect) {
    if (!*e.family) continue;
    compared +=
        compare_with_oracle(test::fixture(std::string("templates/") + e.file + ".jinja"), e, dir);
  }
  EXPECT_GT(compared, 0);
}

TEST(ChatTemplate, OwnTemplatesRenderMatchesJinja2) {
  if (const std::string why = oracle_unavailable(); !why.empty()) GTEST_SKIP() << why;
  test::TempDir dir;
  for (const Expect& e : kOwnTemplates) {
    // Every conversation shape renders with these families (none raises or is refused).
    EXPECT_EQ(compare_with_oracle(own_template(e.file), e, dir),
              static_cast<int>(conversations().size()))
        << e.file;
  }
}

// Llama 2 trims each turn, and the first turn's system block and user text as one string: space
// at the edges of the system message (inside <<SYS>>) and of the user text (toward [INST]) stays.
TEST(ChatTemplate, Llama2TrimsLikeJinja2) {
  if (const std::string why = oracle_unavailable(); !why.empty()) GTEST_SKIP() << why;
  test::TempDir dir;
  const ChatSpecialTokens tok = tokens_for("llama2");
  const Conversation conv{"whitespace at the edges",
                          {{"system", " \n Be brief. \n"},
                           {"user", "\t Hi there \n"},
                           {"assistant", "  Hello.  "},
                           {"user", " \nAnd you? "}},
                          true};
  bool raised = false;
  const std::string want = oracle_render(own_template("llama2"), conv, tok, dir, &raised);
  ASSERT_FALSE(raised) << want;
  EXPECT_EQ(render_builtin("llama2", conv, tok), want);
  EXPECT_EQ(want,
            "<s>[INST] <<SYS>>\n \n Be brief. \n\n<</SYS>>\n\n\t Hi there [/INST] Hello. </s>"
            "<s>[INST] And you? [/INST]");
}

TEST(ChatTemplate, NamesAreSortedUniqueAndRenderable) {
  const auto names = chat_template_names();
  ASSERT_GE(names.size(), 42u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  const Conversation conv{"s+u", {{"system", "S"}, {"user", "U"}}, true};
  for (const std::string& n : names) {
    if (n == "gemma2") continue;  // raises on a system message, checked below
    const std::string out = render_builtin(n, conv, {"<B>", "<E>"}, "2026-03-05");
    EXPECT_NE(out.find('U'), std::string::npos) << n;
  }
}

/// The message of the JinjaError that rendering `messages` with built-in `name` raises, or "".
std::string raised(const std::string& name, std::vector<ChatMessage> messages,
                   const char* today = kToday) {
  try {
    render_builtin(name, {"", std::move(messages), true}, {"<bos>", "<eos>"}, today);
  } catch (const jinja::JinjaError& e) {
    EXPECT_GT(e.line(), 0) << e.what();
    return e.message();
  }
  return "";
}

TEST(ChatTemplate, BuiltinsRaiseWhatTheyCannotExpress) {
  EXPECT_NE(raised("gemma2", {{"system", "s"}, {"user", "hi"}}).find("system message"),
            std::string::npos);
  EXPECT_NE(raised("chatml", {{"user", "hi"}, {"system", "late"}}).find("must be first"),
            std::string::npos);
  EXPECT_NE(raised("chatml", {{"tool", "x"}}).find("unsupported role 'tool'"), std::string::npos);
  EXPECT_NE(raised("mistral-v7", {{"user", "hi"}}).find("needs a system message"),
            std::string::npos);
  EXPECT_NE(raised("gemma2", {{"user", "a"}, {"user", "b"}}).find("alternate"), std::string::npos);
  EXPECT_NE(raised("llama2", {{"system", "s"}, {"assistant", "a"}}).find("alternate"),
            std::string::npos);
  EXPECT_EQ(raised("chatml", {{"user", "hi"}}), "");
  EXPECT_THROW(raised("llama3.2", {{"user", "hi"}}, "2026-13-01"), std::invalid_argument);
  EXPECT_FALSE(builtin_chat_template("no-such-family").has_value());
}

TEST(ChatTemplate, ParseErrorsNameTheLine) {
  try {
    ChatTemplate::parse("{{ bos_token }}\n{% if messages %}\nno endif", "t", {});
    ADD_FAILURE() << "no error";
  } catch (const jinja::JinjaError& e) {
    EXPECT_EQ(e.line(), 3) << e.what();
  }
}

// The variables a template sees: bos/eos from the tokens, tools, kwargs (defaults and the
// request's, the request winning), and tool-call arguments given as a JSON string arrive as an
// object.
TEST(ChatTemplate, VariablesFollowLlamaCppConventions) {
  ChatTemplate t = ChatTemplate::parse(
      "{{ bos_token }}|{{ eos_token }}|{{ tools | length if tools else 'none' }}|{{ a }}{{ b }}|"
      "{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.name }}"
      "{% for k, v in c.function.arguments.items() %} {{ k }}={{ v }}{% endfor %}{% endfor %}"
      "{% endfor %}|{{ add_generation_prompt }}",
      "t", {"<B>", "<E>"});
  t.set_default_kwargs({{"a", 1}, {"b", 2}});
  ChatInputs in;
  in.messages = ChatJson::parse(R"([{"role": "assistant", "content": null, "tool_calls": [
      {"id": "c1", "type": "function",
       "function": {"name": "f", "arguments": "{\"x\": 1, \"y\": \"z\"}"}}]}])");
  in.tools = ChatJson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  in.kwargs = {{"b", 3}};
  in.add_generation_prompt = false;
  EXPECT_EQ(t.render(in), "<B>|<E>|1|13|f x=1 y=z|False");
  in.tools = nullptr;
  in.kwargs = ChatJson::object();
  EXPECT_EQ(t.render(in), "<B>|<E>|none|12|f x=1 y=z|False");
  EXPECT_THROW(t.set_default_kwargs(ChatJson::array()), std::invalid_argument);
}

// Dates with a one-digit day and month, for the families that print today's date.
TEST(ChatTemplate, DatesMatchJinja2) {
  KVRUN_REQUIRE_FIXTURE("templates");
  if (const std::string why = oracle_unavailable(); !why.empty()) GTEST_SKIP() << why;
  test::TempDir dir;
  const std::vector<std::pair<const char*, const char*>> files = {
      {"meta-llama-Llama-3.2-3B-Instruct", "llama3.2"},
      {"ibm-granite-granite-3.3-2B-Instruct", "granite3.3"},
      {"openai-gpt-oss-120b", "gpt-oss"},
      {"Apertus-8B-Instruct", "apertus"}};
  const Conversation conv = conversations()[1];  // no system message: the default one has a date
  for (const auto& [file, family] : files) {
    const fs::path path = test::fixture(std::string("templates/") + file + ".jinja");
    const ChatSpecialTokens tok = tokens_for(family);
    for (const char* day : {"2027-03-05", "2024-12-31"}) {
      SCOPED_TRACE(std::string(file) + " " + day);
      bool raised = false;
      const std::string want = oracle_render(path, conv, tok, dir, &raised, day);
      ASSERT_FALSE(raised) << want;
      EXPECT_EQ(render_builtin(family, conv, tok, day), want);
    }
  }
}

}  // namespace
}  // namespace kvrun
