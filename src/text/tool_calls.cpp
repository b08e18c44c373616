// tool_calls.cpp — tool-call and reasoning parsing of chat replies (see tool_calls.h).
#include "text/tool_calls.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace kvrun {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
// DeepSeek's markers (fullwidth bars U+FF5C, U+2581 for spaces).
constexpr std::string_view kDsCallsBegin =
    "<\xef\xbd\x9ctool\xe2\x96\x81"
    "calls\xe2\x96\x81"
    "begin\xef\xbd\x9c>";
constexpr std::string_view kDsCallsEnd =
    "<\xef\xbd\x9ctool\xe2\x96\x81"
    "calls\xe2\x96\x81"
    "end\xef\xbd\x9c>";
constexpr std::string_view kDsCallBegin =
    "<\xef\xbd\x9ctool\xe2\x96\x81"
    "call\xe2\x96\x81"
    "begin\xef\xbd\x9c>";
constexpr std::string_view kDsCallEnd =
    "<\xef\xbd\x9ctool\xe2\x96\x81"
    "call\xe2\x96\x81"
    "end\xef\xbd\x9c>";
constexpr std::string_view kDsSep = "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>";

/// The texts that open a call in `f`.
std::vector<std::string_view> openers(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes:
      return {"<tool_call>"};
    case ToolCallFormat::kLlama3:
      return {"<|python_tag|>"};
    case ToolCallFormat::kMistral:
      return {"[TOOL_CALLS]"};
    case ToolCallFormat::kDeepSeek:
      return {kDsCallsBegin};
    case ToolCallFormat::kGranite:
      return {"<|tool_call|>"};
    case ToolCallFormat::kCommandR:
      return {"<|START_ACTION|>"};
    case ToolCallFormat::kFunctionaryV31:
      return {"<function="};
    case ToolCallFormat::kKimiK2:
      return {"<|tool_calls_section_begin|>"};
    case ToolCallFormat::kNone:
    case ToolCallFormat::kHarmony:
    case ToolCallFormat::kFunctionaryV32:
      break;
  }
  return {};
}

/// The text that closes a call opened by `open`, or "" when the call ends with its JSON value.
std::string_view closer(std::string_view open) {
  if (open == "<tool_call>") return "</tool_call>";
  if (open == kDsCallsBegin) return kDsCallsEnd;
  if (open == "<|START_ACTION|>") return "<|END_ACTION|>";
  if (open == "<function=") return "</function>";
  if (open == "<|tool_calls_section_begin|>") return "<|tool_calls_section_end|>";
  return "";
}

constexpr size_t kIncomplete = std::string_view::npos;
constexpr size_t kBad = std::string_view::npos - 1;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/// The end (one past) of the JSON object or array starting at the first non-space at or after
/// `from`; kIncomplete when it has not closed yet, kBad when no object or array starts there.
size_t json_end(std::string_view s, size_t from) {
  size_t i = from;
  while (i < s.size() && is_space(s[i])) ++i;
  if (i == s.size()) return kIncomplete;
  if (s[i] != '{' && s[i] != '[') return kBad;
  int depth = 0;
  bool in_str = false, esc = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (in_str) {
      if (esc)
        esc = false;
      else if (c == '\\')
        esc = true;
      else if (c == '"')
        in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return kIncomplete;
}

/// Length of the longest suffix of `s` that is a proper prefix of one of `markers` (text to hold
/// back: it may become a marker).
size_t partial_marker(std::string_view s, const std::vector<std::string_view>& markers) {
  size_t best = 0;
  for (std::string_view m : markers)
    for (size_t n = std::min(s.size(), m.size() - 1); n > best; --n)
      if (s.substr(s.size() - n) == m.substr(0, n)) {
        best = n;
        break;
      }
  return best;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

/// Arguments as compact JSON object text: an object, or a string holding one.
std::optional<std::string> arguments_text(const json& args) {
  if (args.is_object()) return args.dump();
  if (args.is_string()) {
    json parsed = json::parse(args.get<std::string>(), nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object()) return parsed.dump();
  }
  return std::nullopt;
}

/// One call object {name_key: N, args_key: {...}} (also under "function": {...}).
std::optional<ToolCall> call_from_json(const json& j, const char* name_key,
                                       std::initializer_list<const char*> args_keys) {
  if (!j.is_object()) return std::nullopt;
  if (auto fn = j.find("function"); fn != j.end() && fn->is_object())
    return call_from_json(*fn, name_key, args_keys);
  auto name = j.find(name_key);
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty())
    return std::nullopt;
  for (const char* key : args_keys)
    if (auto a = j.find(key); a != j.end())
      if (auto text = arguments_text(*a)) return ToolCall{name->get<std::string>(), *text};
  return std::nullopt;
}

/// An object or an array of call objects.
std::optional<std::vector<ToolCall>> calls_from_json(std::string_view text, const char* name_key,
                                                     std::initializer_list<const char*> args_keys) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  std::vector<ToolCall> out;
  for (const json& c : j.is_array() ? j : json::array({j})) {
    auto call = call_from_json(c, name_key, args_keys);
    if (!call) return std::nullopt;
    out.push_back(std::move(*call));
  }
  if (out.empty()) return std::nullopt;
  return out;
}

/// A parameter value of the XML formats: JSON when it parses as JSON, else the text.
json xml_value(const std::string& text) {
  json v = json::parse(text, nullptr, false);
  return v.is_discarded() ? json(text) : v;
}

/// Qwen3-Coder: <function=N>\n<parameter=P>\nvalue\n</parameter>...</function>.
std::optional<ToolCall> parse_qwen3_coder(std::string_view s) {
  constexpr std::string_view kFn = "<function=", kParam = "<parameter=", kParamEnd = "</parameter>";
  if (s.substr(0, kFn.size()) != kFn) return std::nullopt;
  const size_t gt = s.find('>');
  const size_t end = s.rfind("</function>");
  if (gt == std::string_view::npos || end == std::string_view::npos || end < gt)
    return std::nullopt;
  ToolCall call{trim(s.substr(kFn.size(), gt - kFn.size())), ""};
  json args = json::object();
  for (size_t at = s.find(kParam, gt); at != std::string_view::npos && at < end;
       at = s.find(kParam, at)) {
    const size_t name_end = s.find('>', at);
    const size_t close = s.find(kParamEnd, at);
    if (name_end == std::string_view::npos || close == std::string_view::npos || close < name_end)
      return std::nullopt;
    std::string value(s.substr(name_end + 1, close - name_end - 1));
    if (!value.empty() && value.front() == '\n') value.erase(0, 1);
    if (!value.empty() && value.back() == '\n') value.pop_back();
    args[trim(s.substr(at + kParam.size(), name_end - at - kParam.size()))] = xml_value(value);
    at = close + kParamEnd.size();
  }
  if (call.name.empty()) return std::nullopt;
  call.arguments = args.dump();
  return call;
}

/// GLM-4.x: N\n<arg_key>P</arg_key>\n<arg_value>value</arg_value>...
std::optional<ToolCall> parse_glm(std::string_view s) {
  constexpr std::string_view kKey = "<arg_key>", kKeyEnd = "</arg_key>", kVal = "<arg_value>",
                             kValEnd = "</arg_value>";
  const size_t first = s.find(kKey);
  ToolCall call{trim(s.substr(0, first)), ""};
  if (call.name.empty() || call.name.find_first_of("<>{}\n\t\r ") != std::string::npos)
    return std::nullopt;
  json args = json::object();
  for (size_t at = first; at != std::string_view::npos; at = s.find(kKey, at)) {
    const size_t ke = s.find(kKeyEnd, at), vb = s.find(kVal, at), ve = s.find(kValEnd, at);
    if (ke == std::string_view::npos || vb == std::string_view::npos ||
        ve == std::string_view::npos || !(ke < vb && vb < ve))
      return std::nullopt;
    args[trim(s.substr(at + kKey.size(), ke - at - kKey.size()))] =
        xml_value(std::string(s.substr(vb + kVal.size(), ve - vb - kVal.size())));
    at = ve + kValEnd.size();
  }
  call.arguments = args.dump();
  return call;
}

/// DeepSeek's calls between calls_begin and calls_end.
std::optional<std::vector<ToolCall>> parse_deepseek(std::string_view s) {
  std::vector<ToolCall> out;
  for (size_t at = s.find(kDsCallBegin); at != std::string_view::npos;
       at = s.find(kDsCallBegin, at)) {
    const size_t b = at + kDsCallBegin.size();
    const size_t e = s.find(kDsCallEnd, b);
    const size_t sep = s.find(kDsSep, b);
    if (e == std::string_view::npos || sep == std::string_view::npos || sep > e)
      return std::nullopt;
    const std::string left = trim(s.substr(b, sep - b));
    std::string_view right = s.substr(sep + kDsSep.size(), e - sep - kDsSep.size());
    ToolCall call;
    if (left == "function") {  // V3/R1: name on the first line, then ```json fenced arguments
      const size_t nl = right.find('\n');
      if (nl == std::string_view::npos) return std::nullopt;
      call.name = trim(right.substr(0, nl));
      right = right.substr(nl + 1);
      const size_t open = right.find('{'), close = right.rfind('}');
      if (open == std::string_view::npos || close == std::string_view::npos || close < open)
        return std::nullopt;
      right = right.substr(open, close - open + 1);
    } else {  // V3.1: name<sep>arguments
      call.name = left;
    }
    const auto args = arguments_text(json::parse(right, nullptr, false));
    if (call.name.empty() || !args) return std::nullopt;
    call.arguments = *args;
    out.push_back(std::move(call));
    at = e + kDsCallEnd.size();
  }
  if (out.empty()) return std::nullopt;
  return out;
}

/// Kimi K2: <|tool_call_begin|>functions.N:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>...
std::optional<std::vector<ToolCall>> parse_kimi(std::string_view s) {
  constexpr std::string_view kBegin = "<|tool_call_begin|>", kArgs = "<|tool_call_argument_begin|>",
                             kEnd = "<|tool_call_end|>";
  std::vector<ToolCall> out;
  for (size_t at = s.find(kBegin); at != std::string_view::npos; at = s.find(kBegin, at)) {
    const size_t a = s.find(kArgs, at), e = s.find(kEnd, at);
    if (a == std::string_view::npos || e == std::string_view::npos || e < a) return std::nullopt;
    std::string id = trim(s.substr(at + kBegin.size(), a - at - kBegin.size()));
    if (id.rfind("functions.", 0) == 0) id.erase(0, 10);
    if (const size_t colon = id.rfind(':'); colon != std::string::npos) id.resize(colon);
    const auto args = arguments_text(
        json::parse(s.substr(a + kArgs.size(), e - a - kArgs.size()), nullptr, false));
    if (id.empty() || !args) return std::nullopt;
    out.push_back({id, *args});
    at = e + kEnd.size();
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace

std::optional<std::vector<ToolCall>> parse_tool_call_block(ToolCallFormat format,
                                                           std::string_view open,
                                                           std::string_view body) {
  const std::string t = trim(body);
  switch (format) {
    case ToolCallFormat::kHermes:
      if (t.rfind("<function=", 0) == 0) {
        if (auto c = parse_qwen3_coder(t)) return std::vector<ToolCall>{*c};
        return std::nullopt;
      }
      if (auto calls = calls_from_json(t, "name", {"arguments", "parameters"})) return calls;
      if (t.find("<arg_key>") != std::string::npos || t.find('{') == std::string::npos)
        if (auto c = parse_glm(t)) return std::vector<ToolCall>{*c};
      return std::nullopt;
    case ToolCallFormat::kLlama3:
      return calls_from_json(t, "name", {"parameters", "arguments"});
    case ToolCallFormat::kMistral: {
      if (!t.empty() && (t[0] == '[' || t[0] == '{'))
        return calls_from_json(t, "name", {"arguments", "parameters"});
      const size_t args = t.find("[ARGS]");
      if (args == std::string::npos) return std::nullopt;
      json a = json::parse(t.substr(args + 6), nullptr, false);
      const auto text = arguments_text(a);
      const std::string name = trim(std::string_view(t).substr(0, args));
      if (!text || name.empty()) return std::nullopt;
      return std::vector<ToolCall>{{name, *text}};
    }
    case ToolCallFormat::kDeepSeek:
      return parse_deepseek(body);
    case ToolCallFormat::kGranite:
      return calls_from_json(t, "name", {"arguments", "parameters"});
    case ToolCallFormat::kCommandR:
      return calls_from_json(t, "tool_name", {"parameters", "arguments"});
    case ToolCallFormat::kFunctionaryV31: {
      const size_t gt = t.find('>');
      if (open != "<function=" || gt == std::string::npos) return std::nullopt;
      const auto text = arguments_text(json::parse(t.substr(gt + 1), nullptr, false));
      const std::string name = trim(std::string_view(t).substr(0, gt));
      if (!text || name.empty()) return std::nullopt;
      return std::vector<ToolCall>{{name, *text}};
    }
    case ToolCallFormat::kKimiK2:
      return parse_kimi(body);
    case ToolCallFormat::kNone:
    case ToolCallFormat::kHarmony:
    case ToolCallFormat::kFunctionaryV32:
      break;
  }
  return std::nullopt;
}

ToolCallFormat detect_tool_call_format(std::string_view src) {
  auto has = [&](std::string_view s) { return src.find(s) != std::string_view::npos; };
  if (has("<tool_call>")) return ToolCallFormat::kHermes;
  if (has("<|tool_calls_section_begin|>")) return ToolCallFormat::kKimiK2;
  if (has("<|channel|>") && has("<|call|>")) return ToolCallFormat::kHarmony;
  if (has("[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  if (has(kDsCallsBegin)) return ToolCallFormat::kDeepSeek;
  if (has("<|tool_call|>")) return ToolCallFormat::kGranite;
  if (has("<|START_ACTION|>")) return ToolCallFormat::kCommandR;
  if (has("<function=") && has("<|start_header_id|>")) return ToolCallFormat::kFunctionaryV31;
  if (has(">>>all")) return ToolCallFormat::kFunctionaryV32;
  if (has("<|python_tag|>") || (has("<|start_header_id|>") && has("ipython")))
    return ToolCallFormat::kLlama3;
  return ToolCallFormat::kNone;
}

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3:
      return "llama3";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kDeepSeek:
      return "deepseek";
    case ToolCallFormat::kGranite:
      return "granite";
    case ToolCallFormat::kCommandR:
      return "command-r";
    case ToolCallFormat::kFunctionaryV31:
      return "functionary-v3.1";
    case ToolCallFormat::kKimiK2:
      return "kimi-k2";
    case ToolCallFormat::kHarmony:
      return "harmony";
    case ToolCallFormat::kFunctionaryV32:
      return "functionary-v3.2";
    case ToolCallFormat::kNone:
      break;
  }
  return "none";
}

ChatOutputParser::ChatOutputParser(ToolCallFormat format, ReasoningFormat reasoning,
                                   bool thinking_open)
    : format_(format),
      reasoning_(reasoning),
      state_(reasoning == ReasoningFormat::kDeepseek && thinking_open ? State::kReasoning
                                                                      : State::kContent) {}

ChatDelta ChatOutputParser::feed(std::string_view text) {
  buf_.append(text);
  return drain(false);
}

ChatDelta ChatOutputParser::finish() { return drain(true); }

ChatDelta ChatOutputParser::parse_all(std::string_view text) {
  ChatDelta a = feed(text);
  ChatDelta b = finish();
  a.content += b.content;
  a.reasoning += b.reasoning;
  for (ToolCall& c : b.calls) a.calls.push_back(std::move(c));
  return a;
}

ChatDelta ChatOutputParser::drain(bool final) {
  ChatDelta out;
  if (format_ == ToolCallFormat::kHarmony) {
    while (step_harmony(out, final)) {
    }
    return out;
  }
  if (format_ == ToolCallFormat::kFunctionaryV32) {
    while (step_functionary(out, final)) {
    }
    return out;
  }
  for (bool more = true; more;) {
    switch (state_) {
      case State::kContent:
        more = step_content(out, final);
        break;
      case State::kReasoning:
        more = step_reasoning(out, final);
        break;
      case State::kCall:
        more = step_call(out, final);
        break;
    }
  }
  return out;
}

bool ChatOutputParser::step_reasoning(ChatDelta& out, bool final) {
  const size_t at = buf_.find(kThinkClose);
  if (at != std::string::npos) {
    out.reasoning += buf_.substr(0, at);
    buf_.erase(0, at + kThinkClose.size());
    state_ = State::kContent;
    after_think_ = true;
    return true;
  }
  const size_t keep = final ? 0 : partial_marker(buf_, {kThinkClose});
  out.reasoning += buf_.substr(0, buf_.size() - keep);
  buf_.erase(0, buf_.size() - keep);
  return false;
}

bool ChatOutputParser::step_content(ChatDelta& out, bool final) {
  const size_t first = buf_.find_first_not_of(" \n\t\r");
  if (!started_ && first == std::string::npos && !final) return false;  // only space so far
  if (after_think_ && !started_ && first != std::string::npos) buf_.erase(0, first);
  const size_t i = buf_.find_first_not_of(" \n\t\r");
  if (!started_ && i != std::string::npos) {
    if (reasoning_ == ReasoningFormat::kDeepseek && !after_think_) {  // <think> opens the reply
      const std::string_view rest = std::string_view(buf_).substr(i);
      if (rest.substr(0, kThinkOpen.size()) == kThinkOpen) {
        buf_.erase(0, i + kThinkOpen.size());
        state_ = State::kReasoning;
        return true;
      }
      if (!final && kThinkOpen.substr(0, rest.size()) == rest) return false;
    }
    if (format_ == ToolCallFormat::kLlama3 && buf_[i] == '{') {  // a reply that is one call
      buf_.erase(0, i);
      open_.clear();
      state_ = State::kCall;
      return true;
    }
  }
  const std::vector<std::string_view> markers = openers(format_);
  size_t best = std::string::npos;
  std::string_view which;
  for (std::string_view m : markers)
    if (size_t at = buf_.find(m); at < best) best = at, which = m;
  if (best != std::string::npos) {
    out.content += buf_.substr(0, best);
    buf_.erase(0, best + which.size());
    open_ = std::string(which);
    state_ = State::kCall;
    started_ = true;
    return true;
  }
  const size_t keep = final ? 0 : partial_marker(buf_, markers);
  if (buf_.size() > keep) started_ = true;
  out.content += buf_.substr(0, buf_.size() - keep);
  buf_.erase(0, buf_.size() - keep);
  return false;
}

/// The end of the call being read: (body length, bytes consumed), or nullopt while incomplete.
/// A call that cannot be well-formed gives body length kBad.
std::optional<std::pair<size_t, size_t>> ChatOutputParser::call_extent(bool final) const {
  const std::string_view close = closer(open_);
  if (!close.empty()) {
    // A JSON body may hold the closing text in a string: look for it after the JSON value.
    size_t from = 0;
    const size_t j = buf_.find_first_not_of(" \n\t\r");
    if (j != std::string::npos && (buf_[j] == '{' || buf_[j] == '[')) {
      const size_t e = json_end(buf_, j);
      if (e == kIncomplete && !final) return std::nullopt;
      if (e != kIncomplete) from = e;
    }
    const size_t at = buf_.find(close, from);
    if (at != std::string::npos) return std::pair{at, at + close.size()};
    if (!final) return std::nullopt;
    return std::pair{buf_.size(), buf_.size()};
  }
  size_t from = 0;
  const size_t i = buf_.find_first_not_of(" \n\t\r");
  if (format_ == ToolCallFormat::kMistral && i != std::string::npos && buf_[i] != '[' &&
      buf_[i] != '{') {  // NAME[ARGS]{...}
    const size_t a = buf_.find("[ARGS]");
    if (a == std::string::npos) {
      if (!final) return std::nullopt;
      return std::pair{kBad, size_t(0)};
    }
    from = a + 6;
  }
  const size_t e = json_end(buf_, from);
  if (e == kBad) return std::pair{kBad, size_t(0)};
  if (e == kIncomplete) {
    if (!final) return std::nullopt;
    return std::pair{buf_.size(), buf_.size()};
  }
  return std::pair{e, e};
}

bool ChatOutputParser::step_call(ChatDelta& out, bool final) {
  const auto extent = call_extent(final);
  if (!extent) return false;
  const auto [body_len, consumed] = *extent;
  state_ = State::kContent;
  started_ = true;
  if (body_len == kBad) {  // not a call: the opener is content, the rest is read again
    out.content += open_;
    return true;
  }
  const auto calls =
      parse_tool_call_block(format_, open_, std::string_view(buf_).substr(0, body_len));
  if (calls)
    out.calls.insert(out.calls.end(), calls->begin(), calls->end());
  else
    out.content += open_ + buf_.substr(0, consumed);
  buf_.erase(0, consumed);
  return true;
}

namespace {

constexpr std::string_view kHMessage = "<|message|>";
const std::vector<std::string_view> kHEnds = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};

/// The value after `key` in a harmony header, up to a space or "<|".
std::string header_field(std::string_view h, std::string_view key) {
  const size_t at = h.find(key);
  if (at == std::string_view::npos) return "";
  const size_t b = at + key.size();
  size_t e = b;
  while (e < h.size() && !is_space(h[e]) && h.substr(e, 2) != "<|") ++e;
  return std::string(h.substr(b, e - b));
}

}  // namespace

bool ChatOutputParser::step_harmony(ChatDelta& out, bool final) {
  if (state_ != State::kCall && state_ != State::kReasoning && open_.empty()) {  // a header
    const size_t at = buf_.find(kHMessage);
    if (at == std::string::npos) {
      if (final) out.content += buf_, buf_.clear();  // not harmony after all
      return false;
    }
    const std::string header = buf_.substr(0, at);
    buf_.erase(0, at + kHMessage.size());
    const std::string to = header_field(header, "to=");
    const std::string channel = header_field(header, "<|channel|>");
    if (to.rfind("functions.", 0) == 0) {
      open_ = to.substr(10);
      state_ = State::kCall;
    } else {
      open_ = channel.empty() ? "final" : channel;
      state_ = channel == "analysis" && reasoning_ == ReasoningFormat::kDeepseek ? State::kReasoning
                                                                                 : State::kContent;
    }
    return true;
  }
  size_t end = std::string::npos, end_len = 0;  // the message body ends at the first end marker
  for (std::string_view m : kHEnds)
    if (size_t p = buf_.find(m); p < end) end = p, end_len = m == "<|start|>" ? 0 : m.size();
  const bool done = end != std::string::npos || final;
  const size_t body = end != std::string::npos ? end
                      : final                  ? buf_.size()
                                               : buf_.size() - partial_marker(buf_, kHEnds);
  if (state_ == State::kCall) {
    if (!done) return false;
    const auto args = arguments_text(json::parse(buf_.substr(0, body), nullptr, false));
    if (args)
      out.calls.push_back({open_, *args});
    else
      out.content += buf_.substr(0, body);
  } else {
    (state_ == State::kReasoning ? out.reasoning : out.content) += buf_.substr(0, body);
  }
  buf_.erase(0, body);
  if (!done) return false;
  buf_.erase(0, std::min(end_len, buf_.size()));
  if (buf_.rfind("<|start|>", 0) == 0) buf_.erase(0, 9);
  open_.clear();
  state_ = State::kContent;
  return !buf_.empty();
}

bool ChatOutputParser::step_functionary(ChatDelta& out, bool final) {
  constexpr std::string_view kTo = ">>>";
  if (open_.empty()) {  // a segment's header: [>>>]recipient\n (the prompt wrote the first >>>)
    const size_t i = buf_.find_first_not_of(" \n\t\r");
    if (i != std::string::npos && buf_.compare(i, kTo.size(), kTo) == 0) buf_.erase(0, i + 3);
    const std::string_view rest = std::string_view(buf_).substr(std::min(i, buf_.size()));
    if (!final && rest.size() < kTo.size() && kTo.substr(0, rest.size()) == rest) return false;
    const size_t nl = buf_.find('\n');
    if (nl == std::string::npos) {
      if (final) out.content += buf_, buf_.clear();
      return false;
    }
    const std::string to = trim(std::string_view(buf_).substr(0, nl));
    if (to.empty() || to.find_first_of(" \t<>{}") != std::string::npos) {
      open_ = "all";  // not a recipient line: the text is content
      return true;
    }
    open_ = to;
    buf_.erase(0, nl + 1);
    return true;
  }
  if (open_ == "all") {  // text for the user, up to the next >>>
    const size_t at = buf_.find(kTo);
    const size_t n = at != std::string::npos ? at
                     : final                 ? buf_.size()
                                             : buf_.size() - partial_marker(buf_, {kTo});
    out.content += buf_.substr(0, n);
    buf_.erase(0, n);
    if (at == std::string::npos) return false;
    open_.clear();
    return true;
  }
  const size_t e = json_end(buf_, 0);  // a call: its JSON arguments
  if (e == kIncomplete && !final) return false;
  const auto args = e != kBad && e != kIncomplete
                        ? arguments_text(json::parse(buf_.substr(0, e), nullptr, false))
                        : std::nullopt;
  if (!args) {  // not JSON: the segment is text
    out.content += kTo;
    out.content += open_ + "\n";
    open_ = "all";
    return true;
  }
  out.calls.push_back({open_, *args});
  buf_.erase(0, e);
  open_.clear();
  return !buf_.empty();
}

}  // namespace kvrun
