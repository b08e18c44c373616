// test_cli.cpp — the kvrun binary end to end on the stories260K fixture: completion mode (-p,
// -f, piped stdin, --json, sampling seeds, stop reasons, errors) and the chat REPL with piped
// input (-i): /save and /load, /reset, /stats, damaged save files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace kvrun {
namespace {

using nlohmann::json;

constexpr const char* kModel = "models/stories260K-F32.gguf";
constexpr const char* kPrompt = "Once upon a time";

/// `s` quoted for /bin/sh.
std::string q(const std::string& s) { return test::shell_quote(s); }

/// The kvrun command line with the fixture model and `args`.
std::string kvrun(const std::string& args) {
  return q(test::kvrun_binary()) + " -m " + q(test::fixture(kModel).string()) + " " + args;
}

void write_file(const std::filesystem::path& p, const std::string& data) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << data;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

/// Runs kvrun with `args` and --json; expects exit 0 and one JSON object on stdout.
json run_json(const std::string& args) {
  const auto r = test::run_command(kvrun(args + " --json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << r.out;
  return j.is_discarded() ? json::object() : j;
}

std::vector<int32_t> ints(const json& j) { return j.get<std::vector<int32_t>>(); }

TEST(Cli, TextModeStreamsTheSameContinuationAsJson) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const std::string args = "-p " + q(kPrompt) + " -n 24 --temp 0";
  const auto r = test::run_command(kvrun(args));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = run_json(args);
  const std::string text = j.at("text");
  ASSERT_FALSE(text.empty());
  EXPECT_NE(text.find_first_not_of(" \n"), std::string::npos) << "blank continuation";
  EXPECT_EQ(r.out, text + "\n");  // the continuation, then one newline
  ASSERT_EQ(j.at("tokens").size(), 24u);
  // The timings line on stderr, with the same counts as the JSON run.
  const std::string prompt_n = std::to_string(j.at("prompt_tokens").size());
  EXPECT_NE(r.err.find("kvrun: prompt " + prompt_n + " tokens in "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("| generation 24 tokens in "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" t/s)"), std::string::npos) << r.err;
}

TEST(Cli, FileAndPipedStdinGiveTheSameTokensAsPrompt) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  const auto file = dir / "prompt.txt";
  write_file(file, kPrompt);  // no trailing newline: the prompt is taken verbatim
  const std::string gen = " -n 20 --temp 0";
  const json from_p = run_json("-p " + q(kPrompt) + gen);
  const json from_f = run_json("-f " + q(file.string()) + gen);
  const auto piped = test::run_command("cat " + q(file.string()) + " | " + kvrun(gen + " --json"));
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  const json from_stdin = json::parse(piped.out);
  ASSERT_EQ(from_p.at("tokens").size(), 20u);
  EXPECT_EQ(from_f.at("prompt_tokens"), from_p.at("prompt_tokens"));
  EXPECT_EQ(from_stdin.at("prompt_tokens"), from_p.at("prompt_tokens"));
  EXPECT_EQ(from_f.at("tokens"), from_p.at("tokens"));
  EXPECT_EQ(from_stdin.at("tokens"), from_p.at("tokens"));
  EXPECT_EQ(from_stdin.at("text"), from_p.at("text"));
  // Text mode from stdin streams the same continuation.
  const auto text = test::run_command(kvrun(gen) + " < " + q(file.string()));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out, from_p.at("text").get<std::string>() + "\n");
}

// Every token of the vocabulary in --n-probs, byte tokens (<0x80> … <0xFF>, pieces that are not
// UTF-8 on their own) included: the JSON stays valid, such bytes become U+FFFD, ids stay exact.
TEST(Cli, JsonWithByteTokenPiecesStaysValid) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const json j = run_json("-p " + q(kPrompt) + " --temp 0 -n 2 --n-probs 512");
  ASSERT_EQ(j["probs"].size(), 2u);
  ASSERT_EQ(j["probs"][0].size(), 512u);
  std::vector<int32_t> ids;
  bool replaced = false;
  for (const auto& p : j["probs"][0]) {
    ids.push_back(p["id"].get<int32_t>());
    replaced |= p["token"].get<std::string>().find("\xEF\xBF\xBD") != std::string::npos;
  }
  std::sort(ids.begin(), ids.end());
  for (int32_t i = 0; i < 512; ++i) ASSERT_EQ(ids[size_t(i)], i) << "every id once";
  EXPECT_TRUE(replaced) << "a lone byte token is written as U+FFFD";
}

TEST(Cli, JsonFieldsAndInvariants) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  constexpr int kN = 16, kK = 5;
  const json j = run_json("-p " + q(kPrompt) + " --temp 0 -n " + std::to_string(kN) +
                          " --n-probs " + std::to_string(kK));
  for (const char* key : {"prompt_tokens", "tokens", "text", "stop", "timings", "probs"})
    ASSERT_TRUE(j.contains(key)) << key << " missing in " << j.dump();
  const auto prompt = ints(j["prompt_tokens"]);
  const auto tokens = ints(j["tokens"]);
  ASSERT_FALSE(prompt.empty());
  EXPECT_EQ(prompt[0], 1) << "a llama (SPM) prompt starts with BOS";
  ASSERT_EQ(tokens.size(), size_t(kN));
  EXPECT_EQ(j["stop"], "limit");
  for (int32_t t : tokens) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 512);  // n_vocab
  }
  const json& tm = j["timings"];
  for (const char* key : {"prompt_n", "prompt_ms", "prompt_tps", "gen_n", "gen_ms", "gen_tps"})
    ASSERT_TRUE(tm.contains(key)) << key;
  EXPECT_EQ(tm["prompt_n"], prompt.size());
  EXPECT_EQ(tm["gen_n"], kN);
  EXPECT_GT(tm["prompt_ms"].get<double>(), 0.0);
  EXPECT_GT(tm["gen_ms"].get<double>(), 0.0);
  EXPECT_GT(tm["prompt_tps"].get<double>(), 0.0);
  EXPECT_GT(tm["gen_tps"].get<double>(), 0.0);

  const json& probs = j["probs"];
  ASSERT_EQ(probs.size(), size_t(kN));
  std::string top_text;
  for (size_t i = 0; i < probs.size(); ++i) {
    SCOPED_TRACE("position " + std::to_string(i));
    ASSERT_EQ(probs[i].size(), size_t(kK));
    std::set<int32_t> ids;
    double mass = 0;
    for (size_t k = 0; k < probs[i].size(); ++k) {
      const json& p = probs[i][k];
      ASSERT_TRUE(p.contains("id") && p.contains("token") && p.contains("logprob")) << p.dump();
      const double lp = p["logprob"];
      EXPECT_LE(lp, 0.0);
      EXPECT_TRUE(std::isfinite(lp));
      if (k > 0) {
        EXPECT_LE(lp, probs[i][k - 1]["logprob"].get<double>()) << "not sorted";
      }
      ids.insert(p["id"].get<int32_t>());
      mass += std::exp(lp);
    }
    EXPECT_EQ(ids.size(), size_t(kK)) << "duplicate ids";
    EXPECT_LE(mass, 1.0 + 1e-4);
    EXPECT_EQ(probs[i][0]["id"].get<int32_t>(), tokens[i]) << "greedy picks the top token";
    top_text += probs[i][0]["token"].get<std::string>();
  }
  EXPECT_EQ(top_text, j["text"].get<std::string>()) << "the top pieces spell the text";

  // Without --n-probs there is no "probs" key; the tokens are the same.
  const json plain = run_json("-p " + q(kPrompt) + " --temp 0 -n " + std::to_string(kN));
  EXPECT_FALSE(plain.contains("probs"));
  EXPECT_EQ(plain["tokens"], j["tokens"]);
}

TEST(Cli, StopReasons) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const json limit = run_json("-p " + q(kPrompt) + " --temp 0 -n 7");
  EXPECT_EQ(limit["stop"], "limit");
  EXPECT_EQ(limit["tokens"].size(), 7u);

  // A small context fills up before the limit (-n larger than the context).
  for (const std::string extra : {"--ignore-eos", "--ignore-eos -n 500"}) {
    SCOPED_TRACE(extra);
    const json full = run_json("-p " + q(kPrompt) + " --temp 0 -c 40 " + extra);
    EXPECT_EQ(full["stop"], "context_full");
    const size_t held = full["prompt_tokens"].size() + full["tokens"].size();
    // The context holds 40 tokens; the last sampled one need not be evaluated.
    EXPECT_GE(held, 40u);
    EXPECT_LE(held, 41u);
  }
}

TEST(Cli, DefaultContextIsTheTrainingContextAndLargerOneWarns) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  // Default: min(4096, n_ctx_train = 128), no warning.
  const auto def = test::run_command(kvrun("-p " + q(kPrompt) + " --temp 0 --ignore-eos --json"));
  ASSERT_EQ(def.exit_code, 0) << def.err;
  EXPECT_EQ(def.err.find("warning"), std::string::npos) << def.err;
  const json j = json::parse(def.out);
  EXPECT_EQ(j["stop"], "context_full");
  const size_t held = j["prompt_tokens"].size() + j["tokens"].size();
  EXPECT_GE(held, 128u);
  EXPECT_LE(held, 129u);
  // Beyond n_ctx_train: a warning on stderr, and it still runs.
  const auto big = test::run_command(kvrun("-p " + q(kPrompt) + " --temp 0 -n 4 -c 256"));
  ASSERT_EQ(big.exit_code, 0) << big.err;
  EXPECT_NE(big.err.find("kvrun: warning:"), std::string::npos) << big.err;
  EXPECT_NE(big.err.find("128"), std::string::npos) << big.err;
  EXPECT_GT(big.out.size(), 1u);
}

TEST(Cli, SameSeedSameTokensOtherSeedOtherTokens) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const std::string args = "-p " + q(kPrompt) + " --temp 0.8 -n 100 --ignore-eos -s ";
  const json a = run_json(args + "42");
  const json b = run_json(args + "42");
  const json c = run_json(args + "4242");
  ASSERT_EQ(a["tokens"].size(), 100u);
  EXPECT_EQ(a["tokens"], b["tokens"]);
  EXPECT_EQ(a["text"], b["text"]);
  // 100 tokens at temperature 0.8: two seeds agreeing on all of them is vanishingly unlikely.
  EXPECT_NE(a["tokens"], c["tokens"]);
}

TEST(Cli, PromptLongerThanTheContextIsAnError) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const auto r = test::run_command(
      kvrun("-c 8 -p " + q("Once upon a time there was a little girl named Lily who loved")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("kvrun: error: ", 0), 0u) << r.err;
  EXPECT_EQ(count_of(r.err, "\n"), 1u) << "one line: " << r.err;
  EXPECT_NE(r.err.find("context"), std::string::npos) << r.err;
}

// Progress lines (issue 24): loading the weights and a prefill longer than -b. They show on a
// terminal only; KVRUN_PROGRESS=1 forces them (as a log would), --log-disable silences them, and
// they never reach stdout.
TEST(Cli, ProgressLinesForLoadingAndLongPrefill) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const std::string args = "-p " + q("Once upon a time there was a little girl who liked to play") +
                           " -n 2 -b 4 --temp 0";
  const auto quiet = test::run_command(kvrun(args));
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err.find("loading model"), std::string::npos) << "stderr is not a terminal";
  const auto shown = test::run_command("KVRUN_PROGRESS=1 " + kvrun(args));
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_EQ(shown.out, quiet.out);
  EXPECT_NE(shown.err.find("loading model 100% (1.0/1.0 MiB)"), std::string::npos) << shown.err;
  EXPECT_NE(shown.err.find("prompt 100% (19/19 tokens)"), std::string::npos) << shown.err;
  const auto off = test::run_command("KVRUN_PROGRESS=1 " + kvrun(args + " --log-disable"));
  EXPECT_EQ(off.err.find("loading model"), std::string::npos) << off.err;
  EXPECT_EQ(off.err.find("prompt 100%"), std::string::npos) << off.err;
}

TEST(Cli, MissingOrUnusableModelIsAnError) {
  test::TempDir dir;
  const std::string missing = (dir / "no-such-model.gguf").string();
  const auto r = test::run_command(q(test::kvrun_binary()) + " -m " + q(missing) + " -p hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;

  const auto not_model = dir / "not-a-model.gguf";
  write_file(not_model, "this is not a GGUF file\n");
  const auto r2 =
      test::run_command(q(test::kvrun_binary()) + " -m " + q(not_model.string()) + " -p hi");
  EXPECT_EQ(r2.exit_code, 1);
  EXPECT_EQ(r2.out, "");
  EXPECT_EQ(r2.err.rfind("kvrun: error: ", 0), 0u) << r2.err;
  EXPECT_EQ(count_of(r2.err, "\n"), 1u) << "one line: " << r2.err;
}

// Device flags (-ngl, -dev, --list-devices, -nkvo) are parsed and checked in every command; a
// build without a GPU backend behind the seam refuses -ngl N > 0 with one line and exit 2.
// (`kvrun info -ngl N` plans without a GPU too: tests/test_gpu_plan.cpp.)
/// A shell prefix that hides every GPU from the command after it (no CUDA device, no Vulkan
/// driver), so the tests of a machine without one also run where one is (a GPU lease).
const std::string kNoGpu = "env CUDA_VISIBLE_DEVICES= VK_ICD_FILENAMES=/nonexistent/icd.json ";

TEST(Cli, NglWithoutAGpuIsOneLineAndExit2InEveryCommand) {
  const std::string m = " -m " + q(test::fixture(kModel).string());
  const std::string bin = kNoGpu + q(test::kvrun_binary());
  for (const std::string& cmd :
       {bin + m + " -p hi -n 1 -ngl 99", bin + m + " -p hi -n 1 -ngl all",
        bin + m + " -p hi -n 1 -ngl 1 -dev CUDA0", bin + " serve" + m + " -ngl 99",
        bin + " bench" + m + " -ngl 99", bin + " perplexity" + m + " -f /dev/null -ngl 99",
        bin + " batch" + m + " -ngl 99 -i /dev/null -o /dev/null", bin + m + " -p hi -n 1 -ngl abc",
        bin + m + " -p hi -n 1 -ngl=-3"}) {
    SCOPED_TRACE(cmd);
    const auto r = test::run_command(cmd);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err.rfind("kvrun: -", 0), 0u) << r.err;  // names the flag: -ngl or -dev
    EXPECT_EQ(count_of(r.err, "\n"), 1u) << "one line: " << r.err;
  }
}

TEST(Cli, NglAutoAndZeroRunOnTheCpuAsWithout) {
  const json ref = run_json("-p " + q(kPrompt) + " -n 8 --temp 0");
  for (const char* flags : {"-ngl auto", "-ngl 0", "-ngl 0 -nkvo", "-ngl auto -dev none"}) {
    const json j = run_json("-p " + q(kPrompt) + " -n 8 --temp 0 " + std::string(flags));
    EXPECT_EQ(j["tokens"], ref["tokens"]) << flags;
  }
}

// -ot as llama.cpp spells it: rules kvrun can honour run (a layer's FFN on the CPU, where it
// already is: the same tokens); a malformed rule, a bad regex or an unknown device is one line
// naming -ot and exit 2 before anything loads; a rule that matches a tensor outside a layer's
// FFN is a load error naming the rule and the tensor.
TEST(Cli, OverrideTensorRunsOrSaysWhyNot) {
  const std::string gen = "-p " + q(kPrompt) + " -n 8 --temp 0";
  const json ref = run_json(gen);
  const json j = run_json(gen + " -ot ffn_up=CPU --override-tensor 'blk\\.0\\.ffn_down=cpu'");
  EXPECT_EQ(j["tokens"], ref["tokens"]);
  const std::string base = q(test::kvrun_binary()) + " -m " + q(test::fixture(kModel).string());
  for (const char* bad : {"-ot ffn_up", "-ot =CPU", "-ot 'ffn_(=CPU'", "-ot ffn_up=NoSuchGpu0",
                          "-ot ffn_up=CPU,attn"}) {
    SCOPED_TRACE(bad);
    const auto r = test::run_command(base + " -p hi -n 1 " + bad);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err.rfind("kvrun: -ot ", 0), 0u) << r.err;
    EXPECT_EQ(count_of(r.err, "\n"), 1u) << "one line: " << r.err;
  }
  const auto r = test::run_command(base + " -p hi -n 1 -ot attn_q=CPU");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("-ot attn_q=CPU: matches blk.0.attn_q.weight"), std::string::npos) << r.err;
}

TEST(Cli, ListDevicesSaysNoGpuAndExits0) {
  const auto r = test::run_command(kNoGpu + q(test::kvrun_binary()) + " --list-devices");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("no GPU devices"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CPU"), std::string::npos) << r.out;
  const auto s = test::run_command(kNoGpu + q(test::kvrun_binary()) + " serve -m " +
                                   q(test::fixture(kModel).string()) + " --list-devices");
  EXPECT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(s.out, r.out);
}

TEST(Cli, ChatTemplateListNamesTheFamilies) {
  const auto r = test::run_command(q(test::kvrun_binary()) + " --chat-template list");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> names;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) names.insert(line);
  EXPECT_TRUE(names.count("chatml")) << r.out;
  EXPECT_TRUE(names.count("llama3.1")) << r.out;
  EXPECT_FALSE(names.count("list"));
}

TEST(Cli, UnknownChatTemplateIsAnErrorInTheRepl) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const auto r = test::run_command("printf 'hello\\n' | " +
                                   kvrun("-i --chat-template no-such-template -n 4 --temp 0"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("kvrun: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no-such-template"), std::string::npos) << r.err;
}

TEST(Cli, UnknownChatTemplateIsAnErrorInCompletionMode) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const auto r =
      test::run_command(kvrun("-p hello --chat-template no-such-template -n 4 --temp 0"));
  EXPECT_EQ(r.exit_code, 1) << "an unknown template name must not be ignored; stdout: " << r.out;
  EXPECT_NE(r.err.find("no-such-template"), std::string::npos) << r.err;
}

// A template file that does not parse, or one that raises, is a clear error naming the template
// line: at start (exit 1) for a parse error or malformed kwargs; on the turn (the REPL goes on)
// for a raise. A file template that renders is used for the chat.
TEST(Cli, ChatTemplateFileErrorsNameTheLine) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  const std::string broken = (dir / "broken.jinja").string();
  std::ofstream(broken) << "{% for m in messages %}\n{{ m.content }}\n{% endfor\n";
  auto r = test::run_command("printf 'hello\\n' | " +
                             kvrun("-i --chat-template " + q(broken) + " -n 4 --temp 0"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("does not parse: line "), std::string::npos) << r.err;
  r = test::run_command(kvrun("-p hi --chat-template chatml --chat-template-kwargs '[1]' -n 2"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--chat-template-kwargs must be a JSON object"), std::string::npos) << r.err;
  const std::string raising = (dir / "raising.jinja").string();
  std::ofstream(raising) << "{% if not shout %}\n{{ raise_exception('set shout') }}\n{% endif %}"
                            "{% for m in messages %}{{ m.content | upper }}{% endfor %}";
  r = test::run_command("printf 'hello\\n' | " +
                        kvrun("-i --chat-template " + q(raising) + " -n 2 --temp 0"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("line 2: set shout"), std::string::npos) << r.err;
  r = test::run_command("printf 'hello\\n' | " +
                        kvrun("-i --chat-template " + q(raising) +
                              " --chat-template-kwargs '{\"shout\": true}' -n 2 --temp 0"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("error"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("chat template " + raising), std::string::npos) << r.err;
}

// ---- the REPL with piped input ----

constexpr const char* kMark = "/--mark--";

/// Runs the REPL (-i) with `inputs`, one per line, a marker command after each; returns the
/// stdout of each input (the text printed between its marker and the previous one), trimmed.
struct ReplRun {
  test::CommandResult result;
  std::vector<std::string> outputs;
};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \n") - b + 1);
}

ReplRun run_repl(const std::string& args, const std::vector<std::string>& inputs) {
  test::TempDir dir;
  std::string script;
  for (const std::string& in : inputs) script += in + "\n" + kMark + "\n";
  write_file(dir / "input.txt", script);
  ReplRun run;
  run.result = test::run_command(kvrun("-i " + args) + " < " + q((dir / "input.txt").string()));
  EXPECT_EQ(run.result.exit_code, 0) << run.result.err;
  const std::string marker = std::string("unknown command or missing argument: ") + kMark;
  const std::string& out = run.result.out;
  size_t start = 0;
  for (size_t p = out.find(marker); p != std::string::npos; p = out.find(marker, start)) {
    run.outputs.push_back(trim(out.substr(start, p - start)));
    start = out.find('\n', p);
    start = start == std::string::npos ? out.size() : start + 1;
  }
  EXPECT_EQ(run.outputs.size(), inputs.size()) << "stdout:\n"
                                               << out << "\nstderr:\n"
                                               << run.result.err;
  run.outputs.resize(inputs.size());
  return run;
}

const std::string kChat = "--chat-template chatml -n 12 --temp 0";
const std::string kPlain = "-n 12 --temp 0";

TEST(CliRepl, SaveThenLoadGivesTheSameNextReply) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  const std::string f = (dir / "chat.kvchat").string();
  for (const std::string& mode : {kChat, kPlain}) {
    SCOPED_TRACE(mode);
    const ReplRun r = run_repl(
        mode, {"Once upon a time", "/save " + f, "The dog", "/load " + f, "The dog", "/stats"});
    const auto& o = r.outputs;
    EXPECT_FALSE(o[0].empty());
    EXPECT_EQ(o[1].rfind("saved ", 0), 0u) << o[1];
    EXPECT_FALSE(o[2].empty());
    EXPECT_EQ(o[3].rfind("loaded ", 0), 0u) << o[3];
    EXPECT_EQ(o[4], o[2]) << "the reply after /load differs from the reply after /save";
    EXPECT_NE(o[5].find("context: "), std::string::npos) << o[5];
    if (mode == kChat) {
      EXPECT_NE(o[5].find("messages: 4"), std::string::npos) << o[5];
    }
    EXPECT_EQ(count_of(r.result.err, "kvrun: error"), 0u) << r.result.err;

    // A new process loading the file continues the same way.
    const ReplRun fresh = run_repl(mode, {"/load " + f, "The dog"});
    EXPECT_EQ(fresh.outputs[0].rfind("loaded ", 0), 0u) << fresh.outputs[0];
    EXPECT_EQ(fresh.outputs[1], o[2]);
  }
}

TEST(CliRepl, ResetThenTheSameInputGivesTheFirstReplyOfAFreshRun) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  for (const std::string& mode : {kChat, kPlain}) {
    SCOPED_TRACE(mode);
    const ReplRun first = run_repl(mode, {"hello"});
    ASSERT_FALSE(first.outputs[0].empty());
    const ReplRun r = run_repl(mode, {"hello", "how are you", "/reset", "/stats", "hello"});
    const auto& o = r.outputs;
    EXPECT_EQ(o[0], first.outputs[0]);
    EXPECT_NE(o[1], "");
    EXPECT_EQ(o[2], "conversation reset");
    EXPECT_NE(o[3].find("context: 0 of 128 tokens | messages: 0"), std::string::npos) << o[3];
    EXPECT_EQ(o[4], first.outputs[0]) << "after /reset the same input gives another reply";
  }
}

TEST(CliRepl, StatsCountsMessagesAndTokens) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  const ReplRun r = run_repl(kChat, {"/stats", "hello", "/stats", "how are you", "/stats"});
  const auto& o = r.outputs;
  EXPECT_NE(o[0].find("context: 0 of 128 tokens | messages: 0"), std::string::npos) << o[0];
  EXPECT_NE(o[2].find("| messages: 2"), std::string::npos) << o[2];
  EXPECT_NE(o[4].find("| messages: 4"), std::string::npos) << o[4];
  auto context_tokens = [](const std::string& s) {
    long long n = -1, m = -1;
    const size_t p = s.find("context: ");
    if (p == std::string::npos || std::sscanf(s.c_str() + p, "context: %lld of %lld", &n, &m) != 2)
      return -1LL;
    return n;
  };
  const long long n1 = context_tokens(o[2]), n2 = context_tokens(o[4]);
  EXPECT_GT(n1, 12) << o[2];  // the rendered prompt and the reply
  EXPECT_GT(n2, n1) << o[4];
  for (const char* s : {"last reply: prompt ", "generation 12 tokens", "KV cache: "})
    EXPECT_NE(o[4].find(s), std::string::npos) << s << " missing in " << o[4];

  // A system prompt is the first message.
  const ReplRun sys =
      run_repl(kChat + " --system " + q("You tell stories."), {"/stats", "hi", "/stats"});
  EXPECT_NE(sys.outputs[0].find("| messages: 1"), std::string::npos) << sys.outputs[0];
  EXPECT_NE(sys.outputs[2].find("| messages: 3"), std::string::npos) << sys.outputs[2];
}

TEST(CliRepl, DamagedOrMissingLoadFileIsAnErrorAndTheReplContinues) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  const auto good = dir / "good.kvchat";
  const ReplRun saved = run_repl(kChat, {"hello", "/save " + good.string()});
  ASSERT_EQ(saved.outputs[1].rfind("saved 2 messages", 0), 0u) << saved.outputs[1];
  const std::string bytes = read_file(good);
  const size_t header_end = bytes.find('\n', bytes.find('\n') + 1);
  ASSERT_NE(header_end, std::string::npos);
  ASSERT_GT(bytes.size(), header_end + 16) << "no KV state after the header";

  // The uninterrupted conversation, for comparison.
  const ReplRun straight = run_repl(kChat, {"hello", "how are you", "/stats"});
  ASSERT_FALSE(straight.outputs[1].empty());

  // The header says one token fewer than the KV state holds.
  const size_t magic_end = bytes.find('\n') + 1;
  json header = json::parse(bytes.substr(magic_end, header_end - magic_end));
  ASSERT_TRUE(header.contains("tokens")) << header.dump();
  header["tokens"].erase(header["tokens"].size() - 1);
  const std::string short_tokens =
      bytes.substr(0, magic_end) + header.dump() + bytes.substr(header_end);

  struct Bad {
    std::string name, data;
    bool name_in_error;  // the error names the file (the KV-state errors do not)
  };
  const std::vector<Bad> bads = {
      {"not_a_chat", "hello world\n", true},
      {"empty", "", true},
      {"damaged_header", "KVRUNCHAT1\n{\"family\": \"chatml\", \"messa\n", true},
      {"header_only", bytes.substr(0, header_end + 1), false},
      {"truncated_state", bytes.substr(0, header_end + 1 + (bytes.size() - header_end - 1) / 2),
       false},
      {"short_tokens", short_tokens, false},
  };
  std::vector<std::string> inputs = {"hello", "/load " + (dir / "missing.kvchat").string()};
  for (const Bad& b : bads) {
    write_file(dir / b.name, b.data);
    inputs.push_back("/load " + (dir / b.name).string());
  }
  inputs.push_back("how are you");
  inputs.push_back("/stats");
  const ReplRun r = run_repl(kChat, inputs);
  const auto& o = r.outputs;
  EXPECT_EQ(o[0], straight.outputs[0]);
  EXPECT_EQ(count_of(r.result.err, "kvrun: error: "), bads.size() + 1) << r.result.err;
  EXPECT_NE(r.result.err.find("missing.kvchat"), std::string::npos) << r.result.err;
  for (const Bad& b : bads) {
    if (b.name_in_error) {
      EXPECT_NE(r.result.err.find(b.name), std::string::npos) << b.name << ": " << r.result.err;
    }
  }
  for (size_t i = 1; i < inputs.size() - 2; ++i)
    EXPECT_EQ(o[i].find("loaded"), std::string::npos) << inputs[i] << ": " << o[i];
  // Nothing changed: the conversation goes on exactly as without the failed loads.
  EXPECT_EQ(o[inputs.size() - 2], straight.outputs[1]);
  auto first_line = [](const std::string& s) { return s.substr(0, s.find('\n')); };
  EXPECT_EQ(first_line(o[inputs.size() - 1]), first_line(straight.outputs[2]));
  EXPECT_NE(o[inputs.size() - 1].find("messages: 4"), std::string::npos) << o[inputs.size() - 1];

  // A file saved in plain completion mode does not load into a chatml conversation.
  const auto plain = dir / "plain.kvchat";
  run_repl(kPlain, {"hello", "/save " + plain.string()});
  const ReplRun mixed = run_repl(kChat, {"/load " + plain.string(), "hello"});
  EXPECT_EQ(mixed.outputs[0].find("loaded"), std::string::npos) << mixed.outputs[0];
  EXPECT_NE(mixed.result.err.find("kvrun: error: "), std::string::npos) << mixed.result.err;
  EXPECT_EQ(mixed.outputs[1], straight.outputs[0]);
}

}  // namespace
}  // namespace kvrun
