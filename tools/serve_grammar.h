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

namespace kvrun::tools {

/// Reads the grammar fields of request body `j` into `params.grammar` (left null without
/// them). Throws ApiError 400 naming the field: two of them at once, a malformed value, invalid
/// GBNF (with its line and column), or an unsupported JSON Schema keyword (with its place).
void parse_grammar_fields(const nlohmann::ordered_json& j, RequestParams& params);

}  // namespace kvrun::tools
