// jinja_lexer.cpp — the Jinja lexer: template text and tags into tokens, with Jinja2's whitespace
// control (trim_blocks, lstrip_blocks, "-" and "+" modifiers) applied to the text.
#include <algorithm>
#include <cctype>

#include "text/jinja_impl.h"

namespace kvrun::jinja::detail {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/// Lexer state over the whole source.
class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  std::vector<Token> run() {
    bool lstrip_next = false;   // the previous tag ended with "-": strip leading whitespace
    bool trim_newline = false;  // the previous tag was a block/comment: drop one newline
    while (pos_ < src_.size()) {
      const size_t open = find_tag(pos_);
      std::string text(src_.substr(pos_, open - pos_));
      const int text_line = line_;
      count_lines(pos_, open);
      pos_ = open;
      if (lstrip_next) {
        size_t i = 0;
        while (i < text.size() && is_space(text[i])) ++i;
        text.erase(0, i);
      } else if (trim_newline && !text.empty() && text[0] == '\n') {
        text.erase(0, 1);
      }
      lstrip_next = trim_newline = false;
      if (open < src_.size()) apply_left_control(text);
      if (!text.empty()) out_.push_back({Tok::kText, text, text_line});
      if (open >= src_.size()) break;
      const char kind = src_[open + 1];
      pos_ = open + 2;
      if (pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) ++pos_;
      if (kind == '#') {
        lex_comment(&lstrip_next);
        trim_newline = !lstrip_next;
      } else {
        const bool block = kind == '%';
        out_.push_back({block ? Tok::kBlockBegin : Tok::kVarBegin, "", line_});
        lex_tag(block, &lstrip_next);
        trim_newline = block && !lstrip_next;
      }
    }
    out_.push_back({Tok::kEof, "", line_});
    return std::move(out_);
  }

 private:
  /// Position of the next "{{", "{%" or "{#" at or after `from`, or src_.size().
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return src_.size();
  }

  void count_lines(size_t from, size_t to) {
    for (size_t i = from; i < to && i < src_.size(); ++i) line_ += src_[i] == '\n';
  }

  /// Whitespace control on the text before the tag at pos_: "-" strips all trailing
  /// whitespace; lstrip_blocks strips spaces/tabs before a block/comment at a line's start.
  void apply_left_control(std::string& text) const {
    const char kind = src_[pos_ + 1];
    const char mod = pos_ + 2 < src_.size() ? src_[pos_ + 2] : '\0';
    if (mod == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
      return;
    }
    if (kind == '{' || mod == '+') return;
    size_t p = pos_;
    while (p > 0 && (src_[p - 1] == ' ' || src_[p - 1] == '\t')) --p;
    if (p != 0 && src_[p - 1] != '\n') return;
    const size_t n = std::min(pos_ - p, text.size());
    text.erase(text.size() - n);
  }

  void lex_comment(bool* lstrip_next) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string_view::npos) throw JinjaError("unterminated comment", line_);
    *lstrip_next = end > pos_ && src_[end - 1] == '-';
    count_lines(pos_, end);
    pos_ = end + 2;
  }

  /// Tokens of one {{ }} or {% %} tag up to and including its end.
  void lex_tag(bool block, bool* lstrip_next) {
    const char close = block ? '%' : '}';
    const int start_line = line_;
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) line_ += src_[pos_++] == '\n';
      if (pos_ >= src_.size())
        throw JinjaError(std::string("unterminated ") + (block ? "{%" : "{{") + " tag", start_line);
      const char c = src_[pos_];
      if ((c == '-' || c == '+') && pos_ + 2 < src_.size() && src_[pos_ + 1] == close &&
          src_[pos_ + 2] == '}') {
        *lstrip_next = c == '-';
        pos_ += 3;
        break;
      }
      if (c == close && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}') {
        pos_ += 2;
        break;
      }
      lex_token();
    }
    out_.push_back({block ? Tok::kBlockEnd : Tok::kVarEnd, "", line_});
  }

  void lex_token() {
    const char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = pos_;
      while (e < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
        ++e;
      out_.push_back({Tok::kName, std::string(src_.substr(pos_, e - pos_)), line_});
      pos_ = e;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      lex_number();
    } else if (c == '"' || c == '\'') {
      lex_string(c);
    } else {
      static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                         "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                         "]",  "{",  "}",  ",",  ".",  ":",  "|"};
      for (const char* op : kOps) {
        const std::string_view o(op);
        if (src_.substr(pos_, o.size()) == o) {
          out_.push_back({Tok::kOp, std::string(o), line_});
          pos_ += o.size();
          return;
        }
      }
      throw JinjaError(std::string("unexpected character '") + c + "'", line_);
    }
  }

  void lex_number() {
    size_t e = pos_;
    bool is_float = false;
    while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
      ++e;
    if (e + 1 < src_.size() && src_[e] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      ++e;
      while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {  // exponent: 1e20, 2.5e-4
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && std::isdigit(static_cast<unsigned char>(src_[x]))) {
        is_float = true;
        e = x;
        while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
      }
    }
    std::string text;
    for (size_t i = pos_; i < e; ++i)
      if (src_[i] != '_') text += src_[i];
    out_.push_back({is_float ? Tok::kFloat : Tok::kInt, text, line_});
    pos_ = e;
  }

  void lex_string(char quote) {
    const int start_line = line_;
    std::string value;
    size_t i = pos_ + 1;
    for (;; ++i) {
      if (i >= src_.size()) throw JinjaError("unterminated string literal", start_line);
      const char c = src_[i];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\' || i + 1 >= src_.size()) {
        value += c;
        continue;
      }
      const char n = src_[++i];
      switch (n) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case '\n':
          ++line_;
          break;
        default:
          value += '\\';
          value += n;
          break;
      }
    }
    out_.push_back({Tok::kString, value, start_line});
    pos_ = i + 1;
  }

  std::string_view src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) {
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r' && i + 1 < source.size() && source[i + 1] == '\n') continue;
    normalized += source[i];
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  std::vector<Token> tokens = Lexer(normalized).run();
  for (Token& t : tokens) t.text.shrink_to_fit();
  return tokens;
}

}  // namespace kvrun::jinja::detail
