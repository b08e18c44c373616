// unicode_util.h — the few Unicode facts the tokenizers need: UTF-8 coding, GPT-2's byte-to-
// unicode table, general categories, White_Space, the first codepoint of a canonical
// decomposition, and simple lowercase.
//
// Sources: UTF-8 is RFC 3629; general categories, White_Space (PropList.txt), canonical
// decompositions and simple case mappings come from the Unicode Character Database, read through
// ICU (libicu, `icu-uc`). The byte-to-unicode table is the one published with GPT-2
// (openai/gpt-2, encoder.py, `bytes_to_unicode`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvrun::unicode {

/// U+FFFD, produced for every byte that does not start a well-formed UTF-8 sequence.
inline constexpr uint32_t kReplacement = 0xFFFD;

/// Length in bytes of the UTF-8 sequence whose first byte is `lead`, judged by its top four bits
/// only (0xxx → 1, 10xx → 1, 110x → 2, 1110 → 3, 1111 → 4). A continuation byte counts as 1.
/// This is the rule the GGUF tokenizers (llama.cpp) use to cut text into symbols.
size_t utf8_len(uint8_t lead);

/// Decodes `text` into codepoints. A malformed sequence (bad lead byte, missing continuation
/// bytes, truncated end) yields one U+FFFD and skips one byte. Overlong forms and surrogates are
/// not rejected (they decode to their numeric value), as in llama.cpp.
std::vector<uint32_t> decode_utf8(std::string_view text);

/// UTF-8 encoding of codepoint `cp` (1-4 bytes). `cp` above 0x10FFFF encodes as U+FFFD.
std::string encode_utf8(uint32_t cp);

/// Appends the UTF-8 encoding of `cp` to `out`.
void append_utf8(std::string& out, uint32_t cp);

/// GPT-2's reversible byte → codepoint table (bytes_to_unicode): the printable bytes
/// 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF map to themselves; the other 68 bytes map, in increasing
/// order, to U+0100, U+0101, ... So space (0x20) is U+0120 'Ġ' and '\n' is U+010A 'Ċ'.
uint32_t byte_to_cpt(uint8_t b);

/// UTF-8 text of byte_to_cpt(b).
const std::string& byte_to_utf8(uint8_t b);

/// Inverse of byte_to_cpt: the byte, or -1 when `cp` is not in the table.
int cpt_to_byte(uint32_t cp);

/// Unicode general category, grouped by its first letter (L, N, Z, M, P, S, C), with unassigned
/// codepoints (Cn) apart. Values are bit flags so that sets can be tested with one mask.
enum Category : uint32_t {
  kUndefined = 0x01,    ///< Cn (unassigned)
  kNumber = 0x02,       ///< \p{N}
  kLetter = 0x04,       ///< \p{L}
  kSeparator = 0x08,    ///< \p{Z}
  kAccentMark = 0x10,   ///< \p{M}
  kPunctuation = 0x20,  ///< \p{P}
  kSymbol = 0x40,       ///< \p{S}
  kControl = 0x80,      ///< Cc, Cf, Co, Cs
};

/// The category group of `cp` (one Category value).
Category category(uint32_t cp);

/// True when `cp` has the Unicode White_Space property (PropList.txt): U+0009-U+000D, U+0020,
/// U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
bool is_whitespace(uint32_t cp);

/// The first codepoint of the canonical decomposition (NFD) of `cp`, or `cp` itself when it has
/// none. For example U+00FC 'ü' → 'u', U+1EC7 'ệ' → 'e', U+AC00 '가' → U+1100. This is the
/// per-codepoint "NFD" that llama.cpp's WordPiece preprocessing applies (it keeps only the first
/// codepoint, which also drops the accents).
uint32_t nfd_first(uint32_t cp);

/// Simple (one-to-one) lowercase mapping of `cp` (UnicodeData.txt field 13), or `cp`.
uint32_t to_lower(uint32_t cp);

}  // namespace kvrun::unicode
