// jinja_str.h — Python str methods on UTF-8 text for the Jinja engine (case mapping is ASCII
// only; whitespace is Python's ASCII whitespace).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvrun::jinja::detail {

/// str.upper() (ASCII letters).
std::string str_upper(std::string s);
/// str.lower() (ASCII letters).
std::string str_lower(std::string s);
/// str.capitalize(): first character upper case, the rest lower case.
std::string str_capitalize(const std::string& s);
/// str.title(): upper case after every non-letter, lower case elsewhere.
std::string str_title(const std::string& s);
/// str.strip/lstrip/rstrip(chars); `chars` null means whitespace.
std::string str_strip(const std::string& s, const std::string* chars, bool left, bool right);
/// str.replace(old, new, count) (count < 0: all).
std::string str_replace(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count);
/// str.split(sep, maxsplit); `sep` null splits on runs of whitespace.
std::vector<std::string> str_split(const std::string& s, const std::string* sep, int64_t maxsplit);
/// str.rsplit(sep, maxsplit) with an explicit separator.
std::vector<std::string> str_rsplit(const std::string& s, const std::string& sep, int64_t maxsplit);
/// str.splitlines() (\n, \r\n and \r).
std::vector<std::string> str_splitlines(const std::string& s);
/// int(s) for a decimal integer (optional sign, underscores between digits not accepted).
std::optional<int64_t> parse_int(const std::string& s);
/// float(s) for a decimal number.
std::optional<double> parse_float(const std::string& s);

}  // namespace kvrun::jinja::detail
