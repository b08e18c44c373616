// tokenizer_wpm.cpp — WordPiece (GGUF tokenizer model "bert").
//
// Algorithm (BERT, google-research/bert tokenization.py, "BasicTokenizer" + "WordpieceTokenizer",
// described in prose; in GGUF vocabularies a word-initial piece carries a U+2581 prefix instead
// of continuation pieces carrying "##"): lowercase, strip accents, split on whitespace and around
// punctuation and CJK ideographs, then cover each word greedily with the longest vocabulary
// pieces from the left; a word that cannot be covered is the unknown token.
#include <algorithm>

#include "text/tokenizer_impl.h"
#include "text/unicode_util.h"

namespace kvrun::tok {

namespace {

// CJK ideograph blocks as BERT's _is_chinese_char lists them (HuggingFace's Rust port uses
// 0x2B920 as the start of the fifth range, and so does llama.cpp).
bool is_cjk(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

}  // namespace

std::vector<std::string> wpm_preprocess(std::string_view text) {
  std::vector<std::string> words(1);
  for (uint32_t cp : unicode::decode_utf8(text)) {
    cp = unicode::nfd_first(cp);
    if (unicode::is_whitespace(cp)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const unicode::Category cat = unicode::category(cp);
    if (cp == 0 || cp == unicode::kReplacement || cat == unicode::kControl) continue;
    const std::string s = unicode::encode_utf8(unicode::to_lower(cp));
    if (cat == unicode::kPunctuation || (cp < 0x7F && cat == unicode::kSymbol) || is_cjk(cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = s;
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void wpm_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) {
  for (const std::string& word : wpm_preprocess(text)) {
    if (word.empty()) continue;
    const std::string w = "\xE2\x96\x81" + word;  // U+2581 marks the start of a word
    const size_t n = w.size();
    const size_t before = out.size();
    for (size_t i = 0; i < n;) {
      bool matched = false;
      for (size_t j = std::min(n, i + vocab.max_token_len + 1); j > i; --j) {
        const int32_t id = vocab.find(w.substr(i, j - i));
        if (id >= 0) {
          out.push_back(id);
          i = j;
          matched = true;
          break;
        }
      }
      if (!matched) {
        out.resize(before);  // the word cannot be covered: drop its pieces
        break;
      }
    }
    if (out.size() == before) out.push_back(vocab.unk);
  }
}

}  // namespace kvrun::tok
