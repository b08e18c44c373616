// serve.cpp — `kvrun serve`: a local HTTP endpoint (cpp-httplib) in front of the
// continuous-batching scheduler (src/engine/scheduler.h). OpenAI-compatible /v1/completions,
// /v1/chat/completions, /v1/models; llama.cpp-compatible /completion, /infill, /tokenize,
// /detokenize, /apply-template, /health, /metrics, /slots; ollama's /api/generate and /api/chat
// (serve_ollama.h, NDJSON through the same streaming loop). Requests and responses:
// docs/http-api.md.
#include <httplib.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/socket.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "commands.h"
#include "engine/scheduler.h"
#include "kv_layout.h"
#include "serve_api.h"
#include "serve_chat.h"
#include "serve_http.h"
#include "serve_ollama.h"
#include "serve_reply.h"
#include "session.h"

namespace kvrun::tools {
namespace {

using std::chrono::milliseconds;

/// "data: {...}\n\n"
std::string frame_sse(const json& j) { return "data: " + to_wire(j) + "\n\n"; }

/// Prometheus text exposition of the scheduler's counters and the KV pool.
std::string metrics_text(const SchedulerStats& s, const KvCache& cache) {
  std::ostringstream o;
  auto metric = [&](const char* name, const char* type, const char* help, auto value,
                    const char* labels = "") {
    o << "# HELP kvrun_" << name << " " << help << "\n# TYPE kvrun_" << name << " " << type
      << "\nkvrun_" << name << labels << " " << value << "\n";
  };
  metric("requests_total", "counter", "Generation requests accepted.", s.n_requests);
  metric("requests_rejected_total", "counter", "Requests refused because the queue was full.",
         s.n_rejected);
  metric("requests_finished_total", "counter", "Requests ended (any reason).", s.n_finished);
  metric("requests_cancelled_total", "counter", "Requests cancelled (client disconnected).",
         s.n_cancelled);
  metric("requests_timeout_total", "counter", "Requests ended by --timeout.", s.n_timeout);
  metric("requests_error_total", "counter", "Requests ended by an error (e.g. KV cache full).",
         s.n_errors);
  metric("requests_active", "gauge", "Sessions generating now.", s.n_active);
  metric("requests_queued", "gauge", "Requests waiting for a session.", s.n_queued);
  metric("prompt_tokens_total", "counter", "Prompt tokens of started requests.", s.n_prompt_tokens);
  metric("prompt_tokens_cached_total", "counter", "Prompt tokens taken from the prefix cache.",
         s.n_cached_tokens);
  metric("prefill_tokens_total", "counter", "Prompt tokens computed.", s.n_prefill_tokens);
  metric("generated_tokens_total", "counter", "Tokens generated.", s.n_generated_tokens);
  metric("forward_steps_total", "counter", "Batched forward steps.", s.n_steps);
  metric("forward_steps_device_oom_total", "counter",
         "Steps run again with fewer rows or sessions after a device ran out of memory.",
         s.n_device_oom);
  metric("prefill_tokens_per_second", "gauge", "Prefill throughput over the server's lifetime.",
         s.prefill_s > 0 ? double(s.n_prefill_tokens) / s.prefill_s : 0.0);
  metric("generation_tokens_per_second", "gauge",
         "Aggregate generation throughput over the server's lifetime (all sessions).",
         s.decode_s > 0 ? double(s.n_generated_tokens) / s.decode_s : 0.0);
  metric("prefix_cache_hit_ratio", "gauge", "Share of prompt tokens taken from the prefix cache.",
         s.n_prompt_tokens > 0 ? double(s.n_cached_tokens) / double(s.n_prompt_tokens) : 0.0);
  const KvTierStats& t = s.tiers;
  o << "# HELP kvrun_kv_blocks KV cache blocks by state (used: held by sessions, by tier: ram "
       "is the fast tier, offload the --kv-offload-dir file; free and cached: the whole pool).\n"
       "# TYPE kvrun_kv_blocks gauge\n";
  o << "kvrun_kv_blocks{tier=\"ram\",state=\"used\"} " << t.used_fast << "\n";
  o << "kvrun_kv_blocks{tier=\"offload\",state=\"used\"} " << t.used_slow << "\n";
  o << "kvrun_kv_blocks{state=\"free\"} " << s.blocks.n_free << "\n";
  o << "kvrun_kv_blocks{state=\"cached\"} " << s.blocks.n_cached << "\n";
  o << "# HELP kvrun_kv_blocks_total KV cache blocks each tier can hold.\n"
       "# TYPE kvrun_kv_blocks_total gauge\n";
  o << "kvrun_kv_blocks_total{tier=\"ram\"} " << t.n_fast << "\n";
  o << "kvrun_kv_blocks_total{tier=\"offload\"} " << t.n_slow << "\n";
  if (cache.window() > 0) {
    o << "# HELP kvrun_kv_window_blocks Blocks of the windowed layers' group (window tables): "
         "used by a session's window, and its capacity.\n"
         "# TYPE kvrun_kv_window_blocks gauge\n";
    o << "kvrun_kv_window_blocks{state=\"used\"} " << s.window_blocks_used << "\n";
    o << "kvrun_kv_window_blocks{state=\"total\"} " << cache.window_blocks() << "\n";
  }
  metric("kv_block_size", "gauge", "Tokens per KV block.", cache.block_size());
  metric("kv_block_bytes", "gauge", "Bytes per KV block (every layer, K and V).",
         cache.bytes_per_block());
  metric("kv_blocks_evicted_total", "counter", "Cached blocks evicted for new ones.",
         s.blocks.n_evicted);
  o << "# HELP kvrun_kv_block_moves_total KV blocks moved between tiers.\n"
       "# TYPE kvrun_kv_block_moves_total counter\n";
  o << "kvrun_kv_block_moves_total{direction=\"out\"} " << t.moves_out << "\n";
  o << "kvrun_kv_block_moves_total{direction=\"in\"} " << t.moves_in << "\n";
  // llama-server's names (llamacpp:*), for dashboards made for it.
  auto llama = [&](const char* name, const char* type, const char* help, auto value) {
    o << "# HELP llamacpp:" << name << " " << help << "\n# TYPE llamacpp:" << name << " " << type
      << "\nllamacpp:" << name << " " << value << "\n";
  };
  llama("prompt_tokens_total", "counter", "Number of prompt tokens processed.", s.n_prefill_tokens);
  llama("tokens_predicted_total", "counter", "Number of generation tokens processed.",
        s.n_generated_tokens);
  llama("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
        s.prefill_s > 0 ? double(s.n_prefill_tokens) / s.prefill_s : 0.0);
  llama("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
        s.decode_s > 0 ? double(s.n_generated_tokens) / s.decode_s : 0.0);
  llama("requests_processing", "gauge", "Number of requests processing.", s.n_active);
  llama("requests_deferred", "gauge", "Number of requests deferred.", s.n_queued);
  llama("n_decode_total", "counter", "Total number of llama_decode() calls.", s.n_steps);
  llama("kv_cache_usage_ratio", "gauge", "KV-cache usage. 1 means 100 percent usage.",
        s.blocks.n_blocks > 0 ? double(s.blocks.n_used) / double(s.blocks.n_blocks) : 0.0);
  llama("kv_cache_tokens", "gauge", "KV-cache tokens.", s.blocks.n_used * cache.block_size());
  return o.str();
}

/// Everything the handlers share.
struct Server {
  Server(const ServeOptions& o, const Tokenizer& t, Scheduler& s, const KvCache& c, ApiContext a)
      : opt(o), tok(t), sched(s), cache(c), api(std::move(a)) {}

  const ServeOptions& opt;
  const Tokenizer& tok;
  Scheduler& sched;
  const KvCache& cache;
  ApiContext api;
  std::atomic<int64_t> next_id{1};
  std::mutex live_mu;                              // guards live, stopping
  std::map<int64_t, std::weak_ptr<Request>> live;  // generations in flight, by Request::id
  bool stopping = false;

  /// Registers a generation so that shutdown() can cancel it (at once when already stopping).
  void track(const std::shared_ptr<Request>& h) {
    std::lock_guard<std::mutex> lock(live_mu);
    if (stopping) h->cancel();
    live[h->id()] = h;
  }
  void untrack(int64_t id) {
    std::lock_guard<std::mutex> lock(live_mu);
    live.erase(id);
  }
  /// Cancels every generation in flight and every later one: each answers with its final
  /// chunk or a 503 at the scheduler's next step.
  void shutdown() {
    std::lock_guard<std::mutex> lock(live_mu);
    stopping = true;
    for (auto& [id, w] : live)
      if (auto h = w.lock()) h->cancel();
  }

  std::string new_id(Api a) {
    return std::string(a == Api::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
  }

  /// The checked request of an endpoint's body (the parsers of serve_api.h, serve_ollama.h).
  ApiRequest parse_request(const httplib::Request& req, Api api_kind) {
    const json body = parse_body(req.body);
    ApiRequest ar;
    switch (api_kind) {
      case Api::kCompletions:
        ar = parse_completions(body, api);
        break;
      case Api::kChat:
        ar = parse_chat(body, api);
        break;
      case Api::kLlamaCompletion:
        ar = req.path == "/infill" ? parse_infill(body, api) : parse_llama_completion(body, api);
        break;
      case Api::kOllamaGenerate:
        ar = parse_ollama_generate(body, api);
        break;
      case Api::kOllamaChat:
        ar = parse_ollama_chat(body, api);
        break;
    }
    return ar;
  }

  void generate(const httplib::Request& req, httplib::Response& res, Api api_kind) {
    if (api.embeddings_only)  // as llama-server answers completions it cannot serve
      throw ApiError(501,
                     api.model_name +
                         " is an embedding (encoder-only) model: it cannot generate text; use "
                         "/v1/embeddings, /embedding or /api/embed",
                     "", "not_supported_error");
    ApiRequest ar = parse_request(req, api_kind);
    std::shared_ptr<Request> handle;
    try {
      handle = sched.submit(ar.params);
    } catch (const QueueFull& e) {
      res.set_header("Retry-After", "1");
      throw ApiError(503, std::string("server busy: ") + e.what(), "", "server_busy");
    } catch (const ContextError& e) {
      throw ApiError(400, e.what(), "prompt");
    }
    track(handle);
    const std::string id = new_id(api_kind);
    const int64_t created = int64_t(std::time(nullptr));
    if (!ar.stream) {
      struct Untrack {
        Server& s;
        int64_t id;
        ~Untrack() { s.untrack(id); }
      } untrack_at_end{*this, handle->id()};
      std::vector<TokenEvent> events;
      for (;;) {
        auto ev = handle->next(milliseconds(200));
        if (!ev) continue;  // the scheduler ends every request (timeout, shutdown)
        if (!ev->done) {
          events.push_back(std::move(ev->token));
          continue;
        }
        if (auto err = result_error(ev->result)) throw *err;
        send_json(res, response_json(ar, ev->result, events, api, id, created));
        return;
      }
    }
    res.set_header("Cache-Control", "no-cache");
    auto state = std::make_shared<ApiRequest>(std::move(ar));
    // ollama streams NDJSON (one object per line); the others server-sent events.
    const bool ndjson = is_ollama(state->api);
    res.set_chunked_content_provider(
        ndjson ? "application/x-ndjson" : "text/event-stream",
        [this, handle, state, id, created, ndjson](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          auto frame = [ndjson](const json& j) {
            return ndjson ? to_wire(j) + "\n" : frame_sse(j);
          };
          if (auto begin = stream_begin_json(*state, api, id, created))
            if (!write(frame(*begin))) return handle->cancel(), false;
          for (;;) {
            auto ev = handle->next(milliseconds(100));
            if (!ev) {
              if (!sink.is_writable()) return handle->cancel(), false;
              continue;
            }
            if (!ev->done) {
              if (auto chunk = stream_chunk_json(*state, ev->token, api, id, created))
                if (!write(frame(*chunk))) return handle->cancel(), false;
              continue;
            }
            if (auto err = result_error(ev->result)) {
              write(frame(ndjson ? json{{"error", err->what()}}
                                 : error_json(err->status, err->what(), err->type)));
            } else {
              for (const json& j : stream_end_json(*state, ev->result, api, id, created))
                if (!write(frame(j))) return false;
            }
            if (state->api == Api::kCompletions || state->api == Api::kChat)
              write("data: [DONE]\n\n");
            sink.done();
            return true;
          }
        },
        [this, handle](bool) {
          handle->cancel();  // no-op when it already ended
          untrack(handle->id());
        });
  }

  /// GET /stats: request counters and where the KV cache's blocks are.
  void stats(httplib::Response& res) {
    const SchedulerStats s = sched.stats();
    const KvTierStats& t = s.tiers;
    const int64_t bpb = cache.bytes_per_block();
    auto tier = [&](int64_t cap, int64_t used) {
      return json{
          {"blocks", cap}, {"blocks_used", used}, {"bytes", cap * bpb}, {"bytes_used", used * bpb}};
    };
    json tiers = {{"ram", tier(t.n_fast, t.used_fast)}};
    if (t.n_slow > 0) {
      tiers["offload"] = tier(t.n_slow, t.used_slow);
      tiers["offload"]["path"] = cache.offload_path();
    }
    json kv = {{"block_size", cache.block_size()},
               {"bytes_per_block", bpb},
               {"blocks_free", s.blocks.n_free},
               {"blocks_cached", s.blocks.n_cached},
               {"blocks_evicted", s.blocks.n_evicted},
               {"tiers", tiers},
               {"moves_out", t.moves_out},
               {"moves_in", t.moves_in},
               {"prefix_blocks_dropped", t.dropped},
               {"blocks_placed_slow", t.placed_slow}};
    // Window tables (gemma2/3): the global layers' blocks are the pool's above; the windowed
    // layers' blocks are a group of their own, always in RAM.
    const int64_t wbpb = cache.window_bytes_per_block();
    const int64_t used_window = s.window_blocks_used;
    if (cache.window() > 0)
      kv["window"] = {{"n_swa", cache.window()},         {"layers", cache.n_window_layers()},
                      {"bytes_per_block", wbpb},         {"blocks", cache.window_blocks()},
                      {"blocks_used", used_window},      {"bytes", cache.window_blocks() * wbpb},
                      {"bytes_used", used_window * wbpb}};
    kv["bytes_used"] = (t.used_fast + t.used_slow) * bpb + used_window * wbpb;
    send_json(res, {{"requests",
                     {{"total", s.n_requests},
                      {"finished", s.n_finished},
                      {"cancelled", s.n_cancelled},
                      {"timeout", s.n_timeout},
                      {"error", s.n_errors},
                      {"rejected", s.n_rejected},
                      {"active", s.n_active},
                      {"queued", s.n_queued}}},
                    {"tokens",
                     {{"prompt", s.n_prompt_tokens},
                      {"prompt_cached", s.n_cached_tokens},
                      {"prefill", s.n_prefill_tokens},
                      {"generated", s.n_generated_tokens}}},
                    {"kv", kv}});
  }

  void slots(httplib::Response& res) {
    const SchedulerStats s = sched.stats();
    json a = json::array();
    for (const auto& x : s.sessions)
      a.push_back({{"id", x.id},
                   {"state", x.prefill ? "prefill" : "decode"},
                   {"n_prompt", x.n_prompt},
                   {"n_cached", x.n_cached},
                   {"n_past", x.n_past},
                   {"n_generated", x.n_generated}});
    send_json(res, {{"n_parallel", opt.n_parallel},
                    {"n_ctx", opt.n_ctx},
                    {"active", a},
                    {"queued", s.n_queued}});
  }
};

/// Registers every endpoint of `s` on `svr`, with the API-key check and the error objects.
void add_routes(httplib::Server& svr, Server& s, ExtrasContext& x) {
  svr.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    // Browsers send CORS preflights without credentials: answered before the key check.
    if (handle_cors_preflight(x, req, res)) return httplib::Server::HandlerResponse::Handled;
    // The chat page itself is public (it asks for the key and sends it with its API calls).
    const bool page = (req.path == "/" || req.path == "/index.html") && req.method == "GET";
    if (s.opt.api_key.empty() || req.path == "/health" || page)
      return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + s.opt.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401, "invalid or missing API key (Authorization: Bearer KEY)", "",
                             "authentication_error"));
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = res.status == 413   ? "the request body is larger than --max-body"
                      : res.status == 404 ? "no such endpoint"
                                          : "HTTP error " + std::to_string(res.status);
    send_error(res, ApiError(res.status, msg, "",
                             res.status == 404 ? "not_found_error" : "invalid_request_error"));
  });

  svr.Post("/v1/completions",
           guarded([&](const auto& q, auto& r) { s.generate(q, r, Api::kCompletions); }));
  svr.Post("/v1/chat/completions",
           guarded([&](const auto& q, auto& r) { s.generate(q, r, Api::kChat); }));
  svr.Post("/completion",
           guarded([&](const auto& q, auto& r) { s.generate(q, r, Api::kLlamaCompletion); }));
  svr.Post("/completions",
           guarded([&](const auto& q, auto& r) { s.generate(q, r, Api::kLlamaCompletion); }));
  svr.Post("/infill",
           guarded([&](const auto& q, auto& r) { s.generate(q, r, Api::kLlamaCompletion); }));
  // ollama: answered in its own error form; a request without a prompt / messages only "loads".
  auto ollama = [&](Api kind) {
    return guarded(
        [&s, kind](const httplib::Request& q, httplib::Response& r) {
          if (auto load = ollama_load_only(parse_body(q.body), s.api, kind == Api::kOllamaChat))
            return send_json(r, *load);
          s.generate(q, r, kind);
        },
        true);
  };
  svr.Post("/api/generate", ollama(Api::kOllamaGenerate));
  svr.Post("/api/chat", ollama(Api::kOllamaChat));
  svr.Post("/apply-template", guarded([&](const auto& q, auto& r) {
             send_json(r, apply_template_response(parse_body(q.body), s.api));
           }));
  svr.Post("/tokenize", guarded([&](const auto& q, auto& r) {
             send_json(r, tokenize_response(parse_body(q.body), s.tok));
           }));
  svr.Post("/detokenize", guarded([&](const auto& q, auto& r) {
             send_json(r, detokenize_response(parse_body(q.body), s.tok));
           }));
  svr.Get("/health", [](const auto&, auto& r) { send_json(r, {{"status", "ok"}}); });
  svr.Get("/v1/models", [&](const auto&, auto& r) {
    send_json(
        r, {{"object", "list"},
            {"data",
             json::array({{{"id", s.api.model_name},
                           {"object", "model"},
                           {"created", int64_t(std::time(nullptr))},
                           {"owned_by", "kvrun"},
                           {"meta", {{"n_ctx", s.opt.n_ctx}, {"n_vocab", s.tok.n_vocab()}}}}})}});
  });
  svr.Get("/metrics", [&](const auto&, auto& r) {
    r.set_content(metrics_text(s.sched.stats(), s.cache), "text/plain; version=0.0.4");
  });
  svr.Get("/slots", [&](const auto&, auto& r) { s.slots(r); });
  svr.Get("/stats", [&](const auto&, auto& r) { s.stats(r); });
  install_cors_and_logging(svr, x);
  add_extra_routes(svr, x);
}

/// The first SIGINT/SIGTERM cancels every generation (clients get their final chunk or a 503),
/// ends every connection and stops the server; a second one exits at once. Returns when
/// `finished` is set.
void stop_on_signals(const sigset_t& sigs, const std::atomic<bool>& finished, HardenedServer& svr,
                     Server& s) {
  const timespec slice{0, 100'000'000};
  bool stopping = false;
  while (!finished.load()) {
    const int sig = sigtimedwait(&sigs, nullptr, &slice);
    if (sig <= 0) continue;
    if (stopping) {
      std::fprintf(stderr, "kvrun: second signal, exiting now\n");
      std::_Exit(128 + sig);
    }
    stopping = true;
    std::fprintf(stderr, "kvrun: stopping (cancelling requests; a second signal exits now)\n");
    s.shutdown();
    svr.begin_shutdown();
    svr.stop();
  }
}

}  // namespace

CLI::App* add_serve_command(CLI::App& app, ServeOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "serve", "HTTP server: OpenAI- and llama.cpp-compatible endpoints, continuous batching");
  cmd->add_option("-m,--model", o.model, "GGUF model file (or -hf / -mu)");
  cmd->add_option("--host", o.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o.port, "port (0: any free port, printed on stderr)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--parallel", o.n_parallel, "(-np) sessions generating at once")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--max-queue", o.max_queue, "requests waiting beyond -np before 503")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("-c,--ctx-size", o.n_ctx,
                  "context length of each session (default: min(4096, n_ctx_train))")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  cmd->add_option("-b,--batch-size", o.n_batch,
                  "tokens per forward step: decodes plus prefill chunks")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("-t,--threads", o.n_threads, "threads (default: physical cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY' (not on /health)");
  cmd->add_option("--max-body", o.max_body, "largest request body, e.g. 1M (else 413)")
      ->capture_default_str();
  cmd->add_option("--timeout", o.timeout_s, "seconds a request may take (0: no limit)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  cmd->add_option("--chat-template", o.chat_template,
                  "chat template instead of the model's: a built-in name (kvrun --chat-template "
                  "list) or a Jinja file");
  cmd->add_option("--chat-template-kwargs", o.chat_template_kwargs,
                  "default extra chat template variables as a JSON object (a request's "
                  "chat_template_kwargs win)");
  cmd->add_option("--reasoning-format", o.reasoning_format,
                  "deepseek: <think>…</think> goes to message.reasoning_content; none: left in "
                  "the content")
      ->check(CLI::IsMember({"none", "deepseek"}))
      ->capture_default_str();
  cmd->add_flag("--spm-infill", o.spm_infill,
                "fill-in-the-middle prompts (/infill, suffix) in suffix-prefix-middle order "
                "instead of prefix-suffix-middle, for models trained so");
  add_kv_cache_options(*cmd, o.kv);
  ServeExtrasOptions& x = o.extras;
  cmd->add_option("--cors-origin", x.cors_origins,
                  "allow browser calls from this origin (repeat; * = any); default: same-origin "
                  "only");
  cmd->add_option("--log-format", x.log_format, "request log lines: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--log-file", x.log_file, "append the request log to FILE (default: stderr)");
  cmd->add_flag("--log-disable", x.log_disable, "no request log");
  cmd->add_flag("--no-webui", x.no_webui, "no chat page at /");
  cmd->add_option("--pooling", x.pooling,
                  "pooling of the embeddings endpoints: none, mean, cls, last (default: the "
                  "model's pooling_type, else mean)")
      ->check(CLI::IsMember({"none", "mean", "cls", "last"}));
  return cmd;
}

namespace {

/// GET /props: llama-server's keys (default_generation_settings, total_slots, model_path,
/// chat_template, build_info) and kvrun's KV cache settings.
json make_props(const ServeOptions& opt, const Model& model, const KvCache& cache,
                Pooling pooling) {
  const KvCacheParams& kp = cache.params();
  const auto tmpl = model.file().get_string("tokenizer.chat_template");
  return {{"default_generation_settings",
           {{"n_ctx", opt.n_ctx}, {"model", opt.model}, {"n_predict", -1}}},
          {"total_slots", opt.n_parallel},
          {"model_path", opt.model},
          {"model_alias", std::filesystem::path(opt.model).stem().string()},
          {"chat_template", tmpl ? std::string(*tmpl) : std::string()},
          {"build_info", "kvrun"},
          {"modalities", {{"vision", false}, {"audio", false}}},
          {"n_embd", model.hparams().n_embd},
          {"pooling", pooling_name(pooling)},
          {"kv_cache",
           {{"type_k", kv_type_name(kp.type_k)},
            {"type_v", kv_type_name(kp.type_v)},
            {"block_size", cache.block_size()},
            {"bytes_per_block", cache.bytes_per_block()},
            {"n_blocks", cache.n_blocks()}}}};
}

}  // namespace

int cmd_serve(const ServeOptions& opt_in) {
  ServeOptions opt = opt_in;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<KvCache> cache;
  SchedulerParams sp;
  ApiContext api;
  std::unique_ptr<EmbedService> embed;
  ExtrasContext extras;
  std::unique_ptr<FILE, int (*)(FILE*)> log_file(nullptr, &std::fclose);
  int64_t max_body = 0;
  try {
    max_body = parse_size(opt.max_body);
    if (max_body < 1) throw std::invalid_argument("--max-body must be positive");
    AutoFit fit = auto_fit(opt.kv, opt.model, opt.n_ctx, opt.n_batch);
    fit.n_seqs = opt.n_parallel;
    model = std::make_unique<Model>(
        Model::load(opt.model, resolve_device_options(opt.kv.dev, -1, &fit)));
    tok = std::make_unique<Tokenizer>(Tokenizer::from_gguf(model->file()));
    opt.n_ctx = resolve_n_ctx(*model, opt.n_ctx);
    ContextParams cp;
    cp.n_ctx = opt.n_ctx * opt.n_parallel;  // pool budget (without --kv-mem): every session full
    // An encoder generates nothing (its generation endpoints answer 501 before the scheduler):
    // the scheduler's pool gets one block instead of -np × -c positions of KV never written.
    if (model->encoder()) cp.n_ctx = 1;
    cp.n_seq = opt.n_parallel;  // window tables: a window and a chunk per session
    cp.n_batch = opt.n_batch;
    apply_kv_cache_options(opt.kv, opt.model, cp);
    cache = make_context_cache(*model, cp);
    sp.n_ctx = opt.n_ctx;
    sp.n_batch = opt.n_batch;
    sp.n_parallel = opt.n_parallel;
    sp.max_queue = opt.max_queue;
    sp.n_threads = opt.n_threads;
    sp.flash_attn = cp.flash_attn;
    api.tok = tok.get();
    api.n_ctx = opt.n_ctx;
    api.n_batch = opt.n_batch;
    api.timeout_s = opt.timeout_s;
    api.model_name = std::filesystem::path(opt.model).stem().string();
    api.embeddings_only = model->encoder();
    api.spm_infill = opt.spm_infill;
    api.chat = chat_template_for(*model, *tok, opt.chat_template, opt.chat_template_kwargs);
    api.reasoning =
        opt.reasoning_format == "none" ? ReasoningFormat::kNone : ReasoningFormat::kDeepseek;
    // Embeddings run beside the scheduler on a context of their own (one request at a time).
    ContextParams ecp;
    ecp.n_ctx = opt.n_ctx;
    ecp.n_batch = opt.n_batch;
    ecp.n_threads = opt.n_threads;
    ecp.kv.type_k = cache->params().type_k;
    ecp.kv.type_v = cache->params().type_v;
    const Pooling pooling =
        opt.extras.pooling.empty() ? model_pooling(*model) : *parse_pooling(opt.extras.pooling);
    embed = std::make_unique<EmbedService>(*model, *tok, ecp, pooling);
    extras.opt = &opt.extras;
    extras.embed = embed.get();
    extras.model_name = api.model_name;
    extras.props = make_props(opt, *model, *cache, pooling);
    extras.ollama_tag = ollama_model_entry(*model, api.model_name, opt.model);
    extras.ollama_info = ollama_show(*model, api.model_name);
    if (!opt.extras.log_file.empty()) {
      log_file.reset(std::fopen(opt.extras.log_file.c_str(), "a"));
      if (!log_file) throw std::runtime_error("cannot open --log-file " + opt.extras.log_file);
    }
    extras.log = opt.extras.log_disable ? nullptr : log_file ? log_file.get() : stderr;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvrun: error: %s: %s\n", opt.model.c_str(), e.what());
    return 1;
  }

  // SIGINT/SIGTERM stop the server from a thread of their own (sigwait), so no handler runs
  // inside the server's threads. Blocked before any thread starts, so all inherit the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  // Few malloc arenas: each handler thread would otherwise get its own (up to 8 per core), and
  // every arena keeps the peak of the requests it served.
  mallopt(M_ARENA_MAX, 4);

  Scheduler sched(*model, *tok, *cache, sp);
  Server s(opt, *tok, sched, *cache, api);
  HttpLimits limits;
  limits.max_body = max_body;
  // A handler thread per connection, started on demand: slow clients do not starve the others.
  HardenedServer svr(limits, size_t(opt.n_parallel) + size_t(opt.max_queue) + 256);

  add_routes(svr, s, extras);

  // httplib 0.11 listens with a backlog of 5 (compiled into the Debian library), too few for a
  // burst of clients connecting at once: keep the listening socket and raise it after bind.
  int listen_fd = -1;
  svr.set_socket_options([&listen_fd](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd = sock;
  });
  const int port = opt.port == 0 ? svr.bind_to_any_port(opt.host)
                                 : (svr.bind_to_port(opt.host, opt.port) ? opt.port : -1);
  if (port >= 0 && listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  if (port < 0) {
    std::fprintf(stderr, "kvrun: error: cannot listen on %s:%d\n", opt.host.c_str(), opt.port);
    return 1;
  }
  std::fprintf(stderr, "kvrun: serving %s (n_ctx %lld per session, -np %d) on %s:%d\n",
               opt.model.c_str(), (long long)opt.n_ctx, opt.n_parallel, opt.host.c_str(), port);
  std::fprintf(stderr, "kvrun: listening on http://%s:%d\n", opt.host.c_str(), port);
  std::fflush(stderr);

  std::atomic<bool> finished{false};
  std::thread stopper([&] { stop_on_signals(sigs, finished, svr, s); });
  svr.listen_after_bind();
  finished = true;  // stopped (by a signal, or listening failed): the stopper returns
  stopper.join();
  std::fprintf(stderr, "kvrun: server stopped\n");
  return 0;
}

}  // namespace kvrun::tools
