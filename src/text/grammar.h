// grammar.h — GBNF grammars: the text format llama.cpp uses to constrain generation
// (grammars/README.md of ggerganov/llama.cpp), parsed into flat rules of elements that the
// pushdown matcher (grammar_matcher.h) walks over Unicode code points.
//
// Syntax accepted (llama.cpp's GBNF):
//   name ::= alternatives            a rule; names are [A-Za-z0-9_-]+; `root` is the start rule
//   a b c                            sequence
//   a | b                            alternatives
//   ( ... )                          grouping (newlines are allowed inside parentheses)
//   x*  x+  x?  x{m}  x{m,}  x{m,n}  repetition
//   "text"                           literal (UTF-8), escapes \n \r \t \\ \" \[ \] \xHH \uHHHH
//   \UHHHHHHHH [a-z0-9_] [^"\\]                 character class with ranges, `^` negates . any
//   single code point # comment                        to the end of the line
// A rule ends at a newline outside parentheses (after `::=` and `|` a newline may follow).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kvrun {

/// What a grammar element is. Rules are sequences of elements: the alternatives of a rule are
/// separated by kAlt and the rule ends with kEnd. A character group is kChar or kCharNot followed
/// by any number of kCharRangeUpper (closing the range opened by the element before) and kCharAlt
/// (one more character or range start); kCharAny stands alone.
enum class GrammarOp : uint8_t {
  kEnd,             ///< end of the rule
  kAlt,             ///< end of one alternative, the next one follows
  kRuleRef,         ///< value: index of the referenced rule
  kChar,            ///< value: a code point (start of a character group)
  kCharNot,         ///< value: a code point (start of a negated character group)
  kCharRangeUpper,  ///< value: inclusive upper end of the range started by the element before
  kCharAlt,         ///< value: another code point of the same group
  kCharAny,         ///< `.`: any code point
};

/// One element: an op and its value (a code point or a rule index).
struct GrammarElement {
  GrammarOp op = GrammarOp::kEnd;
  uint32_t value = 0;
};

/// A parse or grammar error; what() is "line L, column C: message" for syntax errors.
class GrammarError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A parsed, checked grammar: every referenced rule is defined, `root` exists, no rule is left
/// recursive. Immutable; share it between generations with shared_ptr.
struct Grammar {
  std::vector<std::vector<GrammarElement>> rules;  ///< [n_rules], each ending in kEnd
  std::vector<std::string> names;                  ///< [n_rules] (generated ones: "name_N")
  uint32_t root = 0;                               ///< index of the start rule

  /// The grammar as GBNF text again (one line per rule; generated rules included).
  std::string to_string() const;
};

/// Limits that keep a hostile grammar from exhausting memory or the stack.
struct GrammarLimits {
  int max_nesting = 128;           ///< parentheses nested at most this deep
  uint32_t max_repeat = 10000;     ///< m and n of x{m,n} at most this
  size_t max_elements = 1u << 22;  ///< total elements of all rules at most this
};

/// Parses GBNF `text` with `root` as the start rule and checks it (undefined rules, missing
/// root, left recursion). Throws GrammarError naming the position (line, column: 1-based) and
/// what is wrong, e.g. "line 2, column 7: expected '::=' after rule name 'value'", "undefined
/// rule 'item' (used by rule 'list')", "rule 'expr' is left recursive (expr -> term -> expr)".
Grammar parse_grammar(std::string_view text, const GrammarLimits& limits = {});

}  // namespace kvrun
