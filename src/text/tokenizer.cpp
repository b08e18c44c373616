// tokenizer.cpp — Tokenizer: loading from GGUF metadata, special-token splitting, dispatch to
// the SPM/BPE/WPM algorithms, pieces and detokenization.
//
// Loading defaults and special-token handling follow llama.cpp's vocabulary loader
// (src/llama-vocab.cpp, commit c392e509), described in the comments below.
#include "text/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <stdexcept>
#include <unordered_set>

#include "ggml-like/gguf.h"
#include "text/tokenizer_impl.h"
#include "text/unicode_util.h"

namespace kvrun {

using tok::Vocab;

namespace tok {

uint32_t attr_from_token_type(int64_t type) {
  switch (type) {
    case 1:
      return kAttrNormal;
    case 2:
      return kAttrUnknown;
    case 3:
      return kAttrControl;
    case 4:
      return kAttrUserDefined;
    case 5:
      return kAttrUnused;
    case 6:
      return kAttrByte;
    default:
      return kAttrUndefined;
  }
}

}  // namespace tok

struct Tokenizer::Impl {
  Kind kind = Kind::kSpm;
  std::string model;
  std::string pre;
  Vocab vocab;
  std::unique_ptr<tok::RegexSplitter> splitter;  // BPE only
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
  bool ignore_merges = false;
  bool clean_spaces = false;
  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
  int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
  std::vector<int32_t> special_cache;  // control/user-defined/unknown ids, longest text first
  std::vector<std::string> pieces;     // token_to_piece(id, special=true)
  std::unordered_set<int32_t> eog;

  uint32_t attr(int32_t id) const { return vocab.tokens.at(static_cast<size_t>(id)).attr; }
  std::string compute_piece(int32_t id) const;
  void apply_defaults(const TokenizerConfig& c);
  void load_tokens(const TokenizerConfig& c);
  void load_special_ids(const TokenizerConfig& c);
  void detect_special_by_text();
  void build_caches(const std::string& general_name);
};

namespace {

constexpr const char* kSpaceEscape = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

}  // namespace

// Model-dependent defaults (llama.cpp): SPM has BOS 1, EOS 2, UNK 0, adds BOS and a space prefix;
// WPM has [CLS] 101 as BOS, [UNK] 100, [SEP] 102, [PAD] 0, [MASK] 103; BPE has BOS = EOS = 11
// and takes its flags from the pre-tokenizer type.
void Tokenizer::Impl::apply_defaults(const TokenizerConfig& c) {
  if (c.model == "llama") {
    kind = Kind::kSpm;
    bos = 1, eos = 2, unk = 0;
    add_space_prefix = true, add_bos = true;
  } else if (c.model == "bert") {
    kind = Kind::kWpm;
    bos = 101, unk = 100, sep = 102, pad = 0, mask = 103;
    clean_spaces = true, add_bos = true;
  } else if (c.model == "gpt2") {
    kind = Kind::kBpe;
    bos = 11, eos = 11;
    if (c.merges.empty())
      throw std::runtime_error("tokenizer: gpt2 model without tokenizer.ggml.merges");
    const tok::PreTokenizerInfo info = tok::pre_tokenizer_info(c.pre);
    clean_spaces = info.clean_spaces;
    ignore_merges = info.ignore_merges;
    add_bos = info.force_add_bos;
    if (info.no_bos) bos = -1;
    splitter = std::make_unique<tok::RegexSplitter>(info.regexes);
  } else if (c.model.empty()) {
    throw std::runtime_error("tokenizer: missing tokenizer.ggml.model");
  } else {
    throw std::runtime_error("tokenizer: unsupported tokenizer model '" + c.model + "'");
  }
  if (c.add_space_prefix) add_space_prefix = *c.add_space_prefix;
}

void Tokenizer::Impl::load_tokens(const TokenizerConfig& c) {
  const size_t n = c.tokens.size();
  if (n == 0) throw std::runtime_error("tokenizer: missing or empty tokenizer.ggml.tokens");
  if (n > static_cast<size_t>(INT32_MAX)) throw std::runtime_error("tokenizer: too many tokens");
  if (!c.scores.empty() && c.scores.size() != n) {
    throw std::runtime_error("tokenizer: tokenizer.ggml.scores has " +
                             std::to_string(c.scores.size()) + " entries, expected " +
                             std::to_string(n));
  }
  if (!c.token_types.empty() && c.token_types.size() != n) {
    throw std::runtime_error("tokenizer: tokenizer.ggml.token_type has " +
                             std::to_string(c.token_types.size()) + " entries, expected " +
                             std::to_string(n));
  }
  vocab.tokens.resize(n);
  vocab.ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    tok::TokenEntry& t = vocab.tokens[i];
    t.text = c.tokens[i].empty() ? "[EMPTY_" + std::to_string(i) + "]" : c.tokens[i];
    t.score = c.scores.empty() ? 0.0f : c.scores[i];
    t.attr = c.token_types.empty() ? tok::kAttrNormal : tok::attr_from_token_type(c.token_types[i]);
    vocab.ids[t.text] = static_cast<int32_t>(i);
    vocab.max_token_len = std::max(vocab.max_token_len, t.text.size());
  }
  // Merges: "left right", split at the first space after the first byte; rank = line index.
  vocab.bpe_ranks.reserve(c.merges.size());
  for (size_t i = 0; i < c.merges.size(); ++i) {
    const std::string& m = c.merges[i];
    const size_t sp = m.find(' ', 1);
    const std::string key = sp == std::string::npos
                                ? Vocab::merge_key("", "")
                                : Vocab::merge_key(std::string_view(m).substr(0, sp),
                                                   std::string_view(m).substr(sp + 1));
    vocab.bpe_ranks.emplace(key, static_cast<int32_t>(i));  // the first rank of a pair wins
  }
}

void Tokenizer::Impl::load_special_ids(const TokenizerConfig& c) {
  const int64_t n = static_cast<int64_t>(vocab.tokens.size());
  auto set = [n](int32_t& id, const std::optional<int64_t>& v) {
    if (v && *v >= 0 && *v < n) id = static_cast<int32_t>(*v);
  };
  set(bos, c.bos), set(eos, c.eos), set(eot, c.eot), set(eom, c.eom), set(unk, c.unk);
  set(sep, c.sep), set(pad, c.pad), set(mask, c.mask);
  set(fim_pre, c.fim_pre), set(fim_suf, c.fim_suf), set(fim_mid, c.fim_mid);
  set(fim_pad, c.fim_pad), set(fim_rep, c.fim_rep), set(fim_sep, c.fim_sep);
  if (c.add_bos) add_bos = *c.add_bos;
  if (c.add_eos) add_eos = *c.add_eos;
  vocab.unk = unk;
}

// Ids not given by keys are found by their text (llama.cpp's list of well-known texts); such a
// token is made a control token. Then the end-of-generation set is built.
void Tokenizer::Impl::detect_special_by_text() {
  struct Rule {
    int32_t* id;
    std::vector<std::string_view> texts;
  };
  const std::vector<Rule> rules = {
      {&eot,
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
        "<\xEF\xBD\x9C"
        "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"}},
      {&eom, {"<|eom_id|>"}},
      {&fim_pre,
       {"<|fim_prefix|>", "<fim-prefix>",
        "<\xEF\xBD\x9C"
        "fim\xE2\x96\x81"
        "begin\xEF\xBD\x9C>",
        "<PRE>"}},
      {&fim_suf,
       {"<|fim_suffix|>", "<fim-suffix>",
        "<\xEF\xBD\x9C"
        "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
        "<SUF>"}},
      {&fim_mid,
       {"<|fim_middle|>", "<fim-middle>",
        "<\xEF\xBD\x9C"
        "fim\xE2\x96\x81"
        "end\xEF\xBD\x9C>",
        "<MID>"}},
      {&fim_pad, {"<|fim_pad|>", "<fim-pad>", "<PAD>"}},
      {&fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"}},
      {&fim_sep, {"<|file_sep|>"}},
  };
  for (const Rule& r : rules) {
    if (*r.id >= 0) continue;
    for (int32_t i = 0; i < static_cast<int32_t>(vocab.tokens.size()) && *r.id < 0; ++i) {
      const std::string& t = vocab.tokens[i].text;
      if (std::find(r.texts.begin(), r.texts.end(), t) != r.texts.end()) {
        *r.id = i;
        vocab.tokens[i].attr = tok::kAttrControl;  // (llama.cpp replaces the attribute)
      }
    }
  }
  static const std::vector<std::string_view> kEogTexts = {
      "<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>",
      "<|endoftext|>", "<|eom_id|>", "<EOT>"};
  for (int32_t i = 0; i < static_cast<int32_t>(vocab.tokens.size()); ++i) {
    auto& t = vocab.tokens[i];
    if (std::find(kEogTexts.begin(), kEogTexts.end(), t.text) != kEogTexts.end()) {
      eog.insert(i);
      t.attr = tok::kAttrControl;
    }
  }
  for (int32_t id : {fim_pad, fim_rep, fim_sep, eos, eot, eom}) {
    if (id >= 0) eog.insert(id);
  }
}

void Tokenizer::Impl::build_caches(const std::string& general_name) {
  const auto n = static_cast<int32_t>(vocab.tokens.size());
  for (int32_t i = 0; i < n; ++i) {
    if (attr(i) & (tok::kAttrControl | tok::kAttrUserDefined | tok::kAttrUnknown)) {
      special_cache.push_back(i);
    }
  }
  std::stable_sort(special_cache.begin(), special_cache.end(), [&](int32_t a, int32_t b) {
    return vocab.tokens[a].text.size() > vocab.tokens[b].text.size();
  });
  pieces.resize(n);
  for (int32_t i = 0; i < n; ++i) pieces[i] = compute_piece(i);

  // Per-model strip attributes that GGUF does not store (llama.cpp sets them by name).
  std::string name = general_name;
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  auto set_attr = [&](std::string_view text, uint32_t a, bool on) {
    const int32_t id = vocab.find(std::string(text));
    if (id < 0) return;
    auto& at = vocab.tokens[id].attr;
    at = on ? (at | a) : (at & ~a);
  };
  if (pre.find("jina-v2-de") != std::string::npos || pre.find("jina-v2-es") != std::string::npos ||
      pre.find("jina-v2-code") != std::string::npos) {
    set_attr("<mask>", tok::kAttrLstrip, true);
  } else if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (int32_t id : special_cache) vocab.tokens[id].attr |= tok::kAttrRstrip;
    set_attr("</s>", tok::kAttrRstrip, true);
    for (auto t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(t, tok::kAttrRstrip, false);
  }
}

std::string Tokenizer::Impl::compute_piece(int32_t id) const {
  const tok::TokenEntry& t = vocab.tokens[id];
  if (t.attr & (tok::kAttrUnknown | tok::kAttrControl | tok::kAttrUserDefined)) return t.text;
  if (kind == Kind::kBpe) {
    if (!(t.attr & tok::kAttrNormal)) return "";
    std::string out;
    for (uint32_t cp : unicode::decode_utf8(t.text)) {
      const int b = unicode::cpt_to_byte(cp);
      if (b >= 0) {
        out += static_cast<char>(b);
        continue;
      }
      // Not a GPT-2 byte character: llama.cpp writes a marker with the bytes and the text.
      out += "[UNK_BYTE_0x";
      char hex[4];
      for (unsigned char c : unicode::encode_utf8(cp)) {
        std::snprintf(hex, sizeof(hex), "%02x", c);
        out += hex;
      }
      out += t.text + "]";
    }
    return out;
  }
  if (t.attr & tok::kAttrNormal) {
    std::string s = t.text;
    replace_all(s, kSpaceEscape, " ");
    return s;
  }
  if ((t.attr & tok::kAttrByte) && t.text.size() >= 5) {
    return std::string(1, static_cast<char>(std::stoi(t.text.substr(3, 2), nullptr, 16)));
  }
  return "";
}

// ---------------------------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_config(const TokenizerConfig& c) {
  auto impl = std::make_unique<Impl>();
  impl->model = c.model;
  impl->pre = c.pre;
  impl->apply_defaults(c);
  impl->load_tokens(c);
  impl->load_special_ids(c);
  impl->detect_special_by_text();
  impl->build_caches(c.general_name);
  return Tokenizer(std::move(impl));
}

namespace {

template <typename T, typename F>
T read_key(const gguf::File& f, const char* key, F getter) {
  try {
    return (f.*getter)(key);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("tokenizer: bad metadata key ") + key + ": " + e.what());
  }
}

std::vector<std::string> to_strings(const std::optional<std::vector<std::string_view>>& v) {
  std::vector<std::string> out;
  if (v) out.assign(v->begin(), v->end());
  return out;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const gguf::File& f) {
  using gguf::File;
  TokenizerConfig c;
  auto str = [&](const char* key) {
    auto v = read_key<std::optional<std::string_view>>(f, key, &File::get_string);
    return v ? std::string(*v) : std::string();
  };
  auto id = [&](const char* key) {
    return read_key<std::optional<int64_t>>(f, key, &File::get_int);
  };
  auto flag = [&](const char* key) {
    return read_key<std::optional<bool>>(f, key, &File::get_bool);
  };
  c.model = str("tokenizer.ggml.model");
  if (c.model.empty()) throw std::runtime_error("tokenizer: missing tokenizer.ggml.model");
  c.pre = str("tokenizer.ggml.pre");
  c.general_name = str("general.name");
  c.tokens = to_strings(read_key<std::optional<std::vector<std::string_view>>>(
      f, "tokenizer.ggml.tokens", &File::get_string_array));
  c.merges = to_strings(read_key<std::optional<std::vector<std::string_view>>>(
      f, "tokenizer.ggml.merges", &File::get_string_array));
  if (auto s = read_key<std::optional<std::vector<float>>>(f, "tokenizer.ggml.scores",
                                                           &File::get_float_array)) {
    c.scores = std::move(*s);
  }
  if (auto t = read_key<std::optional<std::vector<int64_t>>>(f, "tokenizer.ggml.token_type",
                                                             &File::get_int_array)) {
    c.token_types.assign(t->begin(), t->end());
  }
  c.bos = id("tokenizer.ggml.bos_token_id");
  c.eos = id("tokenizer.ggml.eos_token_id");
  c.eot = id("tokenizer.ggml.eot_token_id");
  c.eom = id("tokenizer.ggml.eom_token_id");
  c.unk = id("tokenizer.ggml.unknown_token_id");
  c.sep = id("tokenizer.ggml.seperator_token_id");  // sic: the GGUF key is spelled so
  c.pad = id("tokenizer.ggml.padding_token_id");
  c.mask = id("tokenizer.ggml.mask_token_id");
  c.fim_pre = id("tokenizer.ggml.fim_pre_token_id");
  c.fim_suf = id("tokenizer.ggml.fim_suf_token_id");
  c.fim_mid = id("tokenizer.ggml.fim_mid_token_id");
  c.fim_pad = id("tokenizer.ggml.fim_pad_token_id");
  c.fim_rep = id("tokenizer.ggml.fim_rep_token_id");
  c.fim_sep = id("tokenizer.ggml.fim_sep_token_id");
  // Deprecated spellings of the FIM ids (read after, so they win, as in llama.cpp).
  if (auto v = id("tokenizer.ggml.prefix_token_id")) c.fim_pre = v;
  if (auto v = id("tokenizer.ggml.suffix_token_id")) c.fim_suf = v;
  if (auto v = id("tokenizer.ggml.middle_token_id")) c.fim_mid = v;
  c.add_bos = flag("tokenizer.ggml.add_bos_token");
  c.add_eos = flag("tokenizer.ggml.add_eos_token");
  c.add_space_prefix = flag("tokenizer.ggml.add_space_prefix");
  return from_config(c);
}

// ---------------------------------------------------------------------------------------------

namespace {

// A piece of the input: raw text [off, off + len), or a special token (token >= 0).
struct Fragment {
  int32_t token;
  size_t off;
  size_t len;
};

// Splits raw fragments around every occurrence of special token `id` (text `t`), leftmost first.
void split_on_special(std::string_view text, int32_t id, const std::string& t, uint32_t attr,
                      std::vector<Fragment>& frags) {
  std::vector<Fragment> out;
  out.reserve(frags.size() + 2);
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f);
      continue;
    }
    size_t base = f.off;
    size_t len = f.len;
    while (len > 0) {
      const size_t m = text.find(t, base);
      if (m == std::string_view::npos || m + t.size() > base + len) {
        out.push_back({-1, base, len});
        break;
      }
      size_t left = m - base;
      if (attr & tok::kAttrLstrip) {
        while (left > 0 && std::isspace(static_cast<unsigned char>(text[base + left - 1]))) --left;
      }
      if (left > 0) out.push_back({-1, base, left});
      out.push_back({id, 0, 0});
      size_t r_off = m + t.size();
      size_t r_len = base + len - r_off;
      if (attr & tok::kAttrRstrip) {
        while (r_len > 0 && std::isspace(static_cast<unsigned char>(text[r_off]))) ++r_off, --r_len;
      }
      base = r_off;
      len = r_len;
    }
  }
  frags.swap(out);
}

}  // namespace

std::vector<int32_t> Tokenizer::tokenize(std::string_view text, bool add_special,
                                         bool parse_special) const {
  const Impl& im = *impl_;
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  for (int32_t id : im.special_cache) {
    const uint32_t attr = im.attr(id);
    // Without parse_special only user-defined tokens are split out.
    if (!parse_special && (attr & (tok::kAttrControl | tok::kAttrUnknown))) continue;
    split_on_special(text, id, im.vocab.tokens[id].text, attr, frags);
  }
  std::vector<int32_t> out;
  const bool bos = add_special && im.bos >= 0 && (im.add_bos || im.kind == Kind::kWpm);
  if (bos) out.push_back(im.bos);
  bool prev_special = true;  // SPM: a space prefix goes before the first text piece
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    const std::string_view piece = text.substr(f.off, f.len);
    switch (im.kind) {
      case Kind::kSpm: {
        std::string s = (im.add_space_prefix && prev_special) ? " " : "";
        s.append(piece);
        replace_all(s, " ", kSpaceEscape);
        tok::spm_tokenize(im.vocab, s, out);
        break;
      }
      case Kind::kBpe:
        tok::bpe_tokenize(im.vocab, *im.splitter, im.ignore_merges, piece, out);
        break;
      case Kind::kWpm:
        tok::wpm_tokenize(im.vocab, piece, out);
        break;
    }
    prev_special = false;
  }
  if (add_special) {
    if (im.kind == Kind::kWpm) {
      if (im.sep >= 0) out.push_back(im.sep);
    } else if (im.add_eos && im.eos >= 0) {
      out.push_back(im.eos);
    }
  }
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
  const uint32_t a = impl_->attr(id);
  if (!special && (a & (tok::kAttrUnknown | tok::kAttrControl))) return "";
  return impl_->pieces[static_cast<size_t>(id)];
}

namespace {

// HF clean_up_tokenization_spaces as llama.cpp applies it, in three in-place passes over the
// bytes (each pass reads the bytes as they were before it and compacts them).
void clean_up_spaces(std::string& s) {
  if (s.empty()) return;
  // Pass 1: " ?", " !", " .", " ," lose the space.
  size_t n = 1;
  for (size_t i = 1; i < s.size(); ++i) {
    const char x = s[i];
    if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --n;
    s[n++] = x;
  }
  s.resize(n);
  // Pass 2: " ' " becomes "'".
  n = 1;
  for (size_t i = 1; i < s.size(); ++i) {
    const char x = s[i];
    if (x == '\'' && i + 1 < s.size() && s[i - 1] == ' ' && s[i + 1] == ' ') {
      --n;            // drop the space before
      s[++i] = '\0';  // and skip the space after
    }
    s[n++] = x;
  }
  s.resize(n);
  // Pass 3: " 's", " 'm", " 're", " 've" lose the space (" 't", " 'd", " 'll" keep it).
  n = 1;
  for (size_t i = 1; i < s.size(); ++i) {
    const char x = s[i];
    if (s[i - 1] == ' ' && x == '\'' && i + 1 < s.size()) {
      const char x1 = s[i + 1];
      const char x2 = i + 2 < s.size() ? s[i + 2] : '\0';
      if (x1 == 's' || x1 == 'm' || (x2 == 'e' && (x1 == 'r' || x1 == 'v'))) --n;
    }
    s[n++] = x;
  }
  s.resize(n);
}

}  // namespace

std::string Tokenizer::detokenize(const std::vector<int32_t>& ids, bool remove_special,
                                  bool unparse_special) const {
  const Impl& im = *impl_;
  size_t begin = 0;
  size_t end = ids.size();
  bool remove_space = im.add_space_prefix;
  if (remove_special && im.add_bos && end > begin && ids[begin] == im.bos) {
    remove_space = false;
    ++begin;
  }
  if (remove_special && im.add_eos && end > begin && ids[end - 1] == im.eos) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    std::string piece = token_to_piece(ids[i], unparse_special);
    if (remove_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    remove_space = false;
    out += piece;
  }
  if (im.clean_spaces) clean_up_spaces(out);
  return out;
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->vocab.tokens.size()); }
Tokenizer::Kind Tokenizer::kind() const { return impl_->kind; }
const std::string& Tokenizer::model_name() const { return impl_->model; }
const std::string& Tokenizer::pre_name() const { return impl_->pre; }
int32_t Tokenizer::bos() const { return impl_->bos; }
int32_t Tokenizer::eos() const { return impl_->eos; }
int32_t Tokenizer::eot() const { return impl_->eot; }
int32_t Tokenizer::unk() const { return impl_->unk; }
int32_t Tokenizer::sep() const { return impl_->sep; }
int32_t Tokenizer::pad() const { return impl_->pad; }
int32_t Tokenizer::fim_prefix() const { return impl_->fim_pre; }
int32_t Tokenizer::fim_suffix() const { return impl_->fim_suf; }
int32_t Tokenizer::fim_middle() const { return impl_->fim_mid; }
int32_t Tokenizer::fim_repo() const { return impl_->fim_rep; }
int32_t Tokenizer::fim_file_sep() const { return impl_->fim_sep; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }
bool Tokenizer::add_space_prefix() const { return impl_->add_space_prefix; }

const std::string& Tokenizer::token_text(int32_t id) const {
  return impl_->vocab.tokens.at(static_cast<size_t>(id)).text;
}

bool Tokenizer::is_control(int32_t id) const { return impl_->attr(id) & tok::kAttrControl; }

bool Tokenizer::is_eog(int32_t id) const { return impl_->eog.count(id) > 0; }

}  // namespace kvrun
