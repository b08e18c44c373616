// test_json_schema.cpp — JSON Schema → GBNF (tools/grammar/json_schema.cpp) and constrained
// generation end to end: for each schema below, `kvrun -p ... --json-schema-file` samples at a
// high temperature over the whole distribution (top-k/top-p/min-p off) from the stories260K
// fixture, and every output must parse as JSON and validate against its schema with Python's
// jsonschema (tests/data/validate_json_schema.py, Debian's python3-jsonschema) as the oracle.
// Also: the converter's errors, the regex subset, and the CLI's exit 2 on bad grammars.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "test_util.h"
#include "text/grammar.h"
#include "text/grammar_matcher.h"
#include "tools/grammar/json_schema.h"

namespace fs = std::filesystem;
namespace test = kvrun::test;
using json = nlohmann::ordered_json;
using kvrun::GrammarMatcher;
using kvrun::tools::json_schema_to_gbnf;
using kvrun::tools::SchemaError;

namespace {

const char* kModel = "models/stories260K-F32.gguf";

/// The schemas sampled from (each at several seeds).
const char* kSchemas[] = {
    R"({"type": "string", "maxLength": 10})",
    R"({"type": "integer"})",
    R"({"type": "number"})",
    R"({"type": "boolean"})",
    R"({"type": "null"})",
    R"({"enum": ["red", "green", 3, null, {"a": 1}]})",
    R"({"const": {"x": [1, 2], "y": "z"}})",
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer"}, "email": {"type": "string", "maxLength": 10}},
        "required": ["name"]})",
    R"({"type": "object", "additionalProperties": false, "properties": {
        "a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "integer"}}})",
    R"({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
        "additionalProperties": {"type": "integer"}})",
    R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4})",
    R"({"type": "array", "prefixItems": [{"type": "string", "maxLength": 3},
        {"type": "integer"}], "items": false})",
    R"({"type": "object", "properties": {"points": {"type": "array", "maxItems": 3,
        "items": {"type": "object", "properties": {"x": {"type": "number"},
        "y": {"type": "number"}}, "required": ["x", "y"]}}}, "required": ["points"]})",
    R"({"anyOf": [{"type": "string", "maxLength": 5}, {"type": "integer"}]})",
    R"({"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}, "v": {"type": "integer"}},
         "required": ["kind", "v"]},
        {"type": "object", "properties": {"kind": {"const": "b"},
         "s": {"type": "string", "maxLength": 4}}, "required": ["kind", "s"]}]})",
    R"({"type": "object", "allOf": [
        {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
        {"properties": {"b": {"type": "boolean"}}, "required": ["b"]}]})",
    R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v"]}}, "$ref": "#/$defs/node"})",
    R"({"type": "string", "format": "date"})",
    R"({"type": "string", "format": "date-time"})",
    R"({"type": "string", "format": "time"})",
    R"({"type": "string", "format": "uuid"})",
    R"({"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,4}$"})",
    R"({"type": "string", "pattern": "^(foo|ba[rz])+\\.txt$"})",
    R"({"type": "string", "minLength": 3, "maxLength": 6})",
    R"({"type": ["string", "null"], "maxLength": 4})",
    R"({"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 5})",
    R"({"type": "object", "properties": {}, "additionalProperties": false})",
    R"({"title": "T", "description": "annotations are ignored", "type": "integer",
        "examples": [1]})",
};

/// Why the oracle cannot run here, or "" when python3 with jsonschema is available.
std::string oracle_missing() {
  if (!fs::exists("/usr/bin/python3")) return "/usr/bin/python3 not found";
  if (test::run_command("/usr/bin/python3 -c 'import jsonschema'").exit_code != 0)
    return "python3-jsonschema is not installed for /usr/bin/python3";
  return "";
}

std::string error_of(const std::string& schema) {
  try {
    json_schema_to_gbnf(json::parse(schema));
  } catch (const SchemaError& e) {
    return e.what();
  }
  return "";
}

/// Whether `value` (JSON text) is a sentence of `schema`'s grammar.
bool schema_accepts(const std::string& schema, const std::string& value) {
  GrammarMatcher m(std::make_shared<const kvrun::Grammar>(
      kvrun::parse_grammar(json_schema_to_gbnf(json::parse(schema)))));
  return m.matches(value);
}

TEST(JsonSchema, EveryTestSchemaConverts) {
  for (const char* s : kSchemas) {
    SCOPED_TRACE(s);
    std::string gbnf;
    ASSERT_NO_THROW(gbnf = json_schema_to_gbnf(json::parse(s)));
    EXPECT_NO_THROW(kvrun::parse_grammar(gbnf)) << gbnf;
  }
}

/// Replaces one value somewhere in `j` with `v` (the k-th value in preorder).
bool mutate(json& j, int& k, const json& v) {
  if (k-- == 0) {
    j = v;
    return true;
  }
  if (j.is_object()) {
    for (auto& [key, child] : j.items())
      if (mutate(child, k, v)) return true;
  } else if (j.is_array()) {
    for (auto& child : j)
      if (mutate(child, k, v)) return true;
  }
  return false;
}

TEST(JsonSchema, MalformedSchemasAreSchemaErrorsAndOutputAlwaysParses) {
  std::mt19937 rng(17);
  const json values[] = {nullptr,
                         0,
                         -1,
                         3.5,
                         "",
                         "x",
                         "#",
                         json::array(),
                         json::array({1, "a"}),
                         json::object(),
                         json{{"type", "integer"}},
                         true,
                         false,
                         100000};
  int n_ok = 0, n_refused = 0;
  for (int round = 0; round < 3000; ++round) {
    json schema = json::parse(kSchemas[rng() % std::size(kSchemas)]);
    for (int m = 0, n = 1 + int(rng() % 3); m < n; ++m) {
      int k = int(rng() % 40);
      mutate(schema, k, values[rng() % std::size(values)]);
    }
    std::string gbnf;
    try {
      gbnf = json_schema_to_gbnf(schema);
    } catch (const SchemaError&) {
      ++n_refused;
      continue;
    }
    EXPECT_NO_THROW(kvrun::parse_grammar(gbnf)) << schema.dump() << "\n" << gbnf;
    ++n_ok;
  }
  EXPECT_GT(n_ok, 100);
  EXPECT_GT(n_refused, 100);
}

TEST(JsonSchema, RandomPatternsConvertOrAreRefused) {
  std::mt19937 rng(5);
  const std::string alphabet = "ab()[]^$-|*+?{},.\\dws\"/:0129é";
  int n_ok = 0;
  for (int round = 0; round < 5000; ++round) {
    std::string p;
    for (int k = 0, n = int(rng() % 14); k < n; ++k) p += alphabet[rng() % alphabet.size()];
    std::string gbnf;
    try {
      gbnf = kvrun::tools::regex_to_gbnf(p);
    } catch (const SchemaError&) {
      continue;
    }
    ++n_ok;
    EXPECT_NO_THROW(kvrun::parse_grammar("root ::= " + gbnf)) << p << " → " << gbnf;
  }
  EXPECT_GT(n_ok, 500);
}

TEST(JsonSchema, UnsupportedIsAnErrorNamingIt) {
  EXPECT_EQ(error_of(R"({"type": "number", "minimum": 3})"), "unsupported keyword 'minimum' at #");
  EXPECT_EQ(error_of(R"({"properties": {"a": {"type": "string", "format": "email"}}})"),
            "unsupported string format '\"email\"' at #/properties/a");
  EXPECT_EQ(error_of(R"({"$ref": "http://x/y.json"})"),
            "remote $ref 'http://x/y.json' is not supported at #");
  EXPECT_EQ(error_of(R"({"$ref": "#/$defs/missing"})"),
            "$ref '#/$defs/missing' points to nothing at #");
  EXPECT_EQ(error_of(R"({"type": "array", "items": {"uniqueItems": true}})"),
            "unsupported keyword 'uniqueItems' at #/items");
  EXPECT_EQ(error_of(R"({"type": "strin"})"), "unknown type 'strin' at #");
  EXPECT_EQ(error_of("false"), "schema 'false' allows no value at #");
  EXPECT_EQ(error_of(R"j({"type": "string", "pattern": "a(?=b)"})j"),
            "pattern 'a(?=b)': lookaround and named groups are not supported at offset 2");
  EXPECT_EQ(error_of(R"j({"type": "string", "pattern": "(a)\\1"})j"),
            "pattern '(a)\\1': unsupported escape '\\1' at offset 5");
  EXPECT_EQ(error_of(R"({"type": "array", "minItems": 3, "maxItems": 2})"),
            "'maxItems' below 'minItems' at #");
  // A "type" beside enum/const is checked, never ignored: malformed, or matching no value.
  EXPECT_EQ(error_of(R"({"enum": [1, 2], "type": 5})"),
            "'type' must name JSON types (null, boolean, integer, number, string, array, "
            "object) at #");
  EXPECT_EQ(error_of(R"({"const": "a", "type": "integer"})"),
            "no 'enum'/'const' value has the schema's 'type' at #");
}

TEST(JsonSchema, TypeBesideEnumKeepsTheValuesOfThatType) {
  const std::string s = R"({"enum": [1, "a", 2.0, null], "type": ["string", "integer"]})";
  EXPECT_TRUE(schema_accepts(s, R"("a")"));
  EXPECT_TRUE(schema_accepts(s, "1"));
  EXPECT_TRUE(schema_accepts(s, "2.0"));
  EXPECT_FALSE(schema_accepts(s, "null"));
}

TEST(JsonSchema, GrammarAcceptsAndRejects) {
  const char* person = R"({"type": "object", "properties": {"name": {"type": "string"},
      "age": {"type": "integer"}}, "required": ["age"]})";
  EXPECT_TRUE(schema_accepts(person, R"({"name": "Ann", "age": 3})"));
  EXPECT_TRUE(schema_accepts(person, R"({"age": -3})"));
  EXPECT_FALSE(schema_accepts(person, R"({"name": "Ann"})"));            // age is required
  EXPECT_FALSE(schema_accepts(person, R"({"age": 3, "name": "Ann"})"));  // properties' order
  EXPECT_FALSE(schema_accepts(person, R"({"age": 3.5})"));
  EXPECT_FALSE(schema_accepts(person, R"({"age": 3, "x": 1})"));  // no additional properties
  const char* pat = R"({"type": "string", "pattern": "^[a-c\"]+\\d?$"})";
  EXPECT_TRUE(schema_accepts(pat, R"("ab\"c7")"));
  EXPECT_FALSE(schema_accepts(pat, R"("abd")"));
  EXPECT_FALSE(schema_accepts(pat, R"("ab"c")"));  // the quote must be escaped in JSON
  const char* arr = R"({"type": "array", "items": {"type": "boolean"}, "maxItems": 2})";
  EXPECT_TRUE(schema_accepts(arr, "[]"));
  EXPECT_TRUE(schema_accepts(arr, "[true, false]"));
  EXPECT_FALSE(schema_accepts(arr, "[true, false, true]"));
  EXPECT_TRUE(schema_accepts(R"({"type": "string", "format": "date"})", R"("2024-02-28")"));
  EXPECT_FALSE(schema_accepts(R"({"type": "string", "format": "date"})", R"("2024-02-30")"));
  EXPECT_FALSE(schema_accepts(R"({"type": "string", "maxLength": 2})", R"("abc")"));
  EXPECT_TRUE(schema_accepts(R"({"type": "string", "maxLength": 2})", R"("\u00e9\n")"));
}

/// Samples every schema at a few seeds and validates the outputs with the oracle.
TEST(JsonSchema, SampledOutputsValidate) {
  const std::string why = oracle_missing();
  if (!why.empty()) GTEST_SKIP() << why;
  const fs::path model = test::fixture(kModel);
  if (!fs::exists(model)) GTEST_SKIP() << "fixture missing: " << model;
  test::TempDir dir;
  json items = json::array();
  int n_truncated = 0;
  for (size_t i = 0; i < std::size(kSchemas); ++i) {
    const fs::path schema_file = dir.path() / ("schema" + std::to_string(i) + ".json");
    std::ofstream(schema_file) << kSchemas[i];
    int n_complete = 0;
    for (int seed = 1; seed <= 3; ++seed) {
      const auto r = test::run_command(
          test::kvrun_binary() + " -m " + model.string() + " -p 'Once upon a time' -n 1500" +
          " --temp 2 --top-k 0 --top-p 1 --min-p 0 -s " + std::to_string(seed) +
          " --json --json-schema-file " + schema_file.string());
      ASSERT_EQ(r.exit_code, 0) << kSchemas[i] << "\n" << r.err;
      const json out = json::parse(r.out);
      if (out["stop"] != "eog") {  // ran out of tokens: the text is a prefix, not checkable
        ++n_truncated;
        continue;
      }
      ++n_complete;
      items.push_back({{"schema", json::parse(kSchemas[i])}, {"text", out["text"]}});
    }
    // A random model may go on adding extra keys until the context is full.
    const bool open_ended =
        std::string(kSchemas[i]).find("\"additionalProperties\": {") != std::string::npos;
    if (!open_ended) {
      EXPECT_GT(n_complete, 0) << "no complete output for " << kSchemas[i];
    }
  }
  EXPECT_LE(n_truncated, 8) << "too many outputs ran out of tokens";
  const fs::path items_file = dir.path() / "items.json";
  std::ofstream(items_file) << items.dump();
  const auto r =
      test::run_command("/usr/bin/python3 '" + test::test_data("validate_json_schema.py").string() +
                        "' '" + items_file.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json verdicts = json::parse(r.out);
  ASSERT_EQ(verdicts.size(), items.size());
  for (size_t k = 0; k < items.size(); ++k)
    EXPECT_TRUE(verdicts[k].is_null()) << verdicts[k] << "\nschema: " << items[k]["schema"].dump()
                                       << "\ntext: " << items[k]["text"].get<std::string>();
  std::printf("validated %zu outputs (%d ran out of tokens)\n", items.size(), n_truncated);
}

TEST(JsonSchema, CliRefusesBadGrammarsWithExit2) {
  const fs::path model = test::fixture(kModel);
  if (!fs::exists(model)) GTEST_SKIP() << "fixture missing: " << model;
  const std::string base = test::kvrun_binary() + " -m " + model.string() + " -p hi ";
  auto r = test::run_command(base + "--grammar 'root ::= \"a\" x'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "kvrun: error: --grammar: line 1, column 14: undefined rule 'x'\n");
  r = test::run_command(base + "--json-schema '{\"type\": \"integer\", \"maximum\": 9}'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "kvrun: error: --json-schema: unsupported keyword 'maximum' at #\n");
  r = test::run_command(base + "--grammar-file /nonexistent.gbnf");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "kvrun: error: --grammar-file /nonexistent.gbnf: cannot read the file\n");
  r = test::run_command(base + "--grammar 'root ::= \"a\"' --json-schema '{}'");
  EXPECT_EQ(r.exit_code, 2);
  // A grammar that holds: the output is exactly one of its sentences.
  r = test::run_command(base + "--temp 2 -s 3 --grammar 'root ::= (\"yes\" | \"no\") \"!\"'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out == "yes!\n" || r.out == "no!\n") << r.out;
}

TEST(JsonSchema, BatchFinalOutputsFollowTheSchema) {
  const fs::path model = test::fixture(kModel);
  if (!fs::exists(model)) GTEST_SKIP() << "fixture missing: " << model;
  test::TempDir dir;
  std::ofstream(dir.path() / "in.jsonl") << R"({"id": "a", "text": "The cat sat on the mat."}
{"id": "b", "text": "Once upon a time there was a dog."}
{"id": "c", "text": "Tom and Lily went to the park to play."}
)";
  const auto r = test::run_command(
      test::kvrun_binary() + " batch -m " + model.string() + " -i " +
      (dir.path() / "in.jsonl").string() + " -o " + (dir.path() / "out.jsonl").string() +
      " -n 300 --temp 1.5 -s 1 --json-schema '{\"type\": \"object\", \"properties\": "
      "{\"mood\": {\"enum\": [\"happy\", \"sad\"]}, \"n\": {\"type\": \"integer\"}}, "
      "\"required\": [\"mood\", \"n\"]}' 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream in(dir.path() / "out.jsonl");
  int n = 0;
  for (std::string line; std::getline(in, line); ++n) {
    const json rec = json::parse(line);
    ASSERT_EQ(rec["finish_reason"], "eog") << line;
    const json out = json::parse(rec["output"].get<std::string>());
    EXPECT_TRUE(out["mood"] == "happy" || out["mood"] == "sad") << line;
    EXPECT_TRUE(out["n"].is_number_integer()) << line;
    EXPECT_EQ(out.size(), 2u) << line;
  }
  EXPECT_EQ(n, 3);
  const auto bad = test::run_command(test::kvrun_binary() + " batch -m " + model.string() + " -i " +
                                     (dir.path() / "in.jsonl").string() + " -o " +
                                     (dir.path() / "o2.jsonl").string() + " --grammar 'root ::='" +
                                     " --grammar-file x.gbnf");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err,
            "kvrun batch: error: give one of --grammar, --grammar-file, --json-schema, "
            "--json-schema-file\n");
}

}  // namespace
