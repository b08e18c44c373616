// fuzz_serve_api.cpp — libFuzzer target for the API layer of `kvrun serve` (tools/serve_api.h):
// request body bytes → the handler code of /completion, /v1/completions, /v1/chat/completions
// (and /apply-template: messages, tools and kwargs through a Jinja chat template that writes
// Hermes tool calls and opens <think>, so that the reply parser sees calls and reasoning),
// /infill, /tokenize and /detokenize, and ollama's /api/generate and /api/chat (on the bodies of
// /v1/completions and /v1/chat/completions) → the response bytes, without the network or the
// engine.
//
// Input: the first byte picks the endpoint, the rest is the request body. A refusal must be an
// ApiError with a 4xx/5xx status; any other exception is what the server would answer with a
// 500, so it escapes and libFuzzer reports it. An accepted generation request gets a made-up
// result (its own prompt tokens as the "generated" ones, a finish reason picked by the input)
// pushed through every response builder, whole and streamed. Every response and error object is
// serialised as on the wire (to_wire) and must parse back as JSON (the oracle).
//
// The tokenizer is the fixture model's: $KVRUN_FUZZ_MODEL, else
// $KVRUN_FIXTURES/models/stories260K-F32.gguf. Built by tests/fuzz/CMakeLists.txt; run by
// scripts/fuzz_gguf.sh (seeds: tests/data/serve_api_seeds/).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "ggml-like/gguf.h"
#include "serve_api.h"
#include "serve_chat.h"
#include "serve_ollama.h"

namespace {

using kvrun::FinishReason;
using kvrun::RequestResult;
using kvrun::TokenEvent;
using kvrun::Tokenizer;
using namespace kvrun::tools;

std::unique_ptr<Tokenizer> g_tok;
ApiContext g_ctx;

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_serve_api: oracle failure: %s: %.300s\n", what, detail.c_str());
  std::abort();
}

/// Serialises `j` as the server sends it; it must parse back.
void check_wire(const json& j) {
  const std::string s = to_wire(j);
  if (json::parse(s, nullptr, false).is_discarded()) fail("to_wire output is not JSON", s);
}

/// A made-up result for `r`: its first prompt tokens as the generated ones.
RequestResult fake_result(const ApiRequest& r, uint8_t pick, std::vector<TokenEvent>& events) {
  RequestResult res;
  static constexpr FinishReason kReasons[] = {FinishReason::kEog,       FinishReason::kStopString,
                                              FinishReason::kLength,    FinishReason::kContextFull,
                                              FinishReason::kCancelled, FinishReason::kTimeout,
                                              FinishReason::kError};
  res.finish = kReasons[pick % 7];
  res.error = "made up";
  res.stop_word = r.params.stop.empty() ? "" : r.params.stop.front();
  res.n_prompt = int64_t(r.params.prompt.size());
  for (size_t i = 0; i < r.params.prompt.size() && i < 8; ++i) {
    TokenEvent ev;
    ev.id = r.params.prompt[i];
    ev.text = g_tok->token_to_piece(ev.id, false);  // may be a partial UTF-8 character
    ev.logprob = -1.0f;
    for (int k = 0; k < r.params.n_probs && k < 3; ++k) ev.top.push_back({ev.id, -1.0f});
    res.tokens.push_back(ev.id);
    res.text += ev.text;
    events.push_back(ev);
  }
  res.tail = res.text.substr(0, res.text.size() / 2);
  return res;
}

void generation(const ApiRequest& r, uint8_t pick) {
  std::vector<TokenEvent> events;
  const RequestResult res = fake_result(r, pick, events);
  if (auto err = result_error(res)) {
    check_wire(error_json(err->status, err->what(), err->type));
    return;
  }
  check_wire(response_json(r, res, events, g_ctx, "cmpl-1", 0));
  if (auto begin = stream_begin_json(r, g_ctx, "cmpl-1", 0)) check_wire(*begin);
  for (const TokenEvent& ev : events)
    if (auto chunk = stream_chunk_json(r, ev, g_ctx, "cmpl-1", 0)) check_wire(*chunk);
  for (const json& j : stream_end_json(r, res, g_ctx, "cmpl-1", 0)) check_wire(j);
}

void check_error(const ApiError& e) {
  if (e.status < 400 || e.status > 599) fail("ApiError status outside 4xx/5xx", e.what());
  check_wire(error_json(e.status, e.what(), e.type, e.param));
}

/// ollama's /api/generate (chat false) or /api/chat on the same body (serve_ollama.h): its
/// refusals are checked like the others, its replies go through every response builder.
void ollama(const json& b, bool chat, uint8_t pick) {
  try {
    if (auto load = ollama_load_only(b, g_ctx, chat)) return check_wire(*load);
    generation(chat ? parse_ollama_chat(b, g_ctx) : parse_ollama_generate(b, g_ctx), pick);
  } catch (const ApiError& e) {
    check_error(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string path;
  if (const char* m = std::getenv("KVRUN_FUZZ_MODEL"))
    path = m;
  else if (const char* f = std::getenv("KVRUN_FIXTURES"))
    path = std::string(f) + "/models/stories260K-F32.gguf";
  if (path.empty()) {
    std::fprintf(stderr, "fuzz_serve_api: set KVRUN_FUZZ_MODEL or KVRUN_FIXTURES\n");
    std::exit(2);
  }
  g_tok = std::make_unique<Tokenizer>(Tokenizer::from_gguf(kvrun::gguf::File::open(path)));
  g_ctx.tok = g_tok.get();
  g_ctx.n_ctx = 512;
  // ChatML with tools, tool calls as Hermes <tool_call> JSON (tool_calls.h), and <think> opened
  // by the generation prompt.
  g_ctx.chat = kvrun::ChatTemplate::parse(
      "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content if m.content is string }}"
      "{%- for c in m.tool_calls or [] %}<tool_call>\n{{ c.function | tojson }}\n</tool_call>"
      "{%- endfor %}<|im_end|>\n{% endfor %}{% if tools %}{{ tools | tojson }}{% endif %}"
      "{%- if enable_thinking is defined and not enable_thinking %}/no_think{% endif %}"
      "{%- if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}",
      "fuzz", {"<s>", "</s>"});
  g_ctx.model_name = "fuzz";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const json b = parse_body(body);
    switch (data[0] % 6) {
      case 0:
        generation(parse_llama_completion(b, g_ctx), data[0] / 6);
        break;
      case 1:
        ollama(b, false, data[0] / 6);
        generation(parse_completions(b, g_ctx), data[0] / 6);
        break;
      case 2:
        ollama(b, true, data[0] / 6);
        check_wire(apply_template_response(b, g_ctx));
        generation(parse_chat(b, g_ctx), data[0] / 6);
        break;
      case 3:
        generation(parse_infill(b, g_ctx), data[0] / 6);
        break;
      case 4:
        check_wire(tokenize_response(b, *g_tok));
        break;
      default:
        check_wire(detokenize_response(b, *g_tok));
        break;
    }
  } catch (const ApiError& e) {
    check_error(e);
  }
  return 0;
}
