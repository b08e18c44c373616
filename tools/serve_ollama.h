// serve_ollama.h — ollama's generation endpoints on `kvrun serve`: POST /api/generate and POST
// /api/chat, as an adapter over the OpenAI / llama.cpp request parsers (serve_api.h,
// serve_chat.h) and the one generation path (Server::generate in serve.cpp). Requests are
// translated into a checked ApiRequest; replies are ollama's objects, streamed as NDJSON (one
// JSON object per line, application/x-ndjson). Source of the format: ollama's docs/api.md
// (github.com/ollama/ollama). Field by field: docs/http-api.md.
#pragma once

#include <optional>
#include <string>

#include "serve_api.h"

namespace kvrun::tools {

/// ollama's model-name rule for this one-model server: `name` with or without ":latest" must be
/// the served model's name. Throws ApiError 400 when `name` is empty ("'model' is required") and
/// 404 when it names another model.
void check_ollama_model(std::string name, const std::string& served);

/// True for the ollama endpoints (NDJSON streams, {"error": "..."} error objects).
inline bool is_ollama(Api a) { return a == Api::kOllamaGenerate || a == Api::kOllamaChat; }

/// POST /api/generate: model, prompt, suffix (FIM), system, raw, stream (default true), format,
/// options, keep_alive (ignored). Without raw the prompt (and system) are rendered as one user
/// turn with the chat template. Throws ApiError 400 naming the field (template, images, context,
/// an option kvrun cannot honour, a suffix on a model without FIM tokens), 404 for another model.
ApiRequest parse_ollama_generate(const json& body, const ApiContext& ctx);

/// POST /api/chat: model, messages (role, content, tool_calls with object arguments, role "tool"
/// with tool_name), tools, stream (default true), format, options, keep_alive (ignored). Throws
/// as parse_ollama_generate, and as render_chat_body for the messages.
ApiRequest parse_ollama_chat(const json& body, const ApiContext& ctx);

/// ollama's answer to a request that only loads the model (generate with an empty prompt, chat
/// with no messages): {"model", "created_at", "response"/"message", "done": true,
/// "done_reason": "load"}; nullopt for any other request. `chat`: the /api/chat form.
std::optional<json> ollama_load_only(const json& body, const ApiContext& ctx, bool chat);

/// "model" in every reply is the name the request gave (e.g. with ":latest").
/// The whole reply (stream false), or the final NDJSON line of a stream when `tail_only` (then the
/// text is the part released at the end, res.tail): the response or message, "done": true,
/// "done_reason" ("stop" or "length") and the counters (eval_count, prompt_eval_count) and
/// durations in nanoseconds (total_duration, load_duration 0, prompt_eval_duration,
/// eval_duration).
json ollama_final_json(const ApiRequest& r, const RequestResult& res, const ApiContext& ctx,
                       bool tail_only);

/// One NDJSON line for a token event ("done": false), or nullopt when it adds nothing visible.
std::optional<json> ollama_chunk_json(const ApiRequest& r, const TokenEvent& ev,
                                      const ApiContext& ctx);

/// An OpenAI-style assistant message or stream delta (chat_message_json, chat_stream_delta) as
/// ollama's message: role "assistant", content ("" for null), thinking (from
/// reasoning_content), tool_calls [{"function": {"name", "arguments": object}}] (arguments that
/// are not a JSON object stay a string).
json ollama_message(const json& openai_message);

/// The time now as ollama writes created_at: RFC 3339 in UTC with nanoseconds.
std::string ollama_created_at();

}  // namespace kvrun::tools
