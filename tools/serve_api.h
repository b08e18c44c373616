// serve_api.h — the JSON side of `kvrun serve`: request bodies of the OpenAI-compatible and
// llama.cpp-compatible endpoints checked and turned into scheduler requests, and the response
// objects (whole and streamed). No HTTP here (serve.cpp), no engine (src/engine/scheduler.h).
// Field by field reference: docs/http-api.md.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/scheduler.h"
#include "serve_fim.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "text/tool_calls.h"

namespace kvrun::tools {

using json = nlohmann::ordered_json;

/// A request the server refuses: HTTP status and an OpenAI-style error object
/// {"error": {"message", "type", "param", "code"}}.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = "",
           std::string type = "invalid_request_error")
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)) {}
  int status;
  std::string type;
  std::string param;
};

/// Throws ApiError 400 "'<param>' <what>" naming the request field `param`.
[[noreturn]] void bad_field(const std::string& param, const std::string& what);

/// The member `key` of the JSON object `j`, or nullptr when it is absent or null.
const json* json_field(const json& j, const char* key);

/// The error object of `e`.
json error_json(int status, const std::string& message, const std::string& type,
                const std::string& param = "");

/// Which endpoint a generation request came through (its response format; the ollama ones are
/// answered by serve_ollama.h and streamed as NDJSON).
enum class Api { kCompletions, kChat, kLlamaCompletion, kOllamaGenerate, kOllamaChat };

/// What the server knows when it reads a request.
struct ApiContext {
  const Tokenizer* tok = nullptr;
  std::optional<ChatTemplate> chat;  ///< the chat template; nullopt: contents joined as text
  ReasoningFormat reasoning = ReasoningFormat::kDeepseek;  ///< --reasoning-format
  int64_t n_ctx = 0;                                       ///< per-session context length
  int64_t n_batch = 0;     ///< -b: tokens one step evaluates (FIM budgets, serve_fim.h; 0: n_ctx)
  double timeout_s = 0;    ///< --timeout
  std::string model_name;  ///< for "model" fields
  /// The model is an encoder (bert, nomic-bert): the generation endpoints answer 501
  /// not_supported_error, the embeddings endpoints work.
  bool embeddings_only = false;
  /// --spm-infill: fill-in-the-middle prompts in suffix-prefix-middle order (serve_fim.h).
  bool spm_infill = false;
};

/// A checked generation request.
struct ApiRequest {
  Api api = Api::kCompletions;
  RequestParams params;        ///< for the scheduler (prompt tokenized)
  bool stream = false;         ///< server-sent events
  bool include_usage = false;  ///< OpenAI stream_options.include_usage
  bool logprobs = false;       ///< OpenAI: logprobs asked for
  bool return_tokens = false;  ///< llama.cpp: "tokens" in the response
  /// llama.cpp n_predict 0 (OpenAI max_tokens 0, ollama num_predict 0): the prompt is evaluated
  /// (warming the prefix cache) and no token is sampled (the scheduler's n_predict 0).
  bool no_tokens = false;
  /// llama.cpp response_fields: only these members ("a/b" = member b of member a) in the
  /// /completion and /infill response, keyed by the path as given; empty: all.
  std::vector<std::string> response_fields;
  /// ollama: the model name as the request gave it (echoed in "model"; "" = the server's).
  std::string reply_model;
  /// ollama /api/generate without `raw`: the final object carries `context`, the prompt's ids
  /// (an accepted `context` included) followed by the generated ids, for the next call.
  bool return_context = false;
  /// Chat: how the reply is split into content, reasoning and tool calls (serve_chat.h).
  std::shared_ptr<struct ChatReply> chat_reply;
};

/// Deepest nesting of arrays and objects a request body may have (else 400).
constexpr int kMaxJsonDepth = 64;
/// Most tokens /tokenize returns and /detokenize reads (else 413): bounds one request's memory.
constexpr size_t kMaxApiTokens = size_t(1) << 18;

/// `j` as sent on the wire: invalid UTF-8 in strings (a partial character of a byte token)
/// becomes U+FFFD instead of throwing.
std::string to_wire(const json& j);

/// True when `s` is well-formed UTF-8 (no partial, overlong or surrogate sequences).
bool is_valid_utf8(std::string_view s);

/// A token's text for /tokenize's with_pieces: the piece as a string when it is valid UTF-8,
/// else its bytes as an array of numbers (as llama-server does).
json piece_json(const std::string& piece);

/// Parses a body as a JSON object; throws ApiError 400 (malformed JSON, not an object, nested
/// deeper than kMaxJsonDepth).
json parse_body(const std::string& body);

/// POST /v1/completions. With `suffix`, the prompt (a string) and the suffix become the
/// fill-in-the-middle prompt of /infill (serve_fim.h). Throws ApiError 400 for a wrong type, a
/// value out of range, a missing or empty prompt, a prompt longer than n_ctx, or a `suffix` for
/// a model without FIM tokens.
ApiRequest parse_completions(const json& body, const ApiContext& ctx);
/// POST /v1/chat/completions (messages, tools and chat_template_kwargs rendered with the chat
/// template, serve_chat.h). Throws as above, and 400 when the template raises.
ApiRequest parse_chat(const json& body, const ApiContext& ctx);
/// POST /completion (llama.cpp). Throws as above.
ApiRequest parse_llama_completion(const json& body, const ApiContext& ctx);
/// POST /infill (llama.cpp): input_prefix, input_suffix, input_extra and prompt laid out
/// around the model's FIM tokens by fim_prompt (serve_fim.h). Throws ApiError 400 when the model
/// has no FIM tokens, for an input_extra that is not an array of {filename, text} strings, or
/// as above.
ApiRequest parse_infill(const json& body, const ApiContext& ctx);

/// The FIM budget of a request that may generate `n_predict` tokens (< 0: unbounded).
FimBudget fim_budget(const ApiContext& ctx, int64_t n_predict);
/// The FIM order of the server (--spm-infill: FimOrder::kSpm).
FimOrder fim_order(const ApiContext& ctx);

/// The whole (non-streamed) response. `events` are the request's token events in order.
json response_json(const ApiRequest& r, const RequestResult& res,
                   const std::vector<TokenEvent>& events, const ApiContext& ctx,
                   const std::string& id, int64_t created);
/// One streamed chunk for a token event, or nullopt when there is nothing to send for it.
std::optional<json> stream_chunk_json(const ApiRequest& r, const TokenEvent& ev,
                                      const ApiContext& ctx, const std::string& id,
                                      int64_t created);
/// The chunks that end a stream (text released at the end, finish reason, usage), in order.
std::vector<json> stream_end_json(const ApiRequest& r, const RequestResult& res,
                                  const ApiContext& ctx, const std::string& id, int64_t created);
/// The first chunk of a chat stream (the assistant role), or nullopt for other APIs.
std::optional<json> stream_begin_json(const ApiRequest& r, const ApiContext& ctx,
                                      const std::string& id, int64_t created);

/// POST /tokenize: {"content", "add_special", "with_pieces"} → {"tokens": [ids]} or
/// {"tokens": [{"id", "piece"}]} (see piece_json). Throws ApiError 400 (wrong types), 413 (more
/// than kMaxApiTokens tokens).
json tokenize_response(const json& body, const Tokenizer& tok);
/// POST /detokenize: {"tokens": [ids]} → {"content": text}; the text may end inside a UTF-8
/// character (send it with to_wire). Throws ApiError 400 (not ids, outside the vocabulary), 413.
json detokenize_response(const json& body, const Tokenizer& tok);

/// The HTTP status and error object for a request that ended with timeout or error.
std::optional<ApiError> result_error(const RequestResult& res);

}  // namespace kvrun::tools
