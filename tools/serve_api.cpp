// serve_api.cpp — see serve_api.h.
#include "serve_api.h"

#include <cmath>
#include <limits>
#include <map>

#include "serve_chat.h"
#include "serve_grammar.h"
#include "serve_ollama.h"

namespace kvrun::tools {

void bad_field(const std::string& param, const std::string& what) {
  throw ApiError(400, "'" + param + "' " + what, param);
}

const json* json_field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

namespace {

constexpr int64_t kMaxInt = int64_t(1) << 40;

std::optional<double> number(const json& j, const char* key, double lo, double hi) {
  const json* v = json_field(j, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_field(key, "must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad_field(key, "must be in [" + json(lo).dump() + ", " + json(hi).dump() + "]");
  return x;
}

std::optional<int64_t> integer(const json& j, const char* key, int64_t lo, int64_t hi) {
  const json* v = json_field(j, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) bad_field(key, "must be an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(hi))
    bad_field(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi)
    bad_field(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

std::optional<bool> boolean(const json& j, const char* key) {
  const json* v = json_field(j, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_field(key, "must be a boolean");
  return v->get<bool>();
}

std::optional<std::string> string(const json& j, const char* key) {
  const json* v = json_field(j, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_field(key, "must be a string");
  return v->get<std::string>();
}

std::vector<std::string> stop_strings(const json& j) {
  const json* v = json_field(j, "stop");
  if (!v) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array() || v->size() > 16)
    bad_field("stop", "must be a string or an array of at most 16");
  std::vector<std::string> out;
  for (const auto& s : *v) {
    if (!s.is_string()) bad_field("stop", "must hold strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

/// The seed: negative (llama.cpp's -1) or absent → random.
uint32_t seed_of(const json& j) {
  const auto s =
      integer(j, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  if (!s || *s < 0) return kRandomSeed;
  return uint32_t(uint64_t(*s) & 0xFFFFFFFFu);
}

/// Sampling fields both APIs share.
void parse_sampling(const json& j, SamplerParams& sp, double max_temp) {
  if (auto t = number(j, "temperature", 0, max_temp)) sp.temp = float(*t);
  if (auto t = number(j, "top_p", 0, 1)) sp.top_p = float(*t);
  if (auto t = number(j, "presence_penalty", -2, 2)) sp.presence_penalty = float(*t);
  if (auto t = number(j, "frequency_penalty", -2, 2)) sp.frequency_penalty = float(*t);
  sp.seed = seed_of(j);
}

/// llama-server's `samplers`: an array of names (llama.cpp's common_sampler_type names and
/// their alternatives) or a string of their letters ("kpt"), in chain order. kvrun lacks dry,
/// typ_p, xtc and top_n_sigma: they are accepted and skipped, since their off value is the only
/// one a request can give (off_samplers). Anything else: 400 naming the field.
std::vector<SamplerStage> sampler_chain(const json& v) {
  using S = SamplerStage;
  static const std::map<std::string, std::optional<S>> names = {
      {"penalties", S::kPenalties}, {"top_k", S::kTopK},          {"top-k", S::kTopK},
      {"top_p", S::kTopP},          {"top-p", S::kTopP},          {"nucleus", S::kTopP},
      {"min_p", S::kMinP},          {"min-p", S::kMinP},          {"temperature", S::kTemperature},
      {"temp", S::kTemperature},    {"infill", S::kInfill},       {"dry", std::nullopt},
      {"typ_p", std::nullopt},      {"typ-p", std::nullopt},      {"typ", std::nullopt},
      {"typical_p", std::nullopt},  {"typical-p", std::nullopt},  {"typical", std::nullopt},
      {"xtc", std::nullopt},        {"top_n_sigma", std::nullopt}};
  static const std::map<char, std::optional<S>> letters = {
      {'e', S::kPenalties},   {'k', S::kTopK},    {'p', S::kTopP},     {'m', S::kMinP},
      {'t', S::kTemperature}, {'i', S::kInfill},  {'d', std::nullopt}, {'y', std::nullopt},
      {'x', std::nullopt},    {'s', std::nullopt}};
  const std::string known =
      " (kvrun has penalties, top_k, top_p, min_p, temperature, infill; dry, typ_p, xtc, "
      "top_n_sigma are accepted and off)";
  std::vector<S> out;
  if (v.is_string()) {
    for (char ch : v.get<std::string>()) {
      auto it = letters.find(ch);
      if (it == letters.end())
        bad_field("samplers", "holds '" + std::string(1, ch) + "', not a sampler letter" + known);
      if (it->second) out.push_back(*it->second);
    }
    return out;
  }
  if (!v.is_array()) bad_field("samplers", "must be an array of sampler names or a string");
  for (const auto& n : v) {
    if (!n.is_string()) bad_field("samplers", "must hold strings");
    auto it = names.find(n.get<std::string>());
    if (it == names.end())
      bad_field("samplers", "holds '" + n.get<std::string>() + "', not a sampler" + known);
    if (it->second) out.push_back(*it->second);
  }
  return out;
}

/// llama-server's fields of samplers kvrun does not have: accepted at their off value (as
/// llama.cpp's defaults have them), else 400 naming the field instead of ignoring it.
void off_samplers(const json& j) {
  const auto must_be = [&](const char* key, auto off, const char* what) {
    const json* v = json_field(j, key);
    if (v && (!v->is_number() || !off(v->get<double>())))
      bad_field(key, std::string("is not supported by kvrun (only ") + what + " is accepted)");
  };
  must_be(
      "typical_p", [](double x) { return x >= 1; }, "1, off");
  must_be(
      "dry_multiplier", [](double x) { return x == 0; }, "0, off");
  must_be(
      "xtc_probability", [](double x) { return x == 0; }, "0, off");
  must_be(
      "top_n_sigma", [](double x) { return x <= 0; }, "a value <= 0, off");
  must_be(
      "mirostat", [](double x) { return x == 0; }, "0, off");
}

/// Common checks after the prompt is known.
void finish_params(ApiRequest& r, const ApiContext& ctx) {
  if (r.params.prompt.empty()) bad_field("prompt", "is empty");
  if (int64_t(r.params.prompt.size()) > ctx.n_ctx)
    throw ApiError(400,
                   "the prompt is " + std::to_string(r.params.prompt.size()) +
                       " tokens, longer than the context (n_ctx = " + std::to_string(ctx.n_ctx) +
                       ")",
                   "prompt", "invalid_request_error");
  r.params.timeout_s = ctx.timeout_s;
}

/// A prompt: a string (tokenized with BOS), an array of token ids, or an array of one string.
std::vector<int32_t> prompt_tokens(const json& j, const char* key, const ApiContext& ctx) {
  const json* v = json_field(j, key);
  if (!v) bad_field(key, "is required");
  if (v->is_array() && v->size() == 1 && (*v)[0].is_string()) v = &(*v)[0];
  if (v->is_string()) return ctx.tok->tokenize(v->get<std::string>(), true, true);
  if (!v->is_array()) bad_field(key, "must be a string or an array of token ids");
  std::vector<int32_t> out;
  for (const auto& t : *v) {
    if (!t.is_number_integer()) bad_field(key, "must be a string or an array of token ids");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= ctx.tok->n_vocab())
      bad_field(key, "holds token id " + std::to_string(id) + " outside [0, " +
                         std::to_string(ctx.tok->n_vocab()) + ")");
    out.push_back(int32_t(id));
  }
  return out;
}

void check_n(const json& j) {
  if (auto n = integer(j, "n", 1, kMaxInt); n && *n != 1) bad_field("n", "must be 1 (one choice)");
}

void parse_stream(const json& j, ApiRequest& r) {
  r.stream = boolean(j, "stream").value_or(false);
  if (const json* so = json_field(j, "stream_options")) {
    if (!so->is_object()) bad_field("stream_options", "must be an object");
    r.include_usage = boolean(*so, "include_usage").value_or(false);
  }
}

/// llama.cpp's code-completion limits, read by /completion, /infill and /v1/completions.
void parse_code_limits(const json& j, RequestParams& p) {
  if (auto n = integer(j, "n_indent", 0, 1 << 20)) p.n_indent = int(*n);
  if (auto t = number(j, "t_max_predict_ms", -1e9, 1e9)) p.t_max_predict_ms = std::max(0.0, *t);
  // Read and checked but without effect, as in llama.cpp's server (llama.vim sends it).
  number(j, "t_max_prompt_ms", -1e9, 1e9);
}

/// n_predict / max_tokens 0: evaluate the prompt only (ApiRequest::no_tokens).
void set_n_predict(ApiRequest& r, int64_t n) {
  r.params.n_predict = n;
  r.no_tokens = n == 0;
}

/// The `input_extra` chunks of /infill: [{"filename": string, "text": string}].
std::vector<FimChunk> fim_chunks(const json& j) {
  std::vector<FimChunk> out;
  const json* ex = json_field(j, "input_extra");
  if (!ex) return out;
  const char* what = "must be an array of {\"filename\": string, \"text\": string}";
  if (!ex->is_array()) bad_field("input_extra", what);
  for (const auto& chunk : *ex) {
    if (!chunk.is_object()) bad_field("input_extra", what);
    const json* name = json_field(chunk, "filename");
    const json* text = json_field(chunk, "text");
    if ((name && !name->is_string()) || !text || !text->is_string()) bad_field("input_extra", what);
    out.push_back({name ? name->get<std::string>() : "", text->get<std::string>()});
  }
  return out;
}

std::string finish_reason_oai(FinishReason f) {
  return f == FinishReason::kEog || f == FinishReason::kStopString ? "stop" : "length";
}

/// A chat reply's finish_reason: "tool_calls" when it ended by itself after calls.
std::string finish_reason_chat(FinishReason f, bool calls) {
  const std::string reason = finish_reason_oai(f);
  return calls && reason == "stop" ? "tool_calls" : reason;
}

json bytes_of(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(int(c));
  return a;
}

json usage_json(const RequestResult& res) {
  const int64_t n_gen = int64_t(res.tokens.size());
  return {{"prompt_tokens", res.n_prompt},
          {"completion_tokens", n_gen},
          {"total_tokens", res.n_prompt + n_gen},
          {"prompt_tokens_details", {{"cached_tokens", res.n_cached}}}};
}

/// llama.cpp's timings: prompt_* for the prompt tokens evaluated (cached ones not counted),
/// predicted_* for the generated ones; a rate of nothing is 0.
json timings_json(const RequestResult& res) {
  const int64_t n_gen = int64_t(res.tokens.size()), n_eval = res.n_prompt - res.n_cached;
  const auto per_token = [](double ms, int64_t n) { return n > 0 ? ms / double(n) : 0.0; };
  const auto per_second = [](double ms, int64_t n) { return ms > 0 ? 1e3 * double(n) / ms : 0.0; };
  return {{"prompt_n", n_eval},
          {"prompt_ms", res.prompt_ms},
          {"prompt_per_token_ms", per_token(res.prompt_ms, n_eval)},
          {"prompt_per_second", per_second(res.prompt_ms, n_eval)},
          {"predicted_n", n_gen},
          {"predicted_ms", res.gen_ms},
          {"predicted_per_token_ms", per_token(res.gen_ms, n_gen)},
          {"predicted_per_second", per_second(res.gen_ms, n_gen)},
          {"ttft_ms", res.ttft_ms}};
}

/// llama.cpp response_fields: the members at the paths ("a/b": member b of object a), keyed by
/// the path as given; paths that name nothing are left out.
json select_fields(const json& full, const std::vector<std::string>& paths) {
  if (paths.empty()) return full;
  json out = json::object();
  for (const std::string& path : paths) {
    const json* v = &full;
    for (size_t at = 0; v && at <= path.size();) {
      const size_t slash = std::min(path.find('/', at), path.size());
      const std::string key = path.substr(at, slash - at);
      const auto it = v->is_object() ? v->find(key) : v->end();
      v = v->is_object() && it != v->end() ? &*it : nullptr;
      at = slash + 1;
    }
    if (v) out[path] = *v;
  }
  return out;
}

/// OpenAI /v1/completions logprobs of some events.
json completion_logprobs(const std::vector<const TokenEvent*>& evs, const Tokenizer& tok) {
  json tokens = json::array(), lps = json::array(), tops = json::array();
  for (const TokenEvent* e : evs) {
    tokens.push_back(tok.token_to_piece(e->id, true));
    lps.push_back(e->logprob);
    json top = json::object();
    for (const auto& t : e->top) top[tok.token_to_piece(t.id, true)] = t.logprob;
    tops.push_back(top);
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}};
}

/// OpenAI chat logprobs ({"content": [...]}) of some events.
json chat_logprobs(const std::vector<const TokenEvent*>& evs, const Tokenizer& tok, size_t n_top) {
  json content = json::array();
  for (const TokenEvent* e : evs) {
    const std::string piece = tok.token_to_piece(e->id, true);
    json top = json::array();
    for (size_t i = 0; i < e->top.size() && i < n_top; ++i) {
      const std::string p = tok.token_to_piece(e->top[i].id, true);
      top.push_back({{"token", p}, {"logprob", e->top[i].logprob}, {"bytes", bytes_of(p)}});
    }
    content.push_back({{"token", piece},
                       {"logprob", e->logprob},
                       {"bytes", bytes_of(piece)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

/// llama.cpp completion_probabilities of some events.
json llama_probs(const std::vector<const TokenEvent*>& evs, const Tokenizer& tok) {
  json out = json::array();
  for (const TokenEvent* e : evs) {
    json top = json::array();
    for (const auto& t : e->top) {
      const std::string p = tok.token_to_piece(t.id, true);
      top.push_back({{"id", t.id}, {"token", p}, {"logprob", t.logprob}, {"bytes", bytes_of(p)}});
    }
    const std::string piece = tok.token_to_piece(e->id, true);
    out.push_back({{"id", e->id},
                   {"token", piece},
                   {"logprob", e->logprob},
                   {"bytes", bytes_of(piece)},
                   {"top_logprobs", top}});
  }
  return out;
}

/// `res` with its generated tokens dropped (ApiRequest::no_tokens): ended by the limit.
RequestResult without_tokens(const RequestResult& res) {
  RequestResult out = res;
  out.tokens.clear();
  out.text.clear();
  out.tail.clear();
  out.stop_word.clear();
  if (out.finish == FinishReason::kEog || out.finish == FinishReason::kStopString ||
      out.finish == FinishReason::kContextFull)
    out.finish = FinishReason::kLength;
  return out;
}

const char* stop_type(FinishReason f) {
  switch (f) {
    case FinishReason::kEog:
      return "eos";
    case FinishReason::kStopString:
      return "word";
    case FinishReason::kLength:
    case FinishReason::kContextFull:
      return "limit";
    default:
      return "none";
  }
}

}  // namespace

json error_json(int status, const std::string& message, const std::string& type,
                const std::string& param) {
  json e = {{"message", message}, {"type", type}, {"code", status}};
  e["param"] = param.empty() ? json(nullptr) : json(param);
  return {{"error", e}};
}

std::string to_wire(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80           ? 1
                     : (b >> 5) == 0x6  ? 2
                     : (b >> 4) == 0xE  ? 3
                     : (b >> 3) == 0x1E ? 4
                                        : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1Fu) : n == 3 ? (b & 0x0Fu) : (b & 0x07u);
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3Fu);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

json piece_json(const std::string& piece) {
  return is_valid_utf8(piece) ? json(piece) : bytes_of(piece);
}

json parse_body(const std::string& body) {
  // Refuses deep nesting as the parser reaches it, before the rest of the body is built.
  const json::parser_callback_t depth_check = [](int depth, json::parse_event_t ev, json&) {
    if ((ev == json::parse_event_t::object_start || ev == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw ApiError(400, "the request body is nested deeper than " +
                              std::to_string(kMaxJsonDepth) + " levels");
    return true;
  };
  json j = json::parse(body, depth_check, false);
  if (j.is_discarded()) throw ApiError(400, "the request body is not valid JSON");
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return j;
}

ApiRequest parse_completions(const json& j, const ApiContext& ctx) {
  ApiRequest r;
  r.api = Api::kCompletions;
  check_n(j);
  parse_stream(j, r);
  parse_sampling(j, r.params.sampling, 2);
  parse_grammar_fields(j, r.params);
  if (auto n = integer(j, "max_tokens", 0, kMaxInt)) set_n_predict(r, *n);
  if (auto lp = integer(j, "logprobs", 0, 20)) {
    r.logprobs = true;
    r.params.n_probs = std::max<int>(1, int(*lp));
  }
  if (boolean(j, "echo").value_or(false)) bad_field("echo", "is not supported");
  parse_code_limits(j, r.params);
  r.params.stop = stop_strings(j);
  if (auto suffix = string(j, "suffix")) {  // fill-in-the-middle, as /infill lays it out
    if (!has_fim_tokens(*ctx.tok))
      bad_field("suffix",
                "needs a model with fill-in-the-middle tokens (FIM prefix/suffix/middle)");
    const json* p = json_field(j, "prompt");
    if (p && p->is_array() && p->size() == 1) p = &(*p)[0];
    if (!p || !p->is_string()) bad_field("prompt", "must be a string with a suffix");
    FimInput in;
    in.prefix = p->get<std::string>();
    in.suffix = *suffix;
    r.params.prompt = fim_prompt(*ctx.tok, in, fim_budget(ctx, r.params.n_predict), fim_order(ctx));
  } else {
    r.params.prompt = prompt_tokens(j, "prompt", ctx);
  }
  finish_params(r, ctx);
  return r;
}

ApiRequest parse_chat(const json& j, const ApiContext& ctx) {
  ApiRequest r;
  r.api = Api::kChat;
  check_n(j);
  parse_stream(j, r);
  parse_sampling(j, r.params.sampling, 2);
  parse_grammar_fields(j, r.params);
  if (auto n = integer(j, "max_tokens", 1, kMaxInt)) r.params.n_predict = *n;
  if (auto n = integer(j, "max_completion_tokens", 1, kMaxInt)) r.params.n_predict = *n;
  r.logprobs = boolean(j, "logprobs").value_or(false);
  const auto top = integer(j, "top_logprobs", 0, 20);
  if (top && !r.logprobs) bad_field("top_logprobs", "needs logprobs: true");
  if (r.logprobs) r.params.n_probs = std::max<int>(1, int(top.value_or(0)));
  r.params.stop = stop_strings(j);
  const std::string text = render_chat_body(j, ctx, &r.chat_reply);
  if (r.chat_reply && r.chat_reply->grammar) {
    if (r.params.grammar)
      throw ApiError(400, "tool_choice forces a call: it cannot be combined with a grammar",
                     "tool_choice");
    r.params.grammar = r.chat_reply->grammar;
  }
  const std::string& bos = ctx.chat ? ctx.chat->tokens().bos : std::string();
  const bool add_special = bos.empty() || text.rfind(bos, 0) != 0;  // the template wrote BOS?
  r.params.prompt = ctx.tok->tokenize(text, add_special, true);
  finish_params(r, ctx);
  return r;
}

ApiRequest parse_llama_completion(const json& j, const ApiContext& ctx) {
  ApiRequest r;
  r.api = Api::kLlamaCompletion;
  r.stream = boolean(j, "stream").value_or(false);
  parse_sampling(j, r.params.sampling, 100);
  parse_grammar_fields(j, r.params);
  auto& sp = r.params.sampling;
  if (auto v = integer(j, "top_k", -1, kMaxInt)) sp.top_k = int32_t(std::min<int64_t>(*v, 1 << 30));
  if (auto v = number(j, "min_p", 0, 1)) sp.min_p = float(*v);
  if (auto v = number(j, "repeat_penalty", 0, 100)) sp.repeat_penalty = float(*v);
  if (auto v = integer(j, "repeat_last_n", -1, 1 << 30)) sp.repeat_last_n = int32_t(*v);
  if (auto n = integer(j, "n_predict", -1, kMaxInt)) set_n_predict(r, *n);
  parse_code_limits(j, r.params);
  if (const json* f = json_field(j, "response_fields")) {
    if (!f->is_array()) bad_field("response_fields", "must be an array of strings");
    for (const auto& name : *f) {
      if (!name.is_string()) bad_field("response_fields", "must be an array of strings");
      r.response_fields.push_back(name.get<std::string>());
    }
  }
  if (auto n = integer(j, "n_probs", 0, 100)) r.params.n_probs = int(*n);
  if (const json* s = json_field(j, "samplers")) sp.chain = sampler_chain(*s);
  off_samplers(j);
  r.params.cache_prompt = boolean(j, "cache_prompt").value_or(true);
  r.params.ignore_eos = boolean(j, "ignore_eos").value_or(false);
  r.return_tokens = boolean(j, "return_tokens").value_or(false);
  r.params.stop = stop_strings(j);
  r.params.prompt = prompt_tokens(j, "prompt", ctx);
  finish_params(r, ctx);
  return r;
}

ApiRequest parse_infill(const json& j, const ApiContext& ctx) {
  if (!has_fim_tokens(*ctx.tok))
    throw ApiError(400, "this model has no fill-in-the-middle tokens (FIM prefix/suffix/middle)");
  FimInput in;
  in.extra = fim_chunks(j);
  in.prefix = string(j, "input_prefix").value_or("");
  in.suffix = string(j, "input_suffix").value_or("");
  in.prompt = string(j, "prompt").value_or("");
  const int64_t n_predict = integer(j, "n_predict", -1, kMaxInt).value_or(-1);
  json body = j;  // every /completion field; "prompt" is replaced by the FIM token sequence
  body["prompt"] = fim_prompt(*ctx.tok, in, fim_budget(ctx, n_predict), fim_order(ctx));
  return parse_llama_completion(body, ctx);
}

FimOrder fim_order(const ApiContext& ctx) {
  return ctx.spm_infill ? FimOrder::kSpm : FimOrder::kPsm;
}

FimBudget fim_budget(const ApiContext& ctx, int64_t n_predict) {
  return {ctx.n_batch > 0 ? ctx.n_batch : ctx.n_ctx, ctx.n_ctx, n_predict};
}

namespace {

/// The /completion and /infill response, all fields; `content` is the text it carries (all of
/// it, or the tail at the end of a stream); completion_probabilities with `probs`.
json llama_completion_json(const ApiRequest& r, const RequestResult& res,
                           const std::vector<const TokenEvent*>& evs, const ApiContext& ctx,
                           const std::string& content, bool probs) {
  json out = {{"content", content}, {"stop", true}, {"model", ctx.model_name}};
  if (r.return_tokens) out["tokens"] = res.tokens;
  out["stop_type"] = stop_type(res.finish);
  out["stopping_word"] = res.stop_word;
  out["tokens_predicted"] = res.tokens.size();
  out["tokens_evaluated"] = res.n_prompt;
  out["tokens_cached"] = res.n_cached;
  out["has_new_line"] = res.text.find('\n') != std::string::npos;
  out["truncated"] = res.finish == FinishReason::kContextFull;
  out["timings"] = timings_json(res);
  if (r.params.n_probs > 0 && probs) out["completion_probabilities"] = llama_probs(evs, *ctx.tok);
  return out;
}

}  // namespace

json response_json(const ApiRequest& r, const RequestResult& result,
                   const std::vector<TokenEvent>& events, const ApiContext& ctx,
                   const std::string& id, int64_t created) {
  RequestResult stripped;
  const RequestResult& res = r.no_tokens ? (stripped = without_tokens(result)) : result;
  std::vector<const TokenEvent*> evs;
  if (!r.no_tokens)
    for (const auto& e : events) evs.push_back(&e);
  switch (r.api) {
    case Api::kCompletions: {
      json choice = {{"index", 0}, {"text", res.text}};
      choice["logprobs"] = r.logprobs ? completion_logprobs(evs, *ctx.tok) : json(nullptr);
      choice["finish_reason"] = finish_reason_oai(res.finish);
      return {{"id", id},
              {"object", "text_completion"},
              {"created", created},
              {"model", ctx.model_name},
              {"choices", json::array({choice})},
              {"usage", usage_json(res)}};
    }
    case Api::kChat: {
      bool calls = false;
      json choice = {{"index", 0},
                     {"message", chat_message_json(r.chat_reply.get(), res.text, &calls)}};
      choice["logprobs"] =
          r.logprobs ? chat_logprobs(evs, *ctx.tok, size_t(r.params.n_probs)) : json(nullptr);
      choice["finish_reason"] = finish_reason_chat(res.finish, calls);
      return {{"id", id},
              {"object", "chat.completion"},
              {"created", created},
              {"model", ctx.model_name},
              {"choices", json::array({choice})},
              {"usage", usage_json(res)}};
    }
    case Api::kLlamaCompletion:
      return select_fields(llama_completion_json(r, res, evs, ctx, res.text, true),
                           r.response_fields);
    case Api::kOllamaGenerate:
    case Api::kOllamaChat:
      return ollama_final_json(r, res, ctx, false);
  }
  return {};
}

std::optional<json> stream_begin_json(const ApiRequest& r, const ApiContext& ctx,
                                      const std::string& id, int64_t created) {
  if (r.api != Api::kChat) return std::nullopt;
  json choice = {{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}};
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = nullptr;
  return json{{"id", id},
              {"object", "chat.completion.chunk"},
              {"created", created},
              {"model", ctx.model_name},
              {"choices", json::array({choice})}};
}

std::optional<json> stream_chunk_json(const ApiRequest& r, const TokenEvent& ev,
                                      const ApiContext& ctx, const std::string& id,
                                      int64_t created) {
  const std::vector<const TokenEvent*> evs{&ev};
  if (r.no_tokens) return std::nullopt;
  switch (r.api) {
    case Api::kCompletions: {
      if (ev.text.empty() && !r.logprobs) return std::nullopt;
      json choice = {{"index", 0}, {"text", ev.text}};
      choice["logprobs"] = r.logprobs ? completion_logprobs(evs, *ctx.tok) : json(nullptr);
      choice["finish_reason"] = nullptr;
      return json{{"id", id},
                  {"object", "text_completion"},
                  {"created", created},
                  {"model", ctx.model_name},
                  {"choices", json::array({choice})}};
    }
    case Api::kChat: {
      bool calls = false;
      json delta = chat_stream_delta(r.chat_reply.get(), ev.text, false, &calls);
      if (delta.empty() && !r.logprobs) return std::nullopt;
      json choice = {{"index", 0}, {"delta", delta}};
      choice["logprobs"] =
          r.logprobs ? chat_logprobs(evs, *ctx.tok, size_t(r.params.n_probs)) : json(nullptr);
      choice["finish_reason"] = nullptr;
      return json{{"id", id},
                  {"object", "chat.completion.chunk"},
                  {"created", created},
                  {"model", ctx.model_name},
                  {"choices", json::array({choice})}};
    }
    case Api::kLlamaCompletion: {
      json out = {{"content", ev.text}, {"tokens", json::array({ev.id})}, {"stop", false}};
      if (r.params.n_probs > 0) out["completion_probabilities"] = llama_probs(evs, *ctx.tok);
      return out;
    }
    case Api::kOllamaGenerate:
    case Api::kOllamaChat:
      return ollama_chunk_json(r, ev, ctx);
  }
  return std::nullopt;
}

std::vector<json> stream_end_json(const ApiRequest& r, const RequestResult& result,
                                  const ApiContext& ctx, const std::string& id, int64_t created) {
  RequestResult stripped;
  const RequestResult& res = r.no_tokens ? (stripped = without_tokens(result)) : result;
  std::vector<json> out;
  switch (r.api) {
    case Api::kCompletions:
    case Api::kChat: {
      const bool chat = r.api == Api::kChat;
      const char* object = chat ? "chat.completion.chunk" : "text_completion";
      json choice = {{"index", 0}};
      bool calls = false;
      if (chat)
        choice["delta"] = chat_stream_delta(r.chat_reply.get(), res.tail, true, &calls);
      else
        choice["text"] = res.tail;
      choice["logprobs"] = nullptr;
      choice["finish_reason"] = finish_reason_chat(res.finish, calls);
      out.push_back({{"id", id},
                     {"object", object},
                     {"created", created},
                     {"model", ctx.model_name},
                     {"choices", json::array({choice})}});
      if (r.include_usage)
        out.push_back({{"id", id},
                       {"object", object},
                       {"created", created},
                       {"model", ctx.model_name},
                       {"choices", json::array()},
                       {"usage", usage_json(res)}});
      break;
    }
    case Api::kLlamaCompletion:
      out.push_back(select_fields(llama_completion_json(r, res, {}, ctx, res.tail, false),
                                  r.response_fields));
      break;
    case Api::kOllamaGenerate:
    case Api::kOllamaChat:
      out.push_back(ollama_final_json(r, res, ctx, true));
      break;
  }
  return out;
}

json tokenize_response(const json& body, const Tokenizer& tok) {
  auto it = body.find("content");
  if (it == body.end() || !it->is_string())
    throw ApiError(400, "'content' must be a string", "content");
  auto add = body.find("add_special");
  if (add != body.end() && !add->is_boolean())
    throw ApiError(400, "'add_special' must be a boolean", "add_special");
  const bool add_special = add != body.end() && add->get<bool>();
  auto pieces = body.find("with_pieces");
  if (pieces != body.end() && !pieces->is_boolean())
    throw ApiError(400, "'with_pieces' must be a boolean", "with_pieces");
  const auto ids = tok.tokenize(it->get<std::string>(), add_special, true);
  if (ids.size() > kMaxApiTokens)
    throw ApiError(413, "the content is more than " + std::to_string(kMaxApiTokens) + " tokens",
                   "content");
  json tokens = json::array();
  for (int32_t id : ids) {
    if (pieces != body.end() && pieces->get<bool>())
      tokens.push_back({{"id", id}, {"piece", piece_json(tok.token_to_piece(id, true))}});
    else
      tokens.push_back(id);
  }
  return {{"tokens", tokens}};
}

json detokenize_response(const json& body, const Tokenizer& tok) {
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array())
    throw ApiError(400, "'tokens' must be an array of token ids", "tokens");
  if (it->size() > kMaxApiTokens)
    throw ApiError(413, "more than " + std::to_string(kMaxApiTokens) + " tokens", "tokens");
  std::string text;
  for (const auto& t : *it) {
    if (!t.is_number_integer()) throw ApiError(400, "'tokens' must hold integers", "tokens");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= tok.n_vocab())
      throw ApiError(400, "token id " + std::to_string(id) + " outside the vocabulary", "tokens");
    text += tok.token_to_piece(int32_t(id), false);
  }
  return {{"content", text}};
}

std::optional<ApiError> result_error(const RequestResult& res) {
  if (res.finish == FinishReason::kTimeout)
    return ApiError(504, "the request took longer than --timeout", "", "timeout_error");
  if (res.finish == FinishReason::kError) return ApiError(503, res.error, "", "server_error");
  if (res.finish == FinishReason::kCancelled)
    return ApiError(503, "the request was cancelled (server shutting down)", "", "server_error");
  return std::nullopt;
}

}  // namespace kvrun::tools
