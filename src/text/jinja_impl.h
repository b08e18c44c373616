// jinja_impl.h — the Jinja engine's insides shared by its files: tokens, the syntax tree, and
// the builtins (filters, tests, methods) the evaluator calls. Not part of the public API.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja.h"

namespace kvrun::jinja::detail {

/// Kinds of token produced by the lexer.
enum class Tok {
  kText,        ///< template text between tags (whitespace control already applied)
  kVarBegin,    ///< {{
  kVarEnd,      ///< }}
  kBlockBegin,  ///< {%
  kBlockEnd,    ///< %}
  kName,        ///< identifier or keyword
  kString,      ///< string literal (value unescaped)
  kInt,         ///< integer literal
  kFloat,       ///< float literal
  kOp,          ///< operator or punctuation
  kEof,         ///< end of input
};

/// One token with its 1-based line.
struct Token {
  Tok type;
  std::string text;
  int line;
};

/// Splits `source` into tokens with trim_blocks, lstrip_blocks and -/+ whitespace control
/// applied to the text tokens and one trailing newline of the template dropped (as Jinja2's
/// defaults). Throws JinjaError on an unterminated tag, comment or string.
std::vector<Token> lex(std::string_view source);

struct Expr;
struct Node;
using ExprPtr = std::shared_ptr<const Expr>;
using NodePtr = std::shared_ptr<const Node>;

/// An expression node. `kids` holds operands/arguments in order; meaning per kind below.
struct Expr {
  enum class K {
    kLiteral,  ///< `value`
    kName,     ///< variable `name`
    kList,     ///< list literal: kids (name "tuple" for a tuple)
    kDict,     ///< dict literal: kids = k0, v0, k1, v1, ...
    kAttr,     ///< kids[0].name
    kItem,     ///< kids[0][kids[1]]
    kSlice,    ///< kids[0][a:b:c]; kids 1..3 may be null
    kCall,     ///< kids[0](kids[1..], keyword)
    kFilter,   ///< kids[0] | name(kids[1..], keyword)
    kTest,     ///< kids[0] is [not] name(kids[1..]); `negate`
    kUnary,    ///< name in {"-", "+", "not"} applied to kids[0]
    kBinary,   ///< kids[0] name kids[1]; name is an operator, "and", "or", "in", "not in"
    kCond,     ///< kids[1] if kids[0] else kids[2] (kids[2] may be null)
  };
  K kind;
  int line = 0;
  std::string name;
  Value value;
  bool negate = false;
  std::vector<ExprPtr> kids;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

/// A statement node; bodies are lists of nodes.
struct Node {
  enum class K {
    kBody,         ///< children in `body`
    kText,         ///< literal `text`
    kOutput,       ///< {{ expr }}
    kIf,           ///< conds[i] → bodies[i]; an extra body without cond is the else
    kFor,          ///< for targets in expr [if cond]: body, else_body
    kSet,          ///< set targets = expr, or set targets[0].attr = expr (attr non-empty)
    kSetBlock,     ///< set targets[0] [| filter expr]: body
    kMacro,        ///< macro name(params): body
    kCallBlock,    ///< call(params) expr: body (the caller)
    kFilterBlock,  ///< filter expr: body (expr filters the name "__block__")
    kBreak,        ///< break
    kContinue,     ///< continue
  };
  K kind;
  int line = 0;
  std::string text;
  std::string attr;
  std::vector<std::string> targets;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<ExprPtr> conds;
  std::vector<NodePtr> bodies;
  NodePtr body;
  NodePtr else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;
};

/// Parses tokens into the template's root body; throws JinjaError with the line.
NodePtr parse_tokens(const std::vector<Token>& tokens);

/// Applies the filter `name` to `input` with `args` (map/select call other filters and tests).
/// Throws JinjaError (line 0) for an unknown filter or bad arguments.
Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
/// Whether `name` is a builtin filter.
bool is_filter(const std::string& name);
/// Whether `name` is a builtin test.
bool is_test(const std::string& name);
/// Applies the test `name` (is defined, is string, ...); throws for an unknown test.
bool apply_test(const std::string& name, const Value& input, CallArgs& args);
/// The method or attribute `name` of a string, list or dict (bound to it), or undefined.
Value get_method(const Value& obj, const std::string& name);
/// The engine's globals: raise_exception, strftime_now, namespace, range, dict.
Dict make_globals();

/// Bounds the recursion of repr(), equality and ordering over nested values (a list that
/// contains itself through append): throws JinjaError past 256 levels.
class NestingGuard {
 public:
  NestingGuard();
  ~NestingGuard();
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;
};

/// markupsafe's escape(): & < > " ' as HTML entities.
std::string html_escape(const std::string& s);
/// Python `a op b` for + - * / // % ** and comparisons; throws JinjaError (line 0).
Value binary_op(const std::string& op, const Value& a, const Value& b);
/// Python `a < b` ordering for numbers, strings and lists; throws when not comparable.
bool less_than(const Value& a, const Value& b);
/// Python `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);
/// The values a for loop over `v` visits (list items, dict keys, string characters).
std::vector<Value> iterate(const Value& v);
/// Python len(); throws when `v` has no length.
int64_t length(const Value& v);
/// v[key] / getattr: dict key, list/string index; undefined when missing.
Value get_item(const Value& v, const Value& key);
/// v[start:stop:step] for lists and strings (each bound may be undefined/none).
Value slice(const Value& v, const Value& start, const Value& stop, const Value& step);
/// The Unicode code points of UTF-8 text, one string each (a stray byte is its own item).
std::vector<std::string> utf8_chars(const std::string& s);

}  // namespace kvrun::jinja::detail
