// tokenizer_impl.h — internal: the vocabulary tables shared by the three tokenizer algorithms
// (SPM, BPE, WPM). Not part of the public API; include tokenizer.h instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/tokenizer_pretok.h"

namespace kvrun::tok {

/// Token attributes (bit flags). The GGUF `tokenizer.ggml.token_type` values map to these:
/// 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte; anything else undefined.
enum Attr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLstrip = 1u << 7,  ///< whitespace left of the token's text is dropped when split out
  kAttrRstrip = 1u << 8,  ///< whitespace right of the token's text is dropped when split out
};

/// Attribute for a GGUF token_type value.
uint32_t attr_from_token_type(int64_t type);

/// One vocabulary entry.
struct TokenEntry {
  std::string text;  ///< the token's text as stored in the GGUF (SPM: spaces as U+2581)
  float score = 0;   ///< SPM merge priority (higher merges first)
  uint32_t attr = kAttrNormal;
};

/// Vocabulary lookup tables.
struct Vocab {
  std::vector<TokenEntry> tokens;
  std::unordered_map<std::string, int32_t> ids;        ///< text → id (last id wins)
  std::unordered_map<std::string, int32_t> bpe_ranks;  ///< merge_key(left, right) → rank
  size_t max_token_len = 0;                            ///< longest token text, bytes
  int32_t unk = -1;                                    ///< unknown token or -1

  /// Id of `text`, or -1.
  int32_t find(const std::string& text) const {
    auto it = ids.find(text);
    return it == ids.end() ? -1 : it->second;
  }
  /// Key of the merge (left, right) in bpe_ranks.
  static std::string merge_key(std::string_view left, std::string_view right) {
    std::string k;
    k.reserve(left.size() + right.size() + 1);
    k.append(left);
    k += '\0';
    k.append(right);
    return k;
  }
  /// Rank of merging `left` and `right`, or -1 when the pair is not a merge.
  int32_t bpe_rank(std::string_view left, std::string_view right) const {
    auto it = bpe_ranks.find(merge_key(left, right));
    return it == bpe_ranks.end() ? -1 : it->second;
  }
};

/// SPM byte token for byte `b`: "<0xXX>" (upper-case hex), else the one-byte text, else unk.
int32_t spm_byte_token(const Vocab& vocab, uint8_t b);

/// SentencePiece-BPE on `text` (spaces already escaped as U+2581): symbols are UTF-8 characters;
/// the adjacent pair whose concatenation is a token with the highest score is merged first
/// (ties: leftmost); then every symbol that is not a token is split back along its merges, and
/// what is still not a token is emitted as byte tokens. Appends ids to `out`.
void spm_tokenize(const Vocab& vocab, const std::string& text, std::vector<int32_t>& out);

/// Byte-level BPE (GPT-2): splits `text` with `splitter`, maps every byte of each word through
/// GPT-2's byte-to-unicode table, then merges adjacent symbols by lowest merge rank (ties:
/// leftmost). With `ignore_merges`, a word that is itself a token is emitted whole. A final
/// symbol that is not a token is emitted byte by byte (bytes that are not tokens are dropped).
void bpe_tokenize(const Vocab& vocab, const RegexSplitter& splitter, bool ignore_merges,
                  std::string_view text, std::vector<int32_t>& out);

/// WordPiece preprocessing: per codepoint, the first codepoint of its NFD decomposition,
/// lowercased; whitespace separates words; control characters, U+0000 and U+FFFD are dropped;
/// punctuation, ASCII symbols and CJK ideographs are words of their own.
std::vector<std::string> wpm_preprocess(std::string_view text);

/// WordPiece (BERT): each preprocessed word, prefixed with U+2581, is covered greedily by the
/// longest matching tokens from the left; a word that cannot be covered becomes the unknown token.
void wpm_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);

}  // namespace kvrun::tok
