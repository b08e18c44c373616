// serve_process.h — a `kvrun serve` child process for the serve tests: started on a free
// loopback port (--port 0; the port is read from its "listening on" line), stopped with SIGTERM.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gguf.h"
#include "test_util.h"

extern char** environ;

namespace kvrun::serve_test {

using namespace std::chrono_literals;

inline constexpr const char* kModel = "models/stories260K-F32.gguf";

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// The port of the "kvrun: listening on http://HOST:PORT" line in `log`, or 0.
inline int listening_port(const std::string& log) {
  const std::string mark = "listening on http://";
  const size_t at = log.find(mark);
  if (at == std::string::npos) return 0;
  const size_t colon = log.find(':', at + mark.size());
  const size_t eol = log.find('\n', at);
  if (colon == std::string::npos || eol == std::string::npos || colon > eol) return 0;
  return std::atoi(log.substr(colon + 1, eol - colon - 1).c_str());
}

/// A running `kvrun serve` on a free loopback port; SIGTERM and wait in the destructor.
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& extra, std::string model = "") {
    log_ = dir_ / "server.log";
    if (model.empty()) model = test::fixture(kModel).string();
    std::vector<std::string> args = {
        test::kvrun_binary(), "serve", "-m", model, "--port", "0", "-t", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      pid_ = -1;
      return;
    }
    for (int i = 0; i < 600 && port_ == 0; ++i) {  // up to 60 s (ASan builds load slowly)
      port_ = listening_port(slurp(log_));
      if (port_ > 0) break;
      if (waitpid(pid_, &status_, WNOHANG) == pid_) {  // it exited: the log says why
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(100ms);
    }
  }
  ~ServerProcess() { stop(); }

  bool ok() const { return port_ > 0; }
  int port() const { return port_; }
  std::string log() const { return slurp(log_); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  /// A fresh client (one per thread) with generous timeouts.
  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_read_timeout(120, 0);
    c->set_write_timeout(30, 0);
    return c;
  }

  /// SIGTERM, then the exit status (128 + signal when killed; -1 when it never started).
  /// SIGKILL when it has not exited after `wait_s` seconds.
  int stop(int wait_s = 30) {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      for (int i = 0; i < wait_s * 10; ++i) {
        if (waitpid(pid_, &status_, WNOHANG) == pid_) {
          pid_ = -1;
          break;
        }
        std::this_thread::sleep_for(100ms);
      }
      if (pid_ > 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status_, 0);
        pid_ = -1;
      }
      exit_code_ = WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
    }
    return exit_code_;
  }

 private:
  test::TempDir dir_;
  std::filesystem::path log_;
  pid_t pid_ = -1;
  int port_ = 0;
  int status_ = 0;
  int exit_code_ = -1;
};

/// Writes the stories260K fixture with FIM token ids added (three byte tokens, ids 3, 4, 5,
/// stand in for <PRE> <SUF> <MID>; with `repo_tokens` also ids 6, 7 for the repo-level
/// <|repo_name|> <|file_sep|>) to `path`, for the fill-in-the-middle endpoints.
inline void write_fim_fixture(const std::string& path, bool repo_tokens = false) {
  const gguf::File f = gguf::File::open(test::fixture(kModel).string());
  gguf::Writer w;
  for (const auto& kv : f.metadata()) w.set_value(std::string(kv.key), kv.value);
  w.set_u32("tokenizer.ggml.fim_pre_token_id", 3);
  w.set_u32("tokenizer.ggml.fim_suf_token_id", 4);
  w.set_u32("tokenizer.ggml.fim_mid_token_id", 5);
  if (repo_tokens) {
    w.set_u32("tokenizer.ggml.fim_rep_token_id", 6);
    w.set_u32("tokenizer.ggml.fim_sep_token_id", 7);
  }
  for (const auto& t : f.tensors())
    w.add_tensor(std::string(t.name), t.type,
                 std::vector<int64_t>(t.ne, t.ne + std::max(1, t.n_dims)), t.data);
  w.write(path);
}

#define START_SERVER(name, ...)                              \
  KVRUN_REQUIRE_FIXTURE(kModel);                             \
  ServerProcess name(std::vector<std::string>{__VA_ARGS__}); \
  ASSERT_TRUE(name.ok()) << name.log()

/// Stops the server and expects a clean exit with no sanitizer report.
inline void expect_clean_exit(ServerProcess& s) {
  EXPECT_EQ(s.stop(), 0) << s.log();
  EXPECT_EQ(s.log().find("AddressSanitizer"), std::string::npos) << s.log();
  EXPECT_EQ(s.log().find("runtime error:"), std::string::npos) << s.log();  // UBSan
}

inline nlohmann::json post_json(httplib::Client& c, const std::string& path,
                                const nlohmann::json& body, int want_status) {
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(r) << path << ": " << httplib::to_string(r.error());
  if (!r) return nlohmann::json::object();
  EXPECT_EQ(r->status, want_status) << path << " " << body.dump() << " → " << r->body;
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r->body;
  return j;
}

/// POSTs `body` to `path`, feeding the response body to `recv` as it arrives (a streamed
/// response); `recv` returning false hangs up.
inline httplib::Result post_stream(httplib::Client& c, const std::string& path,
                                   const std::string& body,
                                   std::function<bool(const char*, size_t)> recv) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [recv](const char* d, size_t n, uint64_t, uint64_t) { return recv(d, n); };
  return c.send(req);
}

}  // namespace kvrun::serve_test
