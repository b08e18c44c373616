// chat_template.cpp — chat-template family detection and the per-family prompt formatters.
//
// Each family is a turn grammar (FamilySpec): text before the conversation, an opening and a
// closing string per role, how a present or absent system message is written, and the text that
// opens the assistant's turn. The strings are the ones each family's template emits (read from
// the real templates under ../shared/fixtures/templates, checked against Jinja2 by the tests).
#include "text/chat_template.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <ctime>
#include <initializer_list>
#include <stdexcept>

namespace kvrun {
namespace {

/// Where a family puts the system message.
enum class SystemMode {
  kTurn,          ///< its own turn, written before the first user turn
  kFoldLastUser,  ///< prepended to the last user message, separated by "\n\n" (mistral-nemo)
  /// Wrapped in sys_open/sys_close and prepended to the first user message (llama2); with `trim`
  /// the joined text is trimmed as a whole, not the system message on its own.
  kFoldFirstUser,
  kRaise,  ///< the template raises on a system message (gemma2)
  /// Its content as it is, then "\n\n", before the first user message's (trimmed) content
  /// (gemma3's first_user_prefix).
  kPrefixFirstUser,
};

/// Marks `sys_absent` of a family whose template writes a long built-in default system prompt
/// that kvrun does not reproduce: a conversation without a system message is refused.
constexpr const char* kRefuse = "\x01refuse";

/// The template writes the end of a conversation without a generation prompt in a way kvrun
/// does not reproduce: render_chat refuses add_generation_prompt = false.
constexpr unsigned kNeedsGenPrompt = 1;
/// The template writes a final assistant message (one after the last user message) differently
/// from earlier ones (thinking blocks, <|return|>, no end tag): render_chat refuses a
/// conversation that ends with an assistant message and has no generation prompt.
constexpr unsigned kNoFinalAssistant = 2;

/// The turn grammar of one family. Strings may hold the placeholders {bos}, {eos}, {date_iso}
/// ("2026-11-21"), {date_dmy} ("21 Nov 2026") and {date_long} ("November 21, 2026").
struct FamilySpec {
  const char* name;        ///< family name (render_chat's `family`)
  const char* start;       ///< written first
  const char* sys_open;    ///< before a system message's content
  const char* sys_close;   ///< after it
  const char* sys_absent;  ///< written instead when there is no system message, or kRefuse
  const char* user_open;   ///< before a user message's content
  const char* user_close;  ///< after it
  const char* asst_open;   ///< before an assistant message's content
  const char* asst_close;  ///< after it
  const char* gen;         ///< the generation prompt
  SystemMode sys_mode = SystemMode::kTurn;  ///< where the system message goes
  bool alternate = false;                   ///< the template raises unless user/assistant alternate
  bool trim = false;                        ///< the template trims each message's content
  const char* gen_off = "";  ///< written at the end when there is no generation prompt
  unsigned limits = 0;       ///< kNeedsGenPrompt | kNoFinalAssistant
};

// Shared pieces (macros so that they concatenate with other literals).
#define IM_SYS "<|im_start|>system\n"
#define IM_USER "<|im_start|>user\n"
#define IM_ASST "<|im_start|>assistant\n"
#define IM_END "<|im_end|>\n"
#define L3_SYS "<|start_header_id|>system<|end_header_id|>\n\n"
#define L3_USER "<|start_header_id|>user<|end_header_id|>\n\n"
#define L3_ASST "<|start_header_id|>assistant<|end_header_id|>\n\n"
#define L3_EOT "<|eot_id|>"
#define L3_CUTOFF "Cutting Knowledge Date: December 2023\n"
#define DS_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"  // <｜User｜>
#define DS_ASST   \
  "<\xef\xbd\x9c" \
  "Assistant\xef\xbd\x9c>"  // <｜Assistant｜>
#define DS_EOS    \
  "<\xef\xbd\x9c" \
  "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"  // <｜end▁of▁sentence｜>
#define KIMI_SYS "<|im_system|>system<|im_middle|>"
#define KIMI_USER "<|im_user|>user<|im_middle|>"
#define KIMI_ASST "<|im_assistant|>assistant<|im_middle|>"
#define GR_ROLE(r) "<|start_of_role|>" r "<|end_of_role|>"
#define GR_END "<|end_of_text|>\n"
#define APRIEL15                                                                                 \
  "You are a thoughtful and systematic AI assistant built by ServiceNow Language Models (SLAM) " \
  "lab. Before providing an answer, analyze the problem carefully and present your reasoning "   \
  "step by step. After explaining your thought process, provide the final solution in the "      \
  "following format: [BEGIN FINAL RESPONSE] ... [END FINAL RESPONSE]."
#define APRIEL16                                                                              \
  "<|begin_system|>\nYou are a thoughtful, systematic AI assistant from ServiceNow Language " \
  "Models (SLAM) lab.\n    Analyze each question carefully, present your reasoning "          \
  "step-by-step, then provide the final\n    response after the marker [BEGIN FINAL RESPONSE].\n"
#define GPT_OSS_SYS                                                                        \
  "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n" \
  "Knowledge cutoff: 2024-06\nCurrent date: {date_iso}\n\nReasoning: medium\n\n# Valid "   \
  "channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
#define FUNCTIONARY32_SYS                                                                \
  L3_SYS                                                                                 \
  "You are capable of executing available function(s) if required.\nOnly execute "       \
  "function(s) when absolutely necessary.\nAsk for the required input to:recipient==all" \
  "\nUse JSON for function arguments.\nRespond in this format:\n>>>${recipient}\n"       \
  "${content}\nAvailable functions:\n// Supported function definitions that should be "  \
  "called when necessary.\nnamespace functions {\n\n} // namespace functions" L3_EOT

/// Every family kvrun renders.
const std::array kFamilies = {
    // ---- ChatML: <|im_start|>role\n … <|im_end|>\n ----
    FamilySpec{"chatml", "", IM_SYS, IM_END, "", IM_USER, IM_END, IM_ASST, IM_END, IM_ASST},
    FamilySpec{"qwen3", "", IM_SYS, IM_END, "", IM_USER, IM_END, IM_ASST, IM_END, IM_ASST,
               SystemMode::kTurn, false, false, "", kNoFinalAssistant},
    FamilySpec{"chatml-bos", "{bos}", IM_SYS, IM_END, "", IM_USER, IM_END, IM_ASST, IM_END,
               IM_ASST},
    FamilySpec{"qwen2.5", "", IM_SYS, IM_END,
               IM_SYS "You are Qwen, created by Alibaba Cloud. You are a helpful assistant." IM_END,
               IM_USER, IM_END, IM_ASST, IM_END, IM_ASST},
    FamilySpec{"mimo", "", IM_SYS, IM_END,
               IM_SYS "You are MiMo, an AI assistant developed by Xiaomi." IM_END, IM_USER, IM_END,
               IM_ASST, IM_END, IM_ASST},
    FamilySpec{"qwq", "", IM_SYS, IM_END, "", IM_USER, IM_END, IM_ASST, IM_END,
               IM_ASST "<think>\n</think>"},
    FamilySpec{"qwen3.5", "", IM_SYS, IM_END, "", IM_USER, IM_END, IM_ASST, IM_END,
               IM_ASST "<think>\n", SystemMode::kTurn, false, false, "", kNoFinalAssistant},
    FamilySpec{"step3.5", "{bos}", IM_SYS, IM_END, "", IM_USER, IM_END, IM_ASST, IM_END,
               IM_ASST "<think>\n", SystemMode::kTurn, false, false, "", kNoFinalAssistant},
    FamilySpec{"nemotron3", "", IM_SYS, IM_END, IM_SYS IM_END, IM_USER, IM_END,
               IM_ASST "<think></think>", IM_END, IM_ASST "<think>\n"},
    FamilySpec{"smollm3", "",
               IM_SYS "## Metadata\n\nKnowledge Cutoff Date: June 2025\nReasoning Mode: /think\n\n"
                      "## Custom Instructions\n\n",
               "\n\n" IM_END, kRefuse, IM_USER, IM_END, IM_ASST, IM_END, IM_ASST},
    // ---- Llama 3: <|start_header_id|>role<|end_header_id|>\n\n … <|eot_id|> ----
    FamilySpec{"llama3.1", "{bos}", L3_SYS L3_CUTOFF "Today Date: 26 Jul 2024\n\n", L3_EOT,
               L3_SYS L3_CUTOFF "Today Date: 26 Jul 2024\n\n" L3_EOT, L3_USER, L3_EOT, L3_ASST,
               L3_EOT, L3_ASST, SystemMode::kTurn, false, true},
    FamilySpec{"llama3.2", "{bos}", L3_SYS L3_CUTOFF "Today Date: {date_dmy}\n\n", L3_EOT,
               L3_SYS L3_CUTOFF "Today Date: {date_dmy}\n\n" L3_EOT, L3_USER, L3_EOT, L3_ASST,
               L3_EOT, L3_ASST, SystemMode::kTurn, false, true},
    FamilySpec{"functionary-v3.1", "{bos}" L3_SYS "\n" L3_CUTOFF "\n" L3_EOT, L3_SYS, L3_EOT, "",
               L3_USER, L3_EOT, L3_ASST, L3_EOT, L3_ASST},
    FamilySpec{"functionary-v3.2", "{bos}" FUNCTIONARY32_SYS, L3_SYS, L3_EOT, "", L3_USER, L3_EOT,
               L3_ASST ">>>all\n", L3_EOT, L3_ASST ">>>"},
    // ---- Llama 2 chat: <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {answer} </s> ----
    // No default system prompt (as Meta's reference code and the HF Llama-2-chat template: without
    // a system message the first turn is just "[INST] {user} [/INST]"); no generation prompt, a
    // prompt ends with " [/INST]".
    FamilySpec{"llama2", "", "<<SYS>>\n", "\n<</SYS>>\n\n", "", "{bos}[INST] ", " [/INST]", " ",
               " {eos}", "", SystemMode::kFoldFirstUser, true, true},
    // ---- Mistral: [INST] … [/INST] ----
    FamilySpec{"mistral-v7", "{bos}", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", kRefuse, "[INST]",
               "[/INST]", "", "{eos}", ""},
    FamilySpec{"mistral-v3-tekken", "{bos}", "", "", "", "[INST]", "[/INST]", "", "{eos}", "",
               SystemMode::kFoldLastUser, true},
    // ---- Gemma ----
    FamilySpec{"gemma2", "{bos}", "", "", "", "<start_of_turn>user\n", "<end_of_turn>\n",
               "<start_of_turn>model\n", "<end_of_turn>\n", "<start_of_turn>model\n",
               SystemMode::kRaise, true, true},
    // Gemma 3 (google/gemma-3-*-it tokenizer_config.json; tests/data/chat_templates/gemma3.jinja).
    FamilySpec{"gemma3", "{bos}", "", "", "", "<start_of_turn>user\n", "<end_of_turn>\n",
               "<start_of_turn>model\n", "<end_of_turn>\n", "<start_of_turn>model\n",
               SystemMode::kPrefixFirstUser, true, true},
    FamilySpec{"gemma4", "{bos}", "<|turn>system\n", "<turn|>\n", "", "<|turn>user\n", "<turn|>\n",
               "<|turn>model\n", "<turn|>\n", "<|turn>model\n<|channel>thought\n<channel|>"},
    // ---- Phi-3 ----
    FamilySpec{"phi3", "", "<|system|>\n", "<|end|>\n", "", "<|user|>\n", "<|end|>\n",
               "<|assistant|>\n", "<|end|>\n", "<|assistant|>\n", SystemMode::kTurn, false, false,
               "{eos}"},
    // ---- DeepSeek: <｜User｜> … <｜Assistant｜> … <｜end▁of▁sentence｜> ----
    FamilySpec{"deepseek-r1-distill", "{bos}", "", "", "", DS_USER, "", DS_ASST, DS_EOS,
               DS_ASST "<think>\n"},
    FamilySpec{"deepseek-r1-distill-qwen", "{bos}", "", "", "", DS_USER, "", DS_ASST, DS_EOS,
               DS_ASST "<think>\n</think>"},
    FamilySpec{"deepseek-r1", "{bos}", "", "", "", DS_USER, DS_EOS, DS_ASST, DS_EOS,
               DS_ASST "<think>\n"},
    FamilySpec{"deepseek-v3.1", "{bos}", "", "", "", DS_USER, "", DS_ASST "<think></think>", DS_EOS,
               DS_ASST "<think></think>"},
    FamilySpec{"deepseek-v3.2", "{bos}", "", "", "", DS_USER, "", DS_ASST "</think>", DS_EOS,
               DS_ASST "<think></think>"},
    FamilySpec{"deepseek-v4", "{bos}", "", "", "", DS_USER, "", DS_ASST "</think>", DS_EOS,
               DS_ASST "</think>"},
    // ---- IBM Granite 3.x ----
    FamilySpec{"granite3.3", "", GR_ROLE("system"), GR_END,
               GR_ROLE("system") "Knowledge Cutoff Date: April 2024. Today's Date: {date_long}. "
                                 "You are Granite, developed by IBM. You are a helpful AI "
                                 "assistant." GR_END,
               GR_ROLE("user"), GR_END, GR_ROLE("assistant"), GR_END, GR_ROLE("assistant")},
    // ---- Moonshot Kimi K2 ----
    FamilySpec{"kimi-k2", "", KIMI_SYS, "<|im_end|>",
               KIMI_SYS "You are a helpful assistant<|im_end|>", KIMI_USER, "<|im_end|>", KIMI_ASST,
               "<|im_end|>", KIMI_ASST},
    FamilySpec{"kimi-k2-instruct", "", KIMI_SYS, "<|im_end|>",
               KIMI_SYS "You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>\n",
               KIMI_USER, "<|im_end|>", KIMI_ASST, "<|im_end|>", KIMI_ASST},
    FamilySpec{"kimi-k2-thinking", "", KIMI_SYS, "<|im_end|>",
               KIMI_SYS "You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>",
               KIMI_USER, "<|im_end|>", KIMI_ASST "<think></think>", "<|im_end|>", KIMI_ASST},
    // ---- Zhipu GLM ----
    FamilySpec{"glm4.6", "[gMASK]<sop>", "<|system|>\n", "", "", "<|user|>\n", "",
               "<|assistant|>\n<think></think>\n", "", "<|assistant|>"},
    FamilySpec{"glm4.7", "[gMASK]<sop>", "<|system|>", "", "", "<|user|>", "",
               "<|assistant|></think>", "", "<|assistant|><think>"},
    FamilySpec{"glm5", "[gMASK]<sop><|system|>Reasoning Effort: Max", "<|system|>", "", "",
               "<|user|>", "", "<|assistant|><think></think>", "", "<|assistant|><think>"},
    // ---- Others ----
    FamilySpec{"seed-oss", "", "<seed:bos>system\n", "<seed:eos>", "", "<seed:bos>user\n",
               "<seed:eos>", "<seed:bos>assistant\n", "<seed:eos>", "<seed:bos>assistant\n"},
    FamilySpec{"apertus", "{bos}", "<|system_start|>",
               "<|system_end|><|developer_start|>Deliberation: disabled\nTool Capabilities: "
               "disabled<|developer_end|>",
               "<|system_start|>You are Apertus, a helpful assistant created by the SwissAI "
               "initiative.\nKnowledge cutoff: 2024-04\nCurrent date: {date_iso}<|system_end|>"
               "<|developer_start|>Deliberation: disabled\nTool Capabilities: "
               "disabled<|developer_end|>",
               "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
               "<|assistant_start|>", SystemMode::kTurn, false, false, "", kNoFinalAssistant},
    FamilySpec{"reka", "", "system: ", "\n\n<sep>", "", "human: ", "<sep>",
               "assistant: ", "\n\n<sep>", "assistant:"},
    FamilySpec{"rwkv-world", "{bos}", "System: ", "\n\n", "", "User: ", "\n\n",
               "Assistant: ", "\n\n", "Assistant:"},
    FamilySpec{"gpt-oss", GPT_OSS_SYS, "<|start|>developer<|message|># Instructions\n\n",
               "\n\n<|end|>", "", "<|start|>user<|message|>", "<|end|>",
               "<|start|>assistant<|channel|>final<|message|>", "<|end|>", "<|start|>assistant",
               SystemMode::kTurn, false, false, "", kNoFinalAssistant},
    FamilySpec{"apriel-1.5", "{bos}", "<|system|>\n" APRIEL15, "\n<|end|>\n",
               "<|system|>\n" APRIEL15 "\n<|end|>\n", "<|user|>\n", "\n<|end|>\n",
               "<|assistant|>\n", "\n<|end|>\n{eos}", "<|assistant|>\n"},
    FamilySpec{"apriel-1.6", "{bos}", APRIEL16, "\n", APRIEL16, "<|begin_user|>\n", "\n",
               "<|begin_assistant|>\n", "\n<|end|>\n",
               "<|begin_assistant|>\nHere are my reasoning steps:\n", SystemMode::kTurn, false,
               false, "", kNeedsGenPrompt},
    FamilySpec{"zephyr", "", "<|system|>\n", "{eos}\n", "", "<|user|>\n", "{eos}\n",
               "<|assistant|>\n", "{eos}\n", "<|assistant|>\n"},
};

/// The family spec called `name`, or nullptr.
const FamilySpec* find_family(std::string_view name) {
  for (const FamilySpec& f : kFamilies)
    if (name == f.name) return &f;
  return nullptr;
}

/// The date strings the placeholders stand for.
struct Dates {
  std::string iso, dmy, long_form;
};

/// Formats `today` ("YYYY-MM-DD", empty: the local date) the three ways templates print it.
Dates make_dates(const std::string& today) {
  std::tm tm{};
  if (today.empty()) {
    const std::time_t now = std::time(nullptr);
    localtime_r(&now, &tm);
  } else {
    int y = 0, m = 0, d = 0;
    if (std::sscanf(today.c_str(), "%d-%d-%d", &y, &m, &d) != 3 || m < 1 || m > 12 || d < 1 ||
        d > 31)
      throw std::invalid_argument("chat template: bad date '" + today + "' (want YYYY-MM-DD)");
    tm.tm_year = y - 1900;
    tm.tm_mon = m - 1;
    tm.tm_mday = d;
  }
  static const char* const kMonths[] = {"January",   "February", "March",    "April",
                                        "May",       "June",     "July",     "August",
                                        "September", "October",  "November", "December"};
  char buf[64];
  Dates out;
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
  out.iso = buf;
  std::snprintf(buf, sizeof buf, "%02d %.3s %04d", tm.tm_mday, kMonths[tm.tm_mon],
                tm.tm_year + 1900);
  out.dmy = buf;
  std::snprintf(buf, sizeof buf, "%s %02d, %04d", kMonths[tm.tm_mon], tm.tm_mday,
                tm.tm_year + 1900);
  out.long_form = buf;
  return out;
}

/// Expands the {bos}/{eos}/{date_*} placeholders of a spec string.
std::string expand(std::string_view s, const ChatSpecialTokens& tok, const Dates& dates) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '{') {
      const size_t close = s.find('}', i);
      if (close != std::string_view::npos) {
        const std::string_view key = s.substr(i + 1, close - i - 1);
        const std::string* val = key == "bos"         ? &tok.bos
                                 : key == "eos"       ? &tok.eos
                                 : key == "date_iso"  ? &dates.iso
                                 : key == "date_dmy"  ? &dates.dmy
                                 : key == "date_long" ? &dates.long_form
                                                      : nullptr;
        if (val) {
          out += *val;
          i = close + 1;
          continue;
        }
      }
    }
    out += s[i++];
  }
  return out;
}

/// Python's str.strip() for the ASCII whitespace Jinja's trim removes.
std::string trimmed(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

/// Throws unless `messages` is a conversation `f` can express.
void check_conversation(const FamilySpec& f, const std::vector<ChatMessage>& messages) {
  const std::string fam = f.name;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role == "system") {
      if (i != 0)
        throw std::invalid_argument("chat template " + fam + ": a system message must be first");
      if (f.sys_mode == SystemMode::kRaise)
        throw std::invalid_argument("chat template " + fam +
                                    ": the template does not support a system message");
    } else if (role != "user" && role != "assistant") {
      throw std::invalid_argument("chat template " + fam + ": unsupported role '" + role + "'");
    }
  }
  const bool has_sys = !messages.empty() && messages[0].role == "system";
  if (!has_sys && f.sys_absent == kRefuse)
    throw std::invalid_argument("chat template " + fam +
                                ": needs a system message (kvrun does not reproduce the "
                                "template's built-in default system prompt)");
  if (f.alternate) {
    const char* want = "user";
    for (size_t i = has_sys ? 1 : 0; i < messages.size(); ++i) {
      if (messages[i].role != want)
        throw std::invalid_argument("chat template " + fam +
                                    ": roles must alternate user/assistant starting with user");
      want = want[0] == 'u' ? "assistant" : "user";
    }
  }
}

}  // namespace

std::string render_chat(std::string_view family, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const ChatSpecialTokens& tokens,
                        const ChatRenderOptions& options) {
  const FamilySpec* f = find_family(family);
  if (!f) throw std::invalid_argument("unknown chat template '" + std::string(family) + "'");
  check_conversation(*f, messages);
  if (!add_generation_prompt && (f->limits & kNeedsGenPrompt))
    throw std::invalid_argument("chat template " + std::string(family) +
                                ": only supported with a generation prompt");
  if (!add_generation_prompt && (f->limits & kNoFinalAssistant) && !messages.empty() &&
      messages.back().role == "assistant")
    throw std::invalid_argument("chat template " + std::string(family) +
                                ": a final assistant message without a generation prompt is "
                                "not supported");
  const Dates dates = make_dates(options.today);
  auto content = [&](const ChatMessage& m) { return f->trim ? trimmed(m.content) : m.content; };
  const bool has_sys = !messages.empty() && messages[0].role == "system";

  std::string out = expand(f->start, tokens, dates);
  if (f->sys_mode == SystemMode::kTurn) {
    if (has_sys)
      out += expand(f->sys_open, tokens, dates) + content(messages[0]) +
             expand(f->sys_close, tokens, dates);
    else
      out += expand(f->sys_absent, tokens, dates);
  }
  for (size_t i = has_sys ? 1 : 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      std::string text = content(m);
      if (has_sys && f->sys_mode == SystemMode::kFoldLastUser && i + 1 == messages.size())
        text = content(messages[0]) + "\n\n" + text;
      if (has_sys && f->sys_mode == SystemMode::kPrefixFirstUser && i == 1)
        text = messages[0].content + "\n\n" + text;
      if (has_sys && f->sys_mode == SystemMode::kFoldFirstUser && i == 1) {
        text = expand(f->sys_open, tokens, dates) + messages[0].content +
               expand(f->sys_close, tokens, dates) + m.content;
        if (f->trim) text = trimmed(text);
      }
      out += expand(f->user_open, tokens, dates) + text + expand(f->user_close, tokens, dates);
    } else {
      out +=
          expand(f->asst_open, tokens, dates) + content(m) + expand(f->asst_close, tokens, dates);
    }
  }
  out += expand(add_generation_prompt ? f->gen : f->gen_off, tokens, dates);
  return out;
}

std::vector<std::string> chat_template_names() {
  std::vector<std::string> names;
  for (const FamilySpec& f : kFamilies) names.emplace_back(f.name);
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

/// One detection rule: the template contains every `all` substring and no `none` substring.
/// `family` is a family name, or (when `unsupported` is set) "name: reason".
struct DetectRule {
  const char* family;
  std::initializer_list<const char*> all;
  std::initializer_list<const char*> none = {};
  bool unsupported = false;
};

/// Detection rules, most specific first. The substrings are ones each family's real templates
/// carry (Jinja source text, so "\\n" is a backslash and an n).
const DetectRule kRules[] = {
    // Templates kvrun recognises but does not render.
    {"command-r: long built-in preamble and tool/document sections not reproduced",
     {"<|START_OF_TURN_TOKEN|>"},
     {},
     true},
    {"gigachat: long built-in developer-system preamble not reproduced",
     {"<|role_sep|>"},
     {},
     true},
    {"hermes-tool-use: the template needs a tool list",
     {"You are a function calling AI model"},
     {},
     true},
    {"firefunction-v2: the template needs `functions`",
     {"<|start_header_id|>", "you can chose to call one or more of the provided functions"},
     {},
     true},
    {"mirothinker: the template does not render in Jinja2 (assigns to a non-namespace object)",
     {"MiroThinker"},
     {},
     true},
    // Early Llama-2 templates that write Meta's long default system prompt when there is none.
    {"llama2-default-system: built-in default system prompt not reproduced",
     {"[INST]", "<<SYS>>", "respectful and honest assistant"},
     {},
     true},
    {"llama2-default-system: built-in default system prompt not reproduced",
     {"[INST]", "<<SYS>>", "USE_DEFAULT_PROMPT"},
     {},
     true},
    // GLM.
    {"glm5", {"[gMASK]<sop>", "Reasoning Effort"}},
    {"glm4.6", {"[gMASK]<sop>", "'\\n<think></think>'"}},
    {"glm4.7", {"[gMASK]<sop>", "{{ '</think>' }}"}},
    // Kimi.
    {"kimi-k2-thinking", {"<|im_middle|>", "You are Kimi", "<think></think>"}},
    {"kimi-k2-instruct", {"<|im_middle|>", "You are Kimi"}},
    {"kimi-k2", {"<|im_middle|>", "You are a helpful assistant<|im_end|>"}},
    // DeepSeek.
    {"deepseek-v4", {"<\xef\xbd\x9cUser\xef\xbd\x9c>", "Reasoning Effort"}},
    {"deepseek-v3.2", {"<\xef\xbd\x9cUser\xef\xbd\x9c>", "thinking_start_token"}},
    {"deepseek-v3.1",
     {"<\xef\xbd\x9cUser\xef\xbd\x9c>",
      "<\xef\xbd\x9c"
      "Assistant\xef\xbd\x9c><think></think>"}},
    {"deepseek-r1-distill-qwen",
     {"<\xef\xbd\x9cUser\xef\xbd\x9c>", "<think>\\n'}}{% if not enable_thinking %}"}},
    {"deepseek-r1",
     {"<\xef\xbd\x9cUser\xef\xbd\x9c>' + message['content'] + '<\xef\xbd\x9c"
      "end"}},
    {"deepseek-r1-distill",
     {"<\xef\xbd\x9cUser\xef\xbd\x9c>",
      "<\xef\xbd\x9c"
      "Assistant\xef\xbd\x9c><think>\\n'"}},
    // Mistral.
    {"mistral-v7", {"[SYSTEM_PROMPT]", "[INST]"}},
    {"mistral-v3-tekken", {"[INST]", "system_message + \"\\n\\n\""}, {"<<SYS>>"}},
    // Llama 2 chat (and Code Llama instruct): the system message between <<SYS>> and <</SYS>>.
    {"llama2", {"[INST]", "<<SYS>>", "<</SYS>>"}, {"[SYSTEM_PROMPT]"}},
    // Llama 3 and relatives.
    {"functionary-v3.2", {"<|start_header_id|>", ">>>all"}},
    {"functionary-v3.1", {"<|start_header_id|>", "Cutting Knowledge Date"}, {"Today Date"}},
    {"llama3.2", {"<|start_header_id|>", "Today Date", "strftime_now"}},
    {"llama3.1", {"<|start_header_id|>", "Today Date: \" + date_string", "26 Jul 2024"}},
    // Gemma, Phi, Granite and others with their own markers.
    {"gemma2", {"<start_of_turn>", "System role not supported"}},
    {"gemma3", {"<start_of_turn>", "first_user_prefix"}},
    {"gemma4", {"<|turn>", "<|channel>thought"}},
    {"granite3.3", {"<|start_of_role|>", "You are Granite, developed by IBM", "Today's Date"}},
    {"gpt-oss", {"<|start|>", "<|channel|>", "<|message|>"}},
    {"apertus", {"<|system_start|>", "<|developer_start|>"}},
    {"seed-oss", {"<seed:bos>"}},
    {"reka", {"<sep>", "human"}},
    {"rwkv-world", {"'User: '", "'Assistant: '"}},
    {"apriel-1.6", {"SLAM", "<|begin_system|>"}},
    {"apriel-1.5", {"SLAM", "<|system|>"}},
    // ChatML variants.
    {"smollm3", {"<|im_start|>", "Reasoning Mode"}},
    {"mimo", {"<|im_start|>", "You are MiMo"}},
    {"qwen2.5", {"<|im_start|>", "You are Qwen, created by Alibaba Cloud."}},
    {"nemotron3", {"<|im_start|>", "truncate_history_thinking", "<think></think>"}},
    {"qwq", {"<|im_start|>assistant\\n<think>\\n' }}", "{{- '</think>' -}}"}, {"bos_token"}},
    {"step3.5", {"<|im_start|>assistant\\n<think>\\n' }}", "bos_token"}},
    {"qwen3.5", {"<|im_start|>", "{{- '<think>\\n' }}"}, {"bos_token"}},
    {"chatml-bos", {"<|im_start|>", "bos_token"}},
    {"qwen3", {"<|im_start|>", "enable_thinking is defined and enable_thinking is false"}},
    {"chatml", {"<|im_start|>"}},
    {"phi3", {"<|user|>", "<|end|>", "<|assistant|>"}},
    {"zephyr", {"<|user|>\\n", "eos_token", "<|assistant|>"}},
};

/// The first rule `jinja` matches, or nullptr.
const DetectRule* match_rule(std::string_view jinja) {
  for (const DetectRule& r : kRules) {
    const bool all = std::all_of(r.all.begin(), r.all.end(), [&](const char* s) {
      return jinja.find(s) != std::string_view::npos;
    });
    const bool none = std::none_of(r.none.begin(), r.none.end(), [&](const char* s) {
      return jinja.find(s) != std::string_view::npos;
    });
    if (all && none) return &r;
  }
  return nullptr;
}

}  // namespace

std::optional<std::string> detect_chat_template(std::string_view jinja) {
  const DetectRule* r = match_rule(jinja);
  if (!r || r->unsupported) return std::nullopt;
  return std::string(r->family);
}

std::optional<std::string> unsupported_chat_template(std::string_view jinja) {
  const DetectRule* r = match_rule(jinja);
  if (!r) return std::string("unknown: no known chat-template family matched");
  if (r->unsupported) return std::string(r->family);
  return std::nullopt;
}

}  // namespace kvrun
