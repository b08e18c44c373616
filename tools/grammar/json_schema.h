// json_schema.h — JSON Schema (https://json-schema.org, draft 2020-12 keywords) → a GBNF grammar
// (src/text/grammar.h) whose sentences are JSON texts valid against the schema. The supported
// keywords follow what llama.cpp's json-schema-to-grammar converts (common/json-schema-to-
// grammar.cpp; grammars/README.md); the code is kvrun's own.
//
// Supported: type (one or a list of object, array, string, number, integer, boolean, null),
// properties, required, additionalProperties (false, true or a schema; absent with properties
// given: no extra keys are generated, which every schema allows), items, prefixItems, minItems,
// maxItems, enum, const, anyOf, oneOf (generated as anyOf), allOf (of object schemas: merged),
// $ref to "#", "#/$defs/NAME" and "#/definitions/NAME" (recursion allowed), minLength,
// maxLength, pattern (a regex subset: literals, escapes \d \w \s \D \W \S, classes, ., groups,
// (?:...), |, * + ? {m} {m,} {m,n}; always generated as a full match), format date, time,
// date-time, uuid. Annotations (title, description, default, examples, $schema, $id,
// $comment, readOnly, writeOnly, deprecated) are ignored. Anything else is refused with a
// SchemaError naming the keyword and where it is, never ignored.
//
// The generated JSON has keys in the order of "properties", whitespace limited to one space or
// one newline plus up to 20 blanks between tokens, numbers with at most 16 digits per part.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace kvrun::tools {

/// A schema the converter cannot express or that is malformed; what() names the keyword and
/// its JSON pointer, e.g. "unsupported keyword 'minimum' at /properties/age".
class SchemaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The GBNF text of `schema` (root rule `root`; keys are generated in the order the schema's
/// "properties" list them, hence ordered_json). Throws SchemaError.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);

/// The GBNF text of any JSON object (response_format {"type": "json_object"}).
std::string json_object_gbnf();

/// Translates a regular expression (JSON Schema "pattern", ECMA-262 subset above) into a GBNF
/// expression over the JSON-encoded characters of a string's content (no quotes). Throws
/// SchemaError for an unsupported construct.
std::string regex_to_gbnf(const std::string& pattern);

}  // namespace kvrun::tools
