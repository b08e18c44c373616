// jinja_eval.cpp — the evaluator: runs the syntax tree against a context (scopes, loops, macros,
// call blocks) and the public Template/JinjaError entry points.
#include "text/jinja_impl.h"

namespace kvrun::jinja {

JinjaError::JinjaError(const std::string& message, int line)
    : std::runtime_error(line > 0 ? "line " + std::to_string(line) + ": " + message : message),
      message_(message),
      line_(line) {}

namespace detail {
namespace {

constexpr int kMaxCallDepth = 100;        // nested macro calls
constexpr size_t kMaxOutput = 64u << 20;  // bytes a render may produce

/// A variable scope; lookups walk to the parent.
struct Scope {
  Dict vars;
  Scope* parent = nullptr;
};

/// How a statement list ended.
enum class Flow { kNormal, kBreak, kContinue };

/// Renders one template; lives for one render() call.
class Evaluator {
 public:
  explicit Evaluator(Scope* root) : root_(root) {}

  Flow exec(const Node& n, Scope* s, std::string& out) {
    try {
      return exec_inner(n, s, out);
    } catch (const JinjaError& e) {
      if (e.line() == 0) throw JinjaError(e.message(), n.line);
      throw;
    }
  }

  Value eval(const Expr& e, Scope* s) {
    try {
      return eval_inner(e, s);
    } catch (const JinjaError& err) {
      if (err.line() == 0) throw JinjaError(err.message(), e.line);
      throw;
    }
  }

 private:
  static Value lookup(const std::string& name, Scope* s) {
    for (; s; s = s->parent)
      if (const Value* v = s->vars.find(name)) return *v;
    return Value();
  }

  Flow exec_body(const Node& body, Scope* s, std::string& out) {
    for (const NodePtr& n : body.bodies) {
      const Flow f = exec(*n, s, out);
      if (f != Flow::kNormal) return f;
      if (out.size() > kMaxOutput) throw JinjaError("output too large", n->line);
    }
    return Flow::kNormal;
  }

  Flow exec_inner(const Node& n, Scope* s, std::string& out) {
    switch (n.kind) {
      case Node::K::kBody:
        return exec_body(n, s, out);
      case Node::K::kText:
        out += n.text;
        return Flow::kNormal;
      case Node::K::kOutput:
        out += eval(*n.expr, s).str();
        return Flow::kNormal;
      case Node::K::kIf:
        for (size_t i = 0; i < n.bodies.size(); ++i)
          if (i >= n.conds.size() || eval(*n.conds[i], s).truthy())
            return exec(*n.bodies[i], s, out);
        return Flow::kNormal;
      case Node::K::kFor:
        return exec_for(n, s, out);
      case Node::K::kSet:
        exec_set(n, s);
        return Flow::kNormal;
      case Node::K::kSetBlock: {
        std::string text;
        exec(*n.body, s, text);
        Value v(text);
        if (n.expr) v = filter_block(*n.expr, v, s);
        s->vars.set(n.targets[0], v);
        return Flow::kNormal;
      }
      case Node::K::kMacro:
        s->vars.set(n.text, make_macro(n, s));
        return Flow::kNormal;
      case Node::K::kCallBlock: {
        const Value caller = make_macro(n, s);
        out += call(*n.expr, s, &caller).str();
        return Flow::kNormal;
      }
      case Node::K::kFilterBlock: {
        std::string text;
        exec(*n.body, s, text);
        out += filter_block(*n.expr, Value(text), s).str();
        return Flow::kNormal;
      }
      case Node::K::kBreak:
        return Flow::kBreak;
      case Node::K::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  Value filter_block(const Expr& filters, const Value& input, Scope* s) {
    Scope inner{{}, s};
    inner.vars.set("__block__", input);
    return eval(filters, &inner);
  }

  static void bind_targets(const std::vector<std::string>& targets, const Value& v, Scope* s) {
    if (targets.size() == 1) {
      s->vars.set(targets[0], v);
      return;
    }
    const std::vector<Value> items = iterate(v);
    if (items.size() != targets.size())
      throw JinjaError("cannot unpack " + std::to_string(items.size()) + " values into " +
                           std::to_string(targets.size()) + " names",
                       0);
    for (size_t i = 0; i < items.size(); ++i) s->vars.set(targets[i], items[i]);
  }

  void exec_set(const Node& n, Scope* s) {
    const Value v = eval(*n.expr, s);
    if (n.attr.empty()) return bind_targets(n.targets, v, s);
    const Value ns = lookup(n.targets[0], s);
    if (!ns.is_namespace())
      throw JinjaError("cannot assign attribute on non-namespace object '" + n.targets[0] + "'", 0);
    ns.as_dict().set(n.attr, v);
  }

  Flow exec_for(const Node& n, Scope* s, std::string& out) {
    const Value seq = eval(*n.expr, s);
    if (!seq.is_list() && !seq.is_dict() && !seq.is_string() && !seq.is_undefined())
      throw JinjaError("'" + seq.type_name() + "' object is not iterable", 0);
    std::vector<Value> items = iterate(seq);
    Scope inner{{}, s};
    if (n.cond) {  // the loop filter runs before loop.* is known
      std::vector<Value> kept;
      for (const Value& item : items) {
        bind_targets(n.targets, item, &inner);
        if (eval(*n.cond, &inner).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const auto len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      Dict loop;
      loop.set("index", Value(i + 1));
      loop.set("index0", Value(i));
      loop.set("revindex", Value(len - i));
      loop.set("revindex0", Value(len - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == len - 1));
      loop.set("length", Value(len));
      loop.set("depth", Value(1));
      loop.set("depth0", Value(0));
      if (i > 0) loop.set("previtem", items[i - 1]);
      if (i + 1 < len) loop.set("nextitem", items[i + 1]);
      loop.set("cycle", Value::function(
                            [i](CallArgs& a) {
                              if (a.positional.empty())
                                throw JinjaError("no items for cycling given", 0);
                              return a.positional[i % a.positional.size()];
                            },
                            "cycle"));
      inner.vars.set("loop", Value::dict(std::move(loop)));
      bind_targets(n.targets, items[i], &inner);
      if (exec(*n.body, &inner, out) == Flow::kBreak) break;
    }
    if (len == 0 && n.else_body) return exec(*n.else_body, s, out);
    return Flow::kNormal;
  }

  /// A callable running the macro (or call-block caller) `n` defined in scope `s`.
  Value make_macro(const Node& n, Scope* s) {
    const Node* node = &n;
    Scope* defining = n.kind == Node::K::kCallBlock ? s : root_;
    return Value::function(
        [this, node, defining](CallArgs& args) {
          if (++depth_ > kMaxCallDepth) {
            --depth_;
            throw JinjaError("macro calls nested too deeply (recursion limit)", node->line);
          }
          Scope local{{}, defining};
          for (size_t i = 0; i < node->params.size(); ++i) {
            const auto& [pname, def] = node->params[i];
            Value v = args.get(i, pname);
            if (v.is_undefined() && def) v = eval(*def, &local);
            local.vars.set(pname, v);
          }
          for (const auto& [k, v] : args.keyword) {
            if (!local.vars.find(k) && k != "caller")
              throw JinjaError("macro '" + node->text + "' takes no keyword argument '" + k + "'",
                               0);
            if (k == "caller") local.vars.set(k, v);
          }
          std::string text;
          try {
            exec(*node->body, &local, text);
          } catch (...) {
            --depth_;
            throw;
          }
          --depth_;
          return Value(text);
        },
        n.kind == Node::K::kMacro ? n.text : "caller");
  }

  Value call(const Expr& e, Scope* s, const Value* caller) {
    const Value fn = eval(*e.kids[0], s);
    CallArgs args;
    for (size_t i = 1; i < e.kids.size(); ++i) args.positional.push_back(eval(*e.kids[i], s));
    for (const auto& [k, v] : e.keyword) args.keyword.emplace_back(k, eval(*v, s));
    if (caller) args.keyword.emplace_back("caller", *caller);
    if (!fn.is_function()) {
      const std::string& what =
          e.kids[0]->kind == Expr::K::kName ? e.kids[0]->name : fn.type_name();
      throw JinjaError(std::string("'").append(what).append(
                           fn.is_undefined() ? "' is undefined" : "' object is not callable"),
                       0);
    }
    return fn.as_function()(args);
  }

  CallArgs eval_args(const Expr& e, Scope* s) {
    CallArgs args;
    for (size_t i = 1; i < e.kids.size(); ++i) args.positional.push_back(eval(*e.kids[i], s));
    for (const auto& [k, v] : e.keyword) args.keyword.emplace_back(k, eval(*v, s));
    return args;
  }

  Value eval_attr(const Expr& e, Scope* s) {
    const Value obj = eval(*e.kids[0], s);
    if (obj.is_undefined()) throw JinjaError(undefined_name(*e.kids[0]) + " is undefined", 0);
    if (obj.is_dict() && !obj.is_namespace()) {
      if (Value m = get_method(obj, e.name); !m.is_undefined()) return m;
    }
    if (obj.is_dict()) {
      const Value* v = obj.as_dict().find(e.name);
      return v ? *v : Value();
    }
    return get_method(obj, e.name);
  }

  static std::string undefined_name(const Expr& e) {
    if (e.kind == Expr::K::kName) return "'" + e.name + "'";
    if (e.kind == Expr::K::kAttr) return "'" + e.name + "'";
    return "value";
  }

  Value eval_binary(const Expr& e, Scope* s) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.kids[0], s);
      return a.truthy() ? eval(*e.kids[1], s) : a;
    }
    if (op == "or") {
      Value a = eval(*e.kids[0], s);
      return a.truthy() ? a : eval(*e.kids[1], s);
    }
    const Value a = eval(*e.kids[0], s);
    const Value b = eval(*e.kids[1], s);
    if (op == "~") return Value(a.str() + b.str());
    if (op == "in") return Value(contains(b, a));
    if (op == "not in") return Value(!contains(b, a));
    return binary_op(op, a, b);
  }

  Value eval_inner(const Expr& e, Scope* s);

  Scope* root_;
  int depth_ = 0;
};

Value Evaluator::eval_inner(const Expr& e, Scope* s) {
  switch (e.kind) {
    case Expr::K::kLiteral:
      return e.value;
    case Expr::K::kName:
      return lookup(e.name, s);
    case Expr::K::kList: {
      std::vector<Value> items;
      for (const ExprPtr& k : e.kids) items.push_back(eval(*k, s));
      return e.name == "tuple" ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    case Expr::K::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.kids.size(); i += 2) {
        const Value k = eval(*e.kids[i], s);
        d.set_key(k, eval(*e.kids[i + 1], s));
      }
      return Value::dict(std::move(d));
    }
    case Expr::K::kAttr:
      return eval_attr(e, s);
    case Expr::K::kItem: {
      const Value obj = eval(*e.kids[0], s);
      if (obj.is_undefined()) throw JinjaError(undefined_name(*e.kids[0]) + " is undefined", 0);
      return get_item(obj, eval(*e.kids[1], s));
    }
    case Expr::K::kSlice: {
      const Value obj = eval(*e.kids[0], s);
      Value b[3];
      for (int i = 0; i < 3; ++i)
        if (e.kids[i + 1]) b[i] = eval(*e.kids[i + 1], s);
      return slice(obj, b[0], b[1], b[2]);
    }
    case Expr::K::kCall:
      return call(e, s, nullptr);
    case Expr::K::kFilter: {
      const Value input = eval(*e.kids[0], s);
      CallArgs args = eval_args(e, s);
      return apply_filter(e.name, input, args);
    }
    case Expr::K::kTest: {
      const Value input = eval(*e.kids[0], s);
      CallArgs args = eval_args(e, s);
      return Value(apply_test(e.name, input, args) != e.negate);
    }
    case Expr::K::kUnary: {
      const Value v = eval(*e.kids[0], s);
      if (e.name == "not") return Value(!v.truthy());
      if (!v.is_number()) throw JinjaError("bad operand type for unary " + e.name, 0);
      if (e.name == "+") return v.is_bool() ? Value(v.as_int()) : v;
      return v.is_float() ? Value(-v.as_float()) : Value(-v.as_int());
    }
    case Expr::K::kBinary:
      return eval_binary(e, s);
    case Expr::K::kCond:
      if (eval(*e.kids[0], s).truthy()) return eval(*e.kids[1], s);
      return e.kids[2] ? eval(*e.kids[2], s) : Value();
  }
  return Value();
}

}  // namespace
}  // namespace detail

Template Template::parse(std::string_view source) {
  Template t;
  t.root_ = detail::parse_tokens(detail::lex(source));
  return t;
}

std::string Template::render(const Dict& context) const {
  if (!root_) throw JinjaError("render() of a template that was not parsed", 0);
  detail::Scope globals{detail::make_globals(), nullptr};
  for (const auto& [k, v] : context.items()) globals.vars.set(k, v);
  detail::Scope root{{}, &globals};
  detail::Evaluator ev(&root);
  std::string out;
  ev.exec(*root_, &root, out);
  return out;
}

}  // namespace kvrun::jinja
