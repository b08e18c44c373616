// jinja_parser.cpp — recursive-descent parser: tokens into the statement/expression tree.
// Operator precedence follows Jinja2's parser (lowest first): conditional `if else`, or, and,
// not, comparisons and `in`, + -, ~, * / // %, **, unary - +, then postfix (. [] ()) with
// filters (|) and tests (is) applied to the unary operand.
#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "text/jinja_impl.h"

namespace kvrun::jinja::detail {
namespace {

constexpr int kMaxDepth = 200;  // nesting of expressions and blocks

/// Parser state over the token list.
class Parser {
 public:
  explicit Parser(const std::vector<Token>& toks) : t_(toks) {}

  NodePtr parse_root() {
    std::string end;
    NodePtr body = parse_body({}, &end);
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return t_[i_]; }
  const Token& next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
  [[noreturn]] void fail(const std::string& msg) const { throw JinjaError(msg, cur().line); }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case Tok::kEof:
        return "end of template";
      case Tok::kVarEnd:
        return "'}}'";
      case Tok::kBlockEnd:
        return "'%}'";
      case Tok::kBlockBegin:
        return "'{%'";
      case Tok::kVarBegin:
        return "'{{'";
      case Tok::kText:
        return "template text";
      default:
        return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) fail("expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) fail(std::string("expected ") + what + ", got " + describe(cur()));
    next();
  }
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxDepth) p_->fail("template nested too deeply");
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };

  static std::shared_ptr<Expr> make(Expr::K k, int line) {
    auto e = std::make_shared<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }
  static std::shared_ptr<Node> make_node(Node::K k, int line) {
    auto n = std::make_shared<Node>();
    n->kind = k;
    n->line = line;
    return n;
  }

  // ---- statements ----

  /// Parses nodes until a block tag whose keyword is in `ends` (its name goes to *end, the
  /// tag's keyword consumed) or EOF (only when `ends` is empty).
  NodePtr parse_body(const std::vector<std::string>& ends, std::string* end) {
    DepthGuard guard(this);
    auto body = make_node(Node::K::kBody, cur().line);
    std::vector<NodePtr> items;
    while (true) {
      const Token& tk = cur();
      if (tk.type == Tok::kEof) {
        if (ends.empty()) break;
        fail("unexpected end of template, expected '{% " + ends.back() + " %}'");
      }
      if (tk.type == Tok::kText) {
        auto n = make_node(Node::K::kText, tk.line);
        n->text = tk.text;
        items.push_back(n);
        next();
      } else if (tk.type == Tok::kVarBegin) {
        next();
        auto n = make_node(Node::K::kOutput, tk.line);
        n->expr = parse_expr();
        expect(Tok::kVarEnd, "'}}'");
        items.push_back(n);
      } else {
        next();
        if (cur().type != Tok::kName) fail("expected a statement keyword after '{%'");
        const std::string kw = cur().text;
        if (std::find(ends.begin(), ends.end(), kw) != ends.end()) {
          next();
          *end = kw;
          break;
        }
        items.push_back(parse_statement());
      }
    }
    body->bodies = std::move(items);
    return body;
  }

  NodePtr parse_statement() {
    const Token& kw = cur();
    const int line = kw.line;
    const std::string name = kw.text;
    next();
    if (name == "if") return parse_if(line);
    if (name == "for") return parse_for(line);
    if (name == "set") return parse_set(line);
    if (name == "macro") return parse_macro(line);
    if (name == "call") return parse_call_block(line);
    if (name == "filter") return parse_filter_block(line);
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) throw JinjaError("'" + name + "' outside of a loop", line);
      expect(Tok::kBlockEnd, "'%}'");
      return make_node(name == "break" ? Node::K::kBreak : Node::K::kContinue, line);
    }
    throw JinjaError("unknown or unexpected tag '" + name + "'", line);
  }

  NodePtr parse_if(int line) {
    auto n = make_node(Node::K::kIf, line);
    n->conds.push_back(parse_expr());
    expect(Tok::kBlockEnd, "'%}'");
    while (true) {
      std::string end;
      n->bodies.push_back(parse_body({"elif", "else", "endif"}, &end));
      if (end == "endif") break;
      if (end == "elif") {
        n->conds.push_back(parse_expr());
        expect(Tok::kBlockEnd, "'%}'");
        continue;
      }
      expect(Tok::kBlockEnd, "'%}'");
      n->bodies.push_back(parse_body({"endif"}, &end));
      break;
    }
    expect(Tok::kBlockEnd, "'%}'");
    return n;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = is_op("(");
    if (paren) next();
    names.push_back(expect_name());
    while (is_op(",")) {
      next();
      names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return names;
  }

  NodePtr parse_for(int line) {
    auto n = make_node(Node::K::kFor, line);
    n->targets = parse_targets();
    if (!is_name("in")) fail("expected 'in' in for loop, got " + describe(cur()));
    next();
    n->expr = parse_or();
    if (is_name("if")) {
      next();
      n->cond = parse_expr();
    }
    if (is_name("recursive")) fail("recursive for loops are not supported");
    expect(Tok::kBlockEnd, "'%}'");
    std::string end;
    ++loop_depth_;
    n->body = parse_body({"else", "endfor"}, &end);
    --loop_depth_;
    if (end == "else") {
      expect(Tok::kBlockEnd, "'%}'");
      n->else_body = parse_body({"endfor"}, &end);
    }
    expect(Tok::kBlockEnd, "'%}'");
    return n;
  }

  NodePtr parse_set(int line) {
    auto n = make_node(Node::K::kSet, line);
    n->targets = parse_targets();
    if (n->targets.size() == 1 && is_op(".")) {
      next();
      n->attr = expect_name();
    }
    if (is_op("=")) {
      next();
      n->expr = parse_tuple_expr();
      expect(Tok::kBlockEnd, "'%}'");
      return n;
    }
    if (n->targets.size() != 1 || !n->attr.empty()) fail("expected '=' in set");
    n->kind = Node::K::kSetBlock;
    if (is_op("|")) n->expr = parse_filters(block_input(line));
    expect(Tok::kBlockEnd, "'%}'");
    std::string end;
    n->body = parse_body({"endset"}, &end);
    expect(Tok::kBlockEnd, "'%}'");
    return n;
  }

  static ExprPtr block_input(int line) {
    auto e = make(Expr::K::kName, line);
    e->name = "__block__";
    return e;
  }

  /// `name(a, b=default, ...)` parameter lists of macro and call blocks.
  void parse_params(std::vector<std::pair<std::string, ExprPtr>>* params) {
    expect_op("(");
    while (!is_op(")")) {
      std::string p = expect_name();
      ExprPtr def;
      if (is_op("=")) {
        next();
        def = parse_expr();
      }
      params->emplace_back(std::move(p), def);
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  NodePtr parse_macro(int line) {
    auto n = make_node(Node::K::kMacro, line);
    n->text = expect_name();
    parse_params(&n->params);
    expect(Tok::kBlockEnd, "'%}'");
    std::string end;
    const int saved = loop_depth_;
    loop_depth_ = 0;
    n->body = parse_body({"endmacro"}, &end);
    loop_depth_ = saved;
    if (cur().type == Tok::kName) next();  // {% endmacro name %}
    expect(Tok::kBlockEnd, "'%}'");
    return n;
  }

  NodePtr parse_call_block(int line) {
    auto n = make_node(Node::K::kCallBlock, line);
    if (is_op("(")) parse_params(&n->params);
    n->expr = parse_expr();
    if (n->expr->kind != Expr::K::kCall) throw JinjaError("expected a call in {% call %}", line);
    expect(Tok::kBlockEnd, "'%}'");
    std::string end;
    n->body = parse_body({"endcall"}, &end);
    expect(Tok::kBlockEnd, "'%}'");
    return n;
  }

  NodePtr parse_filter_block(int line) {
    auto n = make_node(Node::K::kFilterBlock, line);
    n->expr = parse_filters(block_input(line), /*leading_pipe=*/false);
    expect(Tok::kBlockEnd, "'%}'");
    std::string end;
    n->body = parse_body({"endfilter"}, &end);
    expect(Tok::kBlockEnd, "'%}'");
    return n;
  }

  // ---- expressions ----

  /// An expression or an unparenthesised tuple `a, b` (set right-hand sides).
  ExprPtr parse_tuple_expr() {
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto list = make(Expr::K::kList, first->line);
    list->name = "tuple";
    list->kids.push_back(first);
    while (is_op(",")) {
      next();
      list->kids.push_back(parse_expr());
    }
    return list;
  }

 public:
  ExprPtr parse_expr() {
    DepthGuard guard(this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      auto c = make(Expr::K::kCond, cur().line);
      next();
      c->kids.push_back(parse_or());
      c->kids.push_back(e);
      if (is_name("else")) {
        next();
        c->kids.push_back(parse_expr());
      } else {
        c->kids.push_back(nullptr);
      }
      e = c;
    }
    return e;
  }

 private:
  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    auto e = make(Expr::K::kBinary, line);
    e->name = op;
    e->kids = {std::move(a), std::move(b)};
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      e = binary("or", e, parse_and(), line);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      e = binary("and", e, parse_not(), line);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(this);
      auto e = make(Expr::K::kUnary, next().line);
      e->name = "not";
      e->kids.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    while (true) {
      const int line = cur().line;
      if (cur().type == Tok::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        const std::string op = next().text;
        e = binary(op, e, parse_math1(), line);
      } else if (is_name("in")) {
        next();
        e = binary("in", e, parse_math1(), line);
      } else if (is_name("not") && i_ + 1 < t_.size() && t_[i_ + 1].type == Tok::kName &&
                 t_[i_ + 1].text == "in") {
        next();
        next();
        e = binary("not in", e, parse_math1(), line);
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      e = binary(op.text, e, parse_concat(), op.line);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const int line = next().line;
      e = binary("~", e, parse_math2(), line);
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      e = binary(op.text, e, parse_pow(), op.line);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const int line = next().line;
      e = binary("**", e, parse_unary(true), line);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      auto u = make(Expr::K::kUnary, cur().line);
      u->name = next().text;
      u->kids.push_back(parse_unary(false));
      e = u;
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filters(e) : e;
  }

  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr e);
  void parse_call_args(Expr* call);
  ExprPtr parse_filters(ExprPtr e, bool leading_pipe = true);
  ExprPtr parse_test(ExprPtr e);

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

ExprPtr Parser::parse_primary() {
  const Token& tk = cur();
  auto lit = make(Expr::K::kLiteral, tk.line);
  switch (tk.type) {
    case Tok::kName: {
      next();
      if (tk.text == "true" || tk.text == "True")
        lit->value = Value(true);
      else if (tk.text == "false" || tk.text == "False")
        lit->value = Value(false);
      else if (tk.text == "none" || tk.text == "None")
        lit->value = Value::none();
      else {
        auto n = make(Expr::K::kName, tk.line);
        n->name = tk.text;
        return n;
      }
      return lit;
    }
    case Tok::kString: {
      std::string s;
      while (cur().type == Tok::kString) s += next().text;  // adjacent literals concatenate
      lit->value = Value(std::move(s));
      return lit;
    }
    case Tok::kInt: {
      errno = 0;
      const long long v = std::strtoll(tk.text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail("integer literal out of range");
      next();
      lit->value = Value(static_cast<int64_t>(v));
      return lit;
    }
    case Tok::kFloat:
      next();
      lit->value = Value(std::strtod(tk.text.c_str(), nullptr));
      return lit;
    default:
      break;
  }
  if (is_op("(")) {
    next();
    if (is_op(")")) {
      next();
      auto empty = make(Expr::K::kList, tk.line);
      empty->name = "tuple";
      return empty;
    }
    ExprPtr e = parse_tuple_expr();
    expect_op(")");
    return e;
  }
  if (is_op("[") || is_op("{")) {
    const bool is_list = is_op("[");
    next();
    auto e = make(is_list ? Expr::K::kList : Expr::K::kDict, tk.line);
    while (!is_op(is_list ? "]" : "}")) {
      e->kids.push_back(parse_expr());
      if (!is_list) {
        expect_op(":");
        e->kids.push_back(parse_expr());
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(is_list ? "]" : "}");
    return e;
  }
  fail("unexpected " + describe(tk) + " in expression");
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  while (true) {
    if (is_op(".")) {
      auto a = make(Expr::K::kAttr, next().line);
      if (cur().type == Tok::kInt) {  // x.0 is x[0]
        a->kind = Expr::K::kItem;
        auto idx = make(Expr::K::kLiteral, cur().line);
        idx->value = Value(static_cast<int64_t>(std::strtoll(next().text.c_str(), nullptr, 10)));
        a->kids = {e, idx};
      } else {
        a->name = expect_name();
        a->kids.push_back(e);
      }
      e = a;
    } else if (is_op("[")) {
      e = parse_subscript(e);
    } else if (is_op("(")) {
      auto c = make(Expr::K::kCall, cur().line);
      c->kids.push_back(e);
      parse_call_args(c.get());
      e = c;
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr e) {
  const int line = next().line;  // '['
  std::vector<ExprPtr> parts(1);
  bool is_slice = false;
  while (!is_op("]")) {
    if (is_op(":")) {
      next();
      is_slice = true;
      parts.emplace_back();
      if (parts.size() > 3) fail("too many ':' in slice");
      continue;
    }
    if (parts.back()) fail("expected ']' or ':', got " + describe(cur()));
    parts.back() = parse_expr();
  }
  next();
  auto s = make(is_slice ? Expr::K::kSlice : Expr::K::kItem, line);
  s->kids.push_back(e);
  if (!is_slice) {
    if (!parts[0]) throw JinjaError("empty subscript", line);
    s->kids.push_back(parts[0]);
    return s;
  }
  parts.resize(3);
  for (auto& p : parts) s->kids.push_back(p);
  return s;
}

void Parser::parse_call_args(Expr* call) {
  expect_op("(");
  while (!is_op(")")) {
    if (cur().type == Tok::kName && i_ + 1 < t_.size() && t_[i_ + 1].type == Tok::kOp &&
        t_[i_ + 1].text == "=") {
      std::string k = next().text;
      next();
      call->keyword.emplace_back(std::move(k), parse_expr());
    } else {
      if (!call->keyword.empty()) fail("positional argument after keyword argument");
      call->kids.push_back(parse_expr());
    }
    if (!is_op(",")) break;
    next();
  }
  expect_op(")");
}

ExprPtr Parser::parse_filters(ExprPtr e, bool leading_pipe) {
  bool first = true;
  while (true) {
    if (is_op("|") || (!leading_pipe && first)) {
      if (is_op("|")) next();
      first = false;
      auto f = make(Expr::K::kFilter, cur().line);
      f->name = expect_name();
      while (is_op(".")) {  // dotted filter names are not used by chat templates
        next();
        f->name.append(".").append(expect_name());
      }
      f->kids.push_back(e);
      if (is_op("(")) parse_call_args(f.get());
      e = f;
    } else if (is_name("is")) {
      e = parse_test(e);
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_test(ExprPtr e) {
  auto t = make(Expr::K::kTest, next().line);  // 'is'
  if (is_name("not")) {
    next();
    t->negate = true;
  }
  t->name = expect_name();
  t->kids.push_back(e);
  if (is_op("(")) {
    parse_call_args(t.get());
  } else if ((cur().type == Tok::kName || cur().type == Tok::kString || cur().type == Tok::kInt ||
              cur().type == Tok::kFloat || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if") &&
             !is_name("in") && !is_name("not")) {
    t->kids.push_back(parse_postfix(parse_primary()));
  }
  return t;
}

}  // namespace

NodePtr parse_tokens(const std::vector<Token>& tokens) { return Parser(tokens).parse_root(); }

}  // namespace kvrun::jinja::detail
