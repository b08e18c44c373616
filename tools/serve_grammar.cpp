// serve_grammar.cpp — see serve_grammar.h.
#include "serve_grammar.h"

#include "serve_api.h"
#include "text/grammar.h"
#include "text/grammar_matcher.h"
#include "tools/grammar/json_schema.h"

namespace kvrun::tools {
namespace {

std::shared_ptr<const Grammar> compile_gbnf(const std::string& field, const std::string& gbnf) {
  try {
    return compile_grammar(gbnf);
  } catch (const GrammarError& e) {
    throw ApiError(400, "'" + field + "' is not a valid grammar: " + e.what(), field);
  }
}

std::shared_ptr<const Grammar> compile_schema(const std::string& field, const json& schema) {
  if (!schema.is_object() && !schema.is_boolean())
    throw ApiError(400, "'" + field + "' must be a JSON Schema object", field);
  try {
    return compile_gbnf(field, json_schema_to_gbnf(schema));
  } catch (const SchemaError& e) {
    throw ApiError(400, "'" + field + "': " + e.what(), field);
  }
}

std::shared_ptr<const Grammar> from_response_format(const json& rf) {
  const std::string field = "response_format";
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    throw ApiError(400, "'response_format' must be an object with a string 'type'", field);
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return nullptr;
  if (type == "json_object") {
    if (rf.contains("schema") && !rf["schema"].is_null())
      return compile_schema("response_format.schema", rf["schema"]);
    return compile_gbnf(field, json_object_gbnf());
  }
  if (type == "json_schema") {
    const auto it = rf.find("json_schema");
    if (it == rf.end() || !it->is_object() || !it->contains("schema"))
      throw ApiError(400, "'response_format' of type json_schema needs json_schema.schema", field);
    return compile_schema("response_format.json_schema.schema", (*it)["schema"]);
  }
  throw ApiError(
      400, "'response_format' type must be text, json_object or json_schema, not '" + type + "'",
      field);
}

}  // namespace

void parse_grammar_fields(const json& j, RequestParams& params) {
  const auto present = [&](const char* key) {
    const auto it = j.find(key);
    return it != j.end() && !it->is_null();
  };
  const int n = present("grammar") + present("json_schema") + present("response_format");
  if (n > 1)
    throw ApiError(400, "give only one of 'grammar', 'json_schema' and 'response_format'",
                   "grammar");
  if (present("grammar")) {
    if (!j["grammar"].is_string()) throw ApiError(400, "'grammar' must be a string", "grammar");
    // llama-server treats an empty grammar as none.
    if (!j["grammar"].get<std::string>().empty())
      params.grammar = compile_gbnf("grammar", j["grammar"].get<std::string>());
  } else if (present("json_schema")) {
    params.grammar = compile_schema("json_schema", j["json_schema"]);
  } else if (present("response_format")) {
    params.grammar = from_response_format(j["response_format"]);
  }
}

std::shared_ptr<const Grammar> forced_tool_call_grammar(ToolCallFormat format, const json& tools,
                                                        const std::string& only) {
  const char* args_key = format == ToolCallFormat::kLlama3 ? "parameters" : "arguments";
  json alternatives = json::array();
  for (const json& t : tools) {
    const json& fn = t["function"];
    const std::string name = fn["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    json params = fn.contains("parameters") && fn["parameters"].is_object()
                      ? fn["parameters"]
                      : json{{"type", "object"}};
    alternatives.push_back({{"type", "object"},
                            {"properties", {{"name", {{"const", name}}}, {args_key, params}}},
                            {"required", {"name", args_key}},
                            {"additionalProperties", false}});
  }
  if (alternatives.empty())
    throw ApiError(400, "tool_choice names function '" + only + "', which is not in tools",
                   "tool_choice");
  std::string call;
  try {
    call = json_schema_to_gbnf(alternatives.size() == 1 ? alternatives[0]
                                                        : json{{"anyOf", alternatives}});
  } catch (const std::exception& e) {
    throw ApiError(400, std::string("tool_choice: a tool's parameters: ") + e.what(),
                   "tool_choice");
  }
  // The converter's start rule becomes the call; the format's markers go around it.
  const size_t at = call.find("root ::=");
  if (at == std::string::npos) throw ApiError(500, "schema grammar without a root rule");
  call.replace(at, 8, "tool-call ::=");
  std::string root;
  switch (format) {
    case ToolCallFormat::kHermes:
      root = "root ::= \"<tool_call>\\n\" tool-call \"\\n</tool_call>\"\n";
      break;
    case ToolCallFormat::kLlama3:
      root = "root ::= tool-call\n";
      break;
    case ToolCallFormat::kMistral:
      root = "root ::= \"[TOOL_CALLS][\" tool-call \"]\"\n";
      break;
    default:
      throw ApiError(400,
                     "tool_choice \"required\" or a named function is not supported for this "
                     "template's tool-call format (only Hermes/Qwen, Llama 3 and Mistral)",
                     "tool_choice");
  }
  return compile_gbnf("tool_choice", root + call);
}

}  // namespace kvrun::tools
