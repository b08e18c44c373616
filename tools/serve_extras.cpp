// serve_extras.cpp — CORS, request logging, /props and the embeddings endpoints (serve_extras.h).
#include "serve_extras.h"

#include <httplib.h>
#include <openssl/evp.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>

#include "dtype.h"
#include "gguf.h"
#include "serve_api.h"
#include "serve_ollama.h"
#include "serve_reply.h"

// tools/web/index.html, embedded by cmake/embed_file.cmake.
extern const unsigned char kvrun_web_index_html[];
extern const size_t kvrun_web_index_html_size;

namespace kvrun::tools {
namespace {

using Clock = std::chrono::steady_clock;
thread_local Clock::time_point t_request_start;  // pre-routing → logger, one handler thread

/// OpenAI's encoding_format "base64": the float32 values, little-endian, in base64.
std::string base64_floats(const std::vector<float>& v) {
  std::string out(4 * ((v.size() * 4 + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(v.data()),
                                int(v.size() * sizeof(float)));
  out.resize(size_t(n));
  return out;
}

/// The inputs of an embeddings request: a string, an array of strings, an array of token ids,
/// or an array of arrays of token ids (OpenAI's `input`; llama-server's `content`).
std::vector<json> embedding_inputs(const json& v, const char* field) {
  auto bad = [&] {
    return ApiError(400,
                    std::string("'") + field +
                        "' must be a string, an array of strings, an array of token ids or "
                        "an array of arrays of token ids",
                    field);
  };
  if (v.is_string()) return {v};
  if (!v.is_array() || v.empty()) throw bad();
  if (v.front().is_number_integer()) return {v};
  std::vector<json> out;
  for (const json& e : v) {
    if (!e.is_string() && !e.is_array()) throw bad();
    out.push_back(e);
  }
  if (out.size() > 2048)
    throw ApiError(400, std::string("more than 2048 inputs in '") + field + "'", field);
  return out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> cors_headers(const ServeExtrasOptions& o,
                                                              const std::string& origin) {
  if (origin.empty()) return {};
  const bool any =
      std::find(o.cors_origins.begin(), o.cors_origins.end(), "*") != o.cors_origins.end();
  if (!any &&
      std::find(o.cors_origins.begin(), o.cors_origins.end(), origin) == o.cors_origins.end())
    return {};
  return {{"Access-Control-Allow-Origin", any ? "*" : origin},
          {"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
          {"Access-Control-Allow-Headers", "Authorization, Content-Type"},
          {"Access-Control-Max-Age", "600"},
          {"Vary", "Origin"}};
}

std::string request_log_line(const std::string& format, const std::string& method,
                             const std::string& path, int status, double ms,
                             const std::string& remote) {
  if (format == "json") {
    const std::time_t now = std::time(nullptr);
    char ts[32];
    std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    return json({{"time", ts},
                 {"method", method},
                 {"path", path},
                 {"status", status},
                 {"ms", std::round(ms * 10) / 10},
                 {"remote", remote}})
        .dump();
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, " %d %.1f ms ", status, ms);
  return "kvrun: " + method + " " + path + buf + remote;
}

EmbedService::EmbedService(const Model& model, const Tokenizer& tok, ContextParams cp,
                           Pooling pooling)
    : model_(model), tok_(tok), cp_(std::move(cp)), pooling_(pooling) {
  cp_.embeddings = true;
  // An encoder serves nothing else: its context is made now, so that a -c it cannot hold (past
  // a bert's position rows) stops the server at start.
  if (model_.encoder()) ctx_ = std::make_unique<Context>(model_, cp_);
}

std::vector<std::vector<float>> EmbedService::embed(const std::vector<json>& inputs, int norm,
                                                    int64_t* n_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ctx_) ctx_ = std::make_unique<Context>(model_, cp_);
  std::vector<std::vector<int32_t>> all;
  *n_tokens = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int32_t> ids;
    if (inputs[i].is_string()) {
      ids = tok_.tokenize(inputs[i].get<std::string>(), true, false);
    } else {
      for (const json& t : inputs[i]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok_.n_vocab())
          throw ApiError(400,
                         "input " + std::to_string(i) + " has a token id outside the vocabulary",
                         "input");
        ids.push_back(t.get<int32_t>());
      }
    }
    if (ids.empty()) throw ApiError(400, "input " + std::to_string(i) + " is empty", "input");
    if (int64_t(ids.size()) > ctx_->n_ctx())
      throw ApiError(400,
                     "input " + std::to_string(i) + " has " + std::to_string(ids.size()) +
                         " tokens, more than the context of " + std::to_string(ctx_->n_ctx()),
                     "input");
    *n_tokens += int64_t(ids.size());
    all.push_back(std::move(ids));
  }
  return embed_inputs(*ctx_, all, pooling_, norm);  // an encoder's: several per step
}

bool handle_cors_preflight(ExtrasContext& x, const httplib::Request& req, httplib::Response& res) {
  t_request_start = Clock::now();
  if (req.method != "OPTIONS") return false;
  for (const auto& [k, v] : cors_headers(*x.opt, req.get_header_value("Origin")))
    res.set_header(k, v);
  res.status = 204;
  return true;
}

void install_cors_and_logging(httplib::Server& svr, ExtrasContext& x) {
  svr.set_post_routing_handler([&x](const httplib::Request& req, httplib::Response& res) {
    if (req.method == "OPTIONS") return;  // the preflight set its own
    for (const auto& [k, v] : cors_headers(*x.opt, req.get_header_value("Origin")))
      res.set_header(k, v);
  });
  if (!x.log) return;
  svr.set_logger([&x](const httplib::Request& req, const httplib::Response& res) {
    const double ms =
        std::chrono::duration<double, std::milli>(Clock::now() - t_request_start).count();
    const std::string line =
        request_log_line(x.opt->log_format, req.method, req.path, res.status, ms, req.remote_addr);
    std::lock_guard<std::mutex> lock(x.log_mu);
    std::fprintf(x.log, "%s\n", line.c_str());
    std::fflush(x.log);
  });
}

namespace {

/// Weight count and the dominant tensor type, as ollama's details report them.
std::pair<int64_t, std::string> weight_summary(const Model& model) {
  int64_t n = 0;
  std::map<std::string, int64_t> bytes_by_type;
  for (const gguf::TensorInfo& t : model.file().tensors()) {
    int64_t e = 1;
    for (int d = 0; d < t.n_dims; ++d) e *= t.ne[d];
    n += e;
    bytes_by_type[traits(t.type).name] += int64_t(t.n_bytes);
  }
  std::string top;
  int64_t best = -1;
  for (const auto& [name, b] : bytes_by_type)
    if (b > best) best = b, top = name;
  for (char& c : top) c = char(std::toupper(static_cast<unsigned char>(c)));
  return {n, top};
}

std::string parameter_size(int64_t n) {
  char buf[32];
  if (n >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.1fB", double(n) / 1e9);
  else if (n >= 1000000)
    std::snprintf(buf, sizeof buf, "%.1fM", double(n) / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1fK", double(n) / 1e3);
  return buf;
}

json ollama_details(const Model& model) {
  const auto [n, type] = weight_summary(model);
  const std::string& arch = model.hparams().arch;
  return {{"parent_model", ""},
          {"format", "gguf"},
          {"family", arch},
          {"families", {arch}},
          {"parameter_size", parameter_size(n)},
          {"quantization_level", type}};
}

}  // namespace

json ollama_model_entry(const Model& model, const std::string& name, const std::string& path) {
  struct stat st {};
  const bool ok = ::stat(path.c_str(), &st) == 0;
  const int64_t size = ok ? int64_t(st.st_size) : 0;
  const std::time_t t = ok ? st.st_mtime : std::time(nullptr);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  char digest[17];
  std::snprintf(digest, sizeof digest, "%016llx",
                (unsigned long long)std::hash<std::string>()(path + std::to_string(size)));
  return {{"name", name + ":latest"}, {"model", name + ":latest"},
          {"modified_at", ts},        {"size", size},
          {"digest", digest},         {"details", ollama_details(model)}};
}

json ollama_show(const Model& model, const std::string& name) {
  const Hparams& hp = model.hparams();
  const auto tmpl = model.file().get_string("tokenizer.chat_template");
  const std::string& a = hp.arch;
  return {{"modelfile", "# served by kvrun: " + name + "\n"},
          {"parameters", ""},
          {"template", tmpl ? std::string(*tmpl) : std::string()},
          {"details", ollama_details(model)},
          {"model_info",
           {{"general.architecture", a},
            {"general.parameter_count", weight_summary(model).first},
            {a + ".block_count", hp.n_layer},
            {a + ".context_length", hp.n_ctx_train},
            {a + ".embedding_length", hp.n_embd},
            {a + ".attention.head_count", hp.n_head},
            {a + ".attention.head_count_kv", hp.n_head_kv}}},
          {"capabilities", {"completion", "embedding"}}};
}

void add_extra_routes(httplib::Server& svr, ExtrasContext& x) {
  // ollama's listing endpoints, for the one model this server has (its name is accepted with or
  // without ":latest"; any other name is 404 on /api/show, as ollama answers).
  svr.Get("/api/version", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, {{"version", "0.9.0"}});
  });
  svr.Get("/api/tags", [&x](const httplib::Request&, httplib::Response& res) {
    send_json(res, {{"models", {x.ollama_tag}}});
  });
  svr.Get("/api/ps", [&x](const httplib::Request&, httplib::Response& res) {
    json m = x.ollama_tag;
    m["size_vram"] = 0;
    send_json(res, {{"models", {m}}});
  });
  svr.Post("/api/show", guarded(
                            [&x](const httplib::Request& req, httplib::Response& res) {
                              const json body = parse_body(req.body);
                              check_ollama_model(body.value("model", body.value("name", "")),
                                                 x.model_name);
                              send_json(res, x.ollama_info);
                            },
                            true));  // ollama's {"error": "..."}
  if (!x.opt->no_webui) {
    auto page = [](const httplib::Request&, httplib::Response& res) {
      res.set_content(reinterpret_cast<const char*>(kvrun_web_index_html),
                      kvrun_web_index_html_size, "text/html; charset=utf-8");
      res.set_header("Content-Security-Policy",
                     "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'");
    };
    svr.Get("/", page);
    svr.Get("/index.html", page);
  }
  svr.Get("/props",
          [&x](const httplib::Request&, httplib::Response& res) { send_json(res, x.props); });
  // OpenAI: {"input", "model", "encoding_format": "float"|"base64"} → a list of embeddings.
  svr.Post(
      "/v1/embeddings", guarded([&x](const httplib::Request& req, httplib::Response& res) {
        const json body = parse_body(req.body);
        if (!body.contains("input")) throw ApiError(400, "'input' is required", "input");
        const std::string fmt = body.value("encoding_format", "float");
        if (fmt != "float" && fmt != "base64")
          throw ApiError(400, "'encoding_format' must be \"float\" or \"base64\"",
                         "encoding_format");
        if (x.embed->pooling() == Pooling::kNone)
          throw ApiError(400, "the server pools with 'none' (a vector per token): use /embedding");
        if (body.contains("dimensions"))
          throw ApiError(400, "'dimensions' is not supported (the model's n_embd is fixed)",
                         "dimensions");
        int64_t n_tokens = 0;
        const auto vecs = x.embed->embed(embedding_inputs(body["input"], "input"), 2, &n_tokens);
        json data = json::array();
        for (size_t i = 0; i < vecs.size(); ++i)
          data.push_back(
              {{"object", "embedding"},
               {"index", i},
               {"embedding", fmt == "base64" ? json(base64_floats(vecs[i])) : json(vecs[i])}});
        send_json(res, {{"object", "list"},
                        {"data", data},
                        {"model", x.model_name},
                        {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}});
      }));
  // llama-server: {"content", "embd_normalize"} → [{"index", "embedding": [[...]]}] (a list of
  // one pooled vector, or of every token's with pooling none).
  auto llama_embedding = guarded([&x](const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const char* field = body.contains("content") ? "content" : "input";
    if (!body.contains(field)) throw ApiError(400, "'content' is required", "content");
    const json& norm_v = body.contains("embd_normalize") ? body["embd_normalize"] : json(2);
    if (!norm_v.is_number_integer() || norm_v.get<int>() < -1 || norm_v.get<int>() > 64)
      throw ApiError(400, "'embd_normalize' must be an integer in [-1, 64]", "embd_normalize");
    int64_t n_tokens = 0;
    const auto vecs =
        x.embed->embed(embedding_inputs(body[field], field), norm_v.get<int>(), &n_tokens);
    const size_t d = size_t(x.embed->n_embd());
    json out = json::array();
    for (size_t i = 0; i < vecs.size(); ++i) {
      json rows = json::array();  // one pooled row, or with pooling none one per token
      for (size_t r = 0; r + d <= vecs[i].size(); r += d)
        rows.push_back(
            std::vector<float>(vecs[i].begin() + long(r), vecs[i].begin() + long(r + d)));
      out.push_back({{"index", i}, {"embedding", rows}});
    }
    send_json(res, out);
  });
  svr.Post("/embedding", llama_embedding);
  svr.Post("/embeddings", llama_embedding);
  // ollama: {"model", "input": string|[string], "truncate", "options"} → {"model",
  // "embeddings": [[...]], "prompt_eval_count", durations in ns}.
  svr.Post(
      "/api/embed",
      guarded(
          [&x](const httplib::Request& req, httplib::Response& res) {
            const auto t0 = Clock::now();
            const json body = parse_body(req.body);
            if (!body.contains("input")) throw ApiError(400, "'input' is required", "input");
            if (x.embed->pooling() == Pooling::kNone)
              throw ApiError(400,
                             "the server pools with 'none' (a vector per token): use /embedding");
            int64_t n_tokens = 0;
            const auto vecs =
                x.embed->embed(embedding_inputs(body["input"], "input"), 2, &n_tokens);
            const int64_t ns =
                std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
            send_json(res, {{"model", body.value("model", x.model_name)},
                            {"embeddings", vecs},
                            {"total_duration", ns},
                            {"load_duration", 0},
                            {"prompt_eval_count", n_tokens}});
          },
          true));  // ollama's {"error": "..."}
}

}  // namespace kvrun::tools
