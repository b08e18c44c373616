// grammar_parser.cpp — GBNF text → Grammar (see grammar.h for the syntax and its source).
// A recursive-descent parser over bytes; repetition is rewritten into generated right-recursive
// rules (x* → R ::= x R | ε), parentheses into generated rules, so the matcher only knows
// sequences, alternatives, rule references and character groups.
#include <algorithm>
#include <map>

#include "text/grammar.h"
#include "text/unicode_util.h"

namespace kvrun {
namespace {

constexpr uint32_t kUnbounded = UINT32_MAX;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

/// Printable form of a byte for messages ("'x'", "end of line", "end of input").
std::string describe(std::string_view s, size_t pos) {
  if (pos >= s.size()) return "end of input";
  const char c = s[pos];
  if (c == '\n' || c == '\r') return "end of line";
  if (static_cast<unsigned char>(c) < 0x20) return "a control character";
  return std::string("'") + c + "'";
}

class Parser {
 public:
  Parser(std::string_view src, const GrammarLimits& lim) : s_(src), lim_(lim) {}

  Grammar run() {
    skip_space(true);
    while (pos_ < s_.size()) {
      parse_rule();
      skip_space(true);
    }
    check_defined();
    return std::move(g_);
  }

 private:
  std::string_view s_;
  GrammarLimits lim_;
  size_t pos_ = 0;
  Grammar g_;
  std::map<std::string, uint32_t, std::less<>> ids_;
  std::vector<size_t> first_use_;  // [rule] byte offset of the first reference
  std::vector<bool> defined_;
  size_t n_elements_ = 0;

  [[noreturn]] void fail(const std::string& msg, size_t at) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw GrammarError("line " + std::to_string(line) + ", column " + std::to_string(col) + ": " +
                       msg);
  }
  [[noreturn]] void fail(const std::string& msg) const { fail(msg, pos_); }

  char peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }
  bool at_end() const { return pos_ >= s_.size(); }

  /// Skips blanks and comments; newlines too when `newline_ok`.
  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && s_[pos_] != '\n' && s_[pos_] != '\r') ++pos_;
      } else if (newline_ok && (c == '\n' || c == '\r')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  uint32_t rule_id(std::string_view name, size_t used_at) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const auto id = static_cast<uint32_t>(g_.rules.size());
    ids_.emplace(std::string(name), id);
    g_.rules.emplace_back();
    g_.names.emplace_back(name);
    first_use_.push_back(used_at);
    defined_.push_back(false);
    return id;
  }

  /// A fresh rule named after `base` ("base_1", "base_2", ...), defined by the caller.
  uint32_t new_rule(const std::string& base) {
    for (size_t n = g_.rules.size();; ++n) {
      const std::string name = base + "_" + std::to_string(n);
      if (ids_.count(name)) continue;
      const uint32_t id = rule_id(name, pos_);
      defined_[id] = true;
      return id;
    }
  }

  void set_rule(uint32_t id, std::vector<GrammarElement> elems) {
    n_elements_ += elems.size();
    if (n_elements_ > lim_.max_elements)
      fail("grammar too large (more than " + std::to_string(lim_.max_elements) + " elements)");
    g_.rules[id] = std::move(elems);
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(s_[pos_])) ++pos_;
    if (pos_ == start) fail("expected a rule name, found " + describe(s_, pos_));
    return std::string(s_.substr(start, pos_ - start));
  }

  void parse_rule() {
    const size_t start = pos_;
    const std::string name = parse_name();
    skip_space(false);
    if (s_.substr(pos_, 3) != "::=")
      fail("expected '::=' after rule name '" + name + "', found " + describe(s_, pos_));
    pos_ += 3;
    skip_space(true);
    const uint32_t id = rule_id(name, start);
    if (defined_[id]) fail("rule '" + name + "' is defined twice", start);
    defined_[id] = true;
    set_rule(id, parse_alternates(name, 0));
    if (!at_end() && s_[pos_] != '\n' && s_[pos_] != '\r')
      fail("unexpected " + describe(s_, pos_) + " in rule '" + name + "'");
  }

  std::vector<GrammarElement> parse_alternates(const std::string& rule, int depth) {
    std::vector<GrammarElement> out;
    parse_sequence(out, rule, depth);
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      out.push_back({GrammarOp::kAlt, 0});
      parse_sequence(out, rule, depth);
    }
    out.push_back({GrammarOp::kEnd, 0});
    return out;
  }

  uint32_t parse_hex(int n_digits) {
    uint32_t v = 0;
    for (int i = 0; i < n_digits; ++i) {
      const char c = peek();
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0)
        fail("expected " + std::to_string(n_digits) + " hex digits, found " + describe(s_, pos_));
      v = v * 16 + uint32_t(d);
      ++pos_;
    }
    if (v > 0x10FFFF) fail("code point out of range (above U+10FFFF)");
    return v;
  }

  /// One code point of a literal or class: an escape or a UTF-8 sequence.
  uint32_t parse_char() {
    if (peek() == '\\') {
      const size_t at = pos_;
      ++pos_;
      const char c = peek();
      ++pos_;
      switch (c) {
        case 'x':
          return parse_hex(2);
        case 'u':
          return parse_hex(4);
        case 'U':
          return parse_hex(8);
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case '\\':
        case '"':
        case '[':
        case ']':
          return uint32_t(c);
        default:
          fail("unknown escape '\\" + std::string(1, c) + "'", at);
      }
    }
    const auto lead = static_cast<uint8_t>(peek());
    const size_t n = unicode::utf8_len(lead);
    if ((lead & 0xC0) == 0x80 || lead >= 0xF8 || pos_ + n > s_.size())
      fail("invalid UTF-8 in the grammar");
    uint32_t cp = n == 1 ? lead : n == 2 ? lead & 0x1Fu : n == 3 ? lead & 0x0Fu : lead & 0x07u;
    for (size_t i = 1; i < n; ++i) {
      const auto b = static_cast<uint8_t>(s_[pos_ + i]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8 in the grammar");
      cp = (cp << 6) | (b & 0x3Fu);
    }
    pos_ += n;
    return cp;
  }

  void parse_literal(std::vector<GrammarElement>& out) {
    const size_t start = pos_++;
    while (peek() != '"') {
      if (at_end()) fail("unterminated string literal", start);
      out.push_back({GrammarOp::kChar, parse_char()});
    }
    ++pos_;
  }

  void parse_class(std::vector<GrammarElement>& out) {
    const size_t start = pos_++;
    GrammarOp op = GrammarOp::kChar;
    if (peek() == '^') {
      op = GrammarOp::kCharNot;
      ++pos_;
    }
    bool first = true;
    while (peek() != ']') {
      if (at_end()) fail("unterminated character class", start);
      const uint32_t lo = parse_char();
      out.push_back({first ? op : GrammarOp::kCharAlt, lo});
      first = false;
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < s_.size()) {
        ++pos_;
        const uint32_t hi = parse_char();
        if (hi < lo) fail("character range with its end before its start", start);
        out.push_back({GrammarOp::kCharRangeUpper, hi});
      }
    }
    if (first) fail("empty character class", start);
    ++pos_;
  }

  uint32_t parse_count() {
    const size_t start = pos_;
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + uint64_t(peek() - '0');
      if (v > lim_.max_repeat)
        fail("repetition count above the limit of " + std::to_string(lim_.max_repeat), start);
      ++pos_;
    }
    if (pos_ == start) fail("expected a number in '{...}', found " + describe(s_, pos_));
    return uint32_t(v);
  }

  /// x{m,n} in place of the item out[item..]: m copies, then n - m nested optional copies (or a
  /// generated x* rule when n is unbounded).
  void repeat(std::vector<GrammarElement>& out, size_t item, uint32_t m, uint32_t n,
              const std::string& rule) {
    const std::vector<GrammarElement> x(out.begin() + ptrdiff_t(item), out.end());
    out.resize(item);
    if (x.empty()) return;  // ("")* is the empty string
    if (uint64_t(x.size()) * m + n_elements_ > lim_.max_elements)
      fail("grammar too large (more than " + std::to_string(lim_.max_elements) + " elements)");
    for (uint32_t i = 0; i < m; ++i) out.insert(out.end(), x.begin(), x.end());
    if (n == kUnbounded) {  // R ::= x R |
      const uint32_t r = new_rule(rule);
      std::vector<GrammarElement> def = x;
      def.push_back({GrammarOp::kRuleRef, r});
      def.push_back({GrammarOp::kAlt, 0});
      def.push_back({GrammarOp::kEnd, 0});
      set_rule(r, std::move(def));
      out.push_back({GrammarOp::kRuleRef, r});
      return;
    }
    int64_t inner = -1;  // R_k ::= x R_{k-1} | ; R_1 ::= x |
    for (uint32_t k = m; k < n; ++k) {
      const uint32_t r = new_rule(rule);
      std::vector<GrammarElement> def = x;
      if (inner >= 0) def.push_back({GrammarOp::kRuleRef, uint32_t(inner)});
      def.push_back({GrammarOp::kAlt, 0});
      def.push_back({GrammarOp::kEnd, 0});
      set_rule(r, std::move(def));
      inner = r;
    }
    if (inner >= 0) out.push_back({GrammarOp::kRuleRef, uint32_t(inner)});
  }

  void parse_braces(std::vector<GrammarElement>& out, size_t item, const std::string& rule) {
    const size_t start = pos_++;
    skip_space(true);
    const uint32_t m = parse_count();
    uint32_t n = m;
    skip_space(true);
    if (peek() == ',') {
      ++pos_;
      skip_space(true);
      n = peek() == '}' ? kUnbounded : parse_count();
      skip_space(true);
    }
    if (peek() != '}') fail("expected '}' to close the repetition, found " + describe(s_, pos_));
    ++pos_;
    if (n < m) fail("repetition {m,n} with n < m", start);
    repeat(out, item, m, n, rule);
  }

  void parse_sequence(std::vector<GrammarElement>& out, const std::string& rule, int depth) {
    const bool nested = depth > 0;
    size_t item = SIZE_MAX;  // where the last repeatable item starts in `out`
    while (!at_end()) {
      const char c = s_[pos_];
      const size_t here = out.size();
      if (c == '"') {
        parse_literal(out);
        item = here;
      } else if (c == '[') {
        parse_class(out);
        item = here;
      } else if (is_name_char(c)) {
        const size_t at = pos_;
        const std::string name = parse_name();
        out.push_back({GrammarOp::kRuleRef, rule_id(name, at)});
        item = here;
      } else if (c == '.') {
        ++pos_;
        out.push_back({GrammarOp::kCharAny, 0});
        item = here;
      } else if (c == '(') {
        const size_t open = pos_++;
        if (depth + 1 > lim_.max_nesting)
          fail("parentheses nested deeper than " + std::to_string(lim_.max_nesting));
        skip_space(true);
        const uint32_t sub = new_rule(rule);
        set_rule(sub, parse_alternates(rule, depth + 1));
        skip_space(true);
        if (peek() != ')') fail("expected ')' to close the '(' opened here", open);
        ++pos_;
        out.push_back({GrammarOp::kRuleRef, sub});
        item = here;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (item == SIZE_MAX) fail("'" + std::string(1, c) + "' has nothing before it to repeat");
        if (c == '{') {
          parse_braces(out, item, rule);
        } else {
          ++pos_;
          repeat(out, item, c == '+' ? 1 : 0, c == '?' ? 1 : kUnbounded, rule);
        }
        item = SIZE_MAX;
      } else if (c == '|' || c == ')' || c == '\n' || c == '\r') {
        break;
      } else {
        fail("unexpected " + describe(s_, pos_) + " in rule '" + rule + "'");
      }
      skip_space(nested);
    }
  }

  void check_defined() {
    for (size_t r = 0; r < g_.rules.size(); ++r)
      if (!defined_[r]) fail("undefined rule '" + g_.names[r] + "'", first_use_[r]);
    const auto it = ids_.find("root");
    if (it == ids_.end()) throw GrammarError("the grammar has no 'root' rule");
    g_.root = it->second;
  }
};

/// Rules that can match the empty string (fixpoint over the rules).
std::vector<bool> nullable_rules(const Grammar& g) {
  std::vector<bool> nullable(g.rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g.rules.size(); ++r) {
      if (nullable[r]) continue;
      bool alt_ok = true;  // the current alternative is all nullable so far
      for (const GrammarElement& e : g.rules[r]) {
        if (e.op == GrammarOp::kAlt || e.op == GrammarOp::kEnd) {
          if (alt_ok) {
            nullable[r] = changed = true;
            break;
          }
          alt_ok = true;
        } else if (e.op == GrammarOp::kRuleRef) {
          alt_ok = alt_ok && nullable[e.value];
        } else if (e.op != GrammarOp::kCharRangeUpper && e.op != GrammarOp::kCharAlt) {
          alt_ok = false;
        }
      }
    }
  }
  return nullable;
}

/// Throws when some rule can reach itself without consuming a character (left recursion),
/// which a top-down matcher cannot expand.
void check_left_recursion(const Grammar& g) {
  const std::vector<bool> nullable = nullable_rules(g);
  const size_t n = g.rules.size();
  std::vector<std::vector<uint32_t>> left(n);  // rules reachable at the left edge
  for (size_t r = 0; r < n; ++r) {
    bool at_left = true;
    for (const GrammarElement& e : g.rules[r]) {
      if (e.op == GrammarOp::kAlt || e.op == GrammarOp::kEnd) {
        at_left = true;
      } else if (e.op == GrammarOp::kRuleRef) {
        if (at_left) left[r].push_back(e.value);
        at_left = at_left && nullable[e.value];
      } else {
        at_left = false;
      }
    }
  }
  // Iterative DFS with colours; on a back edge, report the cycle through the user's names.
  std::vector<uint8_t> colour(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<uint32_t, size_t>> path;
  for (uint32_t s = 0; s < n; ++s) {
    if (colour[s]) continue;
    path.push_back({s, 0});
    colour[s] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == left[r].size()) {
        colour[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t next = left[r][i++];
      if (colour[next] == 1) {
        std::string cycle;
        bool on = false;
        for (const auto& [p, unused] : path) {
          on = on || p == next;
          if (on) cycle += g.names[p] + " -> ";
        }
        throw GrammarError("rule '" + g.names[next] + "' is left recursive (" + cycle +
                           g.names[next] + ")");
      }
      if (colour[next] == 0) {
        colour[next] = 1;
        path.push_back({next, 0});
      }
    }
  }
}

void append_char(std::string& out, uint32_t cp) {
  if (cp == '\n') return out.append("\\n"), void();
  if (cp == '\r') return out.append("\\r"), void();
  if (cp == '\t') return out.append("\\t"), void();
  if (cp == '\\' || cp == '"' || cp == '[' || cp == ']') out.push_back('\\');
  if (cp < 0x20 || cp == 0x7F) {
    static const char* hex = "0123456789ABCDEF";
    out += "\\x";
    out.push_back(hex[cp >> 4]);
    out.push_back(hex[cp & 15]);
    return;
  }
  unicode::append_utf8(out, cp);
}

}  // namespace

Grammar parse_grammar(std::string_view text, const GrammarLimits& limits) {
  Grammar g = Parser(text, limits).run();
  check_left_recursion(g);
  return g;
}

std::string Grammar::to_string() const {
  std::string out;
  for (size_t r = 0; r < rules.size(); ++r) {
    out += names[r] + " ::=";
    const auto& rule = rules[r];
    for (size_t i = 0; i < rule.size(); ++i) {
      const GrammarElement& e = rule[i];
      const bool empty_alt = i == 0 || rule[i - 1].op == GrammarOp::kAlt;
      switch (e.op) {
        case GrammarOp::kEnd:
          if (empty_alt) out += " \"\"";
          break;
        case GrammarOp::kAlt:
          out += empty_alt ? " \"\" |" : " |";
          break;
        case GrammarOp::kRuleRef:
          out += " " + names[e.value];
          break;
        case GrammarOp::kCharAny:
          out += " .";
          break;
        case GrammarOp::kChar:
        case GrammarOp::kCharNot:
          out += e.op == GrammarOp::kCharNot ? " [^" : " [";
          append_char(out, e.value);
          for (; i + 1 < rule.size() && (rule[i + 1].op == GrammarOp::kCharAlt ||
                                         rule[i + 1].op == GrammarOp::kCharRangeUpper);
               ++i) {
            if (rule[i + 1].op == GrammarOp::kCharRangeUpper) out += "-";
            append_char(out, rule[i + 1].value);
          }
          out += "]";
          break;
        case GrammarOp::kCharRangeUpper:
        case GrammarOp::kCharAlt:
          break;  // consumed with their group
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace kvrun
