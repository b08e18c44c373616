// test_grammar.cpp — the GBNF parser (src/text/grammar_parser.cpp) and matcher
// (src/text/grammar_matcher.cpp) against llama.cpp's documented grammar semantics
// (grammars/README.md; the accept/reject cases are in the spirit of its
// tests/test-grammar-integration.cpp, written for kvrun), and the token mask
// (src/text/grammar_vocab.cpp) against a brute-force check of every token.
#include <gtest/gtest.h>

#include <random>

#include "text/grammar.h"
#include "text/grammar_matcher.h"
#include "text/grammar_vocab.h"
#include "text/unicode_util.h"

using kvrun::Grammar;
using kvrun::GrammarError;
using kvrun::GrammarMatcher;
using kvrun::GrammarTokens;
using kvrun::parse_grammar;
using kvrun::TokenTrie;

namespace {

std::shared_ptr<const Grammar> compile(const std::string& text) {
  return std::make_shared<const Grammar>(parse_grammar(text));
}

/// Every string in `yes` is a sentence, every one in `no` is not.
void check(const std::string& grammar, const std::vector<std::string>& yes,
           const std::vector<std::string>& no) {
  SCOPED_TRACE(grammar);
  GrammarMatcher m(compile(grammar));
  for (const auto& s : yes) EXPECT_TRUE(m.matches(s)) << "should match: '" << s << "'";
  for (const auto& s : no) EXPECT_FALSE(m.matches(s)) << "should not match: '" << s << "'";
}

/// The error message of parsing `text` ("" when it parses).
std::string error_of(const std::string& text) {
  try {
    parse_grammar(text);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

const char* kJson = R"(# JSON (ECMA-404), whitespace limited as in llama.cpp's json.gbnf
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

ws ::= | " " | "\n" [ \t]{0,20}
)";

TEST(GrammarMatch, LiteralsAndSequences) {
  check(R"(root ::= "abc")", {"abc"}, {"", "ab", "abcd", "abd", "ABC"});
  check(R"(root ::= "a" "b" "c")", {"abc"}, {"ab", "abcc"});
  check(R"(root ::= "")", {""}, {"a"});
}

TEST(GrammarMatch, Alternatives) {
  check(R"(root ::= "cat" | "dog" | "")", {"cat", "dog", ""}, {"ca", "catdog", "bird"});
  check("root ::= a | b\na ::= \"x\"\nb ::= \"y\" a", {"x", "yx"}, {"y", "xy"});
}

TEST(GrammarMatch, Repetition) {
  check(R"(root ::= "a"*)", {"", "a", "aaaa"}, {"b", "ab"});
  check(R"(root ::= "a"+)", {"a", "aaa"}, {""});
  check(R"(root ::= "a"? "b")", {"b", "ab"}, {"aab", "a"});
  check(R"(root ::= "ab"*)", {"", "ab", "abab"}, {"aba", "a"});
  check(R"(root ::= [0-9]{3})", {"123"}, {"12", "1234", ""});
  check(R"(root ::= [0-9]{2,})", {"12", "123456"}, {"1"});
  check(R"(root ::= [0-9]{1,3})", {"1", "12", "123"}, {"", "1234"});
  check(R"(root ::= [0-9]{0,2})", {"", "1", "12"}, {"123"});
  check(R"(root ::= ("a" | "b"){2} "c")", {"abc", "bbc", "aac"}, {"ac", "abac"});
  check(R"(root ::= "a"{0})", {""}, {"a"});
}

TEST(GrammarMatch, CharacterClasses) {
  check(R"(root ::= [a-z]+)", {"abc", "z"}, {"A", "a1", ""});
  check(R"(root ::= [^a-z]+)", {"ABC", "1é"}, {"a", "Ab"});
  check(R"(root ::= [a-cx-z_]+)", {"abxz_", "c"}, {"d", "w"});
  check(R"(root ::= [-a]+)", {"-", "a-a"}, {"b"});
  check(R"(root ::= [a-]+)", {"-", "a-"}, {"b"});
  check(R"(root ::= .)", {"a", "é", "😀", "\n"}, {"", "ab"});
  check(R"(root ::= [^"\\]*)", {"abc", "é x"}, {"\"", "\\"});
}

TEST(GrammarMatch, EscapesAndUnicode) {
  check(R"(root ::= "\x41\u00e9\U0001F600\n\t\r\\\"\[\]")", {"Aé😀\n\t\r\\\"[]"}, {"A"});
  check(R"(root ::= [\u0400-\u04FF]+)", {"Привет"}, {"Hello"});
  check("root ::= \"日本\" [語]", {"日本語"}, {"日本"});
  check(R"(root ::= [\x00-\x7F]*)", {"plain"}, {"é"});
}

TEST(GrammarMatch, CommentsAndLayout) {
  check(
      "# leading comment\nroot ::= a # trailing\n\n  # indented comment\na ::= \"x\" (\n  \"y\"\n  "
      "| \"z\"\n)\n",
      {"xy", "xz"}, {"x"});
  check("root ::=\n  \"a\" |\n  \"b\"\n", {"a", "b"}, {"ab"});
  check("root ::= \"a\"\r\n", {"a"}, {""});
}

TEST(GrammarMatch, RecursionAndNesting) {
  check(R"g(root ::= "(" root ")" | "")g", {"", "()", "((()))"}, {"(", "())", ")("});
  check("root ::= expr\nexpr ::= term ([-+*/] term)*\nterm ::= [0-9]+ | \"(\" expr \")\"",
        {"1", "1+2*3", "(1+2)*3", "((4))"}, {"1+", "(1", "+1", "1++2"});
}

TEST(GrammarMatch, JsonGrammar) {
  check(kJson,
        {"{}", R"({"a": 1})", R"({"a":[1,2,{"b":null}],"c":"x\"y\u00e9"})",
         R"({"k": -0.5e+3, "t": true})", "{\n  \"a\": \"é😀\"\n}"},
        {"", "[]", R"({"a"})", R"({"a": 01x})", R"({"a": "\q"})", R"({"a": 1,})",
         "{\"a\":\"\x01\"}"});
}

// kvrun's own equivalents of llama.cpp's example grammars (grammars/*.gbnf): a bullet list, an
// arithmetic expression with whitespace, Japanese text, a chess move list.
TEST(GrammarMatch, ExampleGrammarEquivalents) {
  check(R"g(root ::= item+
# a list of lines starting with "- "
item ::= "- " [^\r\n\x0b\x0c\x85\u2028\u2029]+ "\n")g",
        {"- milk\n", "- eggs\n- 2 × bread\n"}, {"", "- \n", "milk\n", "- milk"});
  check(R"g(root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*)g",
        {"1+2= 3\n", "(a_1 *2)/x = 7\n", "a=b\nc=d\n"}, {"1+2=3", "=3\n", "1+=2\n"});
  check(R"g(root ::= jp-char+ ([ \t\n] jp-char+)*
jp-char ::= hiragana | katakana | punctuation | cjk
hiragana ::= [ぁ-ゟ]
katakana ::= [ァ-ヿ]
punctuation ::= [、-〾]
cjk ::= [一-鿿])g",
        {"こんにちは", "カタカナ 漢字。"}, {"hello", "こんにちは!", ""});
  check(R"g(root ::= "1. " move " " move "\n" ([1-9] [0-9]? ". " move " " move "\n")*
move ::= (pawn | nonpawn | castle) [+#]?
nonpawn ::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]
pawn ::= ([a-h] "x")? [a-h] [1-8] ("=" [NBKQR])?
castle ::= "O-O" "-O"?)g",
        {"1. e4 e5\n", "1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n4. O-O Nxe4+\n"},
        {"1. e4\n", "1. e9 e5\n", "1. Zf3 e5\n"});
}

TEST(GrammarMatch, PrefixesAndPartialUtf8) {
  GrammarMatcher m(compile(R"(root ::= "é" [😀-😂] "x")"));
  EXPECT_TRUE(m.accepts_prefix(""));
  EXPECT_TRUE(m.accepts_prefix("\xC3"));       // first byte of é
  EXPECT_FALSE(m.accepts_prefix("\xC4"));      // first byte of U+0100..U+013F: no é there
  EXPECT_TRUE(m.accepts_prefix("é\xF0\x9F"));  // the first two bytes of 😀
  EXPECT_TRUE(m.accepts_prefix("é\xF0\x9F\x98"));
  EXPECT_FALSE(m.accepts_prefix("é\xF0\x9F\x99"));  // U+1F640.. is past the range
  EXPECT_FALSE(m.accepts_prefix("\x80"));           // a lone continuation byte
  // Overlong forms and surrogates are not UTF-8 (a byte-fallback vocabulary can spell them).
  GrammarMatcher any(compile("root ::= .*"));
  EXPECT_TRUE(any.accepts_prefix("{\xE2\x82"));
  EXPECT_FALSE(any.accepts_prefix("\xE0\x81"));      // overlong 3-byte form of U+007B
  EXPECT_FALSE(any.accepts_prefix("\xC1"));          // overlong 2-byte lead
  EXPECT_FALSE(any.accepts_prefix("\xED\xA0"));      // U+D800.. surrogates
  EXPECT_FALSE(any.accepts_prefix("\xF4\x90"));      // above U+10FFFF
  EXPECT_FALSE(any.accepts_prefix("\xF0\x80\x80"));  // overlong 4-byte form
  EXPECT_TRUE(any.matches("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(m.matches("é\xF0\x9F\x98"));  // incomplete code point: not complete
  EXPECT_TRUE(m.matches("é😁x"));
  // A negated class with a partial sequence: everything but the excluded block is possible.
  GrammarMatcher n(compile(R"(root ::= [^\u0400-\u04FF])"));
  EXPECT_TRUE(n.accepts_prefix("\xC3"));
  EXPECT_FALSE(n.accepts_prefix("\xD0"));  // U+0400..U+043F: all excluded
  EXPECT_FALSE(n.accepts_prefix("\xD3"));  // U+04C0..U+04FF
  EXPECT_TRUE(n.accepts_prefix("\xD4"));
}

TEST(GrammarMatch, CompleteAndContinue) {
  GrammarMatcher m(compile(R"(root ::= "a" "b"?)"));
  auto s = m.step(m.start(), "a");
  EXPECT_TRUE(m.accepting(s));
  EXPECT_TRUE(m.can_continue(s));
  s = m.step(s, "b");
  EXPECT_TRUE(m.accepting(s));
  EXPECT_FALSE(m.can_continue(s));
  EXPECT_EQ(m.step(s, "b"), GrammarMatcher::kDead);
}

TEST(GrammarParse, Errors) {
  EXPECT_EQ(error_of("root ::= \"a"), "line 1, column 10: unterminated string literal");
  EXPECT_EQ(error_of("root ::= [a-z"), "line 1, column 10: unterminated character class");
  EXPECT_EQ(error_of("root ::= item\n"), "line 1, column 10: undefined rule 'item'");
  EXPECT_EQ(error_of("a ::= \"x\""), "the grammar has no 'root' rule");
  EXPECT_EQ(error_of("root = \"x\""),
            "line 1, column 6: expected '::=' after rule name 'root', found '='");
  EXPECT_EQ(error_of("root ::= \"x\"\nroot ::= \"y\""),
            "line 2, column 1: rule 'root' is defined twice");
  EXPECT_EQ(error_of("root ::= (\"x\""),
            "line 1, column 10: expected ')' to close the '(' opened here");
  EXPECT_EQ(error_of("root ::= * \"x\""), "line 1, column 10: '*' has nothing before it to repeat");
  EXPECT_EQ(error_of("root ::= \"\\q\""), "line 1, column 11: unknown escape '\\q'");
  EXPECT_EQ(error_of("root ::= [z-a]"),
            "line 1, column 10: character range with its end before its start");
  EXPECT_EQ(error_of("root ::= \"a\"{3,2}"), "line 1, column 13: repetition {m,n} with n < m");
  EXPECT_EQ(error_of("root ::= \"a\"{99999}"),
            "line 1, column 14: repetition count above the limit of 10000");
  EXPECT_EQ(error_of("root ::= []"), "line 1, column 10: empty character class");
  EXPECT_EQ(error_of("root ::= \"a\" )"), "line 1, column 14: unexpected ')' in rule 'root'");
  EXPECT_EQ(error_of("root ::= \"\\x4\""), "line 1, column 14: expected 2 hex digits, found '\"'");
  EXPECT_EQ(error_of("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]"),
            "rule 'expr' is left recursive (expr -> expr)");
  EXPECT_EQ(error_of("root ::= a\na ::= b? c\nb ::= \"x\"\nc ::= a \"y\" | \"z\""),
            "rule 'a' is left recursive (a -> c -> a)");
  EXPECT_EQ(error_of(""), "the grammar has no 'root' rule");
}

TEST(GrammarParse, DeepNestingIsAnErrorNotACrash) {
  const std::string deep =
      "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  EXPECT_NE(error_of(deep).find("nested deeper than 128"), std::string::npos);
  // A long chain of rules is fine (no recursion in the matcher's expansion).
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 5000; ++i) {
    chain.append("r").append(std::to_string(i)).append(" ::= r");
    chain.append(std::to_string(i + 1)).append("\n");
  }
  chain += "r5000 ::= \"end\"\n";
  GrammarMatcher m(compile(chain));
  EXPECT_TRUE(m.matches("end"));
}

TEST(GrammarParse, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  const std::string alphabet = "root::= \"ab|()[]^-*+?{},.\\x#\n09az";
  for (int i = 0; i < 3000; ++i) {
    std::string text = "root ::= ";
    const int n = int(rng() % 24);
    for (int k = 0; k < n; ++k) text += alphabet[rng() % alphabet.size()];
    try {
      GrammarMatcher m(compile(text));
      m.accepts_prefix("ab(");
    } catch (const GrammarError&) {
    }
  }
}

TEST(GrammarParse, ToStringRoundTrips) {
  // The printed grammar parses again and matches the same language.
  const Grammar g = parse_grammar(kJson);
  GrammarMatcher a(std::make_shared<const Grammar>(g));
  GrammarMatcher b(compile(g.to_string()));
  for (const char* s : {"{}", R"({"a": [1, -2.5e+3, "x\n"]})", "{\"a\":}", "[]", "{\"\\q\"}"})
    EXPECT_EQ(a.matches(s), b.matches(s)) << s;
}

/// The mask equals checking every token's bytes one by one through the matcher.
TEST(GrammarTokens, MaskEqualsBruteForce) {
  std::vector<std::string> pieces = {
      "{",  "}",        "\"",       "\"a", "a", "ab",  "abc", " ",    "\n",   ":",    "1",
      "12", "-",        ".",        "e",   ",", "[",   "]",   "true", "null", "\xC3", "\xA9",
      "é",  "\xF0\x9F", "\x98\x80", "😀\"", "",  "{\"", "\":", "\\",   "\\n",  "x\"}", "</s>"};
  const int32_t eos = int32_t(pieces.size()) - 1;
  auto trie = std::make_shared<const TokenTrie>(pieces, std::vector<int32_t>{eos});
  auto g = compile(kJson);
  GrammarTokens gt(g, trie);
  GrammarMatcher ref(g);
  std::string text;
  std::mt19937 rng(3);
  for (int step = 0; step < 200; ++step) {
    const auto& mask = gt.mask();
    const auto st = ref.step(ref.start(), text);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < trie->n_vocab(); ++id) {
      const bool want = id == eos ? ref.accepting(st)
                                  : !pieces[size_t(id)].empty() &&
                                        ref.step(st, pieces[size_t(id)]) != GrammarMatcher::kDead;
      const bool got = (mask[size_t(id) >> 6] >> (id & 63)) & 1;
      ASSERT_EQ(got, want) << "token '" << pieces[size_t(id)] << "' after '" << text << "'";
      ASSERT_EQ(gt.allows(id), want);
      if (want) allowed.push_back(id);
    }
    ASSERT_FALSE(allowed.empty()) << text;
    const int32_t pick = allowed[rng() % allowed.size()];
    if (pick == eos) break;
    gt.accept(pick);
    text += pieces[size_t(pick)];
  }
  EXPECT_THROW(gt.accept(26), GrammarError);  // the empty piece is never allowed
}

}  // namespace
