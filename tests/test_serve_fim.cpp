// test_serve_fim.cpp — code completion as llama.vim and llama.vscode use `kvrun serve`, checked
// against llama.cpp's server (examples/server: format_infill, n_indent, t_max_predict_ms,
// response_fields, timings):
//  * in process: the FIM prompt's exact token layout (repo-level FIM_REP/FIM_SEP, the `// name`
//    fallback, the prefix/suffix/extra budgets), /v1/completions' suffix = /infill's prompt, and
//    the 400s;
//  * --spm-infill: the suffix-prefix-middle layout in process and through the server's flag;
//  * `samplers` (llama.vim's ["top_k", "top_p", "infill"], the web UI's letters) → the chain,
//    and the 400s for unknown samplers and for those kvrun lacks set on;
//  * end to end on the stories260K fixture (with FIM ids added): /infill with the repo tokens,
//    /v1/completions with suffix and with max_tokens 0, n_indent and t_max_predict_ms (on text a
//    grammar forces, so the newlines are known), response_fields, the timings keys.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "serve_api.h"
#include "serve_fim.h"
#include "serve_process.h"
#include "test_util.h"

namespace kvrun {
namespace {

using nlohmann::json;
using namespace serve_test;
using Tokens = std::vector<int32_t>;

constexpr int32_t kPre = 3, kSuf = 4, kMid = 5, kRep = 6, kSep = 7;  // write_fim_fixture's ids

/// The tokenizer of the FIM fixture (with or without the repo-level tokens).
struct FimTokenizer {
  explicit FimTokenizer(bool repo) {
    write_fim_fixture((dir / "fim.gguf").string(), repo);
    tok = std::make_unique<Tokenizer>(
        Tokenizer::from_gguf(gguf::File::open((dir / "fim.gguf").string())));
  }
  test::TempDir dir;
  std::unique_ptr<Tokenizer> tok;
  Tokens text(const std::string& s) const { return tok->tokenize(s, false, false); }
};

Tokens cat(std::initializer_list<Tokens> parts) {
  Tokens out;
  for (const Tokens& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

tools::FimInput sample_input() {
  tools::FimInput in;
  in.prefix = "Once upon";
  in.suffix = "the end.";
  in.prompt = " a";
  in.extra = {{"a.txt", "Lily"}, {"", "Tom"}};
  return in;
}

constexpr tools::FimBudget kRoomy{512, 4096, 16};

/// The expected end of sample_input()'s prompt, after its extra context: FIM_PRE, the prefix
/// and the prompt, FIM_SUF, the suffix, FIM_MID.
Tokens sample_current_file(const FimTokenizer& t) {
  return cat({{kPre},
              t.text("Once upon"),
              t.tok->tokenize(" a", false, true),
              {kSuf},
              t.text("the end."),
              {kMid}});
}

TEST(ServeFim, RepoLevelLayoutWithRepoAndFileSeparatorTokens) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const FimTokenizer t(true);
  ASSERT_EQ(t.tok->fim_repo(), kRep);
  ASSERT_EQ(t.tok->fim_file_sep(), kSep);
  const int32_t bos = t.tok->bos();
  ASSERT_TRUE(t.tok->add_bos());
  // llama.cpp's format_infill: FIM_REP "myproject\n", FIM_SEP name "\n" text per chunk (a chunk
  // without a name is "tmp"), FIM_SEP "filename\n" for the current file, then PRE/SUF/MID.
  const Tokens want = cat({{bos, kRep},
                           t.text("myproject\n"),
                           {kSep},
                           t.text("a.txt\n"),
                           t.text("Lily"),
                           {kSep},
                           t.text("tmp\n"),
                           t.text("Tom"),
                           {kSep},
                           t.text("filename\n"),
                           sample_current_file(t)});
  EXPECT_EQ(tools::fim_prompt(*t.tok, sample_input(), kRoomy), want);
}

TEST(ServeFim, WithoutRepoTokensChunksAreNameComments) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const FimTokenizer t(false);
  ASSERT_LT(t.tok->fim_repo(), 0);
  const Tokens want =
      cat({{t.tok->bos()}, t.text("// a.txt\nLily\n"), t.text("Tom\n"), sample_current_file(t)});
  EXPECT_EQ(tools::fim_prompt(*t.tok, sample_input(), kRoomy), want);
}

TEST(ServeFim, BudgetsKeepTheEndOfPrefixAndExtraAndTheStartOfSuffix) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const FimTokenizer t(true);
  std::string words;
  for (int i = 0; i < 40; ++i) words += " w" + std::to_string(i);
  tools::FimInput in;
  in.prefix = in.suffix = words;
  in.prompt = " a";
  in.extra = {{"x", words}};
  const Tokens w = t.text(words), prompt = t.tok->tokenize(" a", false, true);
  const Tokens extra =
      cat({{kRep}, t.text("myproject\n"), {kSep}, t.text("x\n"), w, {kSep}, t.text("filename\n")});
  ASSERT_GT(w.size(), 40u);
  const int64_t n_prompt = int64_t(prompt.size());
  ASSERT_LT(n_prompt, 6);
  // n_batch 32, n_ctx 96, n_predict 8: prefix 3·(32/4) = 24, suffix 32/4 − 2 − |prompt|, extra
  // 96 − 32 − 2·8 = 48 tokens.
  const Tokens got = tools::fim_prompt(*t.tok, in, {32, 96, 8});
  const Tokens want = cat({{t.tok->bos()},
                           Tokens(extra.end() - 48, extra.end()),
                           {kPre},
                           Tokens(w.end() - 24, w.end()),
                           prompt,
                           {kSuf},
                           Tokens(w.begin(), w.begin() + (6 - n_prompt)),
                           {kMid}});
  EXPECT_EQ(got, want);
  // n_batch above n_ctx counts as n_ctx (64): prefix 48, suffix 14 − |prompt|, no extra context.
  const Tokens clamped = tools::fim_prompt(*t.tok, in, {4096, 64, 0});
  EXPECT_EQ(Tokens(clamped.begin(), clamped.begin() + 2), Tokens({t.tok->bos(), kPre}));
  EXPECT_EQ(int64_t(clamped.size()),
            1 + 1 + std::min<int64_t>(int64_t(w.size()), 48) + n_prompt + 1 + (14 - n_prompt) + 1);
}

tools::ApiContext context(const Tokenizer& tok) {
  tools::ApiContext ctx;
  ctx.tok = &tok;
  ctx.n_ctx = 256;
  ctx.n_batch = 64;
  ctx.model_name = "m";
  return ctx;
}

TEST(ServeFim, CompletionsSuffixIsTheInfillPrompt) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const FimTokenizer t(true);
  const auto ctx = context(*t.tok);
  const auto oai = tools::parse_completions(
      json::parse(R"({"prompt": "Once upon", "suffix": "the end.", "max_tokens": 4})"), ctx);
  const auto infill = tools::parse_infill(
      json::parse(R"({"input_prefix": "Once upon", "input_suffix": "the end.", "n_predict": 4})"),
      ctx);
  EXPECT_EQ(oai.params.prompt, infill.params.prompt);
  EXPECT_EQ(oai.params.prompt.back(), kMid);
  // Without FIM tokens, or with token ids as the prompt, the suffix is refused by name.
  const Tokenizer plain = Tokenizer::from_gguf(gguf::File::open(test::fixture(kModel).string()));
  try {
    tools::parse_completions(json::parse(R"({"prompt": "a", "suffix": "b"})"), context(plain));
    ADD_FAILURE() << "no error";
  } catch (const tools::ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "suffix");
  }
  EXPECT_THROW(tools::parse_completions(json::parse(R"({"prompt": [1, 2], "suffix": "b"})"), ctx),
               tools::ApiError);
  EXPECT_THROW(tools::parse_infill(json::parse(R"({"input_extra": [{"filename": "a"}]})"), ctx),
               tools::ApiError);  // llama.cpp's server also wants each chunk's text
  EXPECT_THROW(tools::parse_llama_completion(
                   json::parse(R"({"prompt": "a", "response_fields": "content"})"), ctx),
               tools::ApiError);
}

TEST(ServeFim, SpmInfillPutsTheSuffixBeforeThePrefix) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const FimTokenizer t(false);
  // llama.cpp's server with --spm-infill: [BOS] extra FIM_SUF suffix FIM_PRE prefix prompt
  // FIM_MID, the same budgets.
  const Tokens want = cat({{t.tok->bos()},
                           t.text("// a.txt\nLily\n"),
                           t.text("Tom\n"),
                           {kSuf},
                           t.text("the end."),
                           {kPre},
                           t.text("Once upon"),
                           t.tok->tokenize(" a", false, true),
                           {kMid}});
  EXPECT_EQ(tools::fim_prompt(*t.tok, sample_input(), kRoomy, tools::FimOrder::kSpm), want);
  // The server's --spm-infill reaches /infill and /v1/completions' suffix alike.
  auto ctx = context(*t.tok);
  ctx.spm_infill = true;
  const auto infill = tools::parse_infill(
      json::parse(R"({"input_prefix": "Once upon", "input_suffix": "the end.", "n_predict": 4})"),
      ctx);
  const Tokens spm =
      cat({{t.tok->bos(), kSuf}, t.text("the end."), {kPre}, t.text("Once upon"), {kMid}});
  EXPECT_EQ(infill.params.prompt, spm);
  const auto oai = tools::parse_completions(
      json::parse(R"({"prompt": "Once upon", "suffix": "the end.", "max_tokens": 4})"), ctx);
  EXPECT_EQ(oai.params.prompt, spm);
  ctx.spm_infill = false;
  EXPECT_EQ(tools::parse_infill(json::parse(R"({"input_prefix": "Once upon",
      "input_suffix": "the end.", "n_predict": 4})"),
                                ctx)
                .params.prompt,
            cat({{t.tok->bos(), kPre}, t.text("Once upon"), {kSuf}, t.text("the end."), {kMid}}));
}

TEST(ServeFim, SamplersFieldBuildsTheChain) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const FimTokenizer t(false);
  const auto ctx = context(*t.tok);
  using S = SamplerStage;
  const auto chain = [&](const char* body) {
    return tools::parse_llama_completion(json::parse(body), ctx).params.sampling.chain;
  };
  EXPECT_FALSE(chain(R"({"prompt": "a"})").has_value());  // the default chain
  // llama.vim's list; the web UI's letters (d, y, x: off samplers kvrun skips); other spellings.
  EXPECT_EQ(chain(R"({"prompt": "a", "samplers": ["top_k", "top_p", "infill"]})"),
            (std::vector<S>{S::kTopK, S::kTopP, S::kInfill}));
  EXPECT_EQ(chain(R"({"prompt": "a", "samplers": "edkypmxt"})"),
            (std::vector<S>{S::kPenalties, S::kTopK, S::kTopP, S::kMinP, S::kTemperature}));
  EXPECT_EQ(chain(R"({"prompt": "a", "samplers": ["temp", "min-p", "nucleus", "dry"]})"),
            (std::vector<S>{S::kTemperature, S::kMinP, S::kTopP}));
  EXPECT_EQ(chain(R"({"prompt": "a", "samplers": []})"), std::vector<S>{});
  // /infill takes every /completion field.
  EXPECT_EQ(
      tools::parse_infill(json::parse(R"({"input_prefix": "a", "samplers": ["infill"]})"), ctx)
          .params.sampling.chain,
      std::vector<S>{S::kInfill});
  const auto param_of = [&](const char* body) {
    try {
      tools::parse_llama_completion(json::parse(body), ctx);
    } catch (const tools::ApiError& e) {
      EXPECT_EQ(e.status, 400);
      return e.param;
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(param_of(R"({"prompt": "a", "samplers": ["top_k", "mirostat"]})"), "samplers");
  EXPECT_EQ(param_of(R"({"prompt": "a", "samplers": "kq"})"), "samplers");
  EXPECT_EQ(param_of(R"({"prompt": "a", "samplers": [1]})"), "samplers");
  EXPECT_EQ(param_of(R"({"prompt": "a", "samplers": {"top_k": 1}})"), "samplers");
  EXPECT_EQ(param_of(R"({"prompt": "a", "typical_p": 0.5})"), "typical_p");
  EXPECT_EQ(param_of(R"({"prompt": "a", "dry_multiplier": 0.8})"), "dry_multiplier");
  EXPECT_EQ(param_of(R"({"prompt": "a", "xtc_probability": 0.5})"), "xtc_probability");
  EXPECT_EQ(param_of(R"({"prompt": "a", "top_n_sigma": 1.0})"), "top_n_sigma");
  EXPECT_EQ(param_of(R"({"prompt": "a", "mirostat": 2})"), "mirostat");
  EXPECT_EQ(param_of(R"({"prompt": "a", "typical_p": 1, "dry_multiplier": 0, "xtc_probability": 0,
                          "top_n_sigma": -1, "mirostat": 0})"),
            "(accepted)");  // their off values, as the llama.cpp web UI sends them
}

// ---- end to end ----

struct FimServer {
  explicit FimServer(std::vector<std::string> args, bool repo = true) {
    write_fim_fixture((dir / "fim.gguf").string(), repo);
    srv = std::make_unique<ServerProcess>(std::move(args), (dir / "fim.gguf").string());
  }
  test::TempDir dir;
  std::unique_ptr<ServerProcess> srv;
};

size_t n_tokens(httplib::Client& c, const std::string& text) {
  return post_json(c, "/tokenize", {{"content", text}}, 200)["tokens"].size();
}

TEST(ServeFim, InfillUsesTheRepoLayoutAndCompletionsSuffixMatchesIt) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  FimServer f({"-c", "256", "-b", "64"});
  ASSERT_TRUE(f.srv->ok()) << f.srv->log();
  auto c = f.srv->client();
  const json j = post_json(*c, "/infill",
                           {{"input_prefix", "Once upon"},
                            {"input_suffix", "the end."},
                            {"input_extra", {{{"filename", "a.txt"}, {"text", "Lily"}}}},
                            {"n_predict", 4},
                            {"temperature", 0},
                            {"cache_prompt", false}},
                           200);
  // BOS, REP "myproject\n", SEP "a.txt\n" "Lily", SEP "filename\n", PRE, prefix, SUF, suffix, MID.
  EXPECT_EQ(j["tokens_evaluated"], 7 + n_tokens(*c, "myproject\n") + n_tokens(*c, "a.txt\n") +
                                       n_tokens(*c, "Lily") + n_tokens(*c, "filename\n") +
                                       n_tokens(*c, "Once upon") + n_tokens(*c, "the end."))
      << j.dump();
  const json ref = post_json(*c, "/infill",
                             {{"input_prefix", "Once upon"},
                              {"input_suffix", "the end."},
                              {"n_predict", 4},
                              {"temperature", 0}},
                             200);
  const json oai = post_json(
      *c, "/v1/completions",
      {{"prompt", "Once upon"}, {"suffix", "the end."}, {"max_tokens", 4}, {"temperature", 0}},
      200);
  // llama.vim's sampling: top_k, top_p, then llama.cpp's infill sampler.
  const json vim = post_json(*c, "/infill",
                             {{"input_prefix", "Once upon"},
                              {"input_suffix", "the end."},
                              {"n_predict", 4},
                              {"top_k", 40},
                              {"top_p", 0.99},
                              {"samplers", {"top_k", "top_p", "infill"}}},
                             200);
  EXPECT_LE(vim["tokens_predicted"].get<int>(), 4) << vim.dump();
  EXPECT_EQ(oai["usage"]["prompt_tokens"], ref["tokens_evaluated"]) << oai.dump();
  EXPECT_EQ(oai["choices"][0]["text"], ref["content"]) << oai.dump();
  expect_clean_exit(*f.srv);
}

TEST(ServeFim, SpmInfillFlagReachesTheServer) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  FimServer f({"-c", "256", "-b", "64", "--spm-infill"}, false);
  ASSERT_TRUE(f.srv->ok()) << f.srv->log();
  auto c = f.srv->client();
  const json j = post_json(*c, "/infill",
                           {{"input_prefix", "Once upon"},
                            {"input_suffix", "the end."},
                            {"n_predict", 6},
                            {"temperature", 0}},
                           200);
  // The same greedy run from the SPM token sequence written out.
  const auto ids = [&](const std::string& s) {
    return post_json(*c, "/tokenize", {{"content", s}}, 200)["tokens"].get<Tokens>();
  };
  const int32_t bos =
      post_json(*c, "/tokenize", {{"content", "a"}, {"add_special", true}}, 200)["tokens"][0];
  const Tokens spm = cat({{bos, kSuf}, ids("the end."), {kPre}, ids("Once upon"), {kMid}});
  const json ref =
      post_json(*c, "/completion", {{"prompt", spm}, {"n_predict", 6}, {"temperature", 0}}, 200);
  EXPECT_EQ(j["tokens_evaluated"], spm.size()) << j.dump();
  EXPECT_EQ(j["content"], ref["content"]) << j.dump() << ref.dump();
  expect_clean_exit(*f.srv);
}

TEST(ServeFim, MaxTokensZeroEvaluatesThePromptOnly) {
  START_SERVER(srv, "-c", "128");
  auto c = srv.client();
  const std::string story =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.";
  const json body = {{"prompt", story}, {"max_tokens", 0}};
  const json j = post_json(*c, "/v1/completions", body, 200);
  EXPECT_EQ(j["choices"][0]["text"], "") << j.dump();
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 0);
  const json n = post_json(*c, "/completion", {{"prompt", story}, {"n_predict", 0}}, 200);
  EXPECT_EQ(n["tokens_predicted"], 0) << n.dump();
  EXPECT_GT(n["tokens_cached"].get<int>(), 0) << "the first request's prompt was not cached";
  EXPECT_GT(n["timings"]["prompt_ms"].get<double>(), 0) << n.dump();
  // No token was sampled by either request.
  auto m = c->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("kvrun_generated_tokens_total 0\n"), std::string::npos) << m->body;
  expect_clean_exit(srv);
}

/// A /completion body whose output a grammar fixes: `text` then lower-case words.
json forced(const std::string& text) {
  return {{"prompt", "Once"},
          {"grammar", "root ::= \"" + text + "\" [a-z ]*"},
          {"n_predict", 24},
          {"temperature", 0},
          {"return_tokens", true}};
}

TEST(ServeFim, NIndentEndsAtALineIndentedLess) {
  START_SERVER(srv, "-c", "128");
  auto c = srv.client();
  json body = forced(R"( upon\n  a time\n  there\nwas)");
  body["n_indent"] = 2;
  json j = post_json(*c, "/completion", body, 200);
  EXPECT_EQ(j["content"], " upon\n  a time\n  there\n") << j.dump();
  EXPECT_EQ(j["stop_type"], "limit");
  body["n_indent"] = 3;  // the first new line is already below
  j = post_json(*c, "/completion", body, 200);
  EXPECT_EQ(j["content"], " upon\n  ") << j.dump();
  body.erase("n_indent");
  j = post_json(*c, "/completion", body, 200);
  EXPECT_EQ(j["content"].get<std::string>().rfind(" upon\n  a time\n  there\nwas", 0), 0u)
      << j.dump();
  expect_clean_exit(srv);
}

TEST(ServeFim, TMaxPredictMsStopsOnlyAfterANewline) {
  START_SERVER(srv, "-c", "128");
  auto c = srv.client();
  json body = forced(R"( upon a\ntime)");
  body["t_max_predict_ms"] = 0.001;  // any step takes longer
  body["t_max_prompt_ms"] = 500;     // accepted; without effect, as in llama.cpp's server
  json j = post_json(*c, "/completion", body, 200);
  // The limit applies from the token after the one whose text held the newline.
  const auto tokens = j["tokens"].get<Tokens>();
  std::string upto_newline;
  size_t n_nl = 0;
  for (int32_t id : tokens) {
    ++n_nl;
    upto_newline += post_json(*c, "/detokenize", {{"tokens", {id}}}, 200)["content"];
    if (upto_newline.find('\n') != std::string::npos) break;
  }
  EXPECT_EQ(j["tokens_predicted"], n_nl + 1) << j.dump();
  EXPECT_EQ(j["stop_type"], "limit");
  body["grammar"] = "root ::= \" upon a time\" [a-z ]*";  // no newline: no time limit
  j = post_json(*c, "/completion", body, 200);
  EXPECT_GT(j["tokens_predicted"].get<size_t>(), n_nl + 1) << j.dump();
  expect_clean_exit(srv);
}

TEST(ServeFim, ResponseFieldsAndTimingsKeys) {
  START_SERVER(srv, "-c", "128");
  auto c = srv.client();
  json body = {{"prompt", "Once upon a time"},
               {"n_predict", 8},
               {"temperature", 0},
               {"cache_prompt", false}};
  const json full = post_json(*c, "/completion", body, 200);
  const json& t = full["timings"];
  for (const char* k :
       {"prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
        "predicted_ms", "predicted_per_token_ms", "predicted_per_second"})
    EXPECT_TRUE(t.contains(k)) << k << " " << t.dump();
  EXPECT_EQ(t["predicted_n"], 8);
  EXPECT_NEAR(t["predicted_per_token_ms"].get<double>(), t["predicted_ms"].get<double>() / 8, 1e-9);
  EXPECT_NEAR(t["prompt_per_token_ms"].get<double>(),
              t["prompt_ms"].get<double>() / t["prompt_n"].get<double>(), 1e-9);
  body["response_fields"] = {"content", "timings/prompt_n", "timings/predicted_n", "no/such",
                             "tokens_cached"};
  const json some = post_json(*c, "/completion", body, 200);
  EXPECT_EQ(some, json({{"content", full["content"]},
                        {"timings/prompt_n", t["prompt_n"]},
                        {"timings/predicted_n", 8},
                        {"tokens_cached", 0}}))
      << some.dump();
  body["response_fields"] = {""};  // llama.vim's cache warm-up asks for nothing
  EXPECT_EQ(post_json(*c, "/completion", body, 200), json::object());
  expect_clean_exit(srv);
}

}  // namespace
}  // namespace kvrun
