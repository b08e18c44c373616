// scheduler.cpp — see scheduler.h.
#include "engine/scheduler.h"

#include <algorithm>
#include <exception>

#include "backend.h"
#include "text/grammar_vocab.h"

namespace kvrun {
namespace {

/// A request's error for the KvCacheFull `what` (KvSequence::reserve's text: how many blocks,
/// and the flag that gives more, or the device that has no memory for them).
std::string full_cache_error(const std::string& what) {
  const std::string prefix = "KV cache full: ";
  return "the KV cache is full: " +
         (what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
}

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

// ---- Request ----

std::optional<RequestEvent> Request::next(std::chrono::milliseconds wait) {
  std::unique_lock lk(mu_);
  if (!cv_.wait_for(lk, wait, [&] { return !events_.empty(); })) return std::nullopt;
  RequestEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void Request::cancel() { cancelled_.store(true); }

void Request::push(RequestEvent e) {
  {
    std::lock_guard lk(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

// ---- Session ----

struct Scheduler::Session {
  Session(KvCache& cache, const Tokenizer& tok, Pending&& pending,
          std::shared_ptr<const TokenTrie> vocab)
      : req(std::move(pending.req)),
        p(std::move(pending.params)),
        seq(cache),
        sampler(p.sampling),
        stream(tok, sampler,
               {p.n_predict, p.n_probs, p.ignore_eos, p.stop, p.grammar, std::move(vocab),
                p.n_indent}),
        submitted(pending.submitted) {
    if (p.timeout_s > 0)
      deadline = submitted + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(p.timeout_s));
  }
  std::shared_ptr<Request> req;
  RequestParams p;
  KvSequence seq;
  Sampler sampler;
  TokenStream stream;       // sample → EOG → UTF-8 → stop strings → limits (token_stream.h)
  int64_t n_prefilled = 0;  // prompt tokens in the KV (cached ones included)
  int32_t next_token = -1;  // sampled, not yet evaluated
  bool prefill = true;
  bool done = false;
  bool had_newline = false;       // an earlier generated token's text held '\n' (t_max_predict_ms)
  int64_t max_chunk = INT64_MAX;  // prompt rows per step at most (halved when a step did not fit)
  RequestResult result;
  Clock::time_point submitted, started, first_token;
  std::optional<Clock::time_point> deadline;
};

// ---- Scheduler ----

Scheduler::Scheduler(const Model& model, const Tokenizer& tok, KvCache& cache,
                     const SchedulerParams& p)
    : model_(model), tok_(tok), cache_(cache), params_(p) {
  if (p.n_ctx < 1) throw std::invalid_argument("scheduler: n_ctx must be at least 1");
  if (p.n_batch < 1) throw std::invalid_argument("scheduler: n_batch must be at least 1");
  if (p.n_parallel < 1) throw std::invalid_argument("scheduler: n_parallel must be at least 1");
  if (p.max_queue < 0) throw std::invalid_argument("scheduler: max_queue must be at least 0");
  flash_ = use_flash_attn(p.flash_attn);
  StepParams sp;
  sp.n_threads = p.n_threads;
  sp.n_batch = p.n_batch;
  sp.flash = flash_;
  sp.n_ctx = p.n_ctx;
  sp.release_window = model.hparams().all_swa_window();
  step_ = std::make_unique<Step>(model, cache, sp);
  publish_stats();
  worker_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

std::shared_ptr<Request> Scheduler::submit(RequestParams params) {
  const int64_t n = int64_t(params.prompt.size()), n_vocab = model_.hparams().n_vocab;
  if (n == 0) throw ContextError("the prompt is empty");
  if (model_.encoder())
    throw ContextError(model_.hparams().arch +
                       " is an embedding (encoder-only) model: it cannot generate text");
  if (n > params_.n_ctx)
    throw ContextError(
        "the prompt is " + std::to_string(n) +
        " tokens but a session holds at most n_ctx = " + std::to_string(params_.n_ctx));
  for (int32_t id : params.prompt)
    if (id < 0 || id >= n_vocab)
      throw ContextError("token id " + std::to_string(id) + " outside [0, " +
                         std::to_string(n_vocab) + ")");
  auto req = std::make_shared<Request>();
  {
    std::lock_guard lk(mu_);
    if (n_inflight_ >= int64_t(params_.n_parallel) + params_.max_queue) {
      ++n_rejected_;
      throw QueueFull("all " + std::to_string(params_.n_parallel) + " sessions are busy and " +
                      std::to_string(params_.max_queue) + " requests are waiting");
    }
    req->id_ = next_id_++;
    ++n_inflight_;
    ++n_requests_;
    queue_.push_back(Pending{req, std::move(params), Clock::now()});
  }
  cv_.notify_all();
  return req;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lk(mu_);
  SchedulerStats s = stats_;
  s.n_requests = n_requests_;
  s.n_rejected = n_rejected_;
  s.n_queued = int64_t(queue_.size());
  return s;
}

void Scheduler::publish_stats() {
  SchedulerStats s = counters_;
  s.n_active = int64_t(active_.size());
  s.blocks = cache_.pool().stats();
  s.tiers = cache_.tier_stats();
  s.window_blocks_used = cache_.window_blocks_used();
  for (const auto& ses : active_)
    s.sessions.push_back({ses->req->id(), ses->prefill, ses->result.n_prompt, ses->result.n_cached,
                          ses->seq.n_tokens(), int64_t(ses->result.tokens.size())});
  std::lock_guard lk(mu_);
  stats_ = std::move(s);
}

void Scheduler::run() {
  for (;;) {
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty() || !active_.empty(); });
      if (stop_) break;
    }
    try {
      admit();
      step();
    } catch (const std::exception& e) {  // unexpected (e.g. out of memory): fail, keep serving
      for (auto& s : active_)
        if (!s->done) finish(*s, FinishReason::kError, e.what());
    }
    std::erase_if(active_, [](const auto& s) { return s->done; });
    publish_stats();
  }
  // Shutdown: end every request.
  for (auto& s : active_) finish(*s, FinishReason::kCancelled);
  active_.clear();
  std::deque<Pending> left;
  {
    std::lock_guard lk(mu_);
    left.swap(queue_);
  }
  for (auto& p : left) {
    p.params.grammar.reset();  // never sampled: no token trie needed
    Session s(cache_, tok_, std::move(p), nullptr);
    finish(s, FinishReason::kCancelled);
  }
  publish_stats();
}

void Scheduler::admit() {
  const auto now = Clock::now();
  std::vector<Pending> start;
  {
    std::lock_guard lk(mu_);
    while (!queue_.empty() && int64_t(active_.size() + start.size()) < params_.n_parallel) {
      start.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
  }
  for (auto& p : start) {
    if (p.params.grammar && !grammar_vocab_) grammar_vocab_ = TokenTrie::build(tok_);
    auto s = std::make_unique<Session>(cache_, tok_, std::move(p), grammar_vocab_);
    s->started = now;
    s->result.n_prompt = int64_t(s->p.prompt.size());
    s->result.queue_ms = ms_between(s->submitted, now);
    if (s->p.cache_prompt && cache_.params().prefix_cache)
      s->n_prefilled = s->seq.attach_prefix(s->p.prompt);
    s->result.n_cached = s->n_prefilled;
    for (int32_t id : s->p.prompt) s->sampler.accept(id);
    counters_.n_prompt_tokens += s->result.n_prompt;
    counters_.n_cached_tokens += s->result.n_cached;
    active_.push_back(std::move(s));
  }
}

bool Scheduler::step() {
  const auto t0 = Clock::now();
  for (auto& s : active_) {
    if (s->req->cancelled())
      finish(*s, FinishReason::kCancelled);
    else if (s->deadline && t0 >= *s->deadline)
      finish(*s, FinishReason::kTimeout);
  }
  Batch b;
  for (;;) {
    b = build_batch();
    if (b.sessions.empty()) {
      if (b.waiting) finish(*b.waiting, FinishReason::kError, full_cache_error(b.waiting_why));
      return false;
    }
    try {
      step_->run();
      break;
    } catch (const DeviceOutOfMemory& e) {
      ++counters_.n_device_oom;
      shed(b, e.what());  // nothing was committed: run the step again without what did not fit
    }
  }
  for (size_t i = 0; i < b.sessions.size(); ++i) {
    Session& s = *b.sessions[i];
    if (s.prefill) {
      s.n_prefilled += b.n_rows[i];
      if (s.n_prefilled < int64_t(s.p.prompt.size())) continue;
      s.prefill = false;
      if (s.p.n_predict == 0) {  // only the prompt (e.g. a client warming the cache)
        s.result.prompt_ms = ms_between(s.started, Clock::now());
        finish(s, FinishReason::kLength);
        continue;
      }
    }
    sample(s, step_->logits(i));
  }
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  const double total = double(b.n_decode + b.n_prefill);
  counters_.prefill_s += dt * double(b.n_prefill) / total;
  counters_.decode_s += dt * double(b.n_decode) / total;
  counters_.n_prefill_tokens += b.n_prefill;
  ++counters_.n_steps;
  return true;
}

Scheduler::Batch Scheduler::build_batch() {
  // Decodes first (one token each), then prefill chunks within what is left of the budget.
  Batch b;
  int64_t budget = params_.n_batch;
  step_->clear();
  for (auto& s : active_) {
    if (s->done || s->prefill || budget == 0) continue;
    try {
      s->seq.reserve(1);
    } catch (const KvCacheFull& e) {
      finish(*s, FinishReason::kError, full_cache_error(e.what()) + " (or lower -np)");
      continue;
    }
    step_->add(s->seq, std::span<const int32_t>(&s->next_token, 1), StepLogits::kLast);
    b.sessions.push_back(s.get());
    b.n_rows.push_back(1);
    --budget;
    ++b.n_decode;
  }
  for (auto& s : active_) {
    if (s->done || !s->prefill || budget == 0) continue;
    const int64_t left = int64_t(s->p.prompt.size()) - s->n_prefilled;
    const int64_t n = std::min({left, budget, s->max_chunk});
    try {
      s->seq.reserve(n);
    } catch (const KvCacheFull& e) {
      if (!b.waiting) {
        b.waiting = s.get();
        b.waiting_why = e.what();
      }
      continue;  // wait for blocks other sessions give back
    }
    const std::span<const int32_t> prompt(s->p.prompt);
    step_->add(s->seq, prompt.subspan(size_t(s->n_prefilled), size_t(n)),
               n == left ? StepLogits::kLast : StepLogits::kNone);
    b.sessions.push_back(s.get());
    b.n_rows.push_back(n);
    budget -= n;
    b.n_prefill += n;
  }
  return b;
}

void Scheduler::shed(const Batch& b, const std::string& why) {
  // The largest prefill chunk is halved (its session keeps the smaller chunk from now on: the
  // step's scratch grows with rows × context); with none left to halve, the session holding
  // the most context ends with the error and the others go on.
  size_t big = 0;
  for (size_t i = 1; i < b.sessions.size(); ++i)
    if (b.n_rows[i] > b.n_rows[big]) big = i;
  if (b.n_rows[big] > 1) {
    b.sessions[big]->max_chunk = b.n_rows[big] / 2;
    return;
  }
  Session* longest = b.sessions.front();
  for (Session* s : b.sessions)
    if (s->seq.n_tokens() > longest->seq.n_tokens()) longest = s;
  finish(*longest, FinishReason::kError,
         why + " (this request was stopped; the others go on: lower -c, -np or -ngl)");
}

void Scheduler::sample(Session& s, std::span<const float> logits) {
  const auto now = Clock::now();
  RequestResult& r = s.result;
  if (r.tokens.empty() && s.first_token == Clock::time_point{}) {
    s.first_token = now;
    r.ttft_ms = ms_between(s.submitted, now);
    r.prompt_ms = ms_between(s.started, now);
  }
  TokenStep t = s.stream.next(logits, s.seq.n_tokens(), params_.n_ctx);
  const bool newline = t.text.find('\n') != std::string::npos;
  if (t.emitted) {
    TokenEvent ev;
    ev.id = t.id;
    ev.text = std::move(t.text);
    ev.logprob = t.logprob;
    ev.top = std::move(t.top);
    r.tokens.push_back(t.id);
    ++counters_.n_generated_tokens;
    r.text += ev.text;
    s.req->push(RequestEvent{false, std::move(ev), {}});
  }
  // t_max_predict_ms, as llama.cpp's server applies it: only once a newline was generated.
  if (!t.finish && s.had_newline && s.p.t_max_predict_ms > 0 &&
      ms_between(s.first_token, now) > s.p.t_max_predict_ms)
    t.finish = FinishReason::kLength;
  s.had_newline = s.had_newline || newline;
  if (t.finish)
    finish(s, *t.finish, s.stream.error());
  else
    s.next_token = t.id;
}

void Scheduler::finish(Session& s, FinishReason why, const std::string& error) {
  if (s.done) return;
  s.done = true;
  RequestResult& r = s.result;
  r.error = error;
  std::string tail = s.stream.close(why);
  r.finish = *s.stream.finish();
  r.text += tail;
  r.tail = std::move(tail);
  r.stop_word = s.stream.stop_word();
  const auto now = Clock::now();
  if (s.first_token != Clock::time_point{}) r.gen_ms = ms_between(s.first_token, now);
  s.seq.clear();  // blocks back to the pool now
  ++counters_.n_finished;
  if (why == FinishReason::kCancelled) ++counters_.n_cancelled;
  if (why == FinishReason::kTimeout) ++counters_.n_timeout;
  if (why == FinishReason::kError) ++counters_.n_errors;
  {
    std::lock_guard lk(mu_);  // before the event: whoever sees the end may submit again
    --n_inflight_;
  }
  publish_stats();  // so that whoever sees the end also sees it (and its device OOMs) counted
  s.req->push(RequestEvent{true, {}, r});
}

}  // namespace kvrun
