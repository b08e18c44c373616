// test_serve_hostile.cpp — `kvrun serve` under hostile and unlucky clients (issue 26): bytes the
// HTTP library's client would never send go over a raw loopback socket. Covers pieces of byte
// tokens (no 500), chunked bodies within --max-body, immediate refusal of impossible
// Content-Lengths, slow clients not starving /health, SIGTERM ending generations and slow
// clients at once, TCP_NODELAY, bounded JSON depth and token counts, n_predict 0, the stop_type
// of a full context, and the header rules of RFC 9112 (count, colon, folding, CL + TE).
// No test asserts a speed: liveness checks wait with generous socket timeouts (10 s) for what
// used to take 30 s or forever; measured times are in docs/http-api.md.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "serve_http.h"
#include "serve_process.h"

namespace kvrun {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using namespace serve_test;

/// A raw TCP connection to 127.0.0.1:port whose reads give up after `timeout_s`.
class RawConn {
 public:
  explicit RawConn(int port, int timeout_s = 10) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{timeout_s, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  bool ok() const { return fd_ >= 0; }
  /// Sends all of `s`; false when the server closed the connection.
  bool send(const std::string& s) {
    for (size_t done = 0; done < s.size();) {
      const ssize_t n = ::send(fd_, s.data() + done, s.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += size_t(n);
    }
    return true;
  }
  /// Reads until the server closes or the timeout passes; "" when nothing came.
  std::string read_all() {
    std::string out;
    char buf[8192];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return out;
      out.append(buf, size_t(n));
    }
  }

 private:
  int fd_ = -1;
};

/// The status code of a raw HTTP response ("HTTP/1.1 413 ..."), or 0.
int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return 0;
  return std::atoi(response.substr(9, 3).c_str());
}

/// The body of a raw response (after the empty line).
std::string body_of(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

/// Sends `request` on a new connection and returns the whole response (the server closes it).
std::string exchange(int port, const std::string& request) {
  RawConn c(port);
  EXPECT_TRUE(c.ok());
  c.send(request);
  return c.read_all();
}

std::string post_head(const std::string& path, const std::string& extra_headers) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
         "Content-Type: application/json\r\n" + extra_headers + "\r\n";
}

std::string chunked(const std::string& body, size_t chunk) {
  std::string out;
  char size[32];
  for (size_t at = 0; at < body.size(); at += chunk) {
    const std::string part = body.substr(at, chunk);
    std::snprintf(size, sizeof size, "%zx\r\n", part.size());
    out += size + part + "\r\n";
  }
  return out + "0\r\n\r\n";
}

TEST(ServeHostile, PiecesAndTextOfByteTokensAre200) {
  START_SERVER(srv, "-c", "128");
  auto c = srv.client();
  for (const std::string text : {"Grüße", "日本", "🙂"}) {
    const json j = post_json(*c, "/tokenize", {{"content", text}, {"with_pieces", true}}, 200);
    ASSERT_TRUE(j["tokens"].is_array()) << j.dump();
    std::string bytes;
    for (const json& t : j["tokens"]) {
      ASSERT_TRUE(t["id"].is_number_integer()) << t.dump();
      if (t["piece"].is_string()) {
        bytes += t["piece"].get<std::string>();
      } else {
        ASSERT_TRUE(t["piece"].is_array()) << t.dump();
        for (const json& b : t["piece"]) bytes += char(b.get<int>());
      }
    }
    EXPECT_NE(bytes.find(text), std::string::npos) << text << " → " << j.dump();
  }
  for (const json& ids : {json{131}, json{200, 201}, json{1, 131, 2}}) {
    const json j = post_json(*c, "/detokenize", {{"tokens", ids}}, 200);
    EXPECT_TRUE(j["content"].is_string()) << ids.dump() << " → " << j.dump();
  }
  expect_clean_exit(srv);
}

TEST(ServeHostile, ChunkedBodiesObeyMaxBody) {
  START_SERVER(srv, "-c", "128", "--max-body", "4K");
  const std::string big = json{{"content", std::string(8000, 'a')}}.dump();
  std::string r = exchange(
      srv.port(), post_head("/tokenize", "Transfer-Encoding: chunked\r\n") + chunked(big, 1000));
  EXPECT_EQ(status_of(r), 413) << r;
  // A chunked body within the limit is read like any other, in chunks of any size.
  const std::string small = json{{"content", "The little dog " + std::string(3000, 'a')}}.dump();
  for (size_t chunk : {size_t(1), size_t(5), size_t(4096)}) {
    r = exchange(srv.port(),
                 post_head("/tokenize", "Transfer-Encoding: chunked\r\n") + chunked(small, chunk));
    EXPECT_EQ(status_of(r), 200) << chunk << ": " << r;
    EXPECT_TRUE(json::parse(body_of(r), nullptr, false).contains("tokens")) << r;
  }
  // The same bytes arriving in pieces cut inside the framing: between the CR and LF after
  // the head, after a chunk's data, and inside a chunk-size line.
  const std::string head = post_head("/tokenize", "Transfer-Encoding: chunked\r\n");
  const std::string wire = head + chunked(small, 1);
  RawConn split(srv.port());
  size_t at = 0;
  for (size_t cut : {head.size() - 1, head.size() + 5, head.size() + 7, wire.size() - 3}) {
    split.send(wire.substr(at, cut - at));
    at = cut;
    std::this_thread::sleep_for(20ms);  // separate reads on the server, not a timing check
  }
  split.send(wire.substr(at));
  r = split.read_all();
  EXPECT_EQ(status_of(r), 200) << r;
  expect_clean_exit(srv);
}

TEST(ServeHostile, ImpossibleContentLengthIsRefusedAtOnce) {
  START_SERVER(srv, "-c", "128");
  // Each answer must come before the raw client's 10 s read timeout (it took 30 s).
  for (const char* length : {"1000000000", "18446744073709551616", "99999999999999999999999"}) {
    const std::string r = exchange(
        srv.port(), post_head("/completion", std::string("Content-Length: ") + length + "\r\n") +
                        "{\"prompt\":");
    EXPECT_EQ(status_of(r), 413) << length << ": " << r;
  }
  for (const char* length : {"-5", "1e9", "12abc", "0x10"}) {
    const std::string r = exchange(
        srv.port(), post_head("/completion", std::string("Content-Length: ") + length + "\r\n") +
                        "{\"prompt\":");
    EXPECT_EQ(status_of(r), 400) << length << ": " << r;
  }
  expect_clean_exit(srv);
}

TEST(ServeHostile, SlowClientsDoNotStarveHealth) {
  // The old pool had n_parallel + max_queue + 4 = 5 threads, each held 30 s by a slow client.
  START_SERVER(srv, "-c", "128", "--parallel", "1", "--max-queue", "0");
  std::vector<std::unique_ptr<RawConn>> slow;
  for (int i = 0; i < 24; ++i) {
    slow.push_back(std::make_unique<RawConn>(srv.port()));
    ASSERT_TRUE(slow.back()->ok());
    slow.back()->send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
  }
  for (int i = 0; i < 24; ++i) {  // oversize Content-Length clients, not reading the answer
    slow.push_back(std::make_unique<RawConn>(srv.port()));
    ASSERT_TRUE(slow.back()->ok());
    slow.back()->send(post_head("/completion", "Content-Length: 5000000000\r\n") + "{");
  }
  auto c = srv.client();
  c->set_read_timeout(10, 0);
  auto r = c->Get("/health");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  slow.clear();
  expect_clean_exit(srv);
}

/// One streamed /completion until the context is full; returns the last SSE event's JSON.
json long_stream(ServerProcess& srv, std::atomic<int>& started) {
  auto c = srv.client();
  std::string buf, last;
  bool counted = false;
  const json body = {
      {"prompt", "Once upon a time"}, {"n_predict", -1}, {"ignore_eos", true}, {"stream", true}};
  post_stream(*c, "/completion", body.dump(), [&](const char* d, size_t n) {
    buf.append(d, n);
    for (size_t p; (p = buf.find("\n\n")) != std::string::npos; buf.erase(0, p + 2)) {
      last = buf.substr(0, p);
      if (!counted) started += (counted = true);
    }
    return true;
  });
  return last.rfind("data: ", 0) == 0 ? json::parse(last.substr(6), nullptr, false) : json();
}

TEST(ServeHostile, SigtermEndsGenerationsAndSlowClientsAtOnce) {
  START_SERVER(srv, "-c", "4096", "--parallel", "4", "--max-queue", "8");
  std::atomic<int> started{0};
  std::vector<json> last(6);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < last.size(); ++i)  // 4 generating, 2 queued
    clients.emplace_back([&, i] { last[i] = long_stream(srv, started); });
  std::atomic<bool> slow_done{false};
  std::thread slow([&] {  // a byte a second, for 40 s at most
    RawConn s(srv.port());
    s.send("GET /health HTTP/1.1\r\n");
    for (int i = 0; i < 40 && s.send("X"); ++i) std::this_thread::sleep_for(1s);
    slow_done = true;
  });
  for (int i = 0; i < 300 && started < 4; ++i) std::this_thread::sleep_for(100ms);
  ASSERT_GE(started.load(), 4);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(srv.stop(10), 0) << "not stopped within 10 s of SIGTERM\n" << srv.log();
  const double exit_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RecordProperty("sigterm_exit_ms", int(exit_s * 1000));
  std::printf("SIGTERM → exit: %.3f s (4 generating, 2 queued, 1 slow client)\n", exit_s);
  for (auto& t : clients) t.join();
  slow.join();
  EXPECT_TRUE(slow_done);
  for (const json& j : last) {  // a final chunk (cancelled: an error object) or nothing at all
    if (j.is_null()) continue;
    EXPECT_TRUE(j.contains("error") || j.value("stop", false)) << j.dump();
  }
}

TEST(ServeHostile, AcceptedSocketsGetTcpNoDelay) {
  // A loopback pair; the accepted end is configured as the server configures its sockets.
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ASSERT_EQ(::listen(lfd, 1), 0);
  const int cfd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(cfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const int sfd = ::accept(lfd, nullptr, nullptr);
  ASSERT_GE(sfd, 0);
  int on = 0;
  len = sizeof on;
  ASSERT_EQ(getsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &on, &len), 0);
  EXPECT_EQ(on, 0) << "Linux default";
  EXPECT_TRUE(tools::configure_client_socket(sfd));
  ASSERT_EQ(getsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &on, &len), 0);
  EXPECT_EQ(on, 1);
  ::close(sfd);
  ::close(cfd);
  ::close(lfd);
}

/// TCP_NODELAY of this process's connected sockets whose local port is `port` (-1: none).
int nodelay_of_connections_on(int port) {
  int found = -1;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(e.path().filename().c_str());
    sockaddr_in local{}, peer{};
    socklen_t len = sizeof local;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0 ||
        local.sin_family != AF_INET || ntohs(local.sin_port) != port)
      continue;
    len = sizeof peer;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) continue;  // listening
    int on = 0;
    len = sizeof on;
    if (getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, &len) == 0) found = on;
  }
  return found;
}

TEST(ServeHostile, HardenedServerConnectionsHaveTcpNoDelay) {
  // In process: the handler looks at the server's end of its own connection.
  tools::HardenedServer svr(tools::HttpLimits{}, 8);
  std::atomic<int> port{0}, nodelay{-2};
  svr.Get("/x", [&](const httplib::Request&, httplib::Response& res) {
    nodelay = nodelay_of_connections_on(port);
    res.set_content("ok", "text/plain");
  });
  port = svr.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port.load(), 0);
  std::thread t([&] { svr.listen_after_bind(); });
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/x");
  svr.begin_shutdown();
  svr.stop();
  t.join();
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->body, "ok");
  EXPECT_EQ(nodelay.load(), 1) << "-1: no connection found";
}

TEST(ServeHostile, OneRequestsAllocationIsBounded) {
  START_SERVER(srv, "-c", "128");
  auto c = srv.client();
  std::string deep = std::string(1000, '[') + std::string(1000, ']');
  json e = post_json(*c, "/completion", json::parse("{\"prompt\": " + deep + "}"), 400);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("nested deeper"), std::string::npos)
      << e.dump();
  e = post_json(*c, "/completion", json::parse(R"({"prompt": "a", "x": )" + deep + "}"), 400);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("nested deeper"), std::string::npos);
  std::string many;  // ~300,000 tokens in a 600 KB body
  for (int i = 0; i < 300000; ++i) many += "a ";
  e = post_json(*c, "/tokenize", {{"content", many}, {"with_pieces", true}}, 413);
  EXPECT_EQ(e["error"]["param"], "content") << e.dump();
  expect_clean_exit(srv);
}

TEST(ServeHostile, NPredictZeroAndFullContext) {
  START_SERVER(srv, "-c", "64");
  auto c = srv.client();
  json j = post_json(*c, "/completion", {{"prompt", "Once upon a time"}, {"n_predict", 0}}, 200);
  EXPECT_EQ(j["tokens_predicted"], 0) << j.dump();
  EXPECT_EQ(j["content"], "");
  EXPECT_EQ(j["stop_type"], "limit");
  EXPECT_GT(j["tokens_evaluated"].get<int>(), 0);
  j = post_json(*c, "/completion",
                {{"prompt", "Once upon a time"}, {"n_predict", -1}, {"ignore_eos", true}}, 200);
  EXPECT_EQ(j["stop_type"], "limit") << j.dump();
  // The KV holds all 64 positions; the last sampled token is returned but never evaluated.
  EXPECT_EQ(j["tokens_predicted"].get<int>() + j["tokens_evaluated"].get<int>(), 64 + 1)
      << j.dump();
  expect_clean_exit(srv);
}

TEST(ServeHostile, HeaderRulesOfRfc9112) {
  START_SERVER(srv, "-c", "128");
  const std::string body = json{{"content", "dog"}}.dump();
  const std::string length = "Content-Length: " + std::to_string(body.size()) + "\r\n";
  std::string many;
  for (int i = 0; i < 1000; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(status_of(exchange(srv.port(), post_head("/tokenize", many + length) + body)), 431);
  std::string huge = "X-Big: " + std::string(100000, 'v') + "\r\n";
  EXPECT_EQ(status_of(exchange(srv.port(), post_head("/tokenize", huge + length) + body)), 431);
  const std::string both = length + "Transfer-Encoding: chunked\r\n";
  EXPECT_EQ(status_of(exchange(srv.port(), post_head("/tokenize", both) + chunked(body, 4))), 400);
  EXPECT_EQ(
      status_of(exchange(srv.port(), post_head("/tokenize", "NoColonHere\r\n" + length) + body)),
      400);
  EXPECT_EQ(status_of(exchange(srv.port(),
                               post_head("/tokenize", "X-A: 1\r\n folded\r\n" + length) + body)),
            400);
  EXPECT_EQ(status_of(exchange(srv.port(), post_head("/tokenize", "X-A : 1\r\n" + length) + body)),
            400);
  EXPECT_EQ(status_of(exchange(srv.port(), post_head("/tokenize", length + length) + body)), 200);
  // Two requests pipelined on one kept-alive connection both get their answer.
  RawConn k(srv.port());
  const std::string one = "POST /tokenize HTTP/1.1\r\nHost: x\r\n" + length + "\r\n" + body;
  const std::string last =
      "POST /tokenize HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + length + "\r\n" + body;
  k.send(one + last);
  const std::string both_answers = k.read_all();
  size_t n_ok = 0;
  for (size_t at = 0; (at = both_answers.find("HTTP/1.1 200", at)) != std::string::npos; ++at)
    ++n_ok;
  EXPECT_EQ(n_ok, 2u) << both_answers;
  expect_clean_exit(srv);
}

TEST(ServeHostile, CheckHeadUnit) {
  tools::HttpLimits lim;
  lim.max_body = 100;
  auto check = [&](const std::string& head) { return tools::check_head(head, lim); };
  EXPECT_EQ(check("GET / HTTP/1.1\r\nHost: x\r\n").status, 0);
  auto h = check("POST / HTTP/1.1\r\nContent-Length: 12\r\nExpect: 100-continue\r\n");
  EXPECT_EQ(h.status, 0);
  EXPECT_EQ(h.content_length, 12);
  EXPECT_TRUE(h.expect_continue);
  EXPECT_EQ(h.head, "POST / HTTP/1.1\r\n");
  EXPECT_EQ(check("POST / HTTP/1.1\r\nContent-Length: 101\r\n").status, 413);
  EXPECT_EQ(check("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n").status, 400);
  EXPECT_EQ(check("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n").status, 501);
  EXPECT_TRUE(check("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n").chunked);
  EXPECT_EQ(check("POST / HTTP/1.1\r\n: empty\r\n").status, 400);
}

}  // namespace
}  // namespace kvrun
