// grammar_source.cpp — see grammar_source.h.
#include "tools/grammar/grammar_source.h"

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "text/grammar_matcher.h"
#include "tools/grammar/json_schema.h"

namespace kvrun::tools {
namespace {

std::string read_file(const std::string& option, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw GrammarSourceError(option + " " + path + ": cannot read the file");
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::shared_ptr<const Grammar> from_gbnf(const std::string& what, const std::string& text) {
  try {
    return compile_grammar(text);
  } catch (const GrammarError& e) {
    throw GrammarSourceError(what + ": " + e.what());
  }
}

std::shared_ptr<const Grammar> from_schema(const std::string& what, const std::string& text) {
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw GrammarSourceError(what + ": invalid JSON: " + e.what());
  }
  try {
    return from_gbnf(what, json_schema_to_gbnf(schema));
  } catch (const SchemaError& e) {
    throw GrammarSourceError(what + ": " + e.what());
  }
}

}  // namespace

std::shared_ptr<const Grammar> compile_grammar_source(const GrammarSource& src) {
  const int n = !src.grammar.empty() + !src.grammar_file.empty() + !src.json_schema.empty() +
                !src.json_schema_file.empty();
  if (n > 1)
    throw GrammarSourceError(
        "give one of --grammar, --grammar-file, --json-schema, --json-schema-file");
  if (!src.grammar.empty()) return from_gbnf("--grammar", src.grammar);
  if (!src.grammar_file.empty())
    return from_gbnf("--grammar-file " + src.grammar_file,
                     read_file("--grammar-file", src.grammar_file));
  if (!src.json_schema.empty()) return from_schema("--json-schema", src.json_schema);
  if (!src.json_schema_file.empty())
    return from_schema("--json-schema-file " + src.json_schema_file,
                       read_file("--json-schema-file", src.json_schema_file));
  return nullptr;
}

}  // namespace kvrun::tools
