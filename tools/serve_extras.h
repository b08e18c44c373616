// serve_extras.h — what `kvrun serve` offers around generation: CORS for browser clients,
// request logging, GET /props, and the embeddings endpoints (/v1/embeddings, /embedding,
// /embeddings, ollama's /api/embed). Field by field: docs/http-api.md.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/context.h"
#include "engine/embed.h"
#include "engine/model.h"
#include "text/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kvrun::tools {

/// The serve options this file reads (a part of ServeOptions).
struct ServeExtrasOptions {
  /// --cors-origin: origins allowed to call from a browser ("*" = any); empty = same-origin only
  /// (no CORS headers, as a browser then refuses cross-origin calls).
  std::vector<std::string> cors_origins;
  std::string log_format = "text";  ///< --log-format text|json: one line per request
  std::string log_file;             ///< --log-file FILE (appended); "" = stderr
  bool log_disable = false;         ///< --log-disable: no request lines
  std::string pooling;              ///< --pooling for the embeddings endpoints ("" = model's)
  bool no_webui = false;            ///< --no-webui: no chat page at /
};

/// The CORS response headers for a request from `origin` ("" when the request has none): empty
/// unless the origin is allowed. Access-Control-Allow-Origin echoes the origin (or "*").
std::vector<std::pair<std::string, std::string>> cors_headers(const ServeExtrasOptions& o,
                                                              const std::string& origin);

/// One request line: text "METHOD PATH STATUS MS ms REMOTE" or a JSON object with those fields
/// (keys method, path, status, ms, remote, time).
std::string request_log_line(const std::string& format, const std::string& method,
                             const std::string& path, int status, double ms,
                             const std::string& remote);

/// Embeddings for the server: one Context in embeddings mode (its own KV cache of n_ctx tokens,
/// created at the first request), used by one request at a time.
class EmbedService {
 public:
  /// `model` and `tok` must outlive this. `cp` is the context's shape (n_ctx, n_batch, threads,
  /// KV types); cp.embeddings is set here. For an encoder model the context is made here
  /// (ContextError, e.g. n_ctx past a bert's positions), else at the first request.
  EmbedService(const Model& model, const Tokenizer& tok, ContextParams cp, Pooling pooling);
  /// Embeds each input (a string, or token ids) with the service's pooling and `norm`; returns
  /// one vector per input, and the tokens used in `n_tokens`. Throws ApiError (400) for an empty
  /// or too long input or a bad token id.
  std::vector<std::vector<float>> embed(const std::vector<nlohmann::ordered_json>& inputs, int norm,
                                        int64_t* n_tokens);
  Pooling pooling() const { return pooling_; }
  /// Floats per embedding row (the model's n_embd).
  int64_t n_embd() const { return model_.hparams().n_embd; }

 private:
  const Model& model_;
  const Tokenizer& tok_;
  ContextParams cp_;
  Pooling pooling_;
  std::mutex mu_;
  std::unique_ptr<Context> ctx_;
};

/// What GET /props and the extra endpoints need.
struct ExtrasContext {
  const ServeExtrasOptions* opt = nullptr;
  EmbedService* embed = nullptr;
  nlohmann::ordered_json props;        ///< the GET /props object (built at start)
  nlohmann::ordered_json ollama_tag;   ///< the model's /api/tags entry (built at start)
  nlohmann::ordered_json ollama_info;  ///< its /api/show object (built at start)
  std::string model_name;              ///< "model" in responses
  FILE* log = nullptr;                 ///< request log (null: off)
  std::mutex log_mu;
};

/// Sets the CORS pre-routing (preflight OPTIONS answered 204 before the API-key check; the
/// returned function must be called first by the server's own pre-routing handler, returning
/// true when it answered) and post-routing (CORS headers on every response) and the request
/// logger on `svr`.
bool handle_cors_preflight(ExtrasContext& x, const httplib::Request& req, httplib::Response& res);
void install_cors_and_logging(httplib::Server& svr, ExtrasContext& x);

/// ollama's model listing for one model: /api/tags's entry, /api/show's object.
nlohmann::ordered_json ollama_model_entry(const Model& model, const std::string& name,
                                          const std::string& path);
nlohmann::ordered_json ollama_show(const Model& model, const std::string& name);

/// Registers GET /props, GET /api/tags, /api/version, /api/ps, POST /api/show, POST /v1/embeddings,
/// /embedding, /embeddings and /api/embed, and the chat page (tools/web/index.html, embedded at
/// build time) at GET / unless --no-webui.
void add_extra_routes(httplib::Server& svr, ExtrasContext& x);

}  // namespace kvrun::tools
