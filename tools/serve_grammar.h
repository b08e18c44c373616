// serve_grammar.h — the grammar fields of `kvrun serve`'s generation requests:
//   llama.cpp's /completion (and, as llama-server allows, the OpenAI endpoints too):
//     "grammar": GBNF text, "json_schema": a JSON Schema object;
//   OpenAI /v1/chat/completions and /v1/completions:
//     "response_format": {"type": "text"} | {"type": "json_object"} (any JSON object; llama.cpp
//     also reads an optional "schema" there) | {"type": "json_schema",
//     "json_schema": {"name", "description", "strict", "schema": {...}}}.
// At most one of them per request. Field reference: docs/http-api.md.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/scheduler.h"
#include "text/tool_calls.h"

namespace kvrun::tools {

/// Reads the grammar fields of request body `j` into `params.grammar` (left null without
/// them). Throws ApiError 400 naming the field: two of them at once, a malformed value, invalid
/// GBNF (with its line and column), or an unsupported JSON Schema keyword (with its place).
void parse_grammar_fields(const nlohmann::ordered_json& j, RequestParams& params);

/// The grammar of a reply that is one well-formed tool call (tool_choice "required", or a named
/// function when `only` is not empty): `format`'s call syntax around the JSON object the parser
/// reads — {"name": a tool's name, "arguments" (Llama 3: "parameters"): that tool's `parameters`
/// schema, converted by json_schema_to_gbnf}. Formats: Hermes/Qwen `<tool_call>…</tool_call>`,
/// Llama 3 JSON, Mistral `[TOOL_CALLS][…]`. Throws ApiError 400 (field tool_choice) for another
/// format, an unknown function name, or a parameters schema the converter refuses (its message).
std::shared_ptr<const Grammar> forced_tool_call_grammar(ToolCallFormat format,
                                                        const nlohmann::ordered_json& tools,
                                                        const std::string& only);

}  // namespace kvrun::tools
