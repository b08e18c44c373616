// jinja_value.cpp — the Value type with Python semantics: str()/repr(), json.dumps, equality,
// ordering, arithmetic, indexing, slicing and iteration.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "text/jinja_impl.h"

namespace kvrun::jinja {

namespace detail {

namespace {
thread_local int nesting = 0;
}  // namespace

NestingGuard::NestingGuard() {
  if (++nesting > 256) {
    --nesting;
    throw JinjaError("value nested too deeply (or containing itself)", 0);
  }
}

NestingGuard::~NestingGuard() { --nesting; }

}  // namespace detail

// ---- Dict ----

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items_)
    if (k == key) return &v;
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : items_)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  if (Value* old = find(key)) {
    *old = std::move(v);
    return;
  }
  items_.emplace_back(key, std::move(v));
  keys_.emplace_back();
}

std::string Dict::canonical(const Value& key) {
  return key.is_string() ? key.as_string() : std::string("\x01").append(key.repr());
}

void Dict::set_key(const Value& key, Value v) {
  const std::string k = canonical(key);
  const bool fresh = !find(k);
  set(k, std::move(v));
  if (fresh && !key.is_string()) keys_.back() = std::make_shared<Value>(key);
}

Value Dict::key_at(size_t i) const { return keys_[i] ? *keys_[i] : Value(items_[i].first); }

bool Dict::erase(std::string_view key) {
  for (auto it = items_.begin(); it != items_.end(); ++it)
    if (it->first == key) {
      keys_.erase(keys_.begin() + (it - items_.begin()));
      items_.erase(it);
      return true;
    }
  return false;
}

// ---- Value ----

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.namespace_ = true;
  return v;
}

Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.namespace_ = true;
  return v;
}

Value Value::dict(Dict d, bool is_namespace) {
  Value v;
  v.kind_ = Kind::kDict;
  v.namespace_ = is_namespace;
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::function(Function f, std::string name) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.fn_ = std::make_shared<Function>(std::move(f));
  v.str_ = std::move(name);
  return v;
}

double Value::as_float() const { return kind_ == Kind::kFloat ? float_ : double(int_); }

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0.0;
    case Kind::kString:
      return !str_.empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return namespace_ || dict_->size() > 0;
    case Kind::kFunction:
      return true;
  }
  return false;
}

namespace {

/// Python's repr() of a float: shortest round-trip digits, fixed for 1e-4 <= |x| < 1e16.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  const int exp = std::stoi(sci.substr(epos + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += e;
  }
  return neg ? "-" + out : out;
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == static_cast<unsigned char>(q))
      out += std::string("\\") + q;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

}  // namespace

std::string Value::str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return str_;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  const detail::NestingGuard guard;
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return int_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return float_repr(float_);
    case Kind::kString:
      return string_repr(str_);
    case Kind::kList: {
      std::string out = namespace_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].repr();
      if (namespace_) return out + (list_->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::kDict: {
      std::string out = namespace_ ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict_->size(); ++i)
        out += (i ? ", " : "") + dict_->key_at(i).repr() + ": " + dict_->items()[i].second.repr();
      return out + (namespace_ ? "}>" : "}");
    }
    case Kind::kFunction:
      return "<function " + str_ + ">";
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return namespace_ ? "Namespace" : "dict";
    case Kind::kFunction:
      return "function";
  }
  return "";
}

bool values_equal(const Value& a, const Value& b) {
  const detail::NestingGuard guard;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const auto& x = a.as_list();
      const auto& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!values_equal(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items()) {
        const Value* o = y.find(k);
        if (!o || !values_equal(v, *o)) return false;
      }
      return true;
    }
    case Value::Kind::kFunction:
      return &a.as_function() == &b.as_function();
    default:
      return false;
  }
}

Value CallArgs::get(size_t i, std::string_view name) const {
  if (i < positional.size()) return positional[i];
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return Value();
}

// ---- JSON ----

namespace {

/// Appends \\uXXXX escapes (a surrogate pair above U+FFFF) of the UTF-8 sequence at s[*i].
void json_escape_utf8(const std::string& s, size_t* i, std::string& out) {
  const auto c = static_cast<unsigned char>(s[*i]);
  const int n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (int k = 1; k < n && *i + k < s.size(); ++k) cp = (cp << 6) | (s[*i + k] & 0x3f);
  *i += n - 1;
  char b[16];
  if (cp >= 0x10000) {
    cp -= 0x10000;
    std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
  } else {
    std::snprintf(b, sizeof b, "\\u%04x", cp);
  }
  out += b;
}

void json_string(const std::string& s, std::string& out, bool ascii) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (ascii && c >= 0x80) {
      json_escape_utf8(s, &i, out);
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_value(const Value& v, const JsonOptions& o, int level, std::string& out) {
  if (level > 200) throw JinjaError("tojson: value nested too deeply", 0);
  const std::string nl = o.indent >= 0 ? "\n" + std::string((level + 1) * o.indent, ' ') : "";
  const std::string close_nl = o.indent >= 0 ? "\n" + std::string(level * o.indent, ' ') : "";
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat: {
      const double d = v.as_float();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : v.repr();
      return;
    }
    case Value::Kind::kString:
      json_string(v.as_string(), out, o.ensure_ascii);
      return;
    case Value::Kind::kList: {
      const auto& items = v.as_list();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += "[";
      for (size_t i = 0; i < items.size(); ++i) {
        out += i ? o.item_sep + nl : nl;
        json_value(items[i], o, level + 1, out);
      }
      out += close_nl + "]";
      return;
    }
    case Value::Kind::kDict: {
      if (v.is_namespace()) break;
      std::vector<std::pair<std::string, Value>> entries;
      const Dict& d = v.as_dict();
      for (size_t i = 0; i < d.size(); ++i) {
        const Value k = d.key_at(i);
        if (!k.is_string() && !k.is_number() && !k.is_none())
          throw JinjaError("keys must be str, int, float, bool or None", 0);
        entries.emplace_back(k.is_none()   ? "null"
                             : k.is_bool() ? (k.as_bool() ? "true" : "false")
                                           : k.str(),
                             d.items()[i].second);
      }
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      out += "{";
      for (size_t i = 0; i < entries.size(); ++i) {
        out += i ? o.item_sep + nl : nl;
        json_string(entries[i].first, out, o.ensure_ascii);
        out += o.key_sep;
        json_value(entries[i].second, o, level + 1, out);
      }
      out += close_nl + "}";
      return;
    }
    default:
      break;
  }
  throw JinjaError("Object of type " + v.type_name() + " is not JSON serializable", 0);
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_value(v, options, 0, out);
  return out;
}

}  // namespace kvrun::jinja
