// test_tokenizer.cpp — GGUF tokenizers (SPM, BPE + pre-tokenizers, WPM) against llama.cpp's
// reference tokenizations (fixtures vocab/*.gguf with .inp/.out, and stories260K's prompts).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ggml-like/gguf.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "text/tokenizer_pretok.h"
#include "text/unicode_util.h"

namespace kvrun {
namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- Unicode helpers ----

TEST(UnicodeUtil, Gpt2ByteTableIsABijectionWithThePublishedAnchors) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = unicode::byte_to_cpt(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second) << "duplicate image for byte " << b;
    EXPECT_EQ(unicode::cpt_to_byte(cp), b);
  }
  EXPECT_EQ(unicode::byte_to_cpt(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(unicode::byte_to_cpt('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(unicode::byte_to_cpt('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(unicode::byte_to_cpt(0xAD), 0x143u);  // soft hyphen is the last remapped byte
  EXPECT_EQ(unicode::byte_to_utf8(' '), "\xC4\xA0");
  EXPECT_EQ(unicode::cpt_to_byte(0x20), -1);  // space itself is not an image
}

TEST(UnicodeUtil, Utf8DecodeEncodeAndMalformedInput) {
  const std::string s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\xA6\x99";  // a é € 🦙
  const std::vector<uint32_t> cps = unicode::decode_utf8(s);
  ASSERT_EQ(cps, (std::vector<uint32_t>{'a', 0xE9, 0x20AC, 0x1F999}));
  std::string back;
  for (uint32_t cp : cps) unicode::append_utf8(back, cp);
  EXPECT_EQ(back, s);
  // A lone continuation byte and a truncated sequence give one U+FFFD per bad byte.
  EXPECT_EQ(unicode::decode_utf8("\x80x\xE2\x82"),
            (std::vector<uint32_t>{0xFFFD, 'x', 0xFFFD, 0xFFFD}));
  EXPECT_EQ(unicode::utf8_len(0xF0), 4u);
  EXPECT_EQ(unicode::utf8_len(0x80), 1u);
}

TEST(UnicodeUtil, PropertiesFromTheUnicodeDatabase) {
  EXPECT_EQ(unicode::category('a'), unicode::kLetter);
  EXPECT_EQ(unicode::category(0x17B6), unicode::kAccentMark);  // KHMER VOWEL SIGN AA (Mc)
  EXPECT_EQ(unicode::category(0xBD), unicode::kNumber);        // ½
  EXPECT_EQ(unicode::category(0x1F999), unicode::kSymbol);     // 🦙
  EXPECT_EQ(unicode::category(','), unicode::kPunctuation);
  EXPECT_EQ(unicode::category(0x200D), unicode::kControl);  // ZWJ is Cf
  EXPECT_TRUE(unicode::is_whitespace(0x85));
  EXPECT_TRUE(unicode::is_whitespace(0x3000));
  EXPECT_FALSE(unicode::is_whitespace(0x200B));
  EXPECT_EQ(unicode::nfd_first(0xFC), static_cast<uint32_t>('u'));    // ü
  EXPECT_EQ(unicode::nfd_first(0x1EC7), static_cast<uint32_t>('e'));  // ệ
  EXPECT_EQ(unicode::nfd_first(0xAC00), 0x1100u);                     // 가 → choseong kiyeok
  EXPECT_EQ(unicode::nfd_first('z'), static_cast<uint32_t>('z'));
  EXPECT_EQ(unicode::to_lower(0xC4), 0xE4u);    // Ä → ä
  EXPECT_EQ(unicode::to_lower(0x416), 0x436u);  // Ж → ж
}

// ---- pre-tokenizer ----

TEST(RegexSplitter, Gpt2PatternSplitsContractionsWordsAndSpaces) {
  const auto info = tok::pre_tokenizer_info("gpt-2");
  tok::RegexSplitter s(info.regexes);
  // \s+(?!\S) leaves the last space of a run for the following word.
  EXPECT_EQ(s.split("Hello world's  test 42!!\n"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " test", " 42", "!!", "\n"}));
  // U+0085 (NEL) and U+3000 are White_Space; full-Unicode mode treats them as \s.
  EXPECT_EQ(s.split("a\xC2\x85"
                    "b"),
            (std::vector<std::string>{"a", "\xC2\x85", "b"}));
  EXPECT_TRUE(s.split("").empty());
}

TEST(RegexSplitter, CollapsedCategoriesAndSuccessiveRegexes) {
  // deepseek-coder: newlines, \s?\p{L}+, \s?\p{P}+, CJK runs, single digits.
  tok::RegexSplitter s(tok::pre_tokenizer_info("deepseek-coder").regexes);
  EXPECT_EQ(s.split("ab 12\ncd, \xE4\xBD\xA0\xE5\xA5\xBD"),
            (std::vector<std::string>{"ab", " ", "1", "2", "\n", "cd", ",", " ",
                                      "\xE4\xBD\xA0\xE5\xA5\xBD"}));
  // A Cyrillic word is \p{L} in collapsed form, so it stays with its leading space.
  EXPECT_EQ(s.split("x \xD0\xB4\xD0\xB0"), (std::vector<std::string>{"x", " \xD0\xB4\xD0\xB0"}));
}

TEST(RegexSplitter, Llama3GroupsDigitsByThree) {
  tok::RegexSplitter s(tok::pre_tokenizer_info("llama-bpe").regexes);
  EXPECT_EQ(s.split("1234567 I'M"), (std::vector<std::string>{"123", "456", "7", " I", "'M"}));
}

TEST(RegexSplitter, Qwen2SplitsSingleDigits) {
  tok::RegexSplitter s(tok::pre_tokenizer_info("qwen2").regexes);
  EXPECT_EQ(s.split("x 1234\n\n"),
            (std::vector<std::string>{"x", " ", "1", "2", "3", "4", "\n\n"}));
}

TEST(RegexSplitter, UnknownPreTokenizerThrows) {
  EXPECT_THROW(tok::pre_tokenizer_info("no-such-pre"), std::runtime_error);
}

// ---- synthetic vocabularies (no fixture needed) ----

TokenizerConfig tiny_spm() {
  TokenizerConfig c;
  c.model = "llama";
  c.tokens = {"<unk>", "<s>", "</s>"};
  c.token_types = {2, 3, 3};
  c.scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    c.tokens.push_back(buf);
    c.token_types.push_back(6);
    c.scores.push_back(0);
  }
  // Pieces: "▁", "a", "b", "ab", "▁ab", "bc"; "bc" scores higher than "ab".
  const std::vector<std::pair<std::string, float>> pieces = {{"\xE2\x96\x81", -1},
                                                             {"a", -2},
                                                             {"b", -3},
                                                             {"c", -4},
                                                             {"ab", -5},
                                                             {"\xE2\x96\x81"
                                                              "ab",
                                                              -6},
                                                             {"bc", -0.5f}};
  for (const auto& [t, s] : pieces) {
    c.tokens.push_back(t);
    c.token_types.push_back(1);
    c.scores.push_back(s);
  }
  return c;
}

TEST(TokenizerSynthetic, SpmMergesByScoreAndFallsBackToBytes) {
  const Tokenizer t = Tokenizer::from_config(tiny_spm());
  const int32_t sp = 259, a = 260, b = 261, c = 262, ab = 263, sp_ab = 264, bc = 265;
  EXPECT_EQ(t.kind(), Tokenizer::Kind::kSpm);
  EXPECT_TRUE(t.add_bos());
  EXPECT_TRUE(t.add_space_prefix());
  // "▁ab": "ab" (-5) merges first, then "▁ab" (-6).
  EXPECT_EQ(t.tokenize("ab", false, false), (std::vector<int32_t>{sp_ab}));
  // "▁abc": "bc" (-0.5) beats "ab" (-5), leaving "▁", "a", "bc".
  EXPECT_EQ(t.tokenize("abc", false, false), (std::vector<int32_t>{sp, a, bc}));
  // 'z' is not a piece: byte fallback <0x7A> = 3 + 0x7A.
  EXPECT_EQ(t.tokenize("z", true, false), (std::vector<int32_t>{1, sp, 3 + 0x7A}));
  // Control text is split out only with parse_special; the text after it gets a space prefix.
  EXPECT_EQ(t.tokenize("</s>c", false, true), (std::vector<int32_t>{2, sp, c}));
  EXPECT_NE(t.tokenize("</s>c", false, false).front(), 2);
  EXPECT_EQ(t.detokenize({1, sp, a, bc, 3 + 0x7A}, true), " abcz");
  EXPECT_EQ(t.detokenize({sp, a, bc}, false), "abc");  // the added space prefix is removed
  EXPECT_EQ(t.token_to_piece(2, false), "");
  EXPECT_EQ(t.token_to_piece(2, true), "</s>");
  // "ab" alone (no preceding space piece) is never produced here: "▁ab" wins.
  EXPECT_EQ(t.tokenize(" ab", false, false), (std::vector<int32_t>{sp, sp_ab}));
  EXPECT_EQ(t.token_text(ab), "ab");
  EXPECT_EQ(t.token_text(b), "b");
}

TEST(TokenizerSynthetic, BpeMergesByRank) {
  TokenizerConfig c;
  c.model = "gpt2";
  c.pre = "gpt-2";
  // 'Ġ' is U+0120, the GPT-2 image of the space byte.
  c.tokens = {"a",
              "b",
              "c",
              "\xC4\xA0",
              "ab",
              "bc",
              "\xC4\xA0"
              "a",
              "<|endoftext|>"};
  c.token_types = {1, 1, 1, 1, 1, 1, 1, 3};
  c.merges = {"b c", "a b", "\xC4\xA0 a"};
  const Tokenizer t = Tokenizer::from_config(c);
  EXPECT_EQ(t.tokenize("abc", false, false), (std::vector<int32_t>{0, 5}));  // "bc" ranks first
  EXPECT_EQ(t.tokenize("ab ab", false, false), (std::vector<int32_t>{4, 3, 4}));  // "a b" first
  EXPECT_EQ(t.tokenize("a<|endoftext|>", false, true), (std::vector<int32_t>{0, 7}));
  EXPECT_EQ(t.detokenize({4, 3, 4}, false), "ab ab");
  EXPECT_EQ(t.tokenize(" a", false, false), (std::vector<int32_t>{6}));
  EXPECT_EQ(t.eot(), 7);  // found by its text
  EXPECT_TRUE(t.is_eog(7));
  EXPECT_FALSE(t.add_bos());
}

TEST(TokenizerSynthetic, InvalidMetadataIsRejected) {
  TokenizerConfig c = tiny_spm();
  c.scores.pop_back();
  EXPECT_THROW(Tokenizer::from_config(c), std::runtime_error);
  c = tiny_spm();
  c.model = "unigram-xyz";
  EXPECT_THROW(Tokenizer::from_config(c), std::runtime_error);
  c = tiny_spm();
  c.model = "gpt2";  // no merges
  EXPECT_THROW(Tokenizer::from_config(c), std::runtime_error);
  c = tiny_spm();
  c.tokens.clear();
  c.scores.clear();
  c.token_types.clear();
  EXPECT_THROW(Tokenizer::from_config(c), std::runtime_error);
}

// ---- fixture vocabularies: llama.cpp's tokenizer tests ----

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<VocabCase> load_cases(const std::string& name) {
  const std::string inp = read_file(test::fixture("vocab/ggml-vocab-" + name + ".gguf.inp"));
  const std::string out = read_file(test::fixture("vocab/ggml-vocab-" + name + ".gguf.out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    size_t hit = inp.find(sep, pos);
    if (hit == std::string::npos) hit = inp.size();
    texts.push_back(inp.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  std::vector<VocabCase> cases;
  std::istringstream lines(out);
  std::string line;
  for (const std::string& text : texts) {
    if (!std::getline(lines, line)) break;
    VocabCase vc{text, {}};
    std::istringstream ids(line);
    for (int64_t id; ids >> id;) vc.ids.push_back(static_cast<int32_t>(id));
    cases.push_back(std::move(vc));
  }
  return cases;
}

class VocabFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabFixture, EveryCaseMatchesLlamaCpp) {
  const std::string rel = "vocab/ggml-vocab-" + GetParam() + ".gguf";
  KVRUN_REQUIRE_FIXTURE(rel);
  const Tokenizer t = Tokenizer::from_gguf(gguf::File::open(test::fixture(rel).string()));
  const std::vector<VocabCase> cases = load_cases(GetParam());
  ASSERT_EQ(cases.size(), 46u);
  size_t pass = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto ids = t.tokenize(cases[i].text, false, false);
    EXPECT_EQ(ids, cases[i].ids) << GetParam() << " case " << i << ": \"" << cases[i].text << "\"";
    pass += ids == cases[i].ids;
  }
  std::printf("[ vocab    ] %s: %zu/%zu cases exact\n", GetParam().c_str(), pass, cases.size());
}

TEST_P(VocabFixture, DetokenizeThenTokenizeRoundTrips) {
  const std::string rel = "vocab/ggml-vocab-" + GetParam() + ".gguf";
  KVRUN_REQUIRE_FIXTURE(rel);
  const Tokenizer t = Tokenizer::from_gguf(gguf::File::open(test::fixture(rel).string()));
  for (const VocabCase& c : load_cases(GetParam())) {
    const std::string text = t.detokenize(c.ids, false);
    if (t.kind() == Tokenizer::Kind::kWpm) {
      // WordPiece is lossy (lowercase, accents, spaces) and [UNK] renders as nothing, but the
      // other ids survive the round trip.
      std::vector<int32_t> known;
      std::copy_if(c.ids.begin(), c.ids.end(), std::back_inserter(known),
                   [&](int32_t id) { return id != t.unk(); });
      EXPECT_EQ(t.tokenize(text, false, false), known) << GetParam() << ": \"" << c.text << "\"";
      continue;
    }
    // SPM and byte-level BPE are lossless: the pieces give back the text exactly (SPM: after
    // the space prefix), and re-tokenizing that text gives the same ids.
    std::string pieces;
    for (int32_t id : c.ids) pieces += t.token_to_piece(id, false);
    const std::string want = t.add_space_prefix() && !c.text.empty() ? " " + c.text : c.text;
    EXPECT_EQ(pieces, want) << GetParam();
    EXPECT_EQ(t.tokenize(c.text, false, false), c.ids);
    if (t.kind() == Tokenizer::Kind::kSpm) {
      EXPECT_EQ(text, c.text) << GetParam();
    } else {
      EXPECT_EQ(t.tokenize(pieces, false, false), c.ids) << GetParam() << ": \"" << c.text << "\"";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, VocabFixture,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "deepseek-llm",
                                           "deepseek-coder", "falcon", "mpt", "refact", "starcoder",
                                           "bert-bge"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

TEST(VocabFixtureMeta, SpecialIdsAndFlagsFollowLlamaCppDefaults) {
  KVRUN_REQUIRE_FIXTURE("vocab/ggml-vocab-bert-bge.gguf");
  const auto open = [](const std::string& n) {
    return Tokenizer::from_gguf(
        gguf::File::open(test::fixture("vocab/ggml-vocab-" + n + ".gguf").string()));
  };
  const Tokenizer bert = open("bert-bge");
  EXPECT_EQ(bert.model_name(), "bert");
  EXPECT_EQ(bert.bos(), 101);
  EXPECT_EQ(bert.sep(), 102);
  EXPECT_EQ(bert.unk(), 100);
  EXPECT_EQ(bert.tokenize("hello", true, false).front(), 101);
  EXPECT_EQ(bert.tokenize("hello", true, false).back(), 102);
  const Tokenizer gpt2 = open("gpt-2");
  EXPECT_EQ(gpt2.pre_name(), "gpt-2");
  EXPECT_EQ(gpt2.bos(), 50256);
  EXPECT_FALSE(gpt2.add_bos());
  EXPECT_EQ(gpt2.tokenize("<|endoftext|>", false, true), (std::vector<int32_t>{50256}));
  const Tokenizer coder = open("deepseek-coder");
  EXPECT_TRUE(coder.add_bos());
  EXPECT_EQ(coder.tokenize("x", true, false).front(), 32013);
  EXPECT_EQ(coder.fim_prefix(), 32016);  // "<｜fim▁begin｜>", found by text
  EXPECT_EQ(coder.fim_suffix(), 32015);
  EXPECT_EQ(coder.fim_middle(), 32017);
  const Tokenizer refact = open("refact");
  EXPECT_EQ(refact.eot(), 0);  // "<|endoftext|>"
  EXPECT_TRUE(refact.is_control(0));
}

// ---- stories260K: prompts of the reference generations ----

TEST(Stories260K, PromptsTokenizeAsLlamaCpp) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  KVRUN_REQUIRE_FIXTURE("refs/prompts.json");
  const Tokenizer t =
      Tokenizer::from_gguf(gguf::File::open(test::fixture("models/stories260K-F32.gguf").string()));
  EXPECT_EQ(t.model_name(), "llama");
  EXPECT_EQ(t.n_vocab(), 512);
  EXPECT_TRUE(t.add_bos());  // no add_bos_token key: SPM default
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  const auto prompts = nlohmann::json::parse(read_file(test::fixture("refs/prompts.json")));
  ASSERT_EQ(prompts.size(), 6u);
  size_t checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::fixture("refs/kv_f16"))) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("stories260K-F32__", 0) != 0) continue;
    const auto ref = nlohmann::json::parse(read_file(entry.path()));
    const std::string prompt = ref.at("prompt");
    const auto want = ref.at("prompt_tokens").get<std::vector<int32_t>>();
    const auto ids = t.tokenize(prompt, true, false);
    EXPECT_EQ(ids, want) << name;
    // llama.cpp keeps the space prefix when it removes the BOS, and strips it otherwise.
    EXPECT_EQ(t.detokenize(ids, true), " " + prompt) << name;
    const std::vector<int32_t> no_bos(ids.begin() + 1, ids.end());
    EXPECT_EQ(t.detokenize(no_bos, false), prompt) << name;
    EXPECT_EQ(t.tokenize(t.detokenize(no_bos, false), true, false), ids) << name;
    EXPECT_NE(std::find(prompts.begin(), prompts.end(), prompt), prompts.end()) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 6u);
}

TEST(Stories260K, PerplexityTextRoundTrips) {
  KVRUN_REQUIRE_FIXTURE("models/stories260K-F32.gguf");
  KVRUN_REQUIRE_FIXTURE("text/tinystories_style_kvrun.txt");
  const Tokenizer t =
      Tokenizer::from_gguf(gguf::File::open(test::fixture("models/stories260K-F32.gguf").string()));
  const std::string text = read_file(test::fixture("text/tinystories_style_kvrun.txt"));
  const auto ids = t.tokenize(text, true, false);
  EXPECT_EQ(ids.size(), 9454u);  // the count the fixtures README gives (BOS included)
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(t.detokenize(std::vector<int32_t>(ids.begin() + 1, ids.end()), false), text);
}

}  // namespace
}  // namespace kvrun
