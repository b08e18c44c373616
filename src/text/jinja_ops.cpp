// jinja_ops.cpp — Python's operators on template values: arithmetic, ordering, `in`, len(),
// iteration, indexing and slicing (strings by Unicode code point, as Python's str).
#include <climits>
#include <cmath>
#include <optional>

#include "text/jinja_impl.h"

namespace kvrun::jinja::detail {
namespace {

constexpr size_t kMaxRepeat = 16u << 20;  // longest result of str * n / list * n

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw JinjaError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                       b.type_name() + "'",
                   0);
}

Value int_op(const std::string& op, int64_t x, int64_t y) {
  int64_t r = 0;
  bool overflow = false;
  if (op == "+")
    overflow = __builtin_add_overflow(x, y, &r);
  else if (op == "-")
    overflow = __builtin_sub_overflow(x, y, &r);
  else if (op == "*")
    overflow = __builtin_mul_overflow(x, y, &r);
  else if (op == "//" || op == "%") {
    if (y == 0) throw JinjaError("integer division or modulo by zero", 0);
    if (x == INT64_MIN && y == -1) throw JinjaError("integer overflow", 0);
    int64_t q = x / y;
    int64_t m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    r = op == "//" ? q : m;
  } else if (op == "**") {
    if (y < 0) return Value(std::pow(double(x), double(y)));
    r = 1;
    for (int64_t i = 0; i < y && !overflow; ++i) overflow = __builtin_mul_overflow(r, x, &r);
  }
  if (overflow) throw JinjaError("integer overflow in '" + op + "'", 0);
  return Value(r);
}

Value float_op(const std::string& op, double x, double y) {
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "**") return Value(std::pow(x, y));
  if (y == 0) throw JinjaError("float division by zero", 0);
  if (op == "/") return Value(x / y);
  const double q = std::floor(x / y);
  return op == "//" ? Value(q) : Value(x - q * y);
}

Value repeat(const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value("") : Value::list();
  const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
  if (unit * static_cast<size_t>(n) > kMaxRepeat || n > int64_t(kMaxRepeat))
    throw JinjaError("repetition result too large", 0);
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(out);
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return Value::list(std::move(out));
}

/// Python index `i` normalised against `n`; returns false when out of range.
bool norm_index(int64_t i, size_t n, size_t* out) {
  if (i < 0) i += static_cast<int64_t>(n);
  if (i < 0 || i >= static_cast<int64_t>(n)) return false;
  *out = static_cast<size_t>(i);
  return true;
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return Value(values_equal(a, b));
  if (op == "!=") return Value(!values_equal(a, b));
  if (op == "<") return Value(less_than(a, b));
  if (op == ">") return Value(less_than(b, a));
  if (op == "<=") return Value(!less_than(b, a));
  if (op == ">=") return Value(!less_than(a, b));
  if (a.is_number() && b.is_number()) {
    if (op == "/") return float_op(op, a.as_float(), b.as_float());
    if (a.is_float() || b.is_float()) return float_op(op, a.as_float(), b.as_float());
    return int_op(op, a.as_int(), b.as_int());
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    if (!a.is_markup() && !b.is_markup()) return Value(a.as_string() + b.as_string());
    return Value::markup((a.is_markup() ? a.as_string() : html_escape(a.as_string())) +
                         (b.is_markup() ? b.as_string() : html_escape(b.as_string())));
  }
  if (op == "+" && a.is_list() && b.is_list()) {
    std::vector<Value> out = a.as_list();
    out.insert(out.end(), b.as_list().begin(), b.as_list().end());
    return Value::list(std::move(out));
  }
  if (op == "*" && (a.is_string() || a.is_list()) && (b.is_int() || b.is_bool()))
    return repeat(a, b.as_int());
  if (op == "*" && (b.is_string() || b.is_list()) && (a.is_int() || a.is_bool()))
    return repeat(b, a.as_int());
  unsupported(op, a, b);
}

bool less_than(const Value& a, const Value& b) {
  const NestingGuard guard;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw JinjaError(
      "'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'",
      0);
}

bool contains(const Value& haystack, const Value& needle) {
  if (haystack.is_string()) {
    if (!needle.is_string())
      throw JinjaError("'in <string>' requires string as left operand, not " + needle.type_name(),
                       0);
    return haystack.as_string().find(needle.as_string()) != std::string::npos;
  }
  if (haystack.is_list()) {
    for (const Value& v : haystack.as_list())
      if (values_equal(v, needle)) return true;
    return false;
  }
  if (haystack.is_dict()) return haystack.as_dict().find(Dict::canonical(needle)) != nullptr;
  if (haystack.is_undefined()) return false;
  throw JinjaError("argument of type '" + haystack.type_name() + "' is not iterable", 0);
}

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::vector<Value> iterate(const Value& v) {
  std::vector<Value> out;
  if (v.is_list()) return v.as_list();
  if (v.is_dict() && !v.is_namespace()) {
    for (size_t i = 0; i < v.as_dict().size(); ++i) out.push_back(v.as_dict().key_at(i));
    return out;
  }
  if (v.is_string()) {
    for (std::string& c : utf8_chars(v.as_string())) out.emplace_back(std::move(c));
    return out;
  }
  if (v.is_undefined()) return out;
  throw JinjaError("'" + v.type_name() + "' object is not iterable", 0);
}

int64_t length(const Value& v) {
  if (v.is_string()) {
    int64_t n = 0;
    for (unsigned char c : v.as_string()) n += (c & 0xC0) != 0x80;
    return n;
  }
  if (v.is_list()) return static_cast<int64_t>(v.as_list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().size());
  if (v.is_undefined()) return 0;
  throw JinjaError("object of type '" + v.type_name() + "' has no len()", 0);
}

Value get_item(const Value& v, const Value& key) {
  if (v.is_dict()) {
    if (const Value* x = v.as_dict().find(Dict::canonical(key))) return *x;
    return key.is_string() ? get_method(v, key.as_string()) : Value();
  }
  if ((v.is_list() || v.is_string()) && (key.is_int() || key.is_bool())) {
    size_t i = 0;
    if (v.is_list())
      return norm_index(key.as_int(), v.as_list().size(), &i) ? v.as_list()[i] : Value();
    const std::vector<std::string> chars = utf8_chars(v.as_string());
    return norm_index(key.as_int(), chars.size(), &i) ? Value(chars[i]) : Value();
  }
  if (key.is_string()) return get_method(v, key.as_string());
  return Value();
}

Value slice(const Value& v, const Value& start, const Value& stop, const Value& step) {
  std::vector<Value> items;
  if (v.is_list())
    items = v.as_list();
  else if (v.is_string())
    items = iterate(v);
  else
    throw JinjaError("'" + v.type_name() + "' object is not subscriptable", 0);
  auto bound = [](const Value& b, const char* what) -> std::optional<int64_t> {
    if (b.is_undefined() || b.is_none()) return std::nullopt;
    if (!b.is_int() && !b.is_bool())
      throw JinjaError(std::string("slice ") + what + " must be an integer or None", 0);
    return b.as_int();
  };
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t st = bound(step, "step").value_or(1);
  if (st == 0) throw JinjaError("slice step cannot be zero", 0);
  auto clamp = [&](std::optional<int64_t> x, int64_t dflt) {
    if (!x) return dflt;
    int64_t i = *x < 0 ? *x + n : *x;
    const int64_t lo = st > 0 ? 0 : -1;
    const int64_t hi = st > 0 ? n : n - 1;
    return i < lo ? lo : i > hi ? hi : i;
  };
  const int64_t b = clamp(bound(start, "start"), st > 0 ? 0 : n - 1);
  const int64_t e = clamp(bound(stop, "stop"), st > 0 ? n : -1);
  std::vector<Value> out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(items[i]);
  if (v.is_list()) return Value::list(std::move(out));
  std::string s;
  for (const Value& c : out) s += c.as_string();
  return Value(s);
}

}  // namespace kvrun::jinja::detail
