// jinja_filters.cpp — Jinja2's builtin filters and tests that chat templates use, following the
// Jinja2 3.1 "List of Builtin Filters/Tests" documentation, with HF's `tojson`
// (json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "text/jinja_impl.h"
#include "text/jinja_str.h"

namespace kvrun::jinja::detail {
namespace {

using FilterFn = Value (*)(const Value&, CallArgs&);

[[noreturn]] void bad(const std::string& msg) { throw JinjaError(msg, 0); }

/// Attribute or item `path` ("a.b.0") of `v`, as Jinja's make_attrgetter.
Value attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = digits ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part))))
                 : get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value f_length(const Value& v, CallArgs&) { return Value(length(v)); }
Value f_string(const Value& v, CallArgs&) { return Value(v.str()); }
Value f_safe(const Value& v, CallArgs&) { return Value::markup(v.str()); }
Value f_upper(const Value& v, CallArgs&) { return Value(str_upper(v.str())); }
Value f_lower(const Value& v, CallArgs&) { return Value(str_lower(v.str())); }
Value f_capitalize(const Value& v, CallArgs&) { return Value(str_capitalize(v.str())); }
Value f_title(const Value& v, CallArgs&) { return Value(str_title(v.str())); }
Value f_list(const Value& v, CallArgs&) { return Value::list(iterate(v)); }

Value f_trim(const Value& v, CallArgs& a) {
  const Value chars = a.get(0, "chars");
  return Value(str_strip(v.str(), chars.is_string() ? &chars.as_string() : nullptr, true, true));
}

Value f_tojson(const Value& v, CallArgs& a) {
  JsonOptions o;
  o.ensure_ascii = a.get(0, "ensure_ascii").truthy();
  const Value indent = a.get(1, "indent");
  if (indent.is_int()) {
    o.indent = static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, 64));
    o.item_sep = ",";
  } else if (!indent.is_undefined() && !indent.is_none()) {
    bad("tojson: indent must be an integer");
  }
  const Value seps = a.get(2, "separators");
  if (seps.is_list() && seps.as_list().size() == 2) {
    o.item_sep = seps.as_list()[0].str();
    o.key_sep = seps.as_list()[1].str();
  } else if (!seps.is_undefined() && !seps.is_none()) {
    bad("tojson: separators must be a pair of strings");
  }
  o.sort_keys = a.get(3, "sort_keys").truthy();
  return Value(to_json(v, o));
}

Value f_default(const Value& v, CallArgs& a) {
  const bool boolean = a.get(1, "boolean").truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) {
    const Value d = a.get(0, "default_value");
    return d.is_undefined() ? Value("") : d;
  }
  return v;
}

Value f_items(const Value& v, CallArgs&) {
  std::vector<Value> out;
  if (v.is_undefined()) return Value::list();
  if (!v.is_dict()) bad("items: can only get items from a mapping, not " + v.type_name());
  const Dict& d = v.as_dict();
  for (size_t i = 0; i < d.size(); ++i)
    out.push_back(Value::tuple({d.key_at(i), d.items()[i].second}));
  return Value::list(std::move(out));
}

Value f_join(const Value& v, CallArgs& a) {
  const Value sep = a.get(0, "d");
  const Value attr = a.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& x : iterate(v)) {
    if (!first) out += sep.is_undefined() ? "" : sep.str();
    first = false;
    out += (attr.is_undefined() ? x : attr_path(x, attr.str())).str();
  }
  return Value(out);
}

Value f_first(const Value& v, CallArgs&) {
  const std::vector<Value> items = iterate(v);
  return items.empty() ? Value() : items.front();
}

Value f_last(const Value& v, CallArgs&) {
  const std::vector<Value> items = iterate(v);
  return items.empty() ? Value() : items.back();
}

Value f_replace(const Value& v, CallArgs& a) {
  const Value count = a.get(2, "count");
  return Value(str_replace(v.str(), a.get(0, "old").str(), a.get(1, "new").str(),
                           count.is_int() ? count.as_int() : -1));
}

Value f_int(const Value& v, CallArgs& a) {
  const Value dflt = a.get(0, "default").is_undefined() ? Value(0) : a.get(0, "default");
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_float()) || std::fabs(v.as_float()) > 9e18) return dflt;
    return Value(static_cast<int64_t>(v.as_float()));
  }
  if (v.is_string()) {
    const std::string s = str_strip(v.as_string(), nullptr, true, true);
    if (std::optional<int64_t> i = parse_int(s)) return Value(*i);
    if (std::optional<double> d = parse_float(s); d && std::fabs(*d) < 9e18)
      return Value(static_cast<int64_t>(*d));
  }
  return dflt;
}

Value f_float(const Value& v, CallArgs& a) {
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string())
    if (std::optional<double> d = parse_float(str_strip(v.as_string(), nullptr, true, true)))
      return Value(*d);
  const Value d = a.get(0, "default");
  return d.is_undefined() ? Value(0.0) : d;
}

Value f_abs(const Value& v, CallArgs&) {
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_number()) {
    if (v.as_int() == INT64_MIN) bad("integer overflow in abs");
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  bad("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_indent(const Value& v, CallArgs& a) {
  const Value w = a.get(0, "width");
  const std::string pad = w.is_string() ? w.as_string()
                          : w.is_int()  ? std::string(std::clamp<int64_t>(w.as_int(), 0, 256), ' ')
                                        : std::string(4, ' ');
  const bool first = a.get(1, "first").truthy();
  const bool blank = a.get(2, "blank").truthy();
  const std::vector<std::string> lines = str_splitlines(v.str() + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n" + ((blank || !lines[i].empty()) ? pad : std::string());
    out += lines[i];
  }
  return Value(first ? pad + out : out);
}

/// A sort key that folds case when `case_sensitive` is false (Jinja's ignore_case).
Value sort_key(const Value& v, bool case_sensitive) {
  return (!case_sensitive && v.is_string()) ? Value(str_lower(v.as_string())) : v;
}

Value f_sort(const Value& v, CallArgs& a) {
  std::vector<Value> items = iterate(v);
  const bool reverse = a.get(0, "reverse").truthy();
  const bool cs = a.get(1, "case_sensitive").truthy();
  const Value attr = a.get(2, "attribute");
  auto key = [&](const Value& x) {
    return sort_key(attr.is_undefined() ? x : attr_path(x, attr.str()), cs);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? less_than(key(y), key(x)) : less_than(key(x), key(y));
  });
  return Value::list(std::move(items));
}

Value f_dictsort(const Value& v, CallArgs& a) {
  if (!v.is_dict()) bad("dictsort: expected a mapping, got " + v.type_name());
  CallArgs none;
  std::vector<Value> items = f_items(v, none).as_list();
  const bool cs = a.get(0, "case_sensitive").truthy();
  const Value by = a.get(1, "by");
  const size_t pos = by.is_string() && by.as_string() == "value" ? 1 : 0;
  const bool reverse = a.get(2, "reverse").truthy();
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key(x.as_list()[pos], cs);
    const Value ky = sort_key(y.as_list()[pos], cs);
    return reverse ? less_than(ky, kx) : less_than(kx, ky);
  });
  return Value::list(std::move(items));
}

Value f_unique(const Value& v, CallArgs& a) {
  const bool cs = a.get(0, "case_sensitive").truthy();
  const Value attr = a.get(1, "attribute");
  std::vector<Value> out;
  std::vector<Value> seen;
  for (const Value& x : iterate(v)) {
    const Value k = sort_key(attr.is_undefined() ? x : attr_path(x, attr.str()), cs);
    if (std::none_of(seen.begin(), seen.end(),
                     [&](const Value& s) { return values_equal(s, k); })) {
      seen.push_back(k);
      out.push_back(x);
    }
  }
  return Value::list(std::move(out));
}

Value f_map(const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (!v.truthy()) return Value::list();  // Jinja's map skips an empty or false input
  for (const auto& [k, x] : a.keyword)
    if (k == "attribute") {
      const Value dflt = a.get(99, "default");
      for (const Value& item : iterate(v)) {
        Value r = attr_path(item, x.str());
        out.push_back(r.is_undefined() && !dflt.is_undefined() ? dflt : r);
      }
      return Value::list(std::move(out));
    }
  if (a.positional.empty()) bad("map: expected a filter name or attribute=");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : iterate(v))
    out.push_back(apply_filter(a.positional[0].str(), item, rest));
  return Value::list(std::move(out));
}

/// select/reject/selectattr/rejectattr: keeps items whose (attribute's) test is `want`.
Value select_impl(const Value& v, CallArgs& a, bool by_attr, bool want) {
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (a.positional.empty()) bad("selectattr/rejectattr: missing attribute name");
    attr = a.positional[next++].str();
  }
  std::string test;
  if (next < a.positional.size()) test = a.positional[next++].str();
  CallArgs targs;
  targs.positional.assign(a.positional.begin() + next, a.positional.end());
  std::vector<Value> out;
  if (!v.truthy()) return Value::list();  // Jinja's select/reject skip a false input
  for (const Value& item : iterate(v)) {
    const Value x = by_attr ? attr_path(item, attr) : item;
    const bool ok = test.empty() ? x.truthy() : apply_test(test, x, targs);
    if (ok == want) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_select(const Value& v, CallArgs& a) { return select_impl(v, a, false, true); }
Value f_reject(const Value& v, CallArgs& a) { return select_impl(v, a, false, false); }
Value f_selectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, true); }
Value f_rejectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, false); }

Value f_reverse(const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::vector<std::string> chars = utf8_chars(v.as_string());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return Value(out);
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_escape(const Value& v, CallArgs&) {
  return v.is_markup() ? v : Value::markup(html_escape(v.str()));
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

Value f_round(const Value& v, CallArgs& a) {
  if (!v.is_number()) bad("round: expected a number");
  const Value p = a.get(0, "precision");
  const double scale = std::pow(10.0, p.is_int() ? double(p.as_int()) : 0.0);
  return Value(std::round(v.as_float() * scale) / scale);
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> m = {
      {"length", f_length},
      {"count", f_length},
      {"string", f_string},
      {"safe", f_safe},
      {"upper", f_upper},
      {"lower", f_lower},
      {"capitalize", f_capitalize},
      {"title", f_title},
      {"list", f_list},
      {"trim", f_trim},
      {"tojson", f_tojson},
      {"default", f_default},
      {"d", f_default},
      {"items", f_items},
      {"join", f_join},
      {"first", f_first},
      {"last", f_last},
      {"replace", f_replace},
      {"int", f_int},
      {"float", f_float},
      {"abs", f_abs},
      {"indent", f_indent},
      {"sort", f_sort},
      {"dictsort", f_dictsort},
      {"unique", f_unique},
      {"map", f_map},
      {"select", f_select},
      {"reject", f_reject},
      {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr},
      {"reverse", f_reverse},
      {"escape", f_escape},
      {"e", f_escape},
      {"round", f_round},
  };
  return m;
}

}  // namespace

bool is_filter(const std::string& name) { return filters().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) bad("no filter named '" + name + "'");
  return it->second(input, args);
}

}  // namespace kvrun::jinja::detail
