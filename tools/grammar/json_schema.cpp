// json_schema.cpp — JSON Schema → GBNF (see json_schema.h for what is supported).
#include "tools/grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <vector>

namespace kvrun::tools {
namespace {

/// One of JSON Schema's seven type names.
bool known_type(const std::string& t) {
  return t == "null" || t == "boolean" || t == "integer" || t == "number" || t == "string" ||
         t == "array" || t == "object";
}

/// Whether JSON value `v` is of JSON Schema type `t` (an integer-valued number is an integer).
bool value_has_type(const nlohmann::ordered_json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "number") return v.is_number();
  if (t == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>())));
  if (t == "string") return v.is_string();
  if (t == "array") return v.is_array();
  return t == "object" && v.is_object();
}

using json = nlohmann::ordered_json;

/// Rules every grammar may use, by name (added on first use, with their dependencies).
const std::map<std::string, std::pair<std::string, std::vector<std::string>>>& primitives() {
  static const std::map<std::string, std::pair<std::string, std::vector<std::string>>> p = {
      {"space", {R"(| " " | "\n" [ \t]{0,20})", {}}},
      {"boolean", {R"(("true" | "false") space)", {"space"}}},
      {"null", {R"("null" space)", {"space"}}},
      {"integral", {R"("0" | [1-9] [0-9]{0,15})", {}}},
      {"integer", {R"("-"? integral space)", {"integral", "space"}}},
      {"number",
       {R"("-"? integral ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? space)",
        {"integral", "space"}}},
      {"char",
       {R"([^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2})))",
        {}}},
      {"string", {R"("\"" char* "\"" space)", {"char", "space"}}},
      {"value",
       {"object | array | string | number | boolean | null",
        {"object", "array", "string", "number", "boolean", "null"}}},
      {"object",
       {R"("{" space (string ":" space value ("," space string ":" space value)*)? "}" space)",
        {"string", "space", "value"}}},
      {"array", {R"("[" space (value ("," space value)*)? "]" space)", {"space", "value"}}},
      {"date",
       {R"([1-9] [0-9]{3} "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])))",
        {}}},
      {"time",
       {R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))",
        {}}},
      {"date-time", {R"(date "T" time)", {"date", "time"}}},
      {"uuid",
       {R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})",
        {}}},
  };
  return p;
}

const std::set<std::string>& annotations() {
  static const std::set<std::string> a = {"title",     "description", "default",  "examples",
                                          "$schema",   "$id",         "$comment", "readOnly",
                                          "writeOnly", "deprecated",  "$defs",    "definitions"};
  return a;
}

const std::set<std::string>& supported() {
  static const std::set<std::string> k = {
      "type",    "properties",  "required",  "additionalProperties",
      "items",   "prefixItems", "minItems",  "maxItems",
      "enum",    "const",       "anyOf",     "oneOf",
      "allOf",   "$ref",        "minLength", "maxLength",
      "pattern", "format"};
  return k;
}

/// The GBNF literal of `bytes`.
std::string literal(const std::string& bytes) {
  std::string out = "\"";
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string sanitize(const std::string& hint) {
  std::string out;
  for (char c : hint) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
  return out.empty() ? "r" : out;
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) { names_.insert("root"); }

  std::string run() {
    const std::string top = visit(root_, "root", "", 0);
    rules_.push_back({"root", top});
    std::string out;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  const json& root_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> names_;
  std::map<std::string, std::string> by_body_;
  std::map<std::string, std::string> refs_;

  [[noreturn]] static void fail(const std::string& msg, const std::string& path) {
    throw SchemaError(msg + " at #" + path);
  }

  void define(const std::string& name, const std::string& body) {
    names_.insert(name);
    rules_.push_back({name, body});
  }

  std::string unique(const std::string& hint) {
    std::string name = sanitize(hint);
    for (int n = 1; names_.count(name) || primitives().count(name); ++n)
      name = sanitize(hint) + "-" + std::to_string(n);
    names_.insert(name);
    return name;
  }

  /// A rule with `body` (an existing one when the body is the same).
  std::string add(const std::string& hint, const std::string& body) {
    auto it = by_body_.find(body);
    if (it != by_body_.end()) return it->second;
    const std::string name = unique(hint);
    rules_.push_back({name, body});
    by_body_[body] = name;
    return name;
  }

  std::string prim(const std::string& name) {
    if (names_.count(name)) return name;
    const auto& [body, deps] = primitives().at(name);
    define(name, body);
    for (const auto& d : deps) prim(d);
    return name;
  }

  const json& resolve(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#') fail("remote $ref '" + ref + "' is not supported", path);
    try {
      return ref == "#" ? root_ : root_.at(json::json_pointer(ref.substr(1)));
    } catch (const json::exception&) {
      fail("$ref '" + ref + "' points to nothing", path);
    }
  }

  std::string ref_rule(const std::string& ref, const std::string& path, int depth) {
    auto it = refs_.find(ref);
    if (it != refs_.end()) return it->second;
    const json& target = resolve(ref, path);
    const size_t slash = ref.rfind('/');
    const std::string name = unique(slash == std::string::npos ? "ref" : ref.substr(slash + 1));
    refs_[ref] = name;  // before visiting: recursive schemas refer to it
    const std::string body = visit(target, name + "-def", ref.substr(1), depth + 1);
    rules_.push_back({name, body});
    return name;
  }

  /// `a` with the keywords of `b` (allOf): properties merged, required united.
  json merge(json a, const json& b, const std::string& path) {
    for (const auto& [k, v] : b.items()) {
      if (k == "properties" && a.contains(k)) {
        for (const auto& [pk, pv] : v.items()) a[k][pk] = pv;
      } else if (k == "required" && a.contains(k)) {
        for (const auto& r : v)
          if (std::find(a[k].begin(), a[k].end(), r) == a[k].end()) a[k].push_back(r);
      } else if (k == "type" && a.contains(k) && a[k] != v) {
        fail("allOf with conflicting 'type'", path);
      } else if (!annotations().count(k)) {
        a[k] = v;
      }
    }
    return a;
  }

  std::string visit(const json& s, const std::string& hint, const std::string& path, int depth);
  std::string all_of_rule(json rest, const std::string& hint, const std::string& path, int depth);
  std::string any_of_rule(json rest, const char* key, const std::string& hint,
                          const std::string& path, int depth);
  std::string visit_typed(const json& s, const std::string& type, const std::string& hint,
                          const std::string& path, int depth);
  std::string object_rule(const json& s, const std::string& hint, const std::string& path,
                          int depth);
  std::string array_rule(const json& s, const std::string& hint, const std::string& path,
                         int depth);
  std::string string_rule(const json& s, const std::string& hint, const std::string& path);
};

std::string Converter::visit(const json& s, const std::string& hint, const std::string& path,
                             int depth) {
  if (depth > 64) fail("schema nested deeper than 64 levels", path);
  if (s.is_boolean()) {
    if (!s.get<bool>()) fail("schema 'false' allows no value", path);
    return prim("value");
  }
  if (!s.is_object()) fail("a schema must be an object or a boolean", path);
  json rest = json::object();  // the keywords that constrain (annotations dropped)
  for (const auto& [k, v] : s.items()) {
    if (annotations().count(k)) continue;
    if (!supported().count(k)) fail("unsupported keyword '" + k + "'", path);
    rest[k] = v;
  }
  if (rest.contains("$ref")) {
    if (rest.size() > 1) fail("'$ref' beside other keywords is not supported", path);
    if (!rest["$ref"].is_string()) fail("'$ref' must be a string", path);
    return ref_rule(rest["$ref"].get<std::string>(), path, depth);
  }
  if (rest.contains("allOf")) return all_of_rule(rest, hint, path, depth);
  for (const char* key : {"anyOf", "oneOf"})
    if (rest.contains(key)) return any_of_rule(rest, key, hint, path, depth);
  if (rest.contains("const") || rest.contains("enum")) {
    // Values are what the schema allows; a "type" beside them keeps those of that type (a
    // malformed "type" is an error here as anywhere, never ignored).
    json values = rest.contains("const") ? json::array({rest["const"]}) : rest["enum"];
    if (!values.is_array() || values.empty()) fail("'enum' must be a non-empty array", path);
    if (rest.contains("type")) {
      const json& type = rest["type"];
      const json types = type.is_array() ? type : json::array({type});
      if (types.empty()) fail("'type' must be a string or a non-empty array", path);
      for (const json& t : types)
        if (!t.is_string() || !known_type(t.get<std::string>()))
          fail(
              "'type' must name JSON types (null, boolean, integer, number, string, array, "
              "object)",
              path);
      json kept = json::array();
      for (const json& v : values)
        for (const json& t : types)
          if (value_has_type(v, t.get<std::string>())) {
            kept.push_back(v);
            break;
          }
      if (kept.empty()) fail("no 'enum'/'const' value has the schema's 'type'", path);
      values = kept;
    }
    std::string body = "(";
    for (size_t i = 0; i < values.size(); ++i) body += (i ? " | " : "") + literal(values[i].dump());
    prim("space");
    return add(hint, body + ") space");
  }
  if (!rest.contains("type")) {  // infer it from the keywords, else any value
    if (rest.contains("properties") || rest.contains("additionalProperties"))
      return visit_typed(rest, "object", hint, path, depth);
    if (rest.contains("items") || rest.contains("prefixItems"))
      return visit_typed(rest, "array", hint, path, depth);
    if (rest.contains("minLength") || rest.contains("maxLength") || rest.contains("pattern") ||
        rest.contains("format"))
      return visit_typed(rest, "string", hint, path, depth);
    return prim("value");
  }
  const json& type = rest["type"];
  if (type.is_string()) return visit_typed(rest, type.get<std::string>(), hint, path, depth);
  if (!type.is_array() || type.empty()) fail("'type' must be a string or a non-empty array", path);
  std::string body;
  for (size_t i = 0; i < type.size(); ++i) {
    if (!type[i].is_string()) fail("'type' must list strings", path);
    body += (i ? " | " : "") + visit_typed(rest, type[i].get<std::string>(), hint, path, depth);
  }
  return add(hint, body);
}

std::string Converter::all_of_rule(json rest, const std::string& hint, const std::string& path,
                                   int depth) {
  const json all = rest["allOf"];
  if (!all.is_array() || all.empty()) fail("'allOf' must be a non-empty array", path);
  rest.erase("allOf");
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string sub = path + "/allOf/" + std::to_string(i);
    const json* part = &all[i];
    if (part->is_object() && part->contains("$ref")) {
      if (!(*part)["$ref"].is_string()) fail("'$ref' must be a string", sub);
      part = &resolve((*part)["$ref"].get<std::string>(), sub);
    }
    if (!part->is_object()) fail("'allOf' items must be schemas", sub);
    if (part->contains("anyOf") || part->contains("oneOf") || part->contains("allOf"))
      fail("'allOf' of anyOf/oneOf/allOf is not supported", sub);
    rest = merge(rest, *part, sub);
  }
  return visit(rest, hint, path, depth + 1);
}

std::string Converter::any_of_rule(json rest, const char* key, const std::string& hint,
                                   const std::string& path, int depth) {
  const json alts = rest[key];
  if (!alts.is_array() || alts.empty())
    fail(std::string("'") + key + "' must be a non-empty array", path);
  rest.erase(key);
  std::string body;
  for (size_t i = 0; i < alts.size(); ++i) {
    const std::string sub = path + "/" + key + "/" + std::to_string(i);
    // Keywords beside anyOf apply to every alternative.
    const json alt = rest.empty() ? alts[i] : json{{"allOf", json::array({rest, alts[i]})}};
    body += (i ? " | " : "") + visit(alt, hint + "-" + std::to_string(i), sub, depth + 1);
  }
  return add(hint, body);
}

std::string Converter::visit_typed(const json& s, const std::string& type, const std::string& hint,
                                   const std::string& path, int depth) {
  if (type == "object") return object_rule(s, hint, path, depth);
  if (type == "array") return array_rule(s, hint, path, depth);
  if (type == "string") return string_rule(s, hint, path);
  if (type == "number" || type == "integer" || type == "boolean" || type == "null")
    return prim(type);
  fail("unknown type '" + type + "'", path);
}

std::string Converter::object_rule(const json& s, const std::string& hint, const std::string& path,
                                   int depth) {
  const json props = s.value("properties", json::object());
  if (!props.is_object()) fail("'properties' must be an object", path);
  const json req = s.value("required", json::array());
  if (!req.is_array()) fail("'required' must be an array", path);
  std::set<std::string> required;
  for (const auto& r : req) {
    if (!r.is_string()) fail("'required' must list strings", path);
    required.insert(r.get<std::string>());
  }
  // Extra keys: absent → none when properties are given (any object otherwise).
  std::string extra;
  const json add_props = s.contains("additionalProperties") ? s["additionalProperties"]
                         : props.empty()                    ? json(true)
                                                            : json(false);
  if (!(add_props.is_boolean() && !add_props.get<bool>()))
    extra = add(hint + "-additional-kv", prim("string") + " \":\" space " +
                                             visit(add_props, hint + "-additional",
                                                   path + "/additionalProperties", depth + 1));
  struct Kv {
    std::string rule;
    bool required;
  };
  std::vector<Kv> kvs;
  for (const auto& [k, v] : props.items()) {
    const std::string value = visit(v, hint + "-" + k, path + "/properties/" + k, depth + 1);
    kvs.push_back(
        {add(hint + "-" + k + "-kv", literal(json(k).dump()) + " space \":\" space " + value),
         required.count(k) > 0});
    required.erase(k);
  }
  for (const auto& k : required) {  // required but not in properties: an extra key by name
    if (extra.empty()) fail("required property '" + k + "' is not allowed by the schema", path);
    const json value_schema = add_props.is_object() ? add_props : json(true);
    kvs.push_back(
        {add(hint + "-" + k + "-kv", literal(json(k).dump()) + " space \":\" space " +
                                         visit(value_schema, hint + "-" + k, path, depth + 1)),
         true});
  }
  prim("space");
  // rest_i: keys i.. after at least one key; first_i: keys i.. before any key.
  std::string rest = extra.empty() ? "" : "(\",\" space " + extra + ")*";
  std::string first = extra.empty() ? "" : "(" + extra + " (\",\" space " + extra + ")*)?";
  for (size_t i = kvs.size(); i-- > 0;) {
    const Kv& kv = kvs[i];
    const std::string r = rest.empty() ? "" : " " + add(hint + "-rest", rest);
    const std::string f = first.empty() ? "" : add(hint + "-first", first);
    if (kv.required) {
      first = kv.rule + r;
      rest = "\",\" space " + kv.rule + r;
    } else {
      first = f.empty() ? "(" + kv.rule + r + ")?" : "(" + kv.rule + r + " | " + f + ")";
      rest = "(\",\" space " + kv.rule + ")?" + r;
    }
  }
  return add(hint, "\"{\" space " + (first.empty() ? "" : add(hint + "-first", first) + " ") +
                       "\"}\" space");
}

std::string Converter::array_rule(const json& s, const std::string& hint, const std::string& path,
                                  int depth) {
  const auto count = [&](const char* key, uint64_t dflt) -> uint64_t {
    if (!s.contains(key)) return dflt;
    if (!s[key].is_number_unsigned() && !(s[key].is_number_integer() && s[key].get<int64_t>() >= 0))
      fail(std::string("'") + key + "' must be a non-negative integer", path);
    return s[key].get<uint64_t>();
  };
  const uint64_t kUnbounded = UINT64_MAX;
  const uint64_t min = count("minItems", 0);
  uint64_t max = count("maxItems", kUnbounded);
  if (min > 1000) fail("'minItems' above 1000 is not supported", path);
  if (max != kUnbounded && max > 1000) max = kUnbounded;  // more than any generation holds
  if (max < min) fail("'maxItems' below 'minItems'", path);
  prim("space");
  std::string prefix;
  uint64_t n_prefix = 0;
  if (s.contains("prefixItems")) {
    const json& items = s["prefixItems"];
    if (!items.is_array()) fail("'prefixItems' must be an array", path);
    n_prefix = items.size();
    if (n_prefix > max) fail("'maxItems' below the number of 'prefixItems'", path);
    for (size_t i = 0; i < items.size(); ++i)
      prefix +=
          (i ? " \",\" space " : "") + visit(items[i], hint + "-" + std::to_string(i),
                                             path + "/prefixItems/" + std::to_string(i), depth + 1);
  }
  const json item_schema = s.contains("items") ? s["items"] : json(true);
  const bool more = !(item_schema.is_boolean() && !item_schema.get<bool>());
  if (!more && min > n_prefix) fail("'minItems' needs more items than the schema allows", path);
  const std::string item =
      more ? visit(item_schema, hint + "-item", path + "/items", depth + 1) : "";
  if (n_prefix > 0) {  // every prefix item, then the rest as items
    const uint64_t lo = min > n_prefix ? min - n_prefix : 0;
    const uint64_t hi = max == kUnbounded ? max : max - n_prefix;
    std::string tail;
    if (more && hi > 0)
      tail = " (\",\" space " + item + "){" + std::to_string(lo) + "," +
             (hi == kUnbounded ? "" : std::to_string(hi)) + "}";
    return add(hint, "\"[\" space " + prefix + tail + " \"]\" space");
  }
  if (max == 0 || !more) return add(hint, "\"[\" space \"]\" space");
  const std::string hi = max == kUnbounded ? "" : std::to_string(max - 1);
  if (min == 0)
    return add(hint,
               "\"[\" space (" + item + " (\",\" space " + item + "){0," + hi + "})? \"]\" space");
  return add(hint, "\"[\" space " + item + " (\",\" space " + item + "){" +
                       std::to_string(min - 1) + "," + hi + "} \"]\" space");
}

std::string Converter::string_rule(const json& s, const std::string& hint,
                                   const std::string& path) {
  prim("space");
  const bool lengths = s.contains("minLength") || s.contains("maxLength");
  if (s.contains("format")) {
    const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
    if (f != "date" && f != "time" && f != "date-time" && f != "uuid")
      fail("unsupported string format '" + s["format"].dump() + "'", path);
    if (lengths || s.contains("pattern"))
      fail("'format' with 'pattern' or lengths is not supported", path);
    return add(hint, "\"\\\"\" " + prim(f) + " \"\\\"\" space");
  }
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string()) fail("'pattern' must be a string", path);
    if (lengths) fail("'pattern' with 'minLength'/'maxLength' is not supported", path);
    return add(hint,
               "\"\\\"\" " + regex_to_gbnf(s["pattern"].get<std::string>()) + " \"\\\"\" space");
  }
  const auto len = [&](const char* key, uint64_t dflt) -> uint64_t {
    if (!s.contains(key)) return dflt;
    if (!(s[key].is_number_integer() && s[key].get<int64_t>() >= 0))
      fail(std::string("'") + key + "' must be a non-negative integer", path);
    const auto v = s[key].get<uint64_t>();
    if (v > 10000) fail(std::string("'") + key + "' above 10000 is not supported", path);
    return v;
  };
  const uint64_t lo = len("minLength", 0), hi = len("maxLength", UINT64_MAX);
  if (hi < lo) fail("'maxLength' below 'minLength'", path);
  const std::string c = prim("char");
  const std::string rep = !lengths ? "*"
                          : hi == UINT64_MAX
                              ? "{" + std::to_string(lo) + ",}"
                              : "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
  return add(hint, "\"\\\"\" " + c + rep + " \"\\\"\" space");
}

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  try {
    return Converter(schema).run();
  } catch (const nlohmann::json::exception& e) {  // a keyword of the wrong JSON type
    throw SchemaError(std::string("malformed schema: ") + e.what());
  }
}

std::string json_object_gbnf() { return json_schema_to_gbnf({{"type", "object"}}); }

}  // namespace kvrun::tools
