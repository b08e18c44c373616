// serve_http.cpp — see serve_http.h.
#include "serve_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

namespace kvrun::tools {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Handler threads started on demand (one per waiting job, up to a cap) and kept for reuse:
/// a connection that sends slowly holds one thread, not a share of a fixed pool.
class GrowingPool : public httplib::TaskQueue {
 public:
  explicit GrowingPool(size_t max_threads) : max_threads_(std::max<size_t>(1, max_threads)) {}
  ~GrowingPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
    if (n_idle_ < jobs_.size() && threads_.size() < max_threads_)
      threads_.emplace_back([this] { work(); });
    cv_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (down_) return;
      down_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();  // no enqueue after shutdown: threads_ is stable
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++n_idle_;
      cv_.wait(lock, [&] { return !jobs_.empty() || down_; });
      --n_idle_;
      if (jobs_.empty()) return;  // shut down and nothing left
      auto fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  const size_t max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t n_idle_ = 0;
  bool down_ = false;
};

/// How a wait on the socket ended.
enum class Wait { kReady, kTimeout, kStop, kError };

/// One client connection: its socket, bytes read but not yet used (pipelined requests), and
/// the server's stop flag.
struct Conn {
  int fd;
  const HttpLimits& lim;
  const std::atomic<bool>& stopping;
  const std::atomic<int64_t>& stop_ms;
  std::string buf;  // bytes read; those before `pos` are used
  size_t pos = 0;

  /// The bytes read but not used yet (pipelined requests, the rest of a body).
  std::string_view in() const { return std::string_view(buf).substr(pos); }
  /// Marks `n` bytes of in() used; compacts the buffer now and then (not per line: a body of
  /// tiny chunks must not cost a move of the buffer per chunk).
  void consume(size_t n) {
    pos += n;
    if (pos == buf.size() || pos > (size_t(64) << 10)) {
      buf.erase(0, pos);
      pos = 0;
    }
  }

  /// Polls for `events` until `deadline` (steady ms) in slices, watching the stop flag.
  Wait wait(short events, int64_t deadline, bool honour_stop = true) const {
    for (;;) {
      if (honour_stop && stopping.load()) return Wait::kStop;
      const int64_t left = deadline - now_ms();
      if (left <= 0) return Wait::kTimeout;
      pollfd p{fd, events, 0};
      const int rc = ::poll(&p, 1, int(std::min<int64_t>(left, 100)));
      if (rc < 0 && errno != EINTR) return Wait::kError;
      if (rc > 0) return (p.revents & (POLLERR | POLLNVAL)) ? Wait::kError : Wait::kReady;
    }
  }

  /// Reads more bytes into `in` by `deadline`: kReady when some came, else why not (kError: EOF).
  Wait fill(int64_t deadline) {
    const Wait w = wait(POLLIN, deadline);
    if (w != Wait::kReady) return w;
    char chunk[16384];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) return Wait::kError;
    buf.append(chunk, size_t(n));
    return Wait::kReady;
  }

  /// Writes all of `data`; fails after write_stall_ms without progress, or shortly after stop.
  bool write_all(const char* data, size_t size) const {
    size_t done = 0;
    while (done < size) {
      int64_t deadline = now_ms() + lim.write_stall_ms;
      if (stopping.load()) deadline = std::min(deadline, stop_ms.load() + lim.shutdown_write_ms);
      if (wait(POLLOUT, deadline, false) != Wait::kReady) return false;
      const ssize_t n = ::send(fd, data + done, size - done, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return false;
      done += size_t(n);
    }
    return true;
  }
};

/// Framing of one request that failed: status (0: the connection just closes) and why.
struct Refusal {
  int status = 0;
  std::string message;
};

const char* reason_phrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    default:
      return "Error";
  }
}

/// Answers a refused request with an OpenAI-style error object and closes the connection.
void send_refusal(const Conn& c, const Refusal& r) {
  if (r.status == 0) return;
  nlohmann::json e = {{"message", r.message},
                      {"type", "invalid_request_error"},
                      {"code", r.status},
                      {"param", nullptr}};
  const std::string body = nlohmann::json{{"error", e}}.dump();
  const std::string msg =
      "HTTP/1.1 " + std::to_string(r.status) + " " + reason_phrase(r.status) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n" + body;
  c.write_all(msg.data(), msg.size());
}

/// Reads one head (up to the empty line, which is dropped) into `head`; false when there is
/// none (closed, timed out, stopping; then `why` says what to answer, status 0: nothing).
/// `first` is false while waiting for a keep-alive connection's next request.
bool read_head(Conn& c, bool first, std::string& head, Refusal& why) {
  int64_t deadline = now_ms() + (first ? c.lim.head_timeout_ms : c.lim.idle_timeout_ms);
  bool started = !c.in().empty();
  for (size_t scanned = 0;;) {
    for (; c.in().substr(0, 2) == "\r\n"; scanned = 0) c.consume(2);  // RFC 9112 §2.2
    const size_t end = c.in().find("\r\n\r\n", scanned);
    if (end != std::string::npos) {
      if (end + 2 > c.lim.max_head_bytes) break;
      head = std::string(c.in().substr(0, end + 2));
      c.consume(end + 4);
      return true;
    }
    if (c.in().size() > c.lim.max_head_bytes) break;
    scanned = c.in().size() < 3 ? 0 : c.in().size() - 3;  // search only the new bytes next
    if (!started && !c.in().empty()) {  // the idle wait is over: the head has its own deadline
      started = true;
      deadline = now_ms() + c.lim.head_timeout_ms;
    }
    const Wait w = c.fill(deadline);
    if (w == Wait::kTimeout && started) why = {408, "the request head did not arrive in time"};
    if (w != Wait::kReady) return false;
  }
  why = {431, "the request head is larger than " + std::to_string(c.lim.max_head_bytes) + " bytes"};
  return false;
}

/// Takes `n` bytes of body from the connection into `body` by `deadline`.
bool read_exact(Conn& c, size_t n, int64_t deadline, std::string& body, Refusal& why) {
  while (c.in().size() < n) {
    const Wait w = c.fill(deadline);
    if (w == Wait::kTimeout) why = {408, "the request body did not arrive in time"};
    if (w != Wait::kReady) return false;
  }
  body.append(c.in().substr(0, n));
  c.consume(n);
  return true;
}

/// Takes one CRLF-ended line (at most `max` bytes) from the connection.
bool read_line(Conn& c, size_t max, int64_t deadline, std::string& line, Refusal& why) {
  for (;;) {
    const size_t eol = c.in().find("\r\n");
    if (eol != std::string::npos && eol <= max) {
      line = std::string(c.in().substr(0, eol));
      c.consume(eol + 2);
      return true;
    }
    if (eol != std::string::npos || c.in().size() > max + 1) {  // + 1: a CR, its LF to come
      why = {400, "malformed chunked body (line too long)"};
      return false;
    }
    const Wait w = c.fill(deadline);
    if (w == Wait::kTimeout) why = {408, "the request body did not arrive in time"};
    if (w != Wait::kReady) return false;
  }
}

/// The value of hex digit `ch`, or -1.
int hex_digit(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/// De-chunks a chunked body (RFC 9112 §7.1) within max_body; trailers are read and dropped.
bool read_chunked(Conn& c, int64_t deadline, std::string& body, Refusal& why) {
  std::string line;
  for (;;) {
    if (!read_line(c, 1024, deadline, line, why)) return false;
    const std::string size_text = line.substr(0, line.find(';'));
    size_t pos = 0;
    uint64_t size = 0;
    for (int d; pos < size_text.size() && pos < 15 && (d = hex_digit(size_text[pos])) >= 0; ++pos)
      size = size * 16 + uint64_t(d);
    if (pos == 0 || size_text.find_first_not_of(" \t", pos) != std::string::npos) {
      why = {400, "malformed chunk size"};
      return false;
    }
    if (size == 0) break;
    if (body.size() + size > uint64_t(c.lim.max_body)) {
      why = {413, "the request body is larger than --max-body"};
      return false;
    }
    if (!read_exact(c, size_t(size), deadline, body, why)) return false;
    if (!read_line(c, 0, deadline, line, why)) return false;  // the CRLF after the data
  }
  for (size_t total = 0;;) {  // trailer fields, then the empty line
    if (!read_line(c, c.lim.max_head_bytes, deadline, line, why)) return false;
    if (line.empty()) return true;
    total += line.size();
    if (total > c.lim.max_head_bytes) {
      why = {431, "the chunked body's trailers are too large"};
      return false;
    }
  }
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// The request re-framed for cpp-httplib, read from memory; writes go to the socket.
class FramedStream : public httplib::Stream {
 public:
  FramedStream(const Conn& c, std::string request) : c_(c), data_(std::move(request)) {}
  bool is_readable() const override { return pos_ < data_.size(); }
  bool is_writable() const override {
    if (c_.stopping.load() && now_ms() > c_.stop_ms.load() + c_.lim.shutdown_write_ms) return false;
    pollfd p{c_.fd, POLLOUT, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP))) return false;
    char b;  // a client that closed its end reads as EOF
    return ::recv(c_.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, data_.size() - pos_);
    std::copy_n(data_.data() + pos_, n, ptr);
    pos_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    return c_.write_all(ptr, size) ? ssize_t(size) : -1;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address(false, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(true, ip, port); }
  socket_t socket() const override { return c_.fd; }

 private:
  void address(bool local, std::string& ip, int& port) const {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    auto* sa = reinterpret_cast<sockaddr*>(&ss);
    if ((local ? getsockname(c_.fd, sa, &len) : getpeername(c_.fd, sa, &len)) != 0) return;
    char buf[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(&ss);
      inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
      port = ntohs(in->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
      inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
      port = ntohs(in6->sin6_port);
    }
    ip = buf;
  }

  const Conn& c_;
  std::string data_;
  size_t pos_ = 0;
};

/// Reads, checks and re-frames the next request; false (with `why`) when there is none to serve.
bool next_request(Conn& c, bool first, std::string& request, Refusal& why) {
  std::string head;
  if (!read_head(c, first, head, why)) return false;
  HeadCheck h = check_head(head, c.lim);
  if (h.status != 0) {
    why = {h.status, h.message};
    return false;
  }
  if (h.expect_continue && (h.chunked || h.content_length > 0)) {
    static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (!c.write_all(kContinue, sizeof kContinue - 1)) return false;
  }
  std::string body;
  const int64_t deadline = now_ms() + c.lim.body_timeout_ms;
  if (h.chunked ? !read_chunked(c, deadline, body, why)
                : !read_exact(c, size_t(h.content_length), deadline, body, why))
    return false;
  request = std::move(h.head);
  request += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  request += "\r\n";
  request += body;
  return true;
}

}  // namespace

HeadCheck check_head(std::string_view head, const HttpLimits& limits) {
  HeadCheck h;
  auto refuse = [&](int status, std::string message) {
    h.status = status;
    h.message = std::move(message);
    return h;
  };
  size_t eol = head.find("\r\n");
  if (eol == std::string_view::npos) return refuse(400, "malformed request line");
  h.head.assign(head.substr(0, eol + 2));
  bool has_length = false;
  size_t n_fields = 0;
  for (size_t at = eol + 2; at < head.size(); at = eol + 2) {
    eol = head.find("\r\n", at);
    if (eol == std::string_view::npos) eol = head.size();
    const std::string_view line = head.substr(at, eol - at);
    if (++n_fields > limits.max_headers)
      return refuse(431, "more than " + std::to_string(limits.max_headers) + " header fields");
    if (!line.empty() && (line[0] == ' ' || line[0] == '\t'))
      return refuse(400, "obsolete header line folding");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return refuse(400, "a header line without a field name and colon");
    if (line.substr(0, colon).find_first_of(" \t") != std::string_view::npos)
      return refuse(400, "whitespace in a header field name");
    const std::string name = lower(line.substr(0, colon));
    const std::string_view value = trim(line.substr(colon + 1));
    if (name == "content-length") {
      if (value.empty() || value.find_first_not_of("0123456789") != std::string_view::npos)
        return refuse(400, "Content-Length must be a decimal number");
      // More than 18 digits is more than any --max-body: refused below as too large.
      const int64_t n = value.size() > 18 ? INT64_MAX : std::stoll(std::string(value));
      if (has_length && n != h.content_length) return refuse(400, "conflicting Content-Length");
      has_length = true;
      h.content_length = n;
      continue;
    }
    if (name == "transfer-encoding") {
      if (lower(value) != "chunked" || h.chunked)
        return refuse(501, "only 'Transfer-Encoding: chunked' is supported");
      h.chunked = true;
      continue;
    }
    if (name == "expect" && lower(value) == "100-continue") {
      h.expect_continue = true;
      continue;
    }
    h.head.append(line);
    h.head.append("\r\n");
  }
  if (has_length && h.chunked)
    return refuse(400, "both Content-Length and Transfer-Encoding (RFC 9112 §6.1)");
  if (h.content_length > limits.max_body)
    return refuse(413, "the request body is larger than --max-body");
  return h;
}

bool configure_client_socket(int fd) {
  const int one = 1;
  return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0 &&
         setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) == 0;
}

HardenedServer::HardenedServer(const HttpLimits& limits, size_t max_threads) : limits_(limits) {
  new_task_queue = [max_threads] { return new GrowingPool(max_threads); };
  set_payload_max_length(size_t(limits.max_body));
}

void HardenedServer::begin_shutdown() {
  if (stopping_.load()) return;
  stop_ms_ = now_ms();
  stopping_ = true;
}

bool HardenedServer::process_and_close_socket(socket_t sock) {
  configure_client_socket(sock);
  Conn c{sock, limits_, stopping_, stop_ms_, {}, 0};
  bool ok = true;
  for (size_t i = 0; i < limits_.max_requests_per_conn && !stopping_.load(); ++i) {
    std::string request;
    Refusal why;
    if (!next_request(c, i == 0, request, why)) {
      send_refusal(c, why);
      break;
    }
    FramedStream strm(c, std::move(request));
    const bool last = i + 1 == limits_.max_requests_per_conn || stopping_.load();
    bool closed = false;
    ok = process_request(strm, last, closed, nullptr);
    if (!ok || closed) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace kvrun::tools
