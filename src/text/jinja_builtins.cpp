// jinja_builtins.cpp — Jinja2's tests (`is defined`, ...), the Python str/list/dict methods chat
// templates call, and the globals (raise_exception, strftime_now, namespace, range, dict).
#include <ctime>
#include <map>

#include "text/jinja_impl.h"
#include "text/jinja_str.h"

namespace kvrun::jinja::detail {
namespace {

constexpr int64_t kMaxRange = 1 << 20;  // items range() may produce

[[noreturn]] void bad(const std::string& msg) { throw JinjaError(msg, 0); }

bool same_as(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  if (a.is_list() || a.is_dict()) return &a.as_list() == &b.as_list();
  return values_equal(a, b);
}

Value arg(const CallArgs& a, size_t i, const char* name, const char* test) {
  Value v = a.get(i, name);
  if (v.is_undefined()) bad(std::string("test '") + test + "' needs an argument");
  return v;
}

}  // namespace

bool apply_test(const std::string& name, const Value& v, CallArgs& a) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.is_namespace();
  if (name == "iterable") return v.is_list() || v.is_string() || (v.is_dict() && !v.is_namespace());
  if (name == "sequence") return v.is_list() || v.is_string() || (v.is_dict() && !v.is_namespace());
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "callable") return v.is_function();
  if (name == "lower") return v.is_string() && str_lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && str_upper(v.as_string()) == v.as_string();
  if (name == "equalto" || name == "eq" || name == "==")
    return values_equal(v, arg(a, 0, "other", "eq"));
  if (name == "ne" || name == "!=") return !values_equal(v, arg(a, 0, "other", "ne"));
  if (name == "lt" || name == "lessthan" || name == "<")
    return less_than(v, arg(a, 0, "other", "lt"));
  if (name == "gt" || name == "greaterthan" || name == ">")
    return less_than(arg(a, 0, "other", "gt"), v);
  if (name == "le" || name == "<=") return !less_than(arg(a, 0, "other", "le"), v);
  if (name == "ge" || name == ">=") return !less_than(v, arg(a, 0, "other", "ge"));
  if (name == "in") return contains(arg(a, 0, "seq", "in"), v);
  if (name == "sameas") return same_as(v, arg(a, 0, "other", "sameas"));
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_int() && !v.is_bool()) bad("test '" + name + "' needs an integer");
    if (name == "divisibleby") {
      const Value d = arg(a, 0, "num", "divisibleby");
      if (!d.is_int() || d.as_int() == 0) bad("divisibleby needs a non-zero integer");
      return v.as_int() % d.as_int() == 0;
    }
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "filter") return is_filter(arg(a, 0, "name", "filter").str());
  if (name == "test") return is_test(arg(a, 0, "name", "test").str());
  bad("no test named '" + name + "'");
}

bool is_test(const std::string& name) {
  static const char* const kTests[] = {
      "defined",     "undefined", "none",    "string",  "mapping",     "iterable", "sequence",
      "number",      "integer",   "float",   "boolean", "true",        "false",    "callable",
      "lower",       "upper",     "equalto", "eq",      "==",          "ne",       "!=",
      "lt",          "lessthan",  "<",       "gt",      "greaterthan", ">",        "le",
      "<=",          "ge",        ">=",      "in",      "sameas",      "odd",      "even",
      "divisibleby", "filter",    "test"};
  for (const char* t : kTests)
    if (name == t) return true;
  return false;
}

namespace {

/// A callable bound to `self` running `fn(self, args)`.
template <typename F>
Value bind(const Value& self, const std::string& name, F fn) {
  return Value::function([self, fn](CallArgs& a) { return fn(self, a); }, name);
}

Value list_of(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  for (const std::string& p : parts) out.emplace_back(p);
  return Value::list(std::move(out));
}

/// startswith/endswith: a string or a tuple (list) of strings.
bool affix(const std::string& s, const Value& what, bool prefix) {
  auto one = [&](const Value& x) {
    if (!x.is_string()) bad("startswith/endswith: expected a string");
    const std::string& p = x.as_string();
    if (p.size() > s.size()) return false;
    return prefix ? s.compare(0, p.size(), p) == 0
                  : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (what.is_list()) {
    for (const Value& x : what.as_list())
      if (one(x)) return true;
    return false;
  }
  return one(what);
}

Value string_method(const Value& self, const std::string& name) {
  auto strip = [name](const Value& s, CallArgs& a) {
    const Value c = a.get(0, "chars");
    const std::string* chars = c.is_string() ? &c.as_string() : nullptr;
    return Value(str_strip(s.as_string(), chars, name != "rstrip", name != "lstrip"));
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") return bind(self, name, strip);
  if (name == "upper")
    return bind(self, name,
                [](const Value& s, CallArgs&) { return Value(str_upper(s.as_string())); });
  if (name == "lower")
    return bind(self, name,
                [](const Value& s, CallArgs&) { return Value(str_lower(s.as_string())); });
  if (name == "title")
    return bind(self, name,
                [](const Value& s, CallArgs&) { return Value(str_title(s.as_string())); });
  if (name == "capitalize")
    return bind(self, name,
                [](const Value& s, CallArgs&) { return Value(str_capitalize(s.as_string())); });
  if (name == "startswith" || name == "endswith")
    return bind(self, name, [name](const Value& s, CallArgs& a) {
      return Value(affix(s.as_string(), a.get(0, "prefix"), name == "startswith"));
    });
  if (name == "split" || name == "rsplit")
    return bind(self, name, [name](const Value& s, CallArgs& a) {
      const Value sep = a.get(0, "sep");
      const Value max = a.get(1, "maxsplit");
      const int64_t m = max.is_int() ? max.as_int() : -1;
      if (sep.is_string() && sep.as_string().empty()) bad("empty separator");
      if (name == "rsplit" && sep.is_string())
        return list_of(str_rsplit(s.as_string(), sep.as_string(), m));
      return list_of(str_split(s.as_string(), sep.is_string() ? &sep.as_string() : nullptr, m));
    });
  if (name == "replace")
    return bind(self, name, [](const Value& s, CallArgs& a) {
      const Value c = a.get(2, "count");
      return Value(str_replace(s.as_string(), a.get(0, "old").str(), a.get(1, "new").str(),
                               c.is_int() ? c.as_int() : -1));
    });
  if (name == "find")
    return bind(self, name, [](const Value& s, CallArgs& a) {
      const size_t p = s.as_string().find(a.get(0, "sub").str());
      return Value(p == std::string::npos ? int64_t{-1} : static_cast<int64_t>(p));
    });
  if (name == "join")
    return bind(self, name, [](const Value& s, CallArgs& a) {
      std::string out;
      bool first = true;
      for (const Value& x : iterate(a.get(0, "iterable"))) {
        if (!x.is_string()) bad("join: sequence item is " + x.type_name() + ", not str");
        out += (first ? "" : s.as_string()) + x.as_string();
        first = false;
      }
      return Value(out);
    });
  return Value();
}

Value list_method(const Value& self, const std::string& name) {
  if (name == "append")
    return bind(self, name, [](const Value& l, CallArgs& a) {
      if (l.as_list().size() > (1u << 20)) bad("list too large");
      l.as_list().push_back(a.get(0, "object"));
      return Value::none();
    });
  if (name == "pop")
    return bind(self, name, [](const Value& l, CallArgs& a) {
      auto& v = l.as_list();
      if (v.empty()) bad("pop from empty list");
      const Value i = a.get(0, "index");
      int64_t idx = i.is_int() ? i.as_int() : -1;
      if (idx < 0) idx += static_cast<int64_t>(v.size());
      if (idx < 0 || idx >= static_cast<int64_t>(v.size())) bad("pop index out of range");
      Value out = v[idx];
      v.erase(v.begin() + idx);
      return out;
    });
  if (name == "index")
    return bind(self, name, [](const Value& l, CallArgs& a) {
      const auto& v = l.as_list();
      for (size_t i = 0; i < v.size(); ++i)
        if (values_equal(v[i], a.get(0, "value"))) return Value(static_cast<int64_t>(i));
      bad("value is not in list");
    });
  return Value();
}

Value dict_method(const Value& self, const std::string& name) {
  if (name == "get")
    return bind(self, name, [](const Value& d, CallArgs& a) {
      const Value* v = d.as_dict().find(Dict::canonical(a.get(0, "key")));
      if (v) return *v;
      const Value dflt = a.get(1, "default");
      return dflt.is_undefined() ? Value::none() : dflt;
    });
  if (name == "items" || name == "keys" || name == "values")
    return bind(self, name, [name](const Value& d, CallArgs&) {
      std::vector<Value> out;
      const Dict& dict = d.as_dict();
      for (size_t i = 0; i < dict.size(); ++i) {
        const Value k = dict.key_at(i);
        const Value& v = dict.items()[i].second;
        out.push_back(name == "items" ? Value::tuple({k, v}) : name == "keys" ? k : v);
      }
      return Value::list(std::move(out));
    });
  if (name == "pop")
    return bind(self, name, [](const Value& d, CallArgs& a) {
      const std::string k = Dict::canonical(a.get(0, "key"));
      const Value* v = d.as_dict().find(k);
      if (!v) {
        if (a.get(1, "default").is_undefined()) bad("KeyError: " + k);
        return a.get(1, "default");
      }
      Value out = *v;
      d.as_dict().erase(k);
      return out;
    });
  return Value();
}

Value strftime_now(CallArgs& a) {
  const std::string fmt = a.get(0, "format").str();
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  return Value(std::string(buf, n));
}

Value range(CallArgs& a) {
  for (const Value& v : a.positional)
    if (!v.is_int()) bad("range: arguments must be integers");
  int64_t start = 0, stop = 0, step = 1;
  if (a.positional.size() == 1)
    stop = a.positional[0].as_int();
  else if (a.positional.size() >= 2) {
    start = a.positional[0].as_int();
    stop = a.positional[1].as_int();
    if (a.positional.size() >= 3) step = a.positional[2].as_int();
  } else {
    bad("range expected at least 1 argument");
  }
  if (step == 0) bad("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) bad("range too large");
    out.emplace_back(i);
  }
  return Value::list(std::move(out));
}

Value make_dict(CallArgs& a, bool ns) {
  Dict d;
  for (const Value& p : a.positional) {
    if (!p.is_dict()) bad("namespace()/dict(): positional argument must be a mapping");
    for (const auto& [k, v] : p.as_dict().items()) d.set(k, v);
  }
  for (const auto& [k, v] : a.keyword) d.set(k, v);
  return Value::dict(std::move(d), ns);
}

}  // namespace

Value get_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return string_method(obj, name);
  if (obj.is_list()) return list_method(obj, name);
  if (obj.is_dict() && !obj.is_namespace()) return dict_method(obj, name);
  return Value();
}

Dict make_globals() {
  Dict g;
  g.set("raise_exception",
        Value::function([](CallArgs& a) -> Value { bad(a.get(0, "message").str()); },
                        "raise_exception"));
  g.set("strftime_now", Value::function(strftime_now, "strftime_now"));
  g.set("range", Value::function(range, "range"));
  g.set("namespace", Value::function([](CallArgs& a) { return make_dict(a, true); }, "namespace"));
  g.set("dict", Value::function([](CallArgs& a) { return make_dict(a, false); }, "dict"));
  return g;
}

}  // namespace kvrun::jinja::detail
