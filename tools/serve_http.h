// serve_http.h — the HTTP/1.1 framing of `kvrun serve`, checked before cpp-httplib sees a request.
//
// cpp-httplib 0.11 (the Debian library) reads request heads and bodies itself, with a per-read
// timeout only, no limit on header count, chunked bodies outside its payload limit, a 30 s wait
// for a body a Content-Length announced, and Nagle's algorithm left on. HardenedServer reads
// each request on a connection itself: the head within a deadline and size limits, the body
// (Content-Length or chunked) within --max-body and a deadline, refusing what RFC 9112 says a
// server should refuse; then it hands cpp-httplib the request re-framed with a Content-Length,
// from memory. Connections get TCP_NODELAY, handler threads grow on demand (a slow client holds
// one thread, not the pool), and begin_shutdown() makes every connection end within about a
// second. Behaviour and limits: docs/http-api.md ("Limits").
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvrun::tools {

/// What one client may send, and how long it may take.
struct HttpLimits {
  int64_t max_body = 1 << 20;        ///< body bytes (Content-Length or de-chunked), else 413
  size_t max_head_bytes = 64 << 10;  ///< request line + header lines, else 431
  size_t max_headers = 128;          ///< header fields, else 431
  int head_timeout_ms = 10000;       ///< the whole head must arrive within this, else 408
  int body_timeout_ms = 20000;       ///< the whole body must arrive within this, else 408
  int idle_timeout_ms = 5000;        ///< keep-alive wait for the next request
  int write_stall_ms = 30000;        ///< a write making no progress this long fails
  int shutdown_write_ms = 1000;      ///< after begin_shutdown(): how long writes may still take
  size_t max_requests_per_conn = 1000;
};

/// The framing of a request head, as checked by check_head().
struct HeadCheck {
  int status = 0;       ///< 0: acceptable; else the HTTP status to refuse it with
  std::string message;  ///< why it was refused
  int64_t content_length = 0;
  bool chunked = false;  ///< Transfer-Encoding: chunked
  bool expect_continue = false;
  std::string head;  ///< request line and headers, framing headers removed, CRLF ended
};

/// Checks a request head (request line and header lines, each CRLF-ended, without the empty
/// line): header count, lines without a colon or with whitespace before it, obsolete line
/// folding, Content-Length (digits only; repeated values must agree; above max_body → 413),
/// Transfer-Encoding (only "chunked"; together with Content-Length → 400).
HeadCheck check_head(std::string_view head, const HttpLimits& limits);

/// Sets TCP_NODELAY (responses go out without waiting for the client's delayed ACK) and
/// keep-alive probes on an accepted socket. Returns false when setsockopt fails.
bool configure_client_socket(int fd);

/// A cpp-httplib server whose connections are read and framed as described at the top.
class HardenedServer : public httplib::Server {
 public:
  /// Limits for every connection; `max_threads` caps the handler threads (one a connection).
  HardenedServer(const HttpLimits& limits, size_t max_threads);

  /// From now on connections take no new request, reads end, and writes get at most
  /// limits.shutdown_write_ms more; stop() then returns quickly. Thread-safe, idempotent.
  void begin_shutdown();
  /// True after begin_shutdown().
  bool shutting_down() const { return stopping_.load(); }

 private:
  bool process_and_close_socket(socket_t sock) override;

  HttpLimits limits_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> stop_ms_{0};  // steady-clock ms of begin_shutdown()
};

}  // namespace kvrun::tools
