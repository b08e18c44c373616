// test_chat_template.cpp — chat-template detection and rendering, checked against Jinja2 itself
// (tests/data/render_chat_template.py run by Debian's /usr/bin/python3 with python3-jinja2) on
// the real templates in ../shared/fixtures/templates.
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

#include "text/chat_template.h"
#include "test_util.h"

namespace kvrun {
namespace {

namespace fs = std::filesystem;

/// What the test expects of one template file.
struct Expect {
  const char* file;           ///< file name under templates/, without ".jinja"
  const char* family;         ///< the family detect_chat_template must return; "" = unsupported
  bool needs_system = false;  ///< kvrun refuses a conversation without a system message
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

/// Whether kvrun is expected to refuse how `conv` ends for `family` (documented limits: these
/// templates write the end of a conversation without a generation prompt specially).
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

/// Renders `conv` with Jinja2 from `template_path`; sets `raised` when the template raises.
std::string oracle_render(const fs::path& template_path, const Conversation& conv,
                          const ChatSpecialTokens& tok, const test::TempDir& dir, bool* raised,
                          const char* today = kToday) {
  nlohmann::json req;
  req["messages"] = nlohmann::json::array();
  for (const ChatMessage& m : conv.messages)
    req["messages"].push_back({{"role", m.role}, {"content", m.content}});
  req["add_generation_prompt"] = conv.add_generation_prompt;
  req["bos_token"] = tok.bos;
  req["eos_token"] = tok.eos;
  req["now"] = today;
  const fs::path req_path = dir / "request.json";
  std::ofstream(req_path) << req.dump();
  const std::string script = test::test_data("render_chat_template.py").string();
  const auto r =
      test::run_command("/usr/bin/python3 " + quoted(script) + " " +
                        quoted(template_path.string()) + " " + quoted(req_path.string()));
  *raised = r.exit_code == 3;
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 3) << "oracle failed: " << r.err;
  return r.out;
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

/// Renders every sample conversation of `e` with Jinja2 from `path` and with render_chat and
/// expects the same text (or both to refuse); returns how many renders were compared.
int compare_with_oracle(const fs::path& path, const Expect& e, const test::TempDir& dir) {
  const ChatSpecialTokens tok = tokens_for(e.family);
  int compared = 0;
  for (const Conversation& conv : conversations()) {
    SCOPED_TRACE(std::string(e.file) + " (" + e.family + "), " + conv.name);
    bool raised = false;
    const std::string want = oracle_render(path, conv, tok, dir, &raised);
    const bool has_system = conv.messages[0].role == "system";
    if (raised || (e.needs_system && !has_system) || refuses_ending(e.family, conv)) {
      EXPECT_THROW(render_chat(e.family, conv.messages, conv.add_generation_prompt, tok, {kToday}),
                   std::invalid_argument)
          << "oracle: " << want;
      continue;
    }
    std::string got;
    try {
      got = render_chat(e.family, conv.messages, conv.add_generation_prompt, tok, {kToday});
    } catch (const std::exception& ex) {
      ADD_FAILURE() << "render_chat threw: " << ex.what();
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

TEST(ChatTemplate, DetectsFamilyOrReportsUnsupported) {
  KVRUN_REQUIRE_FIXTURE("templates");
  const auto names = chat_template_names();
  for (const Expect& e : kExpect) {
    const std::string rel = std::string("templates/") + e.file + ".jinja";
    if (!fs::exists(test::fixture(rel))) continue;
    const std::string jinja = read_file(test::fixture(rel));
    const auto family = detect_chat_template(jinja);
    const auto unsupported = unsupported_chat_template(jinja);
    if (*e.family) {
      EXPECT_EQ(family.value_or("<none>"), e.family) << e.file;
      EXPECT_FALSE(unsupported.has_value()) << e.file;
      EXPECT_TRUE(std::binary_search(names.begin(), names.end(), e.family)) << e.family;
    } else {
      EXPECT_FALSE(family.has_value()) << e.file << " detected as " << family.value_or("");
      ASSERT_TRUE(unsupported.has_value()) << e.file;
      EXPECT_EQ(unsupported->rfind("unknown", 0), std::string::npos)
          << e.file << " should be reported by name, got: " << *unsupported;
    }
  }
}

TEST(ChatTemplate, RenderMatchesJinja2) {
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

TEST(ChatTemplate, OwnTemplatesAreDetected) {
  const auto names = chat_template_names();
  for (const Expect& e : kOwnTemplates) {
    const fs::path path = own_template(e.file);
    ASSERT_TRUE(fs::exists(path)) << path;
    const std::string jinja = read_file(path);
    EXPECT_EQ(detect_chat_template(jinja).value_or("<none>"), e.family) << e.file;
    EXPECT_FALSE(unsupported_chat_template(jinja).has_value()) << e.file;
    EXPECT_TRUE(std::binary_search(names.begin(), names.end(), e.family)) << e.family;
  }
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
  EXPECT_EQ(render_chat("llama2", conv.messages, true, tok), want);
  EXPECT_EQ(want,
            "<s>[INST] <<SYS>>\n \n Be brief. \n\n<</SYS>>\n\n\t Hi there [/INST] Hello. </s>"
            "<s>[INST] And you? [/INST]");
}

}  // namespace
}  // namespace kvrun

namespace kvrun {
namespace {

TEST(ChatTemplate, NamesAreSortedUniqueAndRenderable) {
  const auto names = chat_template_names();
  ASSERT_FALSE(names.empty());
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  const std::vector<ChatMessage> conv = {{"system", "S"}, {"user", "U"}};
  for (const std::string& n : names) {
    if (n == "gemma2") continue;  // raises on a system message, checked below
    const std::string out = render_chat(n, conv, true, {"<B>", "<E>"}, {"2026-03-05"});
    EXPECT_NE(out.find('U'), std::string::npos) << n;
  }
}

TEST(ChatTemplate, RefusesWhatAFamilyCannotExpress) {
  const ChatSpecialTokens tok{"<bos>", "<eos>"};
  EXPECT_THROW(render_chat("no-such-family", {{"user", "hi"}}, true, tok), std::invalid_argument);
  EXPECT_THROW(render_chat("gemma2", {{"system", "s"}, {"user", "hi"}}, true, tok),
               std::invalid_argument);
  EXPECT_THROW(render_chat("chatml", {{"user", "hi"}, {"system", "late"}}, true, tok),
               std::invalid_argument);
  EXPECT_THROW(render_chat("chatml", {{"tool", "x"}}, true, tok), std::invalid_argument);
  EXPECT_THROW(render_chat("mistral-v7", {{"user", "hi"}}, true, tok), std::invalid_argument);
  EXPECT_THROW(render_chat("gemma2", {{"user", "a"}, {"user", "b"}}, true, tok),
               std::invalid_argument);
  EXPECT_THROW(render_chat("llama2", {{"system", "s"}, {"assistant", "a"}}, true, tok),
               std::invalid_argument);
  EXPECT_THROW(render_chat("llama2", {{"user", "a"}, {"user", "b"}}, true, tok),
               std::invalid_argument);
  EXPECT_THROW(render_chat("llama3.2", {{"user", "hi"}}, true, tok, {"2026-13-01"}),
               std::invalid_argument);
}

TEST(ChatTemplate, UnknownTemplateIsReportedUnsupported) {
  EXPECT_FALSE(detect_chat_template("{{ messages }}").has_value());
  const auto why = unsupported_chat_template("{{ messages }}");
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->rfind("unknown", 0), 0u);
}

// Llama-2 style templates are told apart from Mistral's [INST] templates by <<SYS>>; the early
// ones that write Meta's long default system prompt are reported, not rendered without it.
TEST(ChatTemplate, Llama2Detection) {
  const std::string sys_block = "'<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n'";
  EXPECT_EQ(detect_chat_template("{{ bos_token + '[INST] ' }}" + sys_block).value_or(""), "llama2");
  EXPECT_NE(detect_chat_template("{{ bos_token }}{{ '[INST] ' + m + ' [/INST]' }}").value_or(""),
            "llama2");
  const std::string with_default =
      "{% set system_message = 'You are a helpful, respectful and honest assistant.' %}"
      "{{ '[INST] ' }}" +
      sys_block;
  EXPECT_FALSE(detect_chat_template(with_default).has_value());
  const auto why = unsupported_chat_template(with_default);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->rfind("llama2-default-system", 0), 0u) << *why;
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
      EXPECT_EQ(render_chat(family, conv.messages, true, tok, {day}), want);
    }
  }
}

}  // namespace
}  // namespace kvrun
