// serve_chat.h — the chat side of `kvrun serve`: /v1/chat/completions messages, tools,
// tool_choice and chat_template_kwargs checked and rendered with the chat template (POST
// /apply-template too), and the reply split into content, reasoning_content and tool_calls
// (whole or streamed as OpenAI's delta.tool_calls). Field by field: docs/http-api.md.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "serve_api.h"
#include "text/tool_calls.h"

namespace kvrun::tools {

/// How one chat request's reply is split (see ApiRequest::chat_reply).
struct ChatReply {
  ToolCallFormat format = ToolCallFormat::kNone;  ///< kNone: no tool calls are parsed
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  bool thinking_open = false;  ///< the prompt ends inside <think>
  bool parallel = true;        ///< parallel_tool_calls: more than one call per reply
  std::string id_prefix;       ///< tool-call ids are id_prefix + index
  /// The streaming parser (stream_chunk_json feeds it) and how many calls it has returned.
  std::unique_ptr<ChatOutputParser> stream;
  int n_calls = 0;
  /// tool_choice "required" / a named function: the grammar the reply must follow (else null).
  std::shared_ptr<const Grammar> grammar;
};

/// The prompt text of a /v1/chat/completions or /apply-template body: `messages` (roles system,
/// developer, user, assistant with optional tool_calls, tool), `tools`, `tool_choice`,
/// `parallel_tool_calls`, `add_generation_prompt` (default true) and `chat_template_kwargs`
/// rendered with the server's template. Without a template the message contents are joined
/// (no tools then). tool_choice "required" or a named function sets ChatReply::grammar (one
/// well-formed call). Throws ApiError 400 for a malformed field, a forced call the template's
/// format cannot be forced in (serve_grammar.h), or a template that raises (its message and
/// line). When `reply` is given it is set up for parsing the reply.
std::string render_chat_body(const json& body, const ApiContext& ctx,
                             std::shared_ptr<ChatReply>* reply);

/// POST /apply-template: {"prompt": text} for a chat-completions body. Throws as
/// render_chat_body; 400 when the server has no chat template.
json apply_template_response(const json& body, const ApiContext& ctx);

/// The assistant message object for a whole reply `text`: content (null when only calls),
/// reasoning_content when there was thinking, tool_calls when calls were parsed.
json chat_message_json(const ChatReply* reply, const std::string& text, bool* has_calls);

/// The delta object for the next streamed piece of the reply (final: the reply ended, `text` is
/// the released tail), or an empty object when nothing is known yet. Sets `*has_calls` once a
/// call has been streamed.
json chat_stream_delta(ChatReply* reply, const std::string& text, bool final, bool* has_calls);

}  // namespace kvrun::tools
