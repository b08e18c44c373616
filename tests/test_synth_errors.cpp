// test_synth_errors.cpp — `kvrun synth`'s errors (a vocabulary of the wrong size, a bad vocabulary
// file, an unwritable path, a cancelled write: no file left behind) and its CLI through the real
// binary (a written file runs; errors are one line and leave no file).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gguf.h"
#include "test_util.h"
#include "tools/synth/synth.h"

namespace kvrun {
namespace {

namespace fs = std::filesystem;

/// The names of the files in `dir`.
std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  return v;
}

// ---- errors ---------------------------------------------------------------------------------

TEST(SynthErrors, VocabSizeMismatchLeavesNoFile) {
  const std::string rel = "vocab/ggml-vocab-gpt-2.gguf";  // 50257 tokens
  KVRUN_REQUIRE_FIXTURE(rel);
  test::TempDir dir;
  SynthParams p;
  p.shape = find_synth_shape("tiny");
  p.type = SynthFileType::Q4_0;
  p.vocab_from = test::fixture(rel).string();
  p.out_path = (dir / "out.gguf").string();
  try {
    write_synth_model(p);
    FAIL() << "no error";
  } catch (const SynthError& e) {
    EXPECT_NE(std::string(e.what()).find("50257 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("needs 512"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(files_in(dir.path()).empty());
}

TEST(SynthErrors, BadVocabFileAndUnwritablePath) {
  test::TempDir dir;
  SynthParams p;
  p.shape = find_synth_shape("tiny");
  p.type = SynthFileType::F16;
  p.out_path = (dir / "out.gguf").string();
  p.vocab_from = (dir / "missing.gguf").string();
  EXPECT_THROW(write_synth_model(p), SynthError);
  // A GGUF without tokenizer.ggml.tokens.
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.write((dir / "novocab.gguf").string());
  p.vocab_from = (dir / "novocab.gguf").string();
  try {
    write_synth_model(p);
    FAIL() << "no error";
  } catch (const SynthError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.tokens"), std::string::npos);
  }
  p.vocab_from.clear();
  p.out_path = (dir / "no-such-dir" / "out.gguf").string();
  EXPECT_THROW(write_synth_model(p), SynthError);
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"novocab.gguf"});
}

TEST(SynthErrors, CancelRemovesTheTemporaryFile) {
  test::TempDir dir;
  std::atomic<bool> cancel{false};
  SynthParams p;
  p.shape = find_synth_shape("tiny");
  p.type = SynthFileType::F32;
  p.out_path = (dir / "out.gguf").string();
  p.cancel = &cancel;
  p.progress = [&](const SynthProgress& pr) {
    if (pr.tensor >= 3) cancel = true;
  };
  EXPECT_THROW(write_synth_model(p), SynthError);
  EXPECT_TRUE(files_in(dir.path()).empty());
}

// ---- the CLI --------------------------------------------------------------------------------

TEST(SynthCli, WritesAFileThatKvrunRuns) {
  test::TempDir dir;
  const std::string out = (dir / "tiny.gguf").string();
  auto r = test::run_command(test::shell_quote(test::kvrun_binary()) +
                             " synth --shape tiny --type Q4_0 --seed 7 -t 2 -o " +
                             test::shell_quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("wrote " + out), std::string::npos) << r.err;
  const gguf::File f = gguf::File::open(out);
  EXPECT_EQ(f.get_int("kvrun.synth.seed"), 7);
  EXPECT_EQ(f.get_int("general.file_type"), 2);
  r = test::run_command(test::shell_quote(test::kvrun_binary()) + " -m " + test::shell_quote(out) +
                        " -p 'Hello' -n 4 --temp 0 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Text mode (--json is avoided: a random model may emit a lone byte token, which is not
  // valid UTF-8 on its own). The timings line reports the 4 generated tokens.
  EXPECT_NE(r.err.find("4 tokens"), std::string::npos) << r.err;
}

TEST(SynthCli, ErrorsAreOneLineAndLeaveNoFile) {
  test::TempDir dir;
  const std::string out = (dir / "x.gguf").string();
  const std::string bin = test::shell_quote(test::kvrun_binary());
  struct Case {
    std::string args, message;
  };
  std::vector<Case> cases = {
      {"--shape llama-9000 --type Q4_0", "unknown shape 'llama-9000'"},
      {"--shape tiny --type Q3_K", "unknown type 'Q3_K'"},
      {"--shape tiny --type F16 --vocab-from " + test::shell_quote((dir / "nope.gguf").string()),
       "nope.gguf"},
  };
  if (fs::exists(test::fixture("vocab/ggml-vocab-gpt-2.gguf")))
    cases.push_back({"--shape tiny --type F16 --vocab-from " +
                         test::shell_quote(test::fixture("vocab/ggml-vocab-gpt-2.gguf").string()),
                     "has 50257 tokens, shape tiny needs 512"});
  for (const Case& c : cases) {
    const auto r = test::run_command(bin + " synth " + c.args + " -o " + test::shell_quote(out));
    EXPECT_EQ(r.exit_code, 1) << c.args;
    EXPECT_NE(r.err.find("kvrun: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(files_in(dir.path()).empty()) << c.args;
  }
  const auto r = test::run_command(bin + " synth --shape tiny --type F16 -o " +
                                   test::shell_quote((dir / "no-such-dir" / "x.gguf").string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot create"), std::string::npos) << r.err;
  EXPECT_TRUE(files_in(dir.path()).empty());
}

}  // namespace
}  // namespace kvrun
