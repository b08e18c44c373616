// tokenizer_pretok.h — BPE pre-tokenizers: the regex lists selected by `tokenizer.ggml.pre`, and
// the regex splitter (PCRE2) that cuts text into words the way llama.cpp does.
//
// Splitting (llama.cpp src/unicode.cpp, unicode_regex_split, behaviour described in prose): the
// text starts as one segment; each regex of the list in turn refines every segment into the
// regex's matches and the unmatched gaps between them (both become segments). Each segment is
// matched on its own, so `(?!\S)` and `$` see the segment's end.
//
// Regexes are run in one of three ways, chosen as llama.cpp chooses them, so that the same
// characters are matched:
//   * Full Unicode: the GPT-2 regex and the Llama-3 regex (which llama.cpp implements by hand
//     with Unicode categories). PCRE2 with UTF+UCP; `\s` is the Unicode White_Space set.
//   * Collapsed: any other regex that uses \p{N}, \p{L}, \p{P}, \p{M} or \p{S}. Every non-ASCII
//     codepoint is replaced by one byte standing for its category (whitespace → 0x0B, N → 0xD1,
//     L → 0xD2, P → 0xD3, M → 0xD4, S → 0xD5, anything else → 0xD0) and each \p{X} by that byte
//     plus X's ASCII members; the regex is run byte-wise. Codepoints of other groups (C, Z that is
//     not whitespace) collapse to 0xD0, which no \p{X} matches.
//   * Codepoint: regexes without categories. PCRE2 with UTF (no UCP) on the text with non-ASCII
//     whitespace replaced by U+000B, so `\s` means ASCII whitespace.
// Regex patterns are the published ones of each model's tokenizer.json (as adapted by llama.cpp).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvrun::tok {

/// What a `tokenizer.ggml.pre` name implies besides its regexes (llama.cpp's vocab loader).
struct PreTokenizerInfo {
  std::vector<std::string> regexes;  ///< split regexes, applied in order
  bool clean_spaces = true;  ///< detokenize removes " ?", " !", ... (clean_up_tokenization_spaces)
  bool ignore_merges = false;  ///< a word that is itself a token is emitted without merging
  bool force_add_bos = false;  ///< BOS is added by default (overridable by add_bos_token)
  bool no_bos = false;         ///< the type has no BOS token (chatglm-bpe)
};

/// Regexes and flags for pre-tokenizer `name` ("" and "default" give the default list). Throws
/// std::runtime_error for an unknown name.
PreTokenizerInfo pre_tokenizer_info(std::string_view name);

/// A compiled list of split regexes (thread-safe after construction).
class RegexSplitter {
 public:
  /// Compiles `regexes` (PCRE2). Throws std::runtime_error naming the regex when one fails.
  explicit RegexSplitter(const std::vector<std::string>& regexes);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  /// Splits UTF-8 `text` into words (UTF-8; malformed bytes become U+FFFD). The concatenation of
  /// the words is the decoded text.
  std::vector<std::string> split(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvrun::tok
