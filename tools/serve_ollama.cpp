// serve_ollama.cpp — ollama's /api/generate and /api/chat (see serve_ollama.h).
#include "serve_ollama.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <set>

#include "serve_chat.h"

namespace kvrun::tools {
namespace {

double number_option(const json& v, const std::string& name, double lo, double hi) {
  if (!v.is_number()) bad_field(name, "must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad_field(name, "must be in [" + json(lo).dump() + ", " + json(hi).dump() + "]");
  return x;
}

int64_t integer_option(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) ||
      v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    bad_field(name,
              "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v.get<int64_t>();
}

/// Options that only steer how ollama loads or runs a model (threads, GPU layers, mmap, batch):
/// they do not change what is generated, and kvrun's own flags decide them.
const std::set<std::string>& ignored_options() {
  static const std::set<std::string> s = {
      "num_thread", "num_gpu",   "main_gpu",     "num_batch",    "low_vram",
      "use_mmap",   "use_mlock", "numa",         "vocab_only",   "f16_kv",
      "logits_all", "num_keep",  "mirostat_tau", "mirostat_eta", "penalize_newline"};
  return s;
}

/// A "disabled" value kvrun accepts for a sampler it does not have (anything else is a 400).
bool disabled_value(const std::string& key, const json& v) {
  if (!v.is_number()) return false;
  const double x = v.get<double>();
  if (key == "mirostat") return x == 0;
  if (key == "typical_p" || key == "tfs_z") return x == 1;
  return false;
}

/// Applies ollama's `options` to the request: sampling, num_predict, stop, num_ctx (≤ n_ctx).
void apply_one_option(const std::string& key, const json& v, ApiRequest& r, const ApiContext& ctx) {
  SamplerParams& sp = r.params.sampling;
  const std::string name = "options." + key;
  if (key == "temperature") {
    sp.temp = float(number_option(v, name, 0, 100));
  } else if (key == "top_k") {
    sp.top_k = int32_t(integer_option(v, name, -1, 1 << 30));
  } else if (key == "top_p") {
    sp.top_p = float(number_option(v, name, 0, 1));
  } else if (key == "min_p") {
    sp.min_p = float(number_option(v, name, 0, 1));
  } else if (key == "seed") {
    const int64_t s = integer_option(v, name, INT64_MIN, INT64_MAX);
    sp.seed = s < 0 ? kRandomSeed : uint32_t(uint64_t(s) & 0xFFFFFFFFu);
  } else if (key == "num_predict") {
    // ollama: -1 until the end, -2 until the context is full (both are kvrun's -1); 0 evaluates
    // the prompt only (ApiRequest::no_tokens).
    const int64_t n = integer_option(v, name, -2, int64_t(1) << 40);
    r.no_tokens = n == 0;
    r.params.n_predict = n < 0 ? -1 : n;
  } else if (key == "repeat_penalty") {
    sp.repeat_penalty = float(number_option(v, name, 0, 100));
  } else if (key == "repeat_last_n") {
    sp.repeat_last_n = int32_t(integer_option(v, name, -1, 1 << 30));
  } else if (key == "presence_penalty") {
    sp.presence_penalty = float(number_option(v, name, -2, 2));
  } else if (key == "frequency_penalty") {
    sp.frequency_penalty = float(number_option(v, name, -2, 2));
  } else if (key == "stop") {
    if (!v.is_array() || v.size() > 16) bad_field(name, "must be an array of at most 16 strings");
    r.params.stop.clear();
    for (const auto& s : v) {
      if (!s.is_string()) bad_field(name, "must hold strings");
      r.params.stop.push_back(s.get<std::string>());
    }
  } else if (key == "num_ctx") {
    if (integer_option(v, name, 1, int64_t(1) << 40) > ctx.n_ctx)
      bad_field(name, "is larger than the server's context (n_ctx = " + std::to_string(ctx.n_ctx) +
                          "; start it with a larger -c)");
  } else if (disabled_value(key, v) || ignored_options().count(key)) {
    // accepted: the sampler is off, or the option only concerns loading (see ignored_options)
  } else if (key == "mirostat" || key == "typical_p" || key == "tfs_z") {
    bad_field(name, "is not supported by kvrun (only its off value is accepted)");
  } else {
    bad_field(name, "is not an option kvrun knows");
  }
}

void apply_options(const json& body, ApiRequest& r, const ApiContext& ctx) {
  const json* opts = json_field(body, "options");
  if (!opts) return;
  if (!opts->is_object()) bad_field("options", "must be an object");
  for (const auto& [key, v] : opts->items())
    if (!v.is_null()) apply_one_option(key, v, r, ctx);
}

/// The top-level fields shared by both endpoints: model (404 for another), stream (default
/// true), keep_alive (ignored), and those refused.
bool common_fields(const json& body, const ApiContext& ctx) {
  const json* model = json_field(body, "model");
  if (model && !model->is_string()) bad_field("model", "must be a string");
  check_ollama_model(model ? model->get<std::string>() : "", ctx.model_name);
  for (const char* key : {"template", "images", "think"})
    if (json_field(body, key)) bad_field(key, "is not supported by kvrun");
  const json* stream = json_field(body, "stream");
  if (stream && !stream->is_boolean()) bad_field("stream", "must be a boolean");
  return stream ? stream->get<bool>() : true;
}

/// ollama's `context` of /api/generate: the token ids a previous reply returned, each in the
/// vocabulary, at most n_ctx of them (else 400 naming the field).
std::vector<int32_t> context_tokens(const json& body, const ApiContext& ctx) {
  const json* v = json_field(body, "context");
  if (!v) return {};
  if (!v->is_array()) bad_field("context", "must be an array of token ids");
  if (int64_t(v->size()) > ctx.n_ctx)
    bad_field("context",
              "is " + std::to_string(v->size()) +
                  " tokens, longer than the context (n_ctx = " + std::to_string(ctx.n_ctx) + ")");
  std::vector<int32_t> out;
  out.reserve(v->size());
  for (const auto& t : *v) {
    if (!t.is_number_integer()) bad_field("context", "must be an array of token ids");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= ctx.tok->n_vocab())
      bad_field("context", "holds token id " + std::to_string(id) + " outside [0, " +
                               std::to_string(ctx.tok->n_vocab()) + ")");
    out.push_back(int32_t(id));
  }
  return out;
}

/// The accepted `context` before the request's prompt (whose BOS, when it has one, goes: the
/// context already began the sequence); 400 naming `context` when both exceed n_ctx.
void prepend_context(std::vector<int32_t> prior, ApiRequest& r, const ApiContext& ctx) {
  if (prior.empty()) return;
  std::vector<int32_t>& prompt = r.params.prompt;
  if (!prompt.empty() && ctx.tok->bos() >= 0 && prompt.front() == ctx.tok->bos())
    prompt.erase(prompt.begin());
  if (int64_t(prior.size() + prompt.size()) > ctx.n_ctx)
    bad_field("context", "(" + std::to_string(prior.size()) + " tokens) and the prompt (" +
                             std::to_string(prompt.size()) +
                             ") are longer than the context (n_ctx = " + std::to_string(ctx.n_ctx) +
                             ")");
  prior.insert(prior.end(), prompt.begin(), prompt.end());
  prompt = std::move(prior);
}

/// ollama's `format` ("json", or a JSON Schema object) as the grammar field of the OpenAI parsers.
void add_format(const json& body, json& out) {
  const json* f = json_field(body, "format");
  if (!f || (f->is_string() && f->get<std::string>().empty())) return;
  if (f->is_string() && *f == "json")
    out["response_format"] = {{"type", "json_object"}};
  else if (f->is_object())
    out["json_schema"] = *f;
  else
    bad_field("format", "must be \"json\" or a JSON Schema object");
}

/// Runs a parser of serve_api.h, renaming the fields of its errors to ollama's.
template <class F>
ApiRequest translated(F parse) {
  try {
    return parse();
  } catch (const ApiError& e) {
    if (e.param != "response_format" && e.param != "json_schema") throw;
    std::string msg = e.what();
    for (const std::string from : {"'response_format'", "'json_schema'"})
      if (auto at = msg.find(from); at != std::string::npos)
        msg.replace(at, from.size(), "'format'");
    throw ApiError(e.status, msg, "format", e.type);
  }
}

/// An ollama message as the OpenAI message render_chat_body reads.
json openai_message(const json& m) {
  if (!m.is_object()) bad_field("messages", "must hold objects");
  if (json_field(m, "images")) bad_field("messages.images", "is not supported (no vision model)");
  json out = m;
  out.erase("thinking");
  if (const json* t = json_field(m, "thinking")) out["reasoning_content"] = *t;
  out.erase("tool_name");
  if (const json* n = json_field(m, "tool_name")) out["name"] = *n;
  return out;
}

json base_reply(const ApiRequest& r, const ApiContext& ctx) {
  return {{"model", r.reply_model.empty() ? ctx.model_name : r.reply_model},
          {"created_at", ollama_created_at()}};
}

const char* done_reason(FinishReason f) {
  return f == FinishReason::kEog || f == FinishReason::kStopString ? "stop" : "length";
}

int64_t ns(double ms) { return int64_t(std::llround(ms * 1e6)); }

}  // namespace

void check_ollama_model(std::string name, const std::string& served) {
  if (name.empty()) throw ApiError(400, "'model' is required", "model");
  if (name.size() > 7 && name.compare(name.size() - 7, 7, ":latest") == 0)
    name.resize(name.size() - 7);
  if (name != served)
    throw ApiError(404, "model '" + name + "' not found (this server has " + served + ")", "model",
                   "not_found_error");
}

std::string ollama_created_at() {
  const auto now = std::chrono::system_clock::now();
  const auto ns_total =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  const std::time_t secs = std::time_t(ns_total / 1000000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[48];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%09lldZ", (long long)(ns_total % 1000000000));
  return buf;
}

ApiRequest parse_ollama_generate(const json& body, const ApiContext& ctx) {
  const bool stream = common_fields(body, ctx);
  const json* p = json_field(body, "prompt");
  if (p && !p->is_string()) bad_field("prompt", "must be a string");
  const std::string prompt = p ? p->get<std::string>() : "";
  const json* sys = json_field(body, "system");
  if (sys && !sys->is_string()) bad_field("system", "must be a string");
  const json* suffix = json_field(body, "suffix");
  if (suffix && !suffix->is_string()) bad_field("suffix", "must be a string");
  const json* raw_v = json_field(body, "raw");
  if (raw_v && !raw_v->is_boolean()) bad_field("raw", "must be a boolean");
  const bool raw = raw_v && raw_v->get<bool>();
  if (sys && (raw || suffix)) bad_field("system", "cannot be combined with raw or suffix");
  std::vector<int32_t> prior = context_tokens(body, ctx);
  json inner = json::object();
  add_format(body, inner);
  ApiRequest r;
  if (suffix) {  // fill-in-the-middle: the prompt before the cursor, the suffix after it
    inner["prompt"] = prompt;
    inner["suffix"] = *suffix;
    r = translated([&] { return parse_completions(inner, ctx); });
  } else if (raw || !ctx.chat) {
    inner["prompt"] = sys ? sys->get<std::string>() + "\n" + prompt : prompt;
    r = translated([&] { return parse_completions(inner, ctx); });
  } else {  // the prompt as one user turn of the chat template
    json msgs = json::array();
    if (sys) msgs.push_back({{"role", "system"}, {"content", *sys}});
    msgs.push_back({{"role", "user"}, {"content", prompt}});
    inner["messages"] = msgs;
    r = translated([&] { return parse_chat(inner, ctx); });
    r.chat_reply.reset();  // /api/generate returns the raw text
  }
  prepend_context(std::move(prior), r, ctx);
  r.api = Api::kOllamaGenerate;
  r.stream = stream;
  r.reply_model = body["model"];
  r.return_context = !raw;  // as ollama: no context for a raw prompt
  apply_options(body, r, ctx);
  return r;
}

ApiRequest parse_ollama_chat(const json& body, const ApiContext& ctx) {
  const bool stream = common_fields(body, ctx);
  if (json_field(body, "context"))
    bad_field("context", "belongs to /api/generate (a chat continues with its messages)");
  const json* msgs = json_field(body, "messages");
  if (!msgs || !msgs->is_array()) bad_field("messages", "must be an array");
  json inner = json::object();
  inner["messages"] = json::array();
  for (const auto& m : *msgs) inner["messages"].push_back(openai_message(m));
  if (const json* tools = json_field(body, "tools")) inner["tools"] = *tools;
  add_format(body, inner);
  ApiRequest r = translated([&] { return parse_chat(inner, ctx); });
  r.api = Api::kOllamaChat;
  r.stream = stream;
  r.reply_model = body["model"];
  apply_options(body, r, ctx);
  return r;
}

std::optional<json> ollama_load_only(const json& body, const ApiContext& ctx, bool chat) {
  json out = base_reply(ApiRequest(), ctx);
  if (chat) {
    const json* msgs = json_field(body, "messages");
    if (msgs && (!msgs->is_array() || !msgs->empty())) return std::nullopt;
    out["message"] = {{"role", "assistant"}, {"content", ""}};
  } else {
    const json* p = json_field(body, "prompt");
    if (json_field(body, "suffix") || (p && (!p->is_string() || !p->get<std::string>().empty())))
      return std::nullopt;
    out["response"] = "";
  }
  const json* model = json_field(body, "model");
  if (model && !model->is_string()) bad_field("model", "must be a string");
  check_ollama_model(model ? model->get<std::string>() : "", ctx.model_name);
  out["model"] = *model;
  out["done"] = true;
  out["done_reason"] = "load";
  return out;
}

json ollama_message(const json& m) {
  json out = {{"role", "assistant"}};
  const json* c = json_field(m, "content");
  out["content"] = c ? *c : json("");
  if (const json* t = json_field(m, "reasoning_content")) out["thinking"] = *t;
  if (const json* calls = json_field(m, "tool_calls")) {
    json a = json::array();
    for (const auto& call : *calls) {
      const json& fn = call["function"];
      json args = json::parse(fn.value("arguments", "{}"), nullptr, false);
      if (args.is_discarded() || !args.is_object()) args = fn.value("arguments", "");
      a.push_back({{"function", {{"name", fn["name"]}, {"arguments", args}}}});
    }
    out["tool_calls"] = a;
  }
  return out;
}

json ollama_final_json(const ApiRequest& r, const RequestResult& res, const ApiContext& ctx,
                       bool tail_only) {
  json out = base_reply(r, ctx);
  const std::string& text = tail_only ? res.tail : res.text;
  if (r.api == Api::kOllamaChat) {
    bool calls = false;
    ChatReply* reply = r.chat_reply.get();
    out["message"] = ollama_message(tail_only ? chat_stream_delta(reply, text, true, &calls)
                                              : chat_message_json(reply, text, &calls));
  } else {
    out["response"] = text;
  }
  out["done"] = true;
  out["done_reason"] = done_reason(res.finish);
  if (r.return_context) {
    json ids = r.params.prompt;
    for (int32_t id : res.tokens) ids.push_back(id);
    out["context"] = std::move(ids);
  }
  out["total_duration"] = ns(res.ttft_ms + res.gen_ms);
  out["load_duration"] = 0;
  out["prompt_eval_count"] = res.n_prompt;
  out["prompt_eval_duration"] = ns(res.prompt_ms);
  out["eval_count"] = res.tokens.size();
  out["eval_duration"] = ns(res.gen_ms);
  return out;
}

std::optional<json> ollama_chunk_json(const ApiRequest& r, const TokenEvent& ev,
                                      const ApiContext& ctx) {
  json out = base_reply(r, ctx);
  if (r.api == Api::kOllamaChat) {
    bool calls = false;
    const json delta = chat_stream_delta(r.chat_reply.get(), ev.text, false, &calls);
    if (delta.empty()) return std::nullopt;
    out["message"] = ollama_message(delta);
  } else {
    if (ev.text.empty()) return std::nullopt;
    out["response"] = ev.text;
  }
  out["done"] = false;
  return out;
}

}  // namespace kvrun::tools
