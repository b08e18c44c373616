// json_schema_regex.cpp — a JSON Schema "pattern" (ECMA-262 regex subset) → GBNF over the
// JSON-encoded content of a string (see json_schema.h).
#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "text/unicode_util.h"
#include "tools/grammar/json_schema.h"

namespace kvrun::tools {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

/// A code point as a GBNF character (inside [...] or "...").
std::string gbnf_char(uint32_t cp) {
  char buf[16];
  if (cp == '"' || cp == '\\' || cp == '[' || cp == ']' || cp == '-' || cp == '^') {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
    return buf;
  }
  if (cp < 0x20 || cp == 0x7F) {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
    return buf;
  }
  return unicode::encode_utf8(cp);
}

/// "[x]" (written with append: GCC 12's -Wrestrict misfires on "lit" + std::string).
std::string bracket(const std::string& x) { return std::string(1, '[').append(x).append("]"); }

/// "a" or "a-b" inside a GBNF class.
std::string range_text(uint32_t a, uint32_t b) {
  std::string out = gbnf_char(a);
  if (a != b) out.append("-").append(gbnf_char(b));
  return out;
}

/// The GBNF literal of the JSON encoding of code point `cp` inside a string.
std::string json_char_literal(uint32_t cp) {
  std::string body;
  switch (cp) {
    case '"':
      return R"("\\\"")";
    case '\\':
      return R"("\\\\")";
    case '\n':
      return R"("\\n")";
    case '\r':
      return R"("\\r")";
    case '\t':
      return R"("\\t")";
    case '\b':
      return R"("\\b")";
    case '\f':
      return R"("\\f")";
    default:
      break;
  }
  if (cp < 0x20) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\"\\\\u%04X\"", cp);
    return buf;
  }
  return bracket(gbnf_char(cp));
}

bool json_special(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

class RegexParser {
 public:
  explicit RegexParser(const std::string& p) : s_(p) {}

  std::string run() {
    if (peek() == '^') ++pos_;
    std::string e = alternatives();
    if (pos_ < s_.size()) fail("unexpected '" + std::string(1, s_[pos_]) + "'");
    return e.empty() ? "\"\"" : e;
  }

 private:
  const std::string& s_;
  size_t pos_ = 0;
  int depth_ = 0;

  [[noreturn]] void fail(const std::string& msg) const {
    throw SchemaError("pattern '" + s_ + "': " + msg + " at offset " + std::to_string(pos_));
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool at_end() const { return pos_ >= s_.size(); }

  std::string alternatives() {
    std::vector<std::string> alts{sequence()};
    while (peek() == '|') {
      ++pos_;
      alts.push_back(sequence());
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i)
      out += (i ? " | " : "") + (alts[i].empty() ? std::string("\"\"") : alts[i]);
    return out + ")";
  }

  std::string sequence() {
    std::string out;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$' && pos_ + 1 == s_.size()) {
        ++pos_;
        break;
      }
      std::string a = atom();
      a = quantified(a);
      if (!out.empty()) out += " ";
      out += a;
    }
    return out;
  }

  uint32_t number() {
    const size_t start = pos_;
    uint32_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + uint32_t(peek() - '0');
      if (v > 10000) fail("repetition count above 10000");
      ++pos_;
    }
    if (pos_ == start) fail("expected a number in '{...}'");
    return v;
  }

  std::string quantified(const std::string& a) {
    std::string q;
    const char c = peek();
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      ++pos_;
      const uint32_t m = number();
      q = std::string(1, '{').append(std::to_string(m));
      if (peek() == ',') {
        ++pos_;
        q += ",";
        if (peek() != '}') {
          const uint32_t n = number();
          if (n < m) fail("repetition {m,n} with n < m");
          q += std::to_string(n);
        }
      }
      if (peek() != '}') fail("expected '}'");
      ++pos_;
      q += "}";
    } else {
      return a;
    }
    if (peek() == '?') ++pos_;  // lazy: the same language
    return "(" + a + ")" + q;
  }

  uint32_t utf8_at() {
    const auto lead = static_cast<uint8_t>(s_[pos_]);
    const size_t n = unicode::utf8_len(lead);
    if (pos_ + n > s_.size()) fail("invalid UTF-8");
    const auto cps = unicode::decode_utf8(s_.substr(pos_, n));
    pos_ += n;
    return cps.empty() ? unicode::kReplacement : cps[0];
  }

  /// An escape after '\' (pos_ at the letter): adds its ranges to `r` (negated when `neg`).
  void escape(Ranges& r, bool& neg) {
    const char c = peek();
    ++pos_;
    neg = false;
    switch (c) {
      case 'd':
        r = {{'0', '9'}};
        return;
      case 'D':
        r = {{'0', '9'}};
        neg = true;
        return;
      case 'w':
        r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
        return;
      case 'W':
        r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
        neg = true;
        return;
      case 's':
        r = {{' ', ' '}, {'\t', '\r'}};
        return;
      case 'S':
        r = {{' ', ' '}, {'\t', '\r'}};
        neg = true;
        return;
      case 'n':
        r = {{'\n', '\n'}};
        return;
      case 'r':
        r = {{'\r', '\r'}};
        return;
      case 't':
        r = {{'\t', '\t'}};
        return;
      case 'f':
        r = {{'\f', '\f'}};
        return;
      case 'v':
        r = {{'\v', '\v'}};
        return;
      case 'u': {
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i, ++pos_) {
          const char h = peek();
          const int d = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
          if (d < 0) fail("expected 4 hex digits after \\u");
          v = v * 16 + uint32_t(d);
        }
        r = {{v, v}};
        return;
      }
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '\0')
          fail("unsupported escape '\\" + std::string(1, c) + "'");
        r = {{uint32_t(uint8_t(c)), uint32_t(uint8_t(c))}};
    }
  }

  /// A set of code points as GBNF over their JSON encodings.
  static std::string set_expr(Ranges r, bool negated) {
    std::sort(r.begin(), r.end());
    if (negated) {  // never generate a character that needs escaping
      std::string out = "[^\\x00-\\x1F\\x22\\x5C";
      for (const auto& [a, b] : r) out += range_text(a, b);
      return out + "]";
    }
    std::string plain;
    std::vector<std::string> alts;
    for (auto [a, b] : r) {
      for (uint32_t x = a; x <= std::min(b, 0x5Cu); ++x)
        if (json_special(x)) alts.push_back(json_char_literal(x));
      Ranges pieces{{a, b}};  // [a, b] without the characters that need escaping
      for (auto [ea, eb] : {std::pair<uint32_t, uint32_t>{0, 0x1F}, {0x22, 0x22}, {0x5C, 0x5C}}) {
        Ranges next;
        for (auto [pa, pb] : pieces) {
          if (pb < ea || pa > eb) {
            next.push_back({pa, pb});
            continue;
          }
          if (pa < ea) next.push_back({pa, ea - 1});
          if (pb > eb) next.push_back({eb + 1, pb});
        }
        pieces = next;
      }
      for (auto [pa, pb] : pieces) plain += range_text(pa, pb);
    }
    if (!plain.empty()) alts.insert(alts.begin(), "[" + plain + "]");
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }

  std::string char_class() {
    ++pos_;  // '['
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++pos_;
    }
    Ranges r;
    bool first = true;
    while (first || peek() != ']') {
      if (at_end()) fail("unterminated character class");
      first = false;
      uint32_t lo;
      if (peek() == '\\') {
        ++pos_;
        Ranges e;
        bool neg = false;
        escape(e, neg);
        if (neg) fail("negated class escapes inside [...] are not supported");
        if (e.size() > 1 || e[0].first != e[0].second) {
          r.insert(r.end(), e.begin(), e.end());
          continue;
        }
        lo = e[0].first;
      } else {
        lo = utf8_at();
      }
      uint32_t hi = lo;
      if (peek() == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
        ++pos_;
        if (peek() == '\\') {
          ++pos_;
          Ranges e;
          bool neg = false;
          escape(e, neg);
          if (neg || e.size() > 1 || e[0].first != e[0].second) fail("bad range in class");
          hi = e[0].first;
        } else {
          hi = utf8_at();
        }
        if (hi < lo) fail("character range out of order");
      }
      r.push_back({lo, hi});
    }
    ++pos_;  // ']'
    return set_expr(r, negated);
  }

  std::string atom() {
    const char c = peek();
    if (c == '(') {
      ++pos_;
      if (peek() == '?') {
        if (pos_ + 1 < s_.size() && s_[pos_ + 1] == ':')
          pos_ += 2;
        else
          fail("lookaround and named groups are not supported");
      }
      if (++depth_ > 64) fail("groups nested too deeply");
      std::string e = alternatives();
      --depth_;
      if (peek() != ')') fail("missing ')'");
      ++pos_;
      return std::string(1, '(').append(e.empty() ? "\"\"" : e).append(")");
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      return "[^\\x00-\\x1F\\x22\\x5C]";
    }
    if (c == '\\') {
      ++pos_;
      Ranges r;
      bool neg = false;
      escape(r, neg);
      return set_expr(r, neg);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("nothing to repeat");
    if (c == '^' || c == '$') fail("anchors are supported only at the start and the end");
    const uint32_t cp = utf8_at();
    return json_special(cp) ? json_char_literal(cp) : bracket(gbnf_char(cp));
  }
};

}  // namespace

std::string regex_to_gbnf(const std::string& pattern) { return RegexParser(pattern).run(); }

}  // namespace kvrun::tools
