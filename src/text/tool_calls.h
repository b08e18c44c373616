// tool_calls.h — a chat model's reply split into content, reasoning and tool calls, fed
// incrementally (as tokens stream) or at once.
//
// The tool-call syntax is the model family's, chosen from its chat template (the markers the
// template writes for earlier calls). Formats, as the families' model cards and templates
// document them:
//   kHermes     <tool_call>{"name": N, "arguments": {...}}</tool_call> (Hermes 2/3, Qwen 2.5/3,
//               QwQ, MiMo); the same tags around Qwen3-Coder's XML
//               <function=N><parameter=P>value</parameter></function>, and around GLM-4.x's
//               N<arg_key>P</arg_key><arg_value>value</arg_value>
//   kLlama3     <|python_tag|>{"name": N, "parameters": {...}}, or that JSON object alone as the
//               whole reply (Llama 3.1/3.2/3.3 JSON tool calling)
//   kMistral    [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] or [TOOL_CALLS]N[ARGS]{...}
//   kDeepSeek   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}
//               \n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (V3, R1) or
//               ...<｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>... (V3.1)
//   kGranite    <|tool_call|>[{"name": N, "arguments": {...}}, ...]
//   kCommandR   <|START_ACTION|>[{"tool_name": N, "parameters": {...}}, ...]<|END_ACTION|>
//   kFunctionaryV31  <function=N>{...}</function>
//   kFunctionaryV32  segments ">>>recipient\n": recipient all is text for the user, a function
//               name is followed by its JSON arguments (the prompt writes the first ">>>")
//   kKimiK2     <|tool_calls_section_begin|><|tool_call_begin|>functions.N:0
//               <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
//   kHarmony    gpt-oss (OpenAI's harmony format): messages "<|channel|>C[ to=functions.N]
//               [<|constrain|>json]<|message|>BODY" ended by <|end|>, <|call|> or <|return|>
//               and joined by "<|start|>assistant[ to=functions.N]"; channel analysis is
//               reasoning, final is content, a body addressed to functions.N is a call
// Reasoning: with ReasoningFormat::kDeepseek, text between <think> and </think> (the opening
// tag may be in the prompt instead: `thinking_open`) is reasoning, not content (llama-server's
// --reasoning-format deepseek).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvrun {

/// The tool-call syntax of a model family (see the file comment).
enum class ToolCallFormat {
  kNone,
  kHermes,
  kLlama3,
  kMistral,
  kDeepSeek,
  kGranite,
  kCommandR,
  kFunctionaryV31,
  kKimiK2,
  kHarmony,
  kFunctionaryV32
};

/// Where <think>…</think> goes: left in the content (kNone) or to reasoning (kDeepseek).
enum class ReasoningFormat { kNone, kDeepseek };

/// One parsed call: the function name and its arguments as compact JSON text (an object).
struct ToolCall {
  std::string name;       ///< function name
  std::string arguments;  ///< JSON object text, e.g. {"city":"Paris"}
};

/// What a piece of a reply adds: content text, reasoning text and calls completed in it.
struct ChatDelta {
  std::string content;          ///< text for message.content
  std::string reasoning;        ///< text for message.reasoning_content
  std::vector<ToolCall> calls;  ///< calls whose text ended in this piece
  /// True when nothing was added.
  bool empty() const { return content.empty() && reasoning.empty() && calls.empty(); }
};

/// The tool-call format a chat template's source implies (markers it writes), or kNone.
ToolCallFormat detect_tool_call_format(std::string_view template_source);

/// A short name of `f` ("hermes", "llama3", ..., "none").
const char* tool_call_format_name(ToolCallFormat f);

/// Splits a reply as it streams. Text that may be the start of a marker is held back until it
/// is known; a call is reported once its closing text has arrived. Text that looks like a call
/// but does not parse is returned as content, unchanged.
class ChatOutputParser {
 public:
  /// `format`: the tool-call syntax (kNone: no calls are parsed). `reasoning`: where thinking
  /// goes. `thinking_open`: the prompt ended inside <think> (the reply starts as reasoning).
  ChatOutputParser(ToolCallFormat format, ReasoningFormat reasoning, bool thinking_open);

  /// Adds the next piece of the reply; returns what became known.
  ChatDelta feed(std::string_view text);
  /// The reply ended: returns everything still held back (an unclosed call is tried as it is).
  ChatDelta finish();

  /// Parses a whole reply at once (feed, then finish, joined).
  ChatDelta parse_all(std::string_view text);

 private:
  enum class State { kContent, kReasoning, kCall };
  ChatDelta drain(bool final);
  bool step_content(ChatDelta& out, bool final);
  bool step_reasoning(ChatDelta& out, bool final);
  bool step_call(ChatDelta& out, bool final);
  bool step_harmony(ChatDelta& out, bool final);
  bool step_functionary(ChatDelta& out, bool final);
  std::optional<std::pair<size_t, size_t>> call_extent(bool final) const;

  ToolCallFormat format_;
  ReasoningFormat reasoning_;
  State state_;
  std::string buf_;           // text not yet returned
  std::string open_;          // the marker that opened the call being read
  bool started_ = false;      // content or a call has been returned (no <think> / bare JSON now)
  bool after_think_ = false;  // </think> was read (space after it is dropped)
};

/// Parses the text of one call block (what follows `open_marker` up to its end, end marker
/// excluded) in `format`. nullopt when it is not a well-formed call.
std::optional<std::vector<ToolCall>> parse_tool_call_block(ToolCallFormat format,
                                                           std::string_view open_marker,
                                                           std::string_view body);

}  // namespace kvrun
