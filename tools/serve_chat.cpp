// serve_chat.cpp — chat messages, tools and replies of `kvrun serve` (see serve_chat.h).
#include "serve_chat.h"

#include <algorithm>
#include <random>

#include "serve_grammar.h"

namespace kvrun::tools {
namespace {

std::string text_content(const json& c) {
  if (c.is_string()) return c.get<std::string>();
  std::string out;
  for (const auto& part : c) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        (part.contains("text") && !part["text"].is_string()))
      bad_field("messages", "content parts must be of type text");
    out += part.value("text", "");
  }
  return out;
}

/// An assistant message's tool_calls, checked (OpenAI: id, type "function", function.name,
/// function.arguments as a JSON string).
json checked_tool_calls(const json& calls) {
  if (!calls.is_array()) bad_field("messages", "tool_calls must be an array");
  json out = json::array();
  for (const auto& c : calls) {
    const json* fn = c.is_object() ? json_field(c, "function") : nullptr;
    if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
      bad_field("messages", "each tool call needs function.name");
    const json* id = json_field(c, "id");
    if (id && !id->is_string()) bad_field("messages", "a tool call id must be a string");
    json call = {{"id", id ? *id : json("")}, {"type", "function"}};
    json args = fn->value("arguments", json("{}"));
    if (!args.is_string() && !args.is_object())
      bad_field("messages", "tool call arguments must be a JSON string");
    call["function"] = {{"name", (*fn)["name"]},
                        {"arguments", args.is_string() ? args : json(args.dump())}};
    out.push_back(call);
  }
  return out;
}

/// One message, checked and normalised (developer → system; text parts joined).
json checked_message(const json& m) {
  if (!m.is_object()) bad_field("messages", "must hold objects");
  const json* role = json_field(m, "role");
  static const char* const kRoles[] = {"system", "developer", "user", "assistant", "tool"};
  if (!role || !role->is_string() ||
      std::find(std::begin(kRoles), std::end(kRoles), role->get<std::string>()) == std::end(kRoles))
    bad_field("messages", "roles must be system, developer, user, assistant or tool");
  const std::string r = *role == "developer" ? "system" : role->get<std::string>();
  json out = {{"role", r}};
  const json* c = json_field(m, "content");
  if (c && !c->is_string() && !c->is_array())
    bad_field("messages", "content must be a string or an array of text parts");
  const json* calls = r == "assistant" ? json_field(m, "tool_calls") : nullptr;
  if (!c && !calls && r != "assistant") bad_field("messages", "a " + r + " message needs content");
  out["content"] = c ? json(text_content(*c)) : json(calls ? json(nullptr) : json(""));
  if (calls) out["tool_calls"] = checked_tool_calls(*calls);
  for (const char* key : {"name", "tool_call_id", "reasoning_content"})
    if (const json* v = json_field(m, key)) {
      if (!v->is_string()) bad_field("messages", std::string(key) + " must be a string");
      out[key] = *v;
    }
  return out;
}

/// `tools`: an array of {"type": "function", "function": {"name", ...}}.
json checked_tools(const json& j) {
  const json* tools = json_field(j, "tools");
  if (!tools) return nullptr;
  if (!tools->is_array()) bad_field("tools", "must be an array");
  for (const auto& t : *tools) {
    const json* fn = t.is_object() ? json_field(t, "function") : nullptr;
    const json* type = t.is_object() ? json_field(t, "type") : nullptr;
    if (!type || *type != "function" || !fn || !fn->is_object() || !fn->contains("name") ||
        !(*fn)["name"].is_string())
      bad_field("tools",
                "must hold {\"type\": \"function\", \"function\": {\"name\": ...}} objects");
  }
  return tools->empty() ? json(nullptr) : *tools;
}

/// tool_choice: whether tools may be called ("auto", the default; not "none"), and whether a
/// call is forced ("required", or {"type": "function", "function": {"name"}} naming one).
struct ToolChoice {
  bool allowed = true;
  bool forced = false;
  std::string only;  ///< the named function ("" = any)
};

ToolChoice tool_choice(const json& j) {
  const json* tc = json_field(j, "tool_choice");
  if (!tc || (tc->is_string() && *tc == "auto")) return {};
  if (tc->is_string() && *tc == "none") return {false, false, ""};
  if (tc->is_string() && *tc == "required") return {true, true, ""};
  if (tc->is_object()) {
    const json* fn = json_field(*tc, "function");
    const json* name = fn && fn->is_object() ? json_field(*fn, "name") : nullptr;
    if (!name || !name->is_string())
      bad_field("tool_choice",
                "a function choice is {\"type\": \"function\", \"function\": {\"name\"}}");
    return {true, true, name->get<std::string>()};
  }
  bad_field("tool_choice", "must be \"auto\", \"none\", \"required\" or a function");
}

std::string plain_chat(const json& msgs) {
  std::string text;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i > 0 && msgs[i]["role"] != "assistant") text += "\n";
    if (msgs[i]["content"].is_string()) text += msgs[i]["content"].get<std::string>();
  }
  return text;
}

bool ends_inside_think(const std::string& prompt) {
  size_t e = prompt.find_last_not_of(" \n\t\r");
  if (e == std::string::npos) return false;
  const std::string_view p = std::string_view(prompt).substr(0, e + 1);
  return p.size() >= 7 && p.substr(p.size() - 7) == "<think>";
}

std::string random_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string s = "call_";
  for (int i = 0; i < 20; ++i) s += kChars[rng() % (sizeof kChars - 1)];
  return s + "_";
}

json calls_json(const ChatReply& reply, const std::vector<ToolCall>& calls, int first, bool delta) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = json::object();
    if (delta) c["index"] = first + int(i);
    c["id"] = reply.id_prefix + std::to_string(first + int(i));
    c["type"] = "function";
    c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(c);
  }
  return out;
}

/// `calls` less those past the first when parallel calls are off.
void limit_calls(const ChatReply& reply, std::vector<ToolCall>& calls, int already) {
  if (reply.parallel) return;
  const size_t allowed = already > 0 ? 0 : 1;
  if (calls.size() > allowed) calls.resize(allowed);
}

}  // namespace

std::string render_chat_body(const json& j, const ApiContext& ctx,
                             std::shared_ptr<ChatReply>* reply) {
  const json* msgs = json_field(j, "messages");
  if (!msgs) bad_field("messages", "is required");
  if (!msgs->is_array() || msgs->empty()) bad_field("messages", "must be a non-empty array");
  ChatInputs in;
  for (const auto& m : *msgs) in.messages.push_back(checked_message(m));
  in.tools = checked_tools(j);
  const ToolChoice choice = tool_choice(j);
  const bool tools_auto = choice.allowed;
  const json* par = json_field(j, "parallel_tool_calls");
  if (par && !par->is_boolean()) bad_field("parallel_tool_calls", "must be a boolean");
  const json* agp = json_field(j, "add_generation_prompt");
  if (agp && !agp->is_boolean()) bad_field("add_generation_prompt", "must be a boolean");
  in.add_generation_prompt = agp ? agp->get<bool>() : true;
  if (const json* kw = json_field(j, "chat_template_kwargs")) {
    if (!kw->is_object()) bad_field("chat_template_kwargs", "must be an object");
    in.kwargs = *kw;
  }
  std::string text;
  if (!ctx.chat) {
    if (!in.tools.is_null() || json_field(j, "chat_template_kwargs"))
      throw ApiError(400, "the model has no chat template (start the server with --chat-template)",
                     in.tools.is_null() ? "chat_template_kwargs" : "tools");
    text = plain_chat(in.messages);
  } else {
    try {
      text = ctx.chat->render(in);
    } catch (const jinja::JinjaError& e) {
      throw ApiError(400, "chat template error: " + std::string(e.what()), "messages");
    } catch (const std::invalid_argument& e) {
      throw ApiError(400, e.what(), "chat_template_kwargs");
    }
  }
  if (reply) {
    auto r = std::make_shared<ChatReply>();
    // Harmony (gpt-oss) and functionary v3.2 replies always name their channel or recipient, so
    // they are always split; other formats are parsed only with tools.
    const ToolCallFormat f =
        ctx.chat ? detect_tool_call_format(ctx.chat->source()) : ToolCallFormat::kNone;
    if ((tools_auto && !in.tools.is_null()) || f == ToolCallFormat::kHarmony ||
        f == ToolCallFormat::kFunctionaryV32)
      r->format = f;
    r->reasoning = ctx.chat ? ctx.reasoning : ReasoningFormat::kNone;
    r->thinking_open = ends_inside_think(text);
    r->parallel = par ? par->get<bool>() : true;
    r->id_prefix = random_id();
    r->stream = std::make_unique<ChatOutputParser>(r->format, r->reasoning, r->thinking_open);
    if (choice.forced) {  // the reply is one call, by grammar (serve_grammar.h)
      if (in.tools.is_null())
        bad_field("tool_choice", "forces a call but the request has no tools");
      r->grammar = forced_tool_call_grammar(f, in.tools, choice.only);
    }
    *reply = std::move(r);
  }
  return text;
}

json apply_template_response(const json& body, const ApiContext& ctx) {
  if (!ctx.chat)
    throw ApiError(400, "the model has no chat template (start the server with --chat-template)");
  return {{"prompt", render_chat_body(body, ctx, nullptr)}};
}

json chat_message_json(const ChatReply* reply, const std::string& text, bool* has_calls) {
  json msg = {{"role", "assistant"}};
  *has_calls = false;
  if (!reply) {
    msg["content"] = text;
    return msg;
  }
  ChatOutputParser parser(reply->format, reply->reasoning, reply->thinking_open);
  ChatDelta d = parser.parse_all(text);
  limit_calls(*reply, d.calls, 0);
  msg["content"] = d.calls.empty() || !d.content.empty() ? json(d.content) : json(nullptr);
  if (!d.reasoning.empty()) msg["reasoning_content"] = d.reasoning;
  if (!d.calls.empty()) {
    msg["tool_calls"] = calls_json(*reply, d.calls, 0, false);
    *has_calls = true;
  }
  return msg;
}

json chat_stream_delta(ChatReply* reply, const std::string& text, bool final, bool* has_calls) {
  json delta = json::object();
  if (!reply) {
    if (!text.empty()) delta["content"] = text;
    return delta;
  }
  ChatDelta d = reply->stream->feed(text);
  if (final) {
    ChatDelta rest = reply->stream->finish();
    d.content += rest.content;
    d.reasoning += rest.reasoning;
    d.calls.insert(d.calls.end(), rest.calls.begin(), rest.calls.end());
  }
  limit_calls(*reply, d.calls, reply->n_calls);
  if (!d.content.empty()) delta["content"] = d.content;
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (!d.calls.empty()) {
    delta["tool_calls"] = calls_json(*reply, d.calls, reply->n_calls, true);
    reply->n_calls += int(d.calls.size());
  }
  *has_calls = reply->n_calls > 0;
  return delta;
}

}  // namespace kvrun::tools
