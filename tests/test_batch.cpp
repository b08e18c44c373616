// test_batch.cpp — `kvrun batch`: input parsing (malformed lines, duplicate ids), the output
// file's resume scan (cut-short lines), ordered writing, and the real binary on the stories260K
// fixture: kill -9 and resume, SIGINT, documents longer than the context in every --long mode,
// folder input, and the shared prompt head computed once through the prefix cache.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/model.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "tools/batch/batch_input.h"
#include "tools/batch/batch_job.h"
#include "tools/batch/batch_output.h"

namespace kvrun {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kModel = "models/stories260K-F32.gguf";

/// Shell-quoted `s` (test::shell_quote, test_util.h).
std::string q(const std::string& s) { return test::shell_quote(s); }

/// The `kvrun batch` command line with the fixture model and `args`.
std::string batch_cmd(const std::string& args) {
  return q(test::kvrun_binary()) + " batch -m " + q(test::fixture(kModel).string()) + " -t 1 " +
         args;
}

void write_file(const fs::path& p, const std::string& data) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << data;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// The output's lines, parsed (every line must be complete JSON).
std::vector<json> read_lines(const fs::path& p) {
  std::vector<json> out;
  const std::string data = read_file(p);
  EXPECT_TRUE(data.empty() || data.back() == '\n') << "output ends in a partial line";
  std::istringstream in(data);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << line;
    out.push_back(j);
  }
  return out;
}

/// Short TinyStories-like documents: sentences of the fixture text, `n` of them.
std::vector<std::string> short_docs(size_t n) {
  const std::string text = read_file(test::fixture("text/tinystories_style_kvrun.txt"));
  std::vector<std::string> sentences;
  size_t pos = 0;
  while (sentences.size() < n && pos < text.size()) {
    size_t end = text.find(". ", pos);
    if (end == std::string::npos) break;
    std::string s = text.substr(pos, end + 1 - pos);
    pos = end + 2;
    while (!s.empty() && (s[0] == '\n' || s[0] == ' ')) s.erase(0, 1);
    if (s.size() > 20 && s.size() < 160) sentences.push_back(s);
  }
  return sentences;
}

/// JSON lines of documents "d0", "d1", ... with an extra field.
std::string jsonl_of(const std::vector<std::string>& docs) {
  std::string out;
  for (size_t i = 0; i < docs.size(); ++i) {
    std::string id = "d";  // not "d" + to_string: GCC 12's -Wrestrict false positive
    id += std::to_string(i);
    out += json({{"id", id}, {"text", docs[i]}, {"n", i}}).dump() + "\n";
  }
  return out;
}

// ---- input ----

TEST(BatchInput, MalformedLinesAreReportedWithLineNumbers) {
  const std::string data =
      "{\"id\": \"a\", \"text\": \"one\", \"lang\": \"en\"}\n"
      "not json\n"
      "\n"
      "[1, 2]\n"
      "{\"text\": \"no id\"}\n"
      "{\"id\": 7, \"text\": \"seven\"}\n"
      "{\"id\": \"b\", \"text\": 3}\n"
      "{\"id\": \"a\", \"text\": \"again\"}\n"
      "{\"id\": \"c\", \"text\": \"last, no newline\"}";
  const BatchInput in = parse_batch_jsonl(data);
  ASSERT_EQ(in.docs.size(), 3u);
  EXPECT_EQ(in.docs[0].id, "a");
  EXPECT_EQ(in.docs[0].text, "one");
  EXPECT_EQ(in.docs[0].fields.dump(), R"({"id":"a","lang":"en"})");
  EXPECT_EQ(in.docs[1].id, 7);
  EXPECT_EQ(in.docs[1].line, 6);
  EXPECT_EQ(in.docs[2].id, "c");
  ASSERT_EQ(in.invalid.size(), 4u);
  EXPECT_EQ(in.invalid[0].line, 2);
  EXPECT_EQ(in.invalid[1].line, 4);
  EXPECT_EQ(in.invalid[2].line, 5);
  EXPECT_EQ(in.invalid[3].line, 7);
  ASSERT_EQ(in.duplicates.size(), 1u);
  EXPECT_EQ(in.duplicates[0].line, 8);
  EXPECT_NE(in.duplicates[0].message.find("first on line 1"), std::string::npos);
}

TEST(BatchInput, IntegerAndStringIdsDiffer) {
  const BatchInput in =
      parse_batch_jsonl("{\"id\": 1, \"text\": \"x\"}\n{\"id\": \"1\", \"text\": \"y\"}\n");
  EXPECT_EQ(in.docs.size(), 2u);
  EXPECT_TRUE(in.duplicates.empty());
}

TEST(BatchInput, FolderOfTextFilesSortedByName) {
  test::TempDir dir;
  write_file(dir / "b.txt", "bee");
  write_file(dir / "a.md", "ay");
  write_file(dir / "c.json", "{}");
  fs::create_directory(dir / "d.txt");  // a folder, not a file
  const BatchInput in = read_batch_folder(dir.path());
  ASSERT_EQ(in.docs.size(), 2u);
  EXPECT_EQ(in.docs[0].id, "a.md");
  EXPECT_EQ(in.docs[0].text, "ay");
  EXPECT_EQ(in.docs[1].id, "b.txt");
}

// ---- output ----

TEST(BatchOutput, CutShortFinalLineIsRemoved) {
  test::TempDir dir;
  const std::string good = "{\"id\":\"a\",\"output\":\"x\"}\n{\"id\":2,\"output\":\"y\"}\n";
  write_file(dir / "o.jsonl", good + "{\"id\":\"c\",\"outp");
  const BatchResumeState st = scan_batch_output(dir / "o.jsonl");
  EXPECT_EQ(st.done, (std::set<std::string>{"\"a\"", "2"}));
  EXPECT_EQ(st.n_cut_bytes, 15);
  EXPECT_EQ(read_file(dir / "o.jsonl"), good);
}

TEST(BatchOutput, UnparseableFinalLineIsRemovedMiddleOneIgnored) {
  test::TempDir dir;
  const std::string head = "{\"id\":\"a\"}\ngarbage\n{\"id\":\"b\"}\n";
  write_file(dir / "o.jsonl", head + "{\"id\":\"c\",\n");
  const BatchResumeState st = scan_batch_output(dir / "o.jsonl");
  EXPECT_EQ(st.done, (std::set<std::string>{"\"a\"", "\"b\""}));
  EXPECT_EQ(st.warnings.size(), 1u);
  EXPECT_EQ(read_file(dir / "o.jsonl"), head);
}

TEST(BatchOutput, MissingFileIsEmpty) {
  test::TempDir dir;
  const BatchResumeState st = scan_batch_output(dir / "none.jsonl");
  EXPECT_TRUE(st.done.empty());
  EXPECT_FALSE(fs::exists(dir / "none.jsonl"));
}

TEST(BatchOutput, OrderedWriterWaitsForGaps) {
  test::TempDir dir;
  {
    BatchWriter w(dir / "o.jsonl", true);
    w.put(2, {{"id", 2}});
    w.put(1, {{"id", 1}});
    EXPECT_EQ(w.n_written(), 0);
    w.skip(0);  // failed: no line
    EXPECT_EQ(w.n_written(), 2);
    w.put(4, {{"id", 4}});
    w.flush_all();  // index 3 never came (interrupted): 4 is still written
  }
  EXPECT_EQ(read_file(dir / "o.jsonl"), "{\"id\":1}\n{\"id\":2}\n{\"id\":4}\n");
}

TEST(BatchPrompt, TemplateAndSystem) {
  BatchPromptParams p;
  p.prompt = "Sum: {text} end";
  EXPECT_EQ(batch_prompt_text(p, "X"), "Sum: X end");
  p.system = "Be brief.";
  EXPECT_EQ(batch_prompt_text(p, "X"), "Be brief.\nSum: X end");
  p.prompt = "No placeholder";
  p.system.clear();
  EXPECT_EQ(batch_prompt_text(p, "X"), "No placeholder\n\nX");
}

TEST(BatchPrompt, ChatTemplateWrapsSystemAndUserTurn) {
  BatchPromptParams p;
  p.prompt = "Summarize: {text}";
  p.system = "Be brief.";
  p.chat = kvrun::ChatTemplate::parse(std::string(*kvrun::builtin_chat_template("chatml")),
                                      "chatml", {});
  EXPECT_EQ(batch_prompt_text(p, "X"),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSummarize: "
            "X<|im_end|>\n<|im_start|>assistant\n");
}

// ---- the binary ----

/// Starts `cmd` through /bin/sh (exec'd, so the pid is kvrun's).
pid_t spawn(const std::string& cmd) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

/// Exit status of `pid` (128 + signal when killed).
int wait_for(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

size_t lines_in(const fs::path& p) {
  const std::string s = read_file(p);
  return size_t(std::count(s.begin(), s.end(), '\n'));
}

/// Waits (up to 120 s) until `p` holds `n` lines or `pid` has exited; true when it has them.
bool wait_for_lines(const fs::path& p, size_t n, pid_t pid) {
  for (int i = 0; i < 12000; ++i) {
    if (fs::exists(p) && lines_in(p) >= n) return true;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::map<std::string, json> by_id(const std::vector<json>& lines) {
  std::map<std::string, json> m;
  for (const auto& j : lines) m[j.at("id").dump()] = j;
  return m;
}

TEST(BatchCli, EveryDocumentOnceWithItsFields) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  const auto docs = short_docs(6);
  ASSERT_EQ(docs.size(), 6u);
  write_file(dir / "in.jsonl", jsonl_of(docs));
  const auto r =
      test::run_command(batch_cmd("-i " + q((dir / "in.jsonl").string()) + " -o " +
                                  q((dir / "out.jsonl").string()) + " -np 3 -n 12 --ordered"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = read_lines(dir / "out.jsonl");
  ASSERT_EQ(lines.size(), docs.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const json& j = lines[i];
    EXPECT_EQ(j["id"], "d" + std::to_string(i));  // --ordered: input order
    EXPECT_EQ(j["n"], i);                         // extra field copied
    EXPECT_FALSE(j.contains("text"));
    EXPECT_TRUE(j["output"].is_string());
    EXPECT_GT(j["prompt_tokens"].get<int>(), 0);
    EXPECT_GE(j["completion_tokens"].get<int>(), 1);
    EXPECT_LE(j["completion_tokens"].get<int>(), 12);
    EXPECT_TRUE(j.contains("cached_tokens"));
    EXPECT_TRUE(j.contains("time_ms"));
    EXPECT_TRUE(j["finish_reason"] == "length" || j["finish_reason"] == "eog") << j;
  }
  EXPECT_NE(r.err.find("6 documents done"), std::string::npos) << r.err;

  // A rerun finds everything done and adds nothing.
  const auto again = test::run_command(batch_cmd("-i " + q((dir / "in.jsonl").string()) + " -o " +
                                                 q((dir / "out.jsonl").string()) + " -np 3 -n 12"));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(read_lines(dir / "out.jsonl").size(), docs.size());
  EXPECT_NE(again.err.find("6 already done"), std::string::npos) << again.err;
}

TEST(BatchCli, MalformedAndDuplicateLinesAreCountedNotFatal) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  const auto docs = short_docs(3);
  std::string in = jsonl_of(docs);
  in += "{\"id\": \"broken\", \"text\": \n";                                // line 4
  in += json({{"id", "d1"}, {"text", "the same id again"}}).dump() + "\n";  // line 5
  in += "{\"text\": \"no id\"}\n";                                          // line 6
  write_file(dir / "in.jsonl", in);
  const auto r =
      test::run_command(batch_cmd("-i " + q((dir / "in.jsonl").string()) + " -o " +
                                  q((dir / "out.jsonl").string()) + " -n 8 --progress-interval 0"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // stderr is not a terminal: plain progress lines (every poll with interval 0), up to the end.
  EXPECT_NE(r.err.find("kvrun batch: 3/3 done, "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("docs/s"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);
  EXPECT_NE(r.err.find("in.jsonl:4: malformed line"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("in.jsonl:6: malformed line"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("in.jsonl:5: duplicate id \"d1\" (first on line 2)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("2 malformed lines, 1 duplicate ids"), std::string::npos) << r.err;
  const auto out = by_id(read_lines(dir / "out.jsonl"));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out.count("\"d1\""));
  EXPECT_FALSE(out.count("\"broken\""));
}

TEST(BatchCli, ResumeAfterKill9GivesTheUninterruptedOutputs) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  const auto docs = short_docs(12);
  ASSERT_EQ(docs.size(), 12u);
  write_file(dir / "in.jsonl", jsonl_of(docs));
  const std::string common = " -i " + q((dir / "in.jsonl").string()) + " -n 16 --temp 0 -np 2";
  const auto ref = test::run_command(batch_cmd(common + " -o " + q((dir / "ref.jsonl").string())));
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const auto expected = by_id(read_lines(dir / "ref.jsonl"));
  ASSERT_EQ(expected.size(), 12u);

  const fs::path out = dir / "out.jsonl";
  const pid_t pid = spawn(batch_cmd(common + " -o " + q(out.string())) + " 2>/dev/null");
  const bool got = wait_for_lines(out, 2, pid);
  ::kill(pid, SIGKILL);
  const int status = wait_for(pid);
  if (got) {
    EXPECT_EQ(status, 128 + SIGKILL);
  }
  const size_t before = lines_in(out);
  ASSERT_GE(before, 2u);
  ASSERT_LT(before, 12u) << "the run ended before the kill: nothing was resumed";
  // And a line torn by a crash in the middle of a write.
  { std::ofstream(out, std::ios::app) << "{\"id\":\"d11\",\"output\":\"Once up"; }

  const auto resumed = test::run_command(batch_cmd(common + " -o " + q(out.string())));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("cut short"), std::string::npos) << resumed.err;
  const auto lines = read_lines(out);
  ASSERT_EQ(lines.size(), 12u);
  const auto got_by_id = by_id(lines);
  ASSERT_EQ(got_by_id.size(), 12u);  // every id exactly once
  for (const auto& [id, j] : expected) {
    ASSERT_TRUE(got_by_id.count(id)) << id;
    EXPECT_EQ(got_by_id.at(id)["output"], j["output"]) << id;
    EXPECT_EQ(got_by_id.at(id)["completion_tokens"], j["completion_tokens"]) << id;
  }
}

TEST(BatchCli, SigintStopsCleanly) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  std::vector<std::string> docs;
  const auto base = short_docs(12);
  for (int rep = 0; rep < 20; ++rep)
    for (const auto& d : base) docs.push_back(d);
  write_file(dir / "in.jsonl", jsonl_of(docs));
  const fs::path out = dir / "out.jsonl";
  const pid_t pid =
      spawn(batch_cmd("-i " + q((dir / "in.jsonl").string()) + " -o " + q(out.string()) +
                      " -n 32 -np 2 2>" + q((dir / "err.txt").string())));
  ASSERT_TRUE(wait_for_lines(out, 1, pid)) << read_file(dir / "err.txt");
  ::kill(pid, SIGINT);
  EXPECT_EQ(wait_for(pid), 130) << read_file(dir / "err.txt");
  const std::string err = read_file(dir / "err.txt");
  EXPECT_NE(err.find("interrupted:"), std::string::npos) << err;
  const auto lines = read_lines(out);  // whole lines only
  EXPECT_GE(lines.size(), 1u);
  EXPECT_LT(lines.size(), docs.size());
  EXPECT_EQ(by_id(lines).size(), lines.size());
}

/// A document far longer than the fixture's 128-token context.
std::string long_doc() {
  const std::string text = read_file(test::fixture("text/tinystories_style_kvrun.txt"));
  return text.substr(0, 1500);
}

json run_long(const test::TempDir& dir, const std::string& mode, std::string* err = nullptr) {
  write_file(dir / "in.jsonl", json({{"id", "long"}, {"text", long_doc()}}).dump() + "\n" +
                                   json({{"id", "short"}, {"text", "Tom had a red ball."}}).dump() +
                                   "\n");
  const fs::path out = dir / ("out_" + mode + ".jsonl");
  const auto r = test::run_command(batch_cmd("-i " + q((dir / "in.jsonl").string()) + " -o " +
                                             q(out.string()) + " -n 16 -c 128 --long " + mode));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (err) *err = r.err;
  auto m = by_id(read_lines(out));
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(m["\"short\""]["finish_reason"] == "skipped", false);
  return m["\"long\""];
}

TEST(BatchCli, LongDocumentSplitIsMapReduced) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  std::string err;
  const json j = run_long(dir, "split", &err);
  ASSERT_TRUE(j.is_object());
  EXPECT_GE(j["chunks"].get<int>(), 4) << j;  // ~400 tokens in chunks under 112
  EXPECT_TRUE(j["output"].is_string());
  EXPECT_NE(j["finish_reason"], "skipped");
  // Map requests plus at least one reduce request: more tokens than any single prompt can hold.
  EXPECT_GT(j["prompt_tokens"].get<int>(), 128);
  EXPECT_GT(j["completion_tokens"].get<int>(), 16);
  EXPECT_NE(err.find("1 split"), std::string::npos) << err;
}

TEST(BatchCli, LongDocumentTruncateKeepsTheHead) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  const json j = run_long(dir, "truncate");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["truncated"], true);
  EXPECT_FALSE(j.contains("chunks"));
  EXPECT_LE(j["prompt_tokens"].get<int>(), 128 - 16);  // one request within the budget
  EXPECT_GT(j["prompt_tokens"].get<int>(), 64);        // filled with the head of the document
  EXPECT_TRUE(j["output"].is_string());
}

TEST(BatchCli, LongDocumentSkipIsReported) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  std::string err;
  const json j = run_long(dir, "skip", &err);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["finish_reason"], "skipped");
  EXPECT_TRUE(j["output"].is_null());
  EXPECT_EQ(j["completion_tokens"], 0);
  EXPECT_NE(j["error"].get<std::string>().find("tokens"), std::string::npos);
  EXPECT_NE(err.find("1 skipped"), std::string::npos) << err;
}

TEST(BatchCli, FolderInput) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  fs::create_directory(dir / "docs");
  const auto docs = short_docs(3);
  write_file(dir / "docs" / "b.txt", docs[0]);
  write_file(dir / "docs" / "a.md", docs[1]);
  write_file(dir / "docs" / "c.txt", docs[2]);
  write_file(dir / "docs" / "notes.json", "{}");
  const auto r =
      test::run_command(batch_cmd("-i " + q((dir / "docs").string()) + " -o " +
                                  q((dir / "out.jsonl").string()) + " -n 8 --ordered -np 2"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = read_lines(dir / "out.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["id"], "a.md");
  EXPECT_EQ(lines[1]["id"], "b.txt");
  EXPECT_EQ(lines[2]["id"], "c.txt");
}

/// Number after `label` in `s` (e.g. "(123 computed"), or -1.
int64_t number_before(const std::string& s, const std::string& label) {
  const size_t at = s.find(label);
  if (at == std::string::npos) return -1;
  size_t b = at;
  while (b > 0 && std::isdigit(static_cast<unsigned char>(s[b - 1]))) --b;
  return b == at ? -1 : std::stoll(s.substr(b, at - b));
}

TEST(BatchCli, SharedPromptHeadIsComputedOnce) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  test::TempDir dir;
  // Documents that differ from their first word on, behind a long shared head.
  const std::vector<std::string> docs = {"Tom had a red ball.",     "Lily saw a big dog.",
                                         "Max ran to the park.",    "Sue ate a sweet cake.",
                                         "Ben found a shiny rock.", "Anna made a paper boat.",
                                         "Sam lost his blue hat.",  "Mia drew a happy sun."};
  write_file(dir / "in.jsonl", jsonl_of(docs));
  const std::string system =
      "You are a kind helper. You read short stories for little children and you tell what "
      "happened in one short and simple sentence.";
  const std::string prompt = "Summarize the story below.\\n\\n{text}";
  const auto r = test::run_command(batch_cmd("-i " + q((dir / "in.jsonl").string()) + " -o " +
                                             q((dir / "out.jsonl").string()) +
                                             " -n 8 -np 4 --kv-block-size 16 --ordered" +
                                             " --system " + q(system) + " --prompt " + q(prompt)));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = read_lines(dir / "out.jsonl");
  ASSERT_EQ(lines.size(), docs.size());

  // The shared head in tokens, from the model's tokenizer: the common prefix of two prompts.
  const Model model = Model::load(test::fixture(kModel).string());
  const Tokenizer tok = Tokenizer::from_gguf(model.file());
  BatchPromptParams pp;
  pp.system = system;
  pp.prompt = "Summarize the story below.\n\n{text}";
  const auto a = tok.tokenize(batch_prompt_text(pp, docs[0]), true, true);
  const auto b = tok.tokenize(batch_prompt_text(pp, docs[1]), true, true);
  size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
  const int64_t shared_blocks_tokens = int64_t(common / 16 * 16);
  ASSERT_GE(shared_blocks_tokens, 32) << "the test needs a head of at least two blocks";

  int64_t computed = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const json& j = lines[i];
    EXPECT_EQ(j["prompt_tokens"].get<int64_t>(),
              int64_t(tok.tokenize(batch_prompt_text(pp, docs[i]), true, true).size()));
    // The first document computes the head; every other one takes all its full blocks.
    EXPECT_EQ(j["cached_tokens"].get<int64_t>(), i == 0 ? 0 : shared_blocks_tokens) << j;
    computed += j["prompt_tokens"].get<int64_t>() - j["cached_tokens"].get<int64_t>();
  }
  // The engine's own count of prompt tokens computed agrees.
  EXPECT_EQ(number_before(r.err, " computed)"), computed) << r.err;

  // Without the prefix cache every document computes the head again.
  const auto r2 = test::run_command(batch_cmd(
      "-i " + q((dir / "in.jsonl").string()) + " -o " + q((dir / "out2.jsonl").string()) +
      " -n 8 -np 4 --no-prefix-cache" + " --system " + q(system) + " --prompt " + q(prompt)));
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  for (const json& j : read_lines(dir / "out2.jsonl")) EXPECT_EQ(j["cached_tokens"], 0);
  EXPECT_EQ(number_before(r2.err, " computed)") - computed,
            int64_t(docs.size() - 1) * shared_blocks_tokens);
}

}  // namespace
}  // namespace kvrun
