// tokenizer_pretok.cpp — pre-tokenizer regex tables and the PCRE2 splitter.
//
// The regex patterns are the published pre-tokenizer patterns of each model family's
// tokenizer.json, in the form llama.cpp uses them (src/llama-vocab.cpp, llm_tokenizer_bpe; for
// Llama 3 and Qwen 2 the case-insensitive contraction group `(?i:'s|...)` is spelled out as
// `(?:'[sS]|...)`). The name → pattern-list assignment and the per-name flags follow llama.cpp's
// vocab loader (commit c392e509, the version that produced the test fixtures).
#include "tokenizer_pretok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <stdexcept>

#include "unicode_util.h"

namespace kvrun::tok {

namespace {

// ---- published patterns ----
const char* const kGpt2 = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
const char* const kLlama3 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kLlama3Original =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kQwen2 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kDeepseekLetters =
    R"re(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)re";
const char* const kDeepseekPunct = R"re(\s?[!-/:-~！-／：-～‘-‟　-。]+)re";
const char* const kCjk = R"re([一-龥ࠀ-一가-퟿]+)re";
const char* const kDeepseek3Main =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kPoro = R"re( ?[^(\s|.,!?…。，、।۔،)]+)re";
const char* const kTekken =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

bool name_in(std::string_view name, std::initializer_list<std::string_view> names) {
  for (auto n : names) {
    if (name == n) return true;
  }
  return false;
}

}  // namespace

PreTokenizerInfo pre_tokenizer_info(std::string_view name) {
  PreTokenizerInfo info;
  auto& r = info.regexes;
  if (name.empty() || name == "default") {
    r = {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2, R"re(\p{N}+)re", "[0-9][0-9][0-9]"};
  } else if (name_in(name, {"llama3", "llama-v3", "llama-bpe", "falcon3"})) {
    r = {kLlama3};
    info.ignore_merges = true;
    info.force_add_bos = true;
  } else if (name_in(name, {"dbrx", "smaug-bpe"})) {
    r = {kLlama3};
  } else if (name == "chatglm-bpe") {
    r = {kLlama3};
    info.no_bos = true;
  } else if (name == "deepseek-llm") {
    r = {R"re([\r\n])re", kDeepseekLetters, kDeepseekPunct, R"re(\s+$)re", kCjk, R"re(\p{N}+)re"};
    info.clean_spaces = false;
  } else if (name == "deepseek-coder") {
    r = {R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kCjk, R"re(\p{N})re"};
    info.clean_spaces = false;
  } else if (name == "deepseek-v3") {
    r = {R"re(\p{N}{1,3})re", R"re([一-龥぀-ゟ゠-ヿ]+)re", kDeepseek3Main};
    info.clean_spaces = false;
  } else if (name == "falcon") {
    r = {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2, "[0-9][0-9][0-9]"};
  } else if (name_in(name, {"starcoder", "refact", "codeshell", "exaone", "minerva-7b"})) {
    r = {R"re(\p{N})re", kGpt2};
  } else if (name_in(name, {"command-r", "smollm"})) {
    r = {R"re(\p{N})re", kGpt2};
    info.clean_spaces = false;
  } else if (name_in(name, {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en",
                            "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe", "mpt", "olmo",
                            "jais"})) {
    r = {kGpt2};
  } else if (name_in(name, {"qwen2", "deepseek-r1-qwen"})) {
    r = {kQwen2};
    info.clean_spaces = false;
  } else if (name_in(name, {"stablelm2", "megrez"})) {
    r = {kQwen2};
  } else if (name == "poro-chat") {
    r = {kPoro};
    info.clean_spaces = false;
  } else if (name_in(name, {"bloom", "gpt3-finnish"})) {
    r = {kPoro};
  } else if (name == "viking") {
    r = {kPoro, R"re(\p{N})re"};
    info.clean_spaces = false;
  } else if (name == "tekken") {
    r = {kTekken};
    info.clean_spaces = false;
    info.ignore_merges = true;
    info.force_add_bos = true;
  } else if (name == "chameleon") {
    r = {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )",
         R"re(\p{N})re", R"re([\p{P}!-/:-@\[-`{-~])re", kGpt2};
    info.clean_spaces = false;
    info.force_add_bos = true;
  } else {
    throw std::runtime_error("tokenizer: unknown pre-tokenizer type '" + std::string(name) + "'");
  }
  return info;
}

// ---------------------------------------------------------------------------------------------

namespace {

enum class Mode { kUnicode, kCollapsed, kCodepoint };

// The five category escapes llama.cpp collapses, with their byte and ASCII members (as regex
// class text). The symbol set omits '~', as llama.cpp's does.
struct CollapsedClass {
  const char* escape;
  uint32_t category;
  char byte;
  const char* ascii;
};
constexpr std::array<CollapsedClass, 5> kCollapsedClasses = {{
    {"\\p{N}", unicode::kNumber, '\xD1', "0-9"},
    {"\\p{L}", unicode::kLetter, '\xD2', "A-Za-z"},
    {"\\p{P}", unicode::kPunctuation, '\xD3', "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"},
    {"\\p{M}", unicode::kAccentMark, '\xD4', ""},
    {"\\p{S}", unicode::kSymbol, '\xD5', "\\$\\+<->\\^`\\|"},
}};

const CollapsedClass* collapsed_class_at(const std::string& re, size_t i) {
  for (const auto& c : kCollapsedClasses) {
    if (re.compare(i, 5, c.escape) == 0) return &c;
  }
  return nullptr;
}

bool uses_categories(const std::string& re) {
  for (size_t i = 0; i < re.size(); ++i) {
    if (collapsed_class_at(re, i)) return true;
  }
  return false;
}

// Rewrites \p{X} into the collapsed byte plus X's ASCII members (bracketed when outside a class).
std::string collapse_regex(const std::string& re) {
  std::string out;
  bool inside = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const bool escaped = i > 0 && re[i - 1] == '\\';
    if (re[i] == '[' && !escaped) {
      inside = true;
    } else if (inside && re[i] == ']' && !escaped) {
      inside = false;
    } else if (const CollapsedClass* c = collapsed_class_at(re, i)) {
      out += inside ? "" : "[";
      out += c->byte;
      out += c->ascii;
      out += inside ? "" : "]";
      i += 4;
      continue;
    }
    out += re[i];
  }
  return out;
}

// White_Space as class members (PCRE2 UTF syntax).
constexpr const char* kWhiteSpaceMembers =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}"
    "\\x{3000}";

// Replaces \s / \S with the Unicode White_Space set (for the full-Unicode mode).
std::string unicode_whitespace_regex(const std::string& re) {
  std::string out;
  bool inside = false;
  for (size_t i = 0; i < re.size(); ++i) {
    if (re[i] == '\\' && i + 1 < re.size()) {
      const char n = re[i + 1];
      if (n == 's' || n == 'S') {
        if (inside && n == 'S') throw std::runtime_error("tokenizer: \\S inside a class");
        if (inside) {
          out += kWhiteSpaceMembers;
        } else {
          out += n == 's' ? "[" : "[^";
          out += kWhiteSpaceMembers;
          out += "]";
        }
      } else {
        out += re[i];
        out += n;
      }
      ++i;
      continue;
    }
    if (re[i] == '[') inside = true;
    if (re[i] == ']' && inside) inside = false;
    out += re[i];
  }
  return out;
}

struct CompiledRegex {
  Mode mode = Mode::kCodepoint;
  pcre2_code* code = nullptr;
};

}  // namespace

struct RegexSplitter::Impl {
  std::vector<CompiledRegex> regexes;
  ~Impl() {
    for (auto& r : regexes) pcre2_code_free(r.code);
  }
};

RegexSplitter::RegexSplitter(const std::vector<std::string>& regexes)
    : impl_(std::make_unique<Impl>()) {
  for (const auto& re : regexes) {
    CompiledRegex c;
    std::string pattern;
    uint32_t options = PCRE2_DOLLAR_ENDONLY;
    if (re == kGpt2 || re == kLlama3 || re == kLlama3Original) {
      c.mode = Mode::kUnicode;
      pattern = unicode_whitespace_regex(re);
      options |= PCRE2_UTF | PCRE2_UCP;
    } else if (uses_categories(re)) {
      for (unsigned char ch : re) {
        if (ch >= 0x80) {
          throw std::runtime_error("tokenizer: regex mixes categories and non-ASCII: " + re);
        }
      }
      c.mode = Mode::kCollapsed;
      pattern = collapse_regex(re);
    } else {
      c.mode = Mode::kCodepoint;
      pattern = re;
      options |= PCRE2_UTF;
    }
    int err = 0;
    PCRE2_SIZE err_off = 0;
    c.code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                           &err, &err_off, nullptr);
    if (c.code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      throw std::runtime_error("tokenizer: cannot compile regex '" + re + "' at " +
                               std::to_string(err_off) + ": " + reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(c.code, PCRE2_JIT_COMPLETE);  // optional speed-up; falls back when absent
    impl_->regexes.push_back(c);
  }
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

namespace {

// A subject string with, for every byte offset that starts a codepoint, its codepoint index.
struct Subject {
  std::string bytes;
  std::vector<uint32_t> cpt_index;  // size bytes.size() + 1
};

// Builds the subject for `cpts` in `mode` (collapsed: one byte per codepoint).
Subject make_subject(const std::vector<uint32_t>& cpts, Mode mode) {
  Subject s;
  s.cpt_index.reserve(cpts.size() * 2 + 1);
  for (size_t i = 0; i < cpts.size(); ++i) {
    const uint32_t cp = cpts[i];
    const size_t before = s.bytes.size();
    if (mode == Mode::kCollapsed) {
      char b = static_cast<char>(cp);
      if (cp >= 0x80) {
        const uint32_t cat = unicode::category(cp);
        b = '\xD0';
        if (unicode::is_whitespace(cp)) {
          b = '\x0B';
        } else {
          for (const auto& c : kCollapsedClasses) {
            if (c.category == cat) b = c.byte;
          }
        }
      }
      s.bytes += b;
    } else if (mode == Mode::kCodepoint && cp >= 0x80 && unicode::is_whitespace(cp)) {
      s.bytes += '\x0B';
    } else {
      unicode::append_utf8(s.bytes, cp);
    }
    for (size_t k = before; k < s.bytes.size(); ++k) s.cpt_index.push_back(static_cast<uint32_t>(i));
  }
  s.cpt_index.push_back(static_cast<uint32_t>(cpts.size()));
  return s;
}

// Refines the segments (lengths in codepoints) with one regex.
std::vector<size_t> split_segments(const CompiledRegex& re, const Subject& subj,
                                   const std::vector<size_t>& segments) {
  std::vector<size_t> out;
  out.reserve(segments.size());
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re.code, nullptr);
  size_t seg_start_cpt = 0;
  size_t byte_pos = 0;  // byte offset of the segment start
  for (size_t seg_len : segments) {
    // Byte range of this segment.
    size_t byte_end = byte_pos;
    while (byte_end < subj.bytes.size() && subj.cpt_index[byte_end] < seg_start_cpt + seg_len) {
      ++byte_end;
    }
    const auto* base = reinterpret_cast<PCRE2_SPTR>(subj.bytes.data() + byte_pos);
    const size_t len = byte_end - byte_pos;
    auto cpt_at = [&](size_t off) { return subj.cpt_index[byte_pos + off] - seg_start_cpt; };
    size_t last_end = 0;  // codepoints consumed so far within the segment
    size_t off = 0;
    while (off <= len) {
      const int rc = pcre2_match(re.code, base, len, off, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t m0 = cpt_at(ov[0]);
      const size_t m1 = cpt_at(ov[1]);
      if (m0 > last_end) out.push_back(m0 - last_end);
      if (m1 > m0) out.push_back(m1 - m0);
      last_end = m1;
      if (ov[1] > ov[0]) {
        off = ov[1];
      } else {  // empty match: step over one codepoint
        off = ov[1] + 1;
        while (off < len && subj.cpt_index[byte_pos + off] == subj.cpt_index[byte_pos + off - 1]) {
          ++off;
        }
      }
    }
    if (last_end < seg_len) out.push_back(seg_len - last_end);
    seg_start_cpt += seg_len;
    byte_pos = byte_end;
  }
  pcre2_match_data_free(md);
  return out;
}

}  // namespace

std::vector<std::string> RegexSplitter::split(std::string_view text) const {
  const std::vector<uint32_t> cpts = unicode::decode_utf8(text);
  std::vector<size_t> segments = {cpts.size()};
  if (cpts.empty()) return {};
  Subject subjects[3];
  bool built[3] = {false, false, false};
  for (const auto& re : impl_->regexes) {
    const int m = static_cast<int>(re.mode);
    if (!built[m]) {
      subjects[m] = make_subject(cpts, re.mode);
      built[m] = true;
    }
    segments = split_segments(re, subjects[m], segments);
  }
  std::vector<std::string> words;
  words.reserve(segments.size());
  size_t start = 0;
  for (size_t n : segments) {
    std::string w;
    for (size_t i = start; i < start + n; ++i) unicode::append_utf8(w, cpts[i]);
    words.push_back(std::move(w));
    start += n;
  }
  return words;
}

}  // namespace kvrun::tok
