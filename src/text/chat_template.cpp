// chat_template.cpp — chat templates rendered by the Jinja engine (see chat_template.h).
#include "text/chat_template.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <stdexcept>

#include "text/chat_builtin.h"

namespace kvrun {
namespace {

using jinja::Dict;
using jinja::Value;

/// A strftime_now that formats the day `today` ("YYYY-MM-DD", midnight).
Value fixed_strftime_now(const std::string& today) {
  int y = 0, m = 0, d = 0;
  if (std::sscanf(today.c_str(), "%d-%d-%d", &y, &m, &d) != 3 || m < 1 || m > 12 || d < 1 || d > 31)
    throw std::invalid_argument("chat template: bad date '" + today + "' (want YYYY-MM-DD)");
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = m - 1;
  tm.tm_mday = d;
  tm.tm_isdst = -1;
  std::mktime(&tm);  // fills in the weekday and the day of the year
  return Value::function(
      [tm](jinja::CallArgs& a) {
        const std::string fmt = a.get(0, "format").str();
        char buf[256];
        const size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
        return Value(std::string(buf, n));
      },
      "strftime_now");
}

/// `messages` with each tool call's `arguments` JSON string replaced by the parsed value (as
/// llama.cpp passes them: templates iterate `arguments.items()` or apply `tojson`). A string that
/// is not JSON stays a string.
ChatJson with_parsed_arguments(const ChatJson& messages) {
  ChatJson out = messages;
  if (!out.is_array()) return out;
  for (ChatJson& m : out) {
    if (!m.is_object()) continue;
    auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array()) continue;
    for (ChatJson& call : *calls) {
      if (!call.is_object()) continue;
      auto fn = call.find("function");
      if (fn == call.end() || !fn->is_object()) continue;
      auto args = fn->find("arguments");
      if (args == fn->end() || !args->is_string()) continue;
      ChatJson parsed = ChatJson::parse(args->get<std::string>(), nullptr, false);
      if (!parsed.is_discarded()) *args = std::move(parsed);
    }
  }
  return out;
}

}  // namespace

Value json_to_jinja(const ChatJson& j) {
  switch (j.type()) {
    case ChatJson::value_t::null:
      return Value::none();
    case ChatJson::value_t::boolean:
      return Value(j.get<bool>());
    case ChatJson::value_t::number_integer:
      return Value(j.get<int64_t>());
    case ChatJson::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case ChatJson::value_t::number_float:
      return Value(j.get<double>());
    case ChatJson::value_t::string:
      return Value(j.get<std::string>());
    case ChatJson::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const ChatJson& x : j) items.push_back(json_to_jinja(x));
      return Value::list(std::move(items));
    }
    case ChatJson::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), json_to_jinja(it.value()));
      return Value::dict(std::move(d));
    }
    default:
      return Value();
  }
}

ChatJson messages_json(const std::vector<ChatMessage>& messages) {
  ChatJson out = ChatJson::array();
  for (const ChatMessage& m : messages) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

ChatTemplate ChatTemplate::parse(const std::string& source, std::string name,
                                 ChatSpecialTokens tokens) {
  ChatTemplate t;
  t.tmpl_ = jinja::Template::parse(source);
  t.source_ = source;
  t.name_ = std::move(name);
  t.tokens_ = std::move(tokens);
  return t;
}

std::string ChatTemplate::render(const ChatInputs& in) const {
  if (!in.kwargs.is_null() && !in.kwargs.is_object())
    throw std::invalid_argument("chat_template_kwargs must be a JSON object");
  Dict ctx;
  // The kwargs first: the variables kvrun sets below win over a kwarg of the same name, as in
  // llama.cpp (messages, tools, add_generation_prompt and the special tokens are not kwargs).
  for (const ChatJson* kw : {&defaults_, &in.kwargs})
    if (kw->is_object())
      for (auto it = kw->begin(); it != kw->end(); ++it)
        ctx.set(it.key(), json_to_jinja(it.value()));
  ctx.set("messages", json_to_jinja(with_parsed_arguments(in.messages)));
  ctx.set("tools", in.tools.is_array() ? json_to_jinja(in.tools) : Value::none());
  ctx.set("add_generation_prompt", Value(in.add_generation_prompt));
  ctx.set("bos_token", Value(tokens_.bos));
  ctx.set("eos_token", Value(tokens_.eos));
  if (!in.today.empty()) ctx.set("strftime_now", fixed_strftime_now(in.today));
  return tmpl_.render(ctx);
}

void ChatTemplate::set_default_kwargs(ChatJson kwargs) {
  if (!kwargs.is_null() && !kwargs.is_object())
    throw std::invalid_argument("chat template kwargs must be a JSON object");
  defaults_ = kwargs.is_null() ? ChatJson::object() : std::move(kwargs);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) const {
  ChatInputs in;
  in.messages = messages_json(messages);
  in.add_generation_prompt = add_generation_prompt;
  return render(in);
}

std::optional<std::string_view> builtin_chat_template(std::string_view name) {
  for (size_t i = 0; i < detail::kNumBuiltinChatTemplates; ++i)
    if (name == detail::kBuiltinChatTemplates[i].name)
      return detail::kBuiltinChatTemplates[i].source;
  return std::nullopt;
}

std::vector<std::string> chat_template_names() {
  std::vector<std::string> names;
  for (size_t i = 0; i < detail::kNumBuiltinChatTemplates; ++i)
    names.emplace_back(detail::kBuiltinChatTemplates[i].name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kvrun
