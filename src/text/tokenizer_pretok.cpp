// tokenizer_pretok.cpp — pre-tokenizer regex tables and the PCRE2 splitter.
//
// The regex patterns are the published pre-tokenizer patterns of each model family's
// tokenizer.json, in the form llama.cpp uses them (src/llama-vocab.cpp, llm_tokenizer_bpe; for
// Llama 3 and Qwen 2 the case-insensitive contraction group `(?i:'s|...)` is spelled out as
// `(?:'[sS]|...)`). The name → pattern-list assignment and the per-name flags follow llama.cpp's
// vocab loader (commit c392e509, the version that produced the test fixtures).
#include "text/tokenizer_pretok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <stdexcept>

#include "text/unicode_util.h"

namespace kvrun::tok {

namespace {

// ---- published patterns ----
const char* const kGpt2 =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
const char* const kLlama3 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kLlama3Original =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kQwen2 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kDeepseekLetters =
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)re";
const char* const kDeepseekPunct =
    R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re";
const char* const kCjk = R"re([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re";
const char* const kDeepseek3Main =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kPoro =
    R"re( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)re";
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
    r = {R"re(\p{N}{1,3})re", R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re",
         kDeepseek3Main};
    info.clean_spaces = false;
  } else if (name == "falcon") {
    r = {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2, "[0-9][0-9][0-9]"};
  } else if (name_in(name, {"starcoder", "refact", "codeshell", "exaone", "minerva-7b"})) {
    r = {R"re(\p{N})re", kGpt2};
  } else if (name_in(name, {"command-r", "smollm"})) {
    r = {R"re(\p{N})re", kGpt2};
    info.clean_spaces = false;
  } else if (name_in(name, {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en",
                            "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe", "mpt",
                            "olmo", "jais"})) {
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
         R"re(\p{N})re",      R"re([\p{P}!-/:-@\[-`{-~])re",         kGpt2};
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
    // No JIT: the interpreter keeps its backtracking frames on the heap, so long inputs
    // cannot overflow a fixed JIT stack.
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
    for (size_t k = before; k < s.bytes.size(); ++k)
      s.cpt_index.push_back(static_cast<uint32_t>(i));
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
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        pcre2_match_data_free(md);
        throw std::runtime_error("tokenizer: regex match failed (PCRE2 error " +
                                 std::to_string(rc) + ")");
      }
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
