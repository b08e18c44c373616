// jinja.h — a small Jinja2 engine for Hugging Face chat templates (kvrun's own, no JSON library).
//
// The subset is the one chat templates use (the spec is the Jinja2 3.1 template designer
// documentation, https://jinja.palletsprojects.com/en/3.1.x/templates/): text with {{ }}, {% %}
// and {# #}, whitespace control (-, +) with trim_blocks and lstrip_blocks on (as Hugging Face
// sets them), for/if/set/macro/call/filter blocks, break/continue, Python-like expressions,
// the usual filters and tests, and the string/list/dict methods templates call. Values follow
// Python's semantics: str() and repr() of values, json.dumps for `tojson`, floor division, etc.
// Every error (malformed template, bad operation at render time) is a JinjaError that names the
// template line; the engine never crashes and bounds its recursion.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvrun::jinja {

/// A template that does not parse, or an operation that fails while rendering (including the
/// template's own raise_exception). `line()` is the 1-based template line, 0 when unknown.
class JinjaError : public std::runtime_error {
 public:
  /// `message` without the line; what() reads "line N: message" (or just message for line 0).
  JinjaError(const std::string& message, int line);
  /// 1-based template line of the error, 0 when unknown.
  int line() const { return line_; }
  /// The message without the line prefix.
  const std::string& message() const { return message_; }

 private:
  std::string message_;
  int line_;
};

class Value;
struct CallArgs;

/// A native function callable from templates (globals, bound methods, macros).
using Function = std::function<Value(CallArgs&)>;

/// An insertion-ordered dictionary with string keys (Python dicts as chat templates use them).
class Dict {
 public:
  /// The value for `key`, or nullptr.
  const Value* find(std::string_view key) const;
  /// Mutable value for `key`, or nullptr.
  Value* find(std::string_view key);
  /// Sets `key` (kept at its position when present, appended otherwise).
  void set(const std::string& key, Value v);
  /// Sets a key of any kind (dict literals may have int keys, as in Python); a string key is
  /// the same as set(string).
  void set_key(const Value& key, Value v);
  /// Entry `i`'s key as written: a string, or the int/float/bool/none of a literal.
  Value key_at(size_t i) const;
  /// The string a key is stored under (the string itself, or a marked repr for other kinds).
  static std::string canonical(const Value& key);
  /// Removes `key`; returns whether it was present.
  bool erase(std::string_view key);
  /// The entries in insertion order.
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  /// Number of entries (defined after Value, which must be complete for it).
  size_t size() const;

 private:
  std::vector<std::pair<std::string, Value>> items_;
  std::vector<std::shared_ptr<Value>> keys_;  // non-string keys (null for string keys)
};

/// A template value: undefined, none, bool, int, float, string, list, dict or callable. Lists and
/// dicts are shared by reference (as in Python), so `namespace` attributes and `append` mutate.
class Value {
 public:
  /// The kinds of value.
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;                                                  ///< undefined
  Value(bool b) : kind_(Kind::kBool), int_(b) {}                      // NOLINT
  Value(int v) : kind_(Kind::kInt), int_(v) {}                        // NOLINT
  Value(int64_t v) : kind_(Kind::kInt), int_(v) {}                    // NOLINT
  Value(double v) : kind_(Kind::kFloat), float_(v) {}                 // NOLINT
  Value(std::string s) : kind_(Kind::kString), str_(std::move(s)) {}  // NOLINT
  Value(const char* s) : kind_(Kind::kString), str_(s) {}             // NOLINT
  Value(std::string_view s) : kind_(Kind::kString), str_(s) {}        // NOLINT
  /// Python's None.
  static Value none();
  /// A new list holding `items`.
  static Value list(std::vector<Value> items = {});
  /// A string marked safe (jinja2's Markup, from the `safe` filter): `+` with a plain string
  /// HTML-escapes the plain operand, as Markup.__add__ does.
  static Value markup(std::string s);
  /// A new tuple (a list that Python's repr() writes in parentheses).
  static Value tuple(std::vector<Value> items);
  /// A new dict holding `d`; `is_namespace` marks a namespace() object.
  static Value dict(Dict d = {}, bool is_namespace = false);
  /// A callable; `name` is used in messages.
  static Value function(Function f, std::string name = "function");

  Kind kind() const { return kind_; }                                     ///< the value's kind
  bool is_undefined() const { return kind_ == Kind::kUndefined; }         ///< undefined?
  bool is_none() const { return kind_ == Kind::kNone; }                   ///< none?
  bool is_bool() const { return kind_ == Kind::kBool; }                   ///< bool?
  bool is_int() const { return kind_ == Kind::kInt; }                     ///< int (not bool)?
  bool is_float() const { return kind_ == Kind::kFloat; }                 ///< float?
  bool is_number() const { return is_int() || is_float() || is_bool(); }  ///< Python Number?
  bool is_string() const { return kind_ == Kind::kString; }               ///< string?
  bool is_list() const { return kind_ == Kind::kList; }                   ///< list?
  bool is_dict() const { return kind_ == Kind::kDict; }                   ///< dict or namespace?
  bool is_function() const { return kind_ == Kind::kFunction; }           ///< callable?
  bool is_namespace() const { return is_dict() && namespace_; }           ///< namespace() object?
  bool is_tuple() const { return is_list() && namespace_; }     ///< a tuple (a list kind)?
  bool is_markup() const { return is_string() && namespace_; }  ///< a Markup string?

  bool as_bool() const { return int_ != 0; }                 ///< the bool (kBool)
  int64_t as_int() const { return int_; }                    ///< the int (kInt, kBool)
  double as_float() const;                                   ///< int, bool or float as double
  const std::string& as_string() const { return str_; }      ///< the string (kString)
  std::vector<Value>& as_list() const { return *list_; }     ///< the list (kList)
  Dict& as_dict() const { return *dict_; }                   ///< the dict (kDict)
  const Function& as_function() const { return *fn_; }       ///< the callable (kFunction)
  const std::string& function_name() const { return str_; }  ///< name of a callable

  /// Python truthiness (undefined is false).
  bool truthy() const;
  /// Python str(): strings as they are, None/True/False, repr() of lists and dicts.
  std::string str() const;
  /// Python repr() (strings quoted as Python quotes them).
  std::string repr() const;
  /// A short type name for error messages ("string", "list", ...).
  std::string type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool namespace_ = false;  // a namespace() dict, a tuple list, or a Markup string
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<std::vector<Value>> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

inline size_t Dict::size() const { return items_.size(); }

/// Python equality (1 == 1.0 == True; lists and dicts compared deeply).
bool values_equal(const Value& a, const Value& b);

/// Arguments of a call: positional, then keyword in the order written.
struct CallArgs {
  std::vector<Value> positional;                       ///< positional arguments
  std::vector<std::pair<std::string, Value>> keyword;  ///< keyword arguments
  /// Argument `i` or keyword `name`, or undefined when neither was given.
  Value get(size_t i, std::string_view name) const;
};

/// Options of json.dumps as `tojson` takes them.
struct JsonOptions {
  int indent = -1;              ///< < 0: one line
  std::string item_sep = ", ";  ///< between items (", " or "," with indent)
  std::string key_sep = ": ";   ///< between a key and its value
  bool sort_keys = false;       ///< sort dict keys
  bool ensure_ascii = false;    ///< write non-ASCII as \\uXXXX escapes
};

/// Python's json.dumps(v, ensure_ascii=False, ...) of a value; throws JinjaError (line 0) for
/// values JSON cannot hold (undefined, callables).
std::string to_json(const Value& v, const JsonOptions& options = {});

namespace detail {
struct Node;
}

/// A parsed template: parse once, render many times (render is const and thread-compatible).
class Template {
 public:
  /// Parses `source`; throws JinjaError with the line of the first syntax error.
  static Template parse(std::string_view source);

  /// Renders with `context` as the template's variables. Globals provided by the engine unless
  /// the context defines them: raise_exception(msg), strftime_now(fmt) (local time), namespace(),
  /// range(), dict(). Throws JinjaError (with the line) when rendering fails.
  std::string render(const Dict& context) const;

 private:
  std::shared_ptr<const detail::Node> root_;
};

}  // namespace kvrun::jinja
