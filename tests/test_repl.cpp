// test_repl.cpp — the chat REPL on a real terminal: kvrun runs in a tmux pane (a pseudo-terminal,
// so libedit, the "> " prompt and Ctrl-C / Ctrl-D behave as for a user), keys are sent with
// `tmux send-keys` and the screen is read with `tmux capture-pane`. Each test has its own tmux
// server (socket kvrun-test-<pid>-<n>), killed when the test ends, so tests may run in parallel.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace kvrun {
namespace {

constexpr const char* kModel = "models/stories260K-F32.gguf";
constexpr auto kTimeout = std::chrono::seconds(20);

/// `s` quoted for /bin/sh.
std::string q(const std::string& s) { return test::shell_quote(s); }

bool have_tmux() { return test::run_command("command -v tmux").exit_code == 0; }

#define KVRUN_REQUIRE_TMUX()                                                                   \
  do {                                                                                         \
    if (!have_tmux())                                                                          \
      GTEST_SKIP() << "tmux is not on PATH (Debian package tmux); the terminal tests need it"; \
  } while (0)

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) {
    const size_t end = line.find_last_not_of(" \r");
    out.push_back(end == std::string::npos ? "" : line.substr(0, end + 1));
  }
  return out;
}

/// A line the REPL's prompt starts ("> " with or without the typed input).
bool is_prompt_line(const std::string& line) { return line == ">" || line.rfind("> ", 0) == 0; }

/// Lines that are a prompt.
size_t count_prompts(const std::string& screen) {
  size_t n = 0;
  for (const auto& l : lines_of(screen)) n += is_prompt_line(l);
  return n;
}

/// Whether the last non-empty line is an empty prompt waiting for input.
bool waiting_at_prompt(const std::string& screen) {
  const auto lines = lines_of(screen);
  for (auto it = lines.rbegin(); it != lines.rend(); ++it)
    if (!it->empty()) return *it == ">";
  return false;
}

/// The text printed after the `nth` (0-based) prompt line showing `input`, up to the next prompt
/// line (or the end); lines joined with '\n', surrounding blank lines dropped.
std::string text_after(const std::string& screen, const std::string& input, int nth = 0) {
  const auto lines = lines_of(screen);
  size_t i = 0;
  for (int seen = -1; i < lines.size(); ++i)
    if (lines[i] == "> " + input && ++seen == nth) break;
  if (i == lines.size()) return "";
  std::vector<std::string> body;
  for (++i; i < lines.size() && !is_prompt_line(lines[i]); ++i) body.push_back(lines[i]);
  while (!body.empty() && body.back().empty()) body.pop_back();
  size_t b = 0;
  while (b < body.size() && body[b].empty()) ++b;
  std::string out;
  for (size_t k = b; k < body.size(); ++k) out += (k > b ? "\n" : "") + body[k];
  return out;
}

/// The first number after `key` in `text`, or -1.
long long number_after(const std::string& text, const std::string& key) {
  const size_t p = text.rfind(key);
  if (p == std::string::npos) return -1;
  long long n = -1;
  return std::sscanf(text.c_str() + p + key.size(), "%lld", &n) == 1 ? n : -1;
}

/// kvrun in a detached tmux session on its own server; the server dies with the object.
class TmuxKvrun {
 public:
  /// Starts `kvrun -m <fixture> <args>` in a 220x60 pane, HOME set to a temp dir. A wrapper
  /// prints "EXITED <status>" when kvrun ends, then sleeps so that the pane stays readable.
  explicit TmuxKvrun(const std::string& args) {
    static int counter = 0;
    socket_ = "kvrun-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    const auto script = dir_ / "run.sh";
    std::ofstream f(script);
    // Ctrl-C sends SIGINT to the whole foreground process group: the trap lets the shell
    // survive it, and kvrun starts with the default action (a trapped signal is not inherited).
    f << "trap 'true' INT\n"
      << "HOME=" << q(dir_.path().string()) << " " << q(test::kvrun_binary()) << " -m "
      << q(test::fixture(kModel).string()) << " " << args << "\n"
      << "echo \"EXITED $?\"\n"
      << "exec sleep 600\n";
    f.close();
    const auto r = tmux("new-session -d -s kvrun -x 220 -y 60 " + q("sh " + q(script.string())));
    started_ = r.exit_code == 0;
    EXPECT_TRUE(started_) << "tmux new-session failed: " << r.err;
    if (started_) {
      socket_path_ = tmux("display-message -p -t kvrun '#{socket_path}'").out;
      while (!socket_path_.empty() && socket_path_.back() == '\n') socket_path_.pop_back();
    }
  }
  ~TmuxKvrun() {
    tmux("kill-server");
    std::error_code ec;  // tmux 3.3 leaves the socket file behind
    if (!socket_path_.empty()) std::filesystem::remove(socket_path_, ec);
  }
  TmuxKvrun(const TmuxKvrun&) = delete;
  TmuxKvrun& operator=(const TmuxKvrun&) = delete;

  bool started() const { return started_; }
  const test::TempDir& home() const { return dir_; }

  /// Types `text` and presses Enter.
  void type(const std::string& text) {
    EXPECT_EQ(tmux("send-keys -t kvrun -l " + q(text)).exit_code, 0);
    key("Enter");
  }
  /// Presses a key in tmux notation: "Enter", "C-c", "C-d".
  void key(const std::string& k) { EXPECT_EQ(tmux("send-keys -t kvrun " + k).exit_code, 0); }

  /// The pane with its scrollback, wrapped lines joined.
  std::string screen() { return tmux("capture-pane -p -J -t kvrun -S -3000").out; }

  /// Polls the pane until `done(screen)` holds; returns the screen, or fails the test (with the
  /// pane's contents) after kTimeout and returns "".
  std::string wait_for(const std::string& what,
                       const std::function<bool(const std::string&)>& done) {
    const auto deadline = std::chrono::steady_clock::now() + kTimeout;
    std::string s;
    for (;;) {
      s = screen();
      if (done(s)) return s;
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "timed out waiting for " << what << "; the pane shows:\n" << s;
    return "";
  }

  /// Waits until `text` appears in the pane.
  std::string wait_for_text(const std::string& text) {
    return wait_for("'" + text + "'",
                    [&](const std::string& s) { return s.find(text) != std::string::npos; });
  }

  /// Waits until a new empty prompt follows everything seen so far: with `prompts` prompt lines
  /// on the screen before the last input, a turn is over when there are more and the last is
  /// empty.
  std::string wait_for_prompt(size_t prompts) {
    return wait_for("a new prompt", [&](const std::string& s) {
      return count_prompts(s) > prompts && waiting_at_prompt(s);
    });
  }

  /// Sends one line at an idle prompt and waits for the next idle prompt; returns the screen.
  std::string turn(const std::string& input) {
    const size_t before = count_prompts(screen());
    type(input);
    return wait_for_prompt(before);
  }

 private:
  test::CommandResult tmux(const std::string& cmd) {
    return test::run_command("env -u TMUX tmux -L " + socket_ + " -f /dev/null " + cmd);
  }

  test::TempDir dir_;
  std::string socket_;
  std::string socket_path_;
  bool started_ = false;
};

/// What the same inputs give through a pipe (-i): the reply to each input, for comparison.
std::vector<std::string> piped_replies(const std::string& args,
                                       const std::vector<std::string>& inputs) {
  test::TempDir dir;
  std::string script;
  for (const auto& in : inputs) script += in + "\n/--mark--\n";
  std::ofstream(dir / "in.txt") << script;
  const auto r =
      test::run_command(q(test::kvrun_binary()) + " -m " + q(test::fixture(kModel).string()) +
                        " -i " + args + " < " + q((dir / "in.txt").string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> out;
  std::string cur;
  for (const auto& line : lines_of(r.out)) {
    if (line.find("unknown command or missing argument: /--mark--") != std::string::npos) {
      while (!cur.empty() && cur.back() == '\n') cur.pop_back();
      while (!cur.empty() && cur.front() == '\n') cur.erase(cur.begin());
      out.push_back(cur);
      cur.clear();
    } else {
      cur += line + "\n";
    }
  }
  EXPECT_EQ(out.size(), inputs.size()) << r.out;
  out.resize(inputs.size());
  return out;
}

const std::string kChat = "--chat-template chatml -n 12 --temp 0";

TEST(ReplTerminal, TwoTurnChat) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  KVRUN_REQUIRE_TMUX();
  const auto expected = piped_replies(kChat, {"hello", "how are you"});
  ASSERT_FALSE(expected[0].empty());
  ASSERT_FALSE(expected[1].empty());

  TmuxKvrun t(kChat);
  ASSERT_TRUE(t.started());
  std::string s = t.wait_for("the banner and the prompt", [](const std::string& s) {
    return s.find("kvrun chat: ") != std::string::npos && waiting_at_prompt(s);
  });
  EXPECT_NE(s.find("template chatml"), std::string::npos) << s;
  t.turn("hello");
  s = t.turn("how are you");
  EXPECT_EQ(text_after(s, "hello"), expected[0]) << s;
  EXPECT_EQ(text_after(s, "how are you"), expected[1]) << s;
  s = t.turn("/stats");
  const std::string stats = text_after(s, "/stats");
  EXPECT_NE(stats.find("| messages: 4"), std::string::npos) << s;
  EXPECT_GT(number_after(stats, "context: "), 24) << s;
  t.key("C-d");
  t.wait_for_text("EXITED 0");
  // libedit kept the history in $HOME.
  std::ifstream hist(t.home() / ".kvrun_history");
  std::stringstream h;
  h << hist.rdbuf();
  EXPECT_NE(h.str().find("hello"), std::string::npos) << "history: " << h.str();
}

TEST(ReplTerminal, CtrlCStopsAReplyAndKeepsTheConversation) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  KVRUN_REQUIRE_TMUX();
  // A reply that would run for many seconds: no EOS stop, a context of 50000 tokens.
  TmuxKvrun t("--chat-template chatml -c 50000 --ignore-eos --temp 0");
  ASSERT_TRUE(t.started());
  t.wait_for("the prompt", waiting_at_prompt);
  t.type("hello");
  t.wait_for("some reply text",
             [](const std::string& s) { return text_after(s, "hello").size() >= 40; });
  t.key("C-c");
  std::string s = t.wait_for("[stopped] and a new prompt", [](const std::string& s) {
    return s.find("[stopped]") != std::string::npos && waiting_at_prompt(s);
  });
  EXPECT_EQ(s.find("EXITED"), std::string::npos) << "Ctrl-C during a reply ended kvrun:\n" << s;

  // The context holds the first turn: its prompt and every token generated before the stop.
  s = t.turn("/stats");
  std::string stats = text_after(s, "/stats");
  EXPECT_NE(stats.find("| messages: 2"), std::string::npos) << s;
  const long long n1 = number_after(stats, "context: ");
  const long long p1 = number_after(stats, "last reply: prompt ");
  const long long g1 = number_after(stats, "generation ");
  EXPECT_GT(p1, 0) << s;
  EXPECT_GT(g1, 0) << s;
  EXPECT_GE(n1, p1 + g1 - 1) << s;  // the last sampled token need not be evaluated yet
  EXPECT_LE(n1, p1 + g1) << s;

  // A new input gets a reply (stopped again: it would also run for a long time).
  t.type("tell me more");
  t.wait_for("a second reply",
             [](const std::string& s) { return text_after(s, "tell me more").size() >= 40; });
  t.key("C-c");
  s = t.wait_for("a second [stopped]", [](const std::string& s) {
    size_t n = 0;
    for (size_t p = s.find("[stopped]"); p != std::string::npos; p = s.find("[stopped]", p + 1))
      ++n;
    return n >= 2 && waiting_at_prompt(s);
  });
  s = t.turn("/stats");
  stats = text_after(s, "/stats", 1);
  EXPECT_NE(stats.find("| messages: 4"), std::string::npos) << s;
  EXPECT_GT(number_after(stats, "context: "), n1) << s;
  // Only the new turn was evaluated: the context still held the first one.
  EXPECT_LT(number_after(stats, "last reply: prompt "), n1) << s;
  t.key("C-d");
  t.wait_for_text("EXITED 0");
}

TEST(ReplTerminal, SaveThenLoadGivesTheSameNextReply) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  KVRUN_REQUIRE_TMUX();
  TmuxKvrun t(kChat);
  ASSERT_TRUE(t.started());
  const std::string file = (t.home() / "chat.kvchat").string();
  t.wait_for("the prompt", waiting_at_prompt);
  t.turn("hello");
  std::string s = t.turn("/save " + file);
  EXPECT_EQ(text_after(s, "/save " + file).rfind("saved 2 messages", 0), 0u) << s;
  t.turn("how are you");
  s = t.turn("/load " + file);
  EXPECT_EQ(text_after(s, "/load " + file).rfind("loaded 2 messages", 0), 0u) << s;
  s = t.turn("how are you");
  const std::string before = text_after(s, "how are you", 0);
  const std::string after = text_after(s, "how are you", 1);
  EXPECT_FALSE(before.empty()) << s;
  EXPECT_EQ(after, before) << s;
  t.key("C-d");
  t.wait_for_text("EXITED 0");
}

TEST(ReplTerminal, CtrlCAtAnEmptyPromptExitsWithStatus0) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  KVRUN_REQUIRE_TMUX();
  TmuxKvrun t(kChat);
  ASSERT_TRUE(t.started());
  t.wait_for("the prompt", waiting_at_prompt);
  t.turn("hello");
  t.key("C-c");
  const std::string s = t.wait_for_text("EXITED ");
  EXPECT_NE(s.find("EXITED 0"), std::string::npos) << s;
}

TEST(ReplTerminal, CtrlDExitsWithStatus0) {
  KVRUN_REQUIRE_FIXTURE(kModel);
  KVRUN_REQUIRE_TMUX();
  TmuxKvrun t(kChat);
  ASSERT_TRUE(t.started());
  t.wait_for("the prompt", waiting_at_prompt);
  t.key("C-d");
  const std::string s = t.wait_for_text("EXITED ");
  EXPECT_NE(s.find("EXITED 0"), std::string::npos) << s;
}

}  // namespace
}  // namespace kvrun
