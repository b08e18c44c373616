// scheduler.h — continuous batching over the paged KV cache: many generation requests share one
// model and one KvCache; a worker thread runs one batched forward step at a time over every
// active session.
//
// Each step takes the pending decode token of every running session, then fills the rest of
// the token budget (n_batch) with prefill chunks of sessions still reading their prompt, runs
// one llama_forward over all of them (each sequence with its own block table), and samples one
// token for every session whose step produced logits (its own sampler, seed, penalties, stop
// strings, logprobs). A request submitted while others run joins at the next step; a long prompt
// is prefilled a chunk per step, so running decodes keep producing a token every step.
//
// Sessions hold their own KvSequence (context length up to n_ctx each, no fixed split of the
// pool); with the cache's prefix cache on, a prompt starting with blocks another request has
// computed (e.g. the earlier turns of a chat) takes them instead of recomputing them.
//
// Cancellation (Request::cancel, e.g. a client that went away) and the per-request timeout are
// checked at every step: the session ends and its blocks return to the pool. When the pool has
// no block left for a session, the request fails with an error (a prefill waits while other
// sessions run and may free blocks). The engine knows nothing of HTTP (tools/serve.cpp is one
// front end).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/context.h"
#include "engine/logprobs.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/step.h"
#include "engine/token_stream.h"
#include "kv/kv_cache.h"
#include "text/tokenizer.h"

namespace kvrun {

/// The scheduler cannot take another request now (active sessions and queue are full).
class QueueFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// How to build a Scheduler.
struct SchedulerParams {
  int64_t n_ctx = 0;      ///< positions per session at most (≥ 1)
  int64_t n_batch = 512;  ///< tokens per forward step (decodes + prefill chunks), ≥ 1
  int n_parallel = 4;     ///< sessions generating at once (≥ 1)
  int max_queue = 64;     ///< requests waiting beyond n_parallel (≥ 0); more → QueueFull
  int n_threads = 0;      ///< worker threads of the forward pass; 0 = physical cores
  FlashAttn flash_attn = FlashAttn::kAuto;
};

/// What one request asks for.
struct RequestParams {
  std::vector<int32_t> prompt;    ///< token ids (BOS included when wanted), 1 … n_ctx of them
  int64_t n_predict = -1;         ///< tokens to generate at most; < 0: until EOG / full context
  SamplerParams sampling;         ///< temperature, top-k/p, penalties, seed
  int n_probs = 0;                ///< top-K logprobs per generated token (0: none)
  std::vector<std::string> stop;  ///< stop strings (not included in the output)
  bool ignore_eos = false;        ///< keep generating past end-of-generation tokens
  bool cache_prompt = true;       ///< take cached KV blocks of the prompt's prefix
  double timeout_s = 0;           ///< end the request after this many seconds (0: never)
  std::shared_ptr<const Grammar> grammar;  ///< constrain the output (GBNF; null: none)
  int n_indent = 0;  ///< end at a new line indented less than this (TokenStreamParams::n_indent)
  /// Once a generated token's text held a newline, end (kLength) at the first token sampled
  /// more than this many ms after the first generated token (0: never). llama.cpp's server's
  /// t_max_predict_ms, which editor plugins use to bound a completion's latency.
  double t_max_predict_ms = 0;
};

/// One generated token as streamed.
struct TokenEvent {
  int32_t id = 0;                 ///< the token
  std::string text;               ///< text released with it (complete UTF-8, stop-safe; may be "")
  float logprob = 0;              ///< log p(id) of the raw distribution (with n_probs > 0)
  std::vector<TokenLogprob> top;  ///< [n_probs] most likely tokens (with n_probs > 0)
};

/// The outcome of a request.
struct RequestResult {
  FinishReason finish = FinishReason::kLength;
  std::string error;            ///< with kError: why
  std::string stop_word;        ///< with kStopString: which
  std::vector<int32_t> tokens;  ///< generated ids (no EOG token)
  std::string text;             ///< generated text (stop string excluded)
  std::string tail;             ///< the end of `text` released at the end, in no TokenEvent
  int64_t n_prompt = 0;         ///< prompt tokens
  int64_t n_cached = 0;         ///< prompt tokens taken from the prefix cache
  double queue_ms = 0;          ///< submit → first step of the session
  double ttft_ms = 0;           ///< submit → first generated token
  double prompt_ms = 0;         ///< first step → first token (prefill)
  double gen_ms = 0;            ///< first token → end (decode)
};

/// An event of a request's stream: a token, or the end (then `done` and `result` are set).
struct RequestEvent {
  bool done = false;
  TokenEvent token;
  RequestResult result;
};

/// A submitted request: the front end reads its events and may cancel it. Thread-safe.
class Request {
 public:
  /// Blocks up to `wait` for the next event; nullopt when none came.
  std::optional<RequestEvent> next(std::chrono::milliseconds wait);
  /// Asks the scheduler to stop this request at its next step (its blocks return to the pool).
  void cancel();
  bool cancelled() const { return cancelled_.load(); }
  /// A number unique within the scheduler.
  int64_t id() const { return id_; }

 private:
  friend class Scheduler;
  void push(RequestEvent e);
  int64_t id_ = 0;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> events_;
};

/// One active session, for a status view (GET /slots).
struct SessionInfo {
  int64_t id = 0;           ///< Request::id
  bool prefill = false;     ///< still reading its prompt
  int64_t n_prompt = 0;     ///< prompt tokens
  int64_t n_cached = 0;     ///< of which taken from the prefix cache
  int64_t n_past = 0;       ///< tokens the session's KV holds
  int64_t n_generated = 0;  ///< tokens generated so far
};

/// Counters since start, and the pool now (for /metrics).
struct SchedulerStats {
  int64_t n_requests = 0;             ///< submitted
  int64_t n_finished = 0;             ///< ended in any way
  int64_t n_cancelled = 0;            ///< ended by cancel (client gone)
  int64_t n_timeout = 0;              ///< ended by timeout
  int64_t n_errors = 0;               ///< ended with kError
  int64_t n_rejected = 0;             ///< refused with QueueFull
  int64_t n_prompt_tokens = 0;        ///< prompt tokens of started requests
  int64_t n_cached_tokens = 0;        ///< of which taken from the prefix cache
  int64_t n_prefill_tokens = 0;       ///< prompt tokens computed
  int64_t n_generated_tokens = 0;     ///< tokens sampled
  int64_t n_steps = 0;                ///< forward steps
  int64_t n_device_oom = 0;           ///< steps run again after a device ran out of memory
  double prefill_s = 0;               ///< time in steps, weighted by the prefill share of tokens
  double decode_s = 0;                ///< time in steps, weighted by the decode share of tokens
  int64_t n_active = 0;               ///< sessions now
  int64_t n_queued = 0;               ///< waiting requests now
  BlockPoolStats blocks;              ///< the KV pool now
  KvTierStats tiers;                  ///< where the KV blocks are now, and moves so far
  int64_t window_blocks_used = 0;     ///< windowed-layer blocks in a window now (window tables)
  std::vector<SessionInfo> sessions;  ///< active sessions now
};

/// Continuous-batching engine over one Model, Tokenizer and KvCache (all must outlive it).
class Scheduler {
 public:
  /// Starts the worker thread. Throws std::invalid_argument for bad params.
  Scheduler(const Model& model, const Tokenizer& tok, KvCache& cache, const SchedulerParams& p);
  /// Cancels every request (their streams end with kCancelled) and joins the worker.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Queues a request. Throws ContextError for an empty prompt, a prompt longer than n_ctx, a
  /// token id outside the vocabulary or an encoder model (Model::encoder: no text generation);
  /// QueueFull when n_parallel sessions run and max_queue wait.
  std::shared_ptr<Request> submit(RequestParams params);

  /// A snapshot of the counters and the pool (taken after the latest step).
  SchedulerStats stats() const;
  const SchedulerParams& params() const { return params_; }

 private:
  struct Session;
  struct Pending {
    std::shared_ptr<Request> req;
    RequestParams params;
    std::chrono::steady_clock::time_point submitted;
  };
  void run();
  void admit();
  /// The sessions of one step and their rows (Scheduler::step).
  struct Batch {
    std::vector<Session*> sessions;  ///< in the step's slice order
    std::vector<int64_t> n_rows;     ///< rows of each
    int64_t n_decode = 0, n_prefill = 0;
    Session* waiting = nullptr;  ///< a prefill that found the pool full
    std::string waiting_why;     ///< the KvCacheFull that stopped it
  };
  /// One forward step: decodes, then prefill chunks (build_batch). A step that throws
  /// DeviceOutOfMemory is run again after shed(): so a request that no longer fits the device
  /// ends with kError (serve: 503) and the others keep running.
  bool step();
  /// Clears the Step and adds this step's rows; ends a decode whose block cannot be taken.
  Batch build_batch();
  /// After a step of `b` ran out of device memory (`why`): halves the largest prefill chunk;
  /// when every chunk is one row, ends the session with the most context (kError, `why`).
  void shed(const Batch& b, const std::string& why);
  void finish(Session& s, FinishReason why, const std::string& error = "");
  void sample(Session& s, std::span<const float> logits);
  void publish_stats();

  const Model& model_;
  const Tokenizer& tok_;
  std::shared_ptr<const TokenTrie> grammar_vocab_;  // built for the first grammar request
  KvCache& cache_;
  SchedulerParams params_;
  bool flash_ = false;

  mutable std::mutex mu_;  // guards queue_, stop_, stats_, n_inflight_, next_id_
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool stop_ = false;
  int64_t n_inflight_ = 0;  // queued + active
  int64_t next_id_ = 1;
  int64_t n_requests_ = 0, n_rejected_ = 0;
  SchedulerStats stats_;  // the worker's snapshot after its latest step

  // Worker-thread state.
  std::vector<std::unique_ptr<Session>> active_;
  SchedulerStats counters_;     // worker's running counters (copied into stats_)
  std::unique_ptr<Step> step_;  // the batch builder and forward
  std::thread worker_;          // last: starts once everything above exists
};

}  // namespace kvrun
