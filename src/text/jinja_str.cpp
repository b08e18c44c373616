// jinja_str.cpp — Python str methods on UTF-8 text for the Jinja engine.
#include "text/jinja_str.h"

#include <cerrno>
#include <cstdlib>

namespace kvrun::jinja::detail {
namespace {

bool is_ws(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char up(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; }
char down(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

}  // namespace

std::string str_upper(std::string s) {
  for (char& c : s) c = up(c);
  return s;
}

std::string str_lower(std::string s) {
  for (char& c : s) c = down(c);
  return s;
}

std::string str_capitalize(const std::string& s) {
  std::string out = str_lower(s);
  if (!out.empty()) out[0] = up(out[0]);
  return out;
}

std::string str_title(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    const bool letter = is_alpha(c) || static_cast<unsigned char>(c) >= 0x80;
    if (is_alpha(c)) c = prev_letter ? down(c) : up(c);
    prev_letter = letter;
  }
  return out;
}

std::string str_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  auto strip_it = [&](char c) { return chars ? chars->find(c) != std::string::npos : is_ws(c); };
  size_t b = 0;
  size_t e = s.size();
  if (left)
    while (b < e && strip_it(s[b])) ++b;
  if (right)
    while (e > b && strip_it(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string str_replace(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every character
    int64_t n = 0;
    for (size_t i = 0; i <= s.size(); ++i) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (i < s.size()) out += s[i];
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::vector<std::string> str_split(const std::string& s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t hit = s.find(*sep, pos);
      if (hit == std::string::npos) break;
      out.push_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.push_back(s.substr(pos));
    return out;
  }
  size_t i = 0;
  while (true) {
    while (i < s.size() && is_ws(s[i])) ++i;
    if (i >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.push_back(str_strip(s.substr(i), nullptr, false, true));
      break;
    }
    size_t j = i;
    while (j < s.size() && !is_ws(s[j])) ++j;
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::vector<std::string> str_rsplit(const std::string& s, const std::string& sep,
                                    int64_t maxsplit) {
  std::vector<std::string> out;
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep.size()) break;
    const size_t hit = s.rfind(sep, end - sep.size());
    if (hit == std::string::npos) break;
    out.insert(out.begin(), s.substr(hit + sep.size(), end - hit - sep.size()));
    end = hit;
  }
  out.insert(out.begin(), s.substr(0, end));
  return out;
}

std::vector<std::string> str_splitlines(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      out.push_back(cur);
      cur.clear();
    } else {
      cur += s[i];
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::optional<int64_t> parse_int(const std::string& s) {
  if (s.empty()) return std::nullopt;
  size_t i = s[0] == '-' || s[0] == '+' ? 1 : 0;
  if (i >= s.size()) return std::nullopt;
  for (size_t j = i; j < s.size(); ++j)
    if (s[j] < '0' || s[j] > '9') return std::nullopt;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<double> parse_float(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

}  // namespace kvrun::jinja::detail
