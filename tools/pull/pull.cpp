// pull.cpp — listing, resumable download and verification of model files (pull.h), on libcurl.
#include "tools/pull/pull.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

namespace kvrun::pull {
namespace fs = std::filesystem;
namespace {

void curl_init_once() {
  static const bool ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  if (!ok) throw PullError("libcurl failed to initialize");
}

using CurlPtr = std::unique_ptr<CURL, decltype(&curl_easy_cleanup)>;

/// An easy handle with what every request of ours sets: redirects followed (at most 10), a
/// user agent, connect and stall timeouts, and the bearer token for `url`'s own host only
/// (CURLAUTH_BEARER is not forwarded across hosts unless CURLOPT_UNRESTRICTED_AUTH is set).
CurlPtr make_handle(const PullConfig& cfg, const std::string& url) {
  curl_init_once();
  CurlPtr h(curl_easy_init(), &curl_easy_cleanup);
  if (!h) throw PullError("libcurl: cannot create a handle");
  curl_easy_setopt(h.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(h.get(), CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(h.get(), CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(h.get(), CURLOPT_USERAGENT, "kvrun");
  curl_easy_setopt(h.get(), CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(h.get(), CURLOPT_LOW_SPEED_LIMIT, 1L);  // stalled 60 s: give up this try
  curl_easy_setopt(h.get(), CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(h.get(), CURLOPT_NOSIGNAL, 1L);
  if (!cfg.token.empty()) {
    curl_easy_setopt(h.get(), CURLOPT_HTTPAUTH, long(CURLAUTH_BEARER));
    curl_easy_setopt(h.get(), CURLOPT_XOAUTH2_BEARER, cfg.token.c_str());
  }
  return h;
}

size_t append_to_string(char* p, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(p, size * n);
  return size * n;
}

std::string http_get_text(const PullConfig& cfg, const std::string& url) {
  CurlPtr h = make_handle(cfg, url);
  std::string body;
  curl_easy_setopt(h.get(), CURLOPT_WRITEFUNCTION, append_to_string);
  curl_easy_setopt(h.get(), CURLOPT_WRITEDATA, &body);
  const CURLcode rc = curl_easy_perform(h.get());
  if (rc != CURLE_OK) throw PullError("GET " + url + ": " + curl_easy_strerror(rc));
  long code = 0;
  curl_easy_getinfo(h.get(), CURLINFO_RESPONSE_CODE, &code);
  if (code != 200) {
    std::string hint = code == 401 || code == 403 ? " (a gated or private repository: set HF_TOKEN)"
                       : code == 404              ? " (no such repository)"
                                                  : "";
    throw PullError("GET " + url + ": HTTP " + std::to_string(code) + hint);
  }
  return body;
}

/// One transfer into an open .part file; see download_file.
struct Transfer {
  FILE* out = nullptr;
  int64_t offset = 0;   ///< bytes the file had when this try started
  int64_t written = 0;  ///< bytes this try wrote
  bool restarted = false;
  CURL* handle = nullptr;
  const ProgressFn* progress = nullptr;
  int64_t total = -1;
};

size_t write_part(char* p, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  if (t->offset > 0 && t->written == 0 && !t->restarted) {
    long code = 0;
    curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &code);
    if (code == 200) {  // the server ignored the Range: the body is the whole file again
      if (std::fflush(t->out) != 0 || ftruncate(fileno(t->out), 0) != 0) return 0;
      std::rewind(t->out);
      t->offset = 0;
      t->restarted = true;
    }
  }
  const size_t bytes = size * n;
  if (std::fwrite(p, 1, bytes, t->out) != bytes) return 0;
  t->written += int64_t(bytes);
  return bytes;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (t->progress && *t->progress) (*t->progress)(t->offset + t->written, t->total);
  return 0;
}

int64_t file_size_or(const fs::path& p, int64_t missing) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? missing : int64_t(n);
}

/// One try: appends to `part` from its current size. Returns the curl result and HTTP code.
std::pair<CURLcode, long> transfer_once(const PullConfig& cfg, const std::string& url,
                                        const fs::path& part, int64_t size,
                                        const ProgressFn& progress) {
  FILE* out = std::fopen(part.c_str(), "ab");
  if (!out) throw PullError("cannot write " + part.string());
  Transfer t;
  t.out = out;
  t.offset = file_size_or(part, 0);
  t.total = size;
  t.progress = &progress;
  CurlPtr h = make_handle(cfg, url);
  t.handle = h.get();
  curl_easy_setopt(h.get(), CURLOPT_WRITEFUNCTION, write_part);
  curl_easy_setopt(h.get(), CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(h.get(), CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h.get(), CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(h.get(), CURLOPT_XFERINFODATA, &t);
  if (t.offset > 0) curl_easy_setopt(h.get(), CURLOPT_RESUME_FROM_LARGE, curl_off_t(t.offset));
  CURLcode rc = curl_easy_perform(h.get());
  long code = 0;
  curl_easy_getinfo(h.get(), CURLINFO_RESPONSE_CODE, &code);
  if (std::fclose(out) != 0 && rc == CURLE_OK) rc = CURLE_WRITE_ERROR;
  return {rc, code};
}

}  // namespace

ProgressFn terminal_progress(const std::string& name) {
  using Clock = std::chrono::steady_clock;
  struct State {
    Clock::time_point start = Clock::now(), last{};
    int64_t first = -1;
  };
  auto st = std::make_shared<State>();
  return [st, name](int64_t done, int64_t total) {
    const auto now = Clock::now();
    if (st->first < 0) st->first = done;
    if (now - st->last < std::chrono::milliseconds(200) && done != total) return;
    st->last = now;
    const double sec = std::chrono::duration<double>(now - st->start).count();
    const double rate = sec > 0 ? double(done - st->first) / sec : 0.0;
    const double mib = 1024.0 * 1024.0;
    std::fprintf(stderr, "\r%s  %.1f / %.1f MiB  %.1f MiB/s", name.c_str(), double(done) / mib,
                 double(total > 0 ? total : done) / mib, rate / mib);
    if (total > 0 && rate > 0) std::fprintf(stderr, "  ETA %.0f s ", double(total - done) / rate);
    if (total > 0 && done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

PullConfig config_from_env() {
  PullConfig c;
  const char* ep = std::getenv("HF_ENDPOINT");
  c.endpoint = ep && *ep ? ep : "https://huggingface.co";
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  if (const char* tok = std::getenv("HF_TOKEN")) c.token = tok;
  if (const char* d = std::getenv("KVRUN_CACHE"); d && *d) {
    c.cache_dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    c.cache_dir = std::string(x) + "/kvrun";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    c.cache_dir = std::string(home) + "/.cache/kvrun";
  } else {
    c.cache_dir = ".kvrun-cache";
  }
  c.progress = isatty(STDERR_FILENO) != 0;
  return c;
}

std::vector<RemoteFile> list_repo_files(const PullConfig& cfg, const std::string& repo) {
  const std::string url = cfg.endpoint + "/api/models/" + repo + "/tree/main?recursive=true";
  const std::string body = http_get_text(cfg, url);
  std::vector<RemoteFile> out;
  try {
    const nlohmann::json j = nlohmann::json::parse(body);
    if (!j.is_array()) throw PullError("the listing is not a JSON array");
    for (const auto& e : j) {
      if (!e.is_object() || e.value("type", "") != "file") continue;
      RemoteFile f;
      f.path = e.at("path").get<std::string>();
      f.size = e.value("size", int64_t(-1));
      if (auto lfs = e.find("lfs"); lfs != e.end() && lfs->is_object()) {
        f.sha256 = lfs->value("oid", "");
        f.size = lfs->value("size", f.size);
      }
      out.push_back(std::move(f));
    }
  } catch (const nlohmann::json::exception& e) {
    throw PullError("GET " + url + ": malformed listing: " + e.what());
  }
  return out;
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw PullError("cannot read " + path);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw PullError("sha256: OpenSSL failed to initialize");
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), size_t(in.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &n);
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < n; ++i) {
    s += hex[md[i] >> 4];
    s += hex[md[i] & 15];
  }
  return s;
}

void download_file(const PullConfig& cfg, const std::string& url, const std::string& dest,
                   int64_t size, const std::string& sha256, const ProgressFn& progress) {
  const fs::path final_path(dest), part = fs::path(dest + ".part");
  std::error_code ec;
  fs::create_directories(final_path.parent_path(), ec);
  if (ec)
    throw PullError("cannot create " + final_path.parent_path().string() + ": " + ec.message());
  if (size >= 0 && file_size_or(part, 0) > size) fs::remove(part, ec);  // not ours: start over
  std::string last_error;
  for (int attempt = 1; attempt <= cfg.max_attempts; ++attempt) {
    if (size >= 0 && file_size_or(part, -1) == size) break;  // complete: verify below
    const auto [rc, code] = transfer_once(cfg, url, part, size, progress);
    if (rc == CURLE_OK && (code == 200 || code == 206)) {
      if (size < 0 || file_size_or(part, 0) == size) break;
      last_error = "the transfer ended at " + std::to_string(file_size_or(part, 0)) + " of " +
                   std::to_string(size) + " bytes";
    } else if (rc == CURLE_OK && code == 416 && size >= 0 && file_size_or(part, 0) == size) {
      break;  // nothing left to fetch
    } else if (rc == CURLE_OK) {
      throw PullError("GET " + url + ": HTTP " + std::to_string(code));
    } else {
      last_error = curl_easy_strerror(rc);
    }
    if (attempt < cfg.max_attempts)
      std::this_thread::sleep_for(std::chrono::milliseconds(200 * attempt));
  }
  const int64_t have = file_size_or(part, 0);
  if (size >= 0 && have != size)
    throw PullError("GET " + url + ": " + std::to_string(have) + " of " + std::to_string(size) +
                    " bytes after " + std::to_string(cfg.max_attempts) + " tries (" + last_error +
                    "); run again to resume from " + part.string());
  if (!sha256.empty()) {
    const std::string got = sha256_file(part.string());
    if (got != sha256)
      throw PullError(part.string() + ": sha256 " + got + " is not the repository's " + sha256 +
                      "; the file was not used (delete it to download again)");
  }
  fs::rename(part, final_path, ec);
  if (ec) throw PullError("cannot rename " + part.string() + ": " + ec.message());
  if (!sha256.empty()) std::ofstream(dest + ".sha256") << sha256 << "\n";
}

}  // namespace kvrun::pull
