// unicode_util.cpp — UTF-8 coding, GPT-2 byte table, and Unicode properties through ICU.
#include "text/unicode_util.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/utf16.h>

#include <array>

namespace kvrun::unicode {

size_t utf8_len(uint8_t lead) {
  static constexpr size_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

namespace {

bool is_cont(std::string_view s, size_t i) {
  return i < s.size() && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80;
}

// Decodes one codepoint at `pos`; returns false (and leaves pos) when malformed.
bool decode_one(std::string_view s, size_t& pos, uint32_t& cp) {
  const uint8_t b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) {
    cp = b0;
    pos += 1;
    return true;
  }
  int n = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 1;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 2;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 3;
    cp = b0 & 0x07;
  } else {
    return false;  // continuation byte or 0xF8..0xFF as a lead
  }
  for (int k = 1; k <= n; ++k) {
    if (!is_cont(s, pos + k)) return false;
    cp = (cp << 6) | (static_cast<uint8_t>(s[pos + k]) & 0x3F);
  }
  pos += n + 1;
  return true;
}

struct ByteTable {
  std::array<uint32_t, 256> cpt{};
  std::array<std::string, 256> utf8;
  std::array<int16_t, 256 + 68> inverse{};  // codepoint → byte, -1 when none
  ByteTable() {
    inverse.fill(-1);
    std::array<bool, 256> direct{};
    for (int b = 0x21; b <= 0x7E; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      cpt[b] = direct[b] ? static_cast<uint32_t>(b) : next++;
      utf8[b] = encode_utf8(cpt[b]);
      inverse[cpt[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

}  // namespace

std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t cp = 0;
    if (decode_one(text, pos, cp)) {
      out.push_back(cp);
    } else {
      out.push_back(kReplacement);
      ++pos;
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF) cp = kReplacement;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string encode_utf8(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

uint32_t byte_to_cpt(uint8_t b) { return byte_table().cpt[b]; }

const std::string& byte_to_utf8(uint8_t b) { return byte_table().utf8[b]; }

int cpt_to_byte(uint32_t cp) {
  const auto& inv = byte_table().inverse;
  return cp < inv.size() ? inv[cp] : -1;
}

Category category(uint32_t cp) {
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return kLetter;
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK:
      return kAccentMark;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return kNumber;
    case U_SPACE_SEPARATOR:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
      return kSeparator;
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_PRIVATE_USE_CHAR:
    case U_SURROGATE:
      return kControl;
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
      return kPunctuation;
    case U_MATH_SYMBOL:
    case U_CURRENCY_SYMBOL:
    case U_MODIFIER_SYMBOL:
    case U_OTHER_SYMBOL:
      return kSymbol;
    default:
      return kUndefined;
  }
}

bool is_whitespace(uint32_t cp) {
  if (cp >= 0x09 && cp <= 0x0D) return true;
  if (cp >= 0x2000 && cp <= 0x200A) return true;
  switch (cp) {
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return false;
  }
}

uint32_t nfd_first(uint32_t cp) {
  if (cp < 0xC0) return cp;  // nothing below U+00C0 has a canonical decomposition
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfd = unorm2_getNFDInstance(&err);
  if (U_FAILURE(err) || nfd == nullptr) return cp;
  UChar buf[32];
  const int32_t n = unorm2_getDecomposition(nfd, static_cast<UChar32>(cp), buf, 32, &err);
  if (U_FAILURE(err) || n <= 0) return cp;
  UChar32 first = 0;
  int32_t i = 0;
  U16_NEXT(buf, i, n, first);
  return static_cast<uint32_t>(first);
}

uint32_t to_lower(uint32_t cp) {
  return static_cast<uint32_t>(u_tolower(static_cast<UChar32>(cp)));
}

}  // namespace kvrun::unicode
