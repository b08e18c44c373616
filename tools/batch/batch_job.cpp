// batch_job.cpp — `kvrun batch`'s engine over the Scheduler (batch_job.h).
#include "tools/batch/batch_job.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <stdexcept>

#include "engine/context.h"

namespace kvrun {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kMaxDepth = 3;    // map-reduce levels before the rest is truncated
constexpr int64_t kMargin = 4;  // tokens kept free for tokenization at chunk edges

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace

std::optional<BatchLongMode> parse_batch_long_mode(const std::string& s) {
  if (s == "split") return BatchLongMode::kSplit;
  if (s == "truncate") return BatchLongMode::kTruncate;
  if (s == "skip") return BatchLongMode::kSkip;
  return std::nullopt;
}

std::string batch_prompt_text(const BatchPromptParams& p, const std::string& text) {
  std::string user = p.prompt;
  const size_t at = user.find("{text}");
  if (at == std::string::npos)
    user += (user.empty() ? "" : "\n\n") + text;
  else
    user.replace(at, 6, text);
  if (p.chat) {
    std::vector<ChatMessage> msgs;
    if (!p.system.empty()) msgs.push_back({"system", p.system});
    msgs.push_back({"user", user});
    return p.chat->render(msgs, true);
  }
  return p.system.empty() ? user : p.system + "\n" + user;
}

/// One document's progress through its requests.
struct BatchJob::Doc {
  const BatchDoc* in = nullptr;
  int64_t index = 0;
  int pending = 0;                 // units queued or running
  int depth = 0;                   // map-reduce level
  int64_t level_tokens = 0;        // tokens of the text split at the previous level
  std::vector<std::string> parts;  // map outputs of the current level
  int64_t n_prompt = 0, n_cached = 0, n_completion = 0, n_chunks = 0;
  Clock::time_point start;
  bool truncated = false, skipped = false, failed = false, cancelled = false;
  std::string error;  // failed / skipped: why
  std::string output;
  FinishReason finish = FinishReason::kLength;
};

/// One request to make.
struct BatchJob::Unit {
  Doc* doc = nullptr;
  std::vector<int32_t> prompt;
  bool final = true;  // its output is the document's (else a map part)
  size_t part = 0;
};

/// A submitted unit.
struct BatchJob::Active {
  Unit unit;
  std::shared_ptr<Request> req;
};

BatchJob::BatchJob(const Model& model, const Tokenizer& tok, KvCache& cache, BatchParams params)
    : model_(model), tok_(tok), cache_(cache), p_(std::move(params)) {
  const int64_t n_ctx = p_.sched.n_ctx;
  const int64_t reserve = p_.n_predict > 0 ? std::min<int64_t>(p_.n_predict, n_ctx / 2)
                                           : std::max<int64_t>(1, n_ctx / 4);
  budget_ = n_ctx - reserve;
  overhead_ = int64_t(tokens_for("").size());
  const int64_t max_chunk = budget_ - overhead_ - kMargin;
  if (max_chunk < 1)
    throw std::invalid_argument("the prompt template alone needs " + std::to_string(overhead_) +
                                " tokens; the context (" + std::to_string(n_ctx) +
                                ") minus room for the answer leaves " + std::to_string(budget_));
  chunk_ = p_.chunk_tokens > 0 ? std::min(p_.chunk_tokens, max_chunk) : max_chunk;
}

std::vector<int32_t> BatchJob::tokens_for(const std::string& text) const {
  const std::string s = batch_prompt_text(p_.prompt, text);
  bool add_special = true;
  if (p_.prompt.chat && !p_.prompt.chat->tokens().bos.empty() &&
      s.rfind(p_.prompt.chat->tokens().bos, 0) == 0)
    add_special = false;  // the template writes BOS itself
  return tok_.tokenize(s, add_special, true);
}

void BatchJob::plan(Doc& d, const std::string& text, int depth, std::vector<Unit>& out) {
  d.depth = depth;
  auto prompt = tokens_for(text);
  if (int64_t(prompt.size()) <= budget_) {
    out.push_back({&d, std::move(prompt), true, 0});
    ++d.pending;
    return;
  }
  if (depth == 0 && p_.long_mode == BatchLongMode::kSkip) {
    d.skipped = true;
    d.error = "the prompt needs " + std::to_string(prompt.size()) + " tokens, more than the " +
              std::to_string(budget_) + " that fit (--long skip)";
    return;
  }
  const auto ids = tok_.tokenize(text, false, false);
  // The prompt of the text's tokens [begin, begin + k) with k ≤ max_doc as large as fits; k.
  auto fit_head = [&](size_t begin, int64_t max_doc) {
    int64_t k = std::min<int64_t>(max_doc, int64_t(ids.size() - begin));
    for (;;) {
      std::vector<int32_t> head(ids.begin() + int64_t(begin), ids.begin() + int64_t(begin) + k);
      auto pr = tokens_for(tok_.detokenize(head, false));
      if (int64_t(pr.size()) <= budget_ || k <= 1) return std::make_pair(std::move(pr), k);
      k = std::max<int64_t>(1, k - std::max<int64_t>(1, int64_t(pr.size()) - budget_));
    }
  };
  // Map-reduce only while it shrinks the text: chunk summaries (up to n_predict tokens each)
  // must be shorter than the chunks, and a level's summaries shorter than its text.
  const bool shrinks = p_.n_predict > 0 && p_.n_predict < chunk_ &&
                       (depth == 0 || int64_t(ids.size()) < d.level_tokens);
  if (p_.long_mode == BatchLongMode::kTruncate || depth >= kMaxDepth || !shrinks) {
    d.truncated = true;
    out.push_back({&d, fit_head(0, budget_ - overhead_).first, true, 0});
    ++d.pending;
    return;
  }
  // Map: summarize chunks of chunk_ tokens; their summaries are reduced when all are done.
  d.parts.clear();
  d.level_tokens = int64_t(ids.size());
  for (size_t b = 0; b < ids.size();) {
    auto [pr, k] = fit_head(b, chunk_);
    b += size_t(k);  // the next chunk starts where this one ended
    out.push_back({&d, std::move(pr), false, d.parts.size()});
    d.parts.emplace_back();
    ++d.pending;
  }
  d.n_chunks += int64_t(d.parts.size());
}

void BatchJob::prepare(Doc& d, std::vector<Unit>& out) {
  d.start = Clock::now();
  plan(d, d.in->text, 0, out);
}

BatchProgress BatchJob::run(const std::vector<BatchDoc>& docs, const ResultFn& on_result,
                            const ProgressFn& on_progress, const std::atomic<bool>& stop) {
  const auto t0 = Clock::now();
  BatchProgress prog;
  prog.n_total = int64_t(docs.size());
  std::vector<Doc> state(docs.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    state[i].in = &docs[i];
    state[i].index = int64_t(i);
  }
  SchedulerParams sp = p_.sched;
  sp.max_queue = std::max(sp.max_queue, sp.n_parallel);
  Scheduler sched(model_, tok_, cache_, sp);

  std::deque<Unit> units;
  std::vector<Active> active;
  size_t next_doc = 0;
  // Until the first request has read its prompt, nothing else starts: then the shared head of
  // every prompt is in the prefix cache and is computed once.
  bool primed = !cache_.params().prefix_cache;
  bool stopping = false;

  auto report = [&](Doc& d) {
    if (d.cancelled) return on_result(d.index, std::nullopt);
    if (d.failed) {
      ++prog.n_failed;
      errors_.push_back(d.in->key + ": " + d.error);
      return on_result(d.index, std::nullopt);
    }
    nlohmann::ordered_json rec;
    rec["id"] = d.in->id;
    for (const auto& [k, v] : d.in->fields.items())
      if (k != "id") rec[k] = v;
    rec["output"] = d.skipped ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(d.output);
    rec["prompt_tokens"] = d.n_prompt;
    rec["completion_tokens"] = d.n_completion;
    rec["cached_tokens"] = d.n_cached;
    rec["time_ms"] = int64_t(ms_since(d.start) + 0.5);
    rec["finish_reason"] = d.skipped ? "skipped" : finish_reason_name(d.finish);
    if (d.skipped) rec["error"] = d.error;
    if (d.truncated) rec["truncated"] = true;
    if (d.n_chunks > 0) rec["chunks"] = d.n_chunks;
    ++prog.n_done;
    prog.n_skipped += d.skipped;
    prog.n_truncated += d.truncated;
    prog.n_split += d.n_chunks > 0;
    on_result(d.index, rec);
  };

  // A document whose units all ended: reduce its map outputs, or report it.
  auto settle = [&](Doc& d) {
    if (d.pending > 0) return;
    if (!d.failed && !d.cancelled && !d.parts.empty()) {
      std::string joined;
      for (const auto& s : d.parts) joined += (joined.empty() ? "" : "\n\n") + trim(s);
      d.parts.clear();
      std::vector<Unit> more;
      plan(d, joined, d.depth + 1, more);
      units.insert(units.begin(), std::make_move_iterator(more.begin()),
                   std::make_move_iterator(more.end()));
      if (d.pending > 0) return;
    }
    report(d);
  };

  auto end_unit = [&](Active& a, const RequestResult& r) {
    Doc& d = *a.unit.doc;
    --d.pending;
    prog.n_prompt_tokens += r.n_prompt;
    prog.n_cached_tokens += r.n_cached;
    prog.n_completion_tokens += int64_t(r.tokens.size());
    d.n_prompt += r.n_prompt;
    d.n_cached += r.n_cached;
    d.n_completion += int64_t(r.tokens.size());
    if (r.finish == FinishReason::kCancelled) {
      d.cancelled = true;
    } else if (r.finish == FinishReason::kError || r.finish == FinishReason::kTimeout) {
      d.failed = true;
      d.error = r.error.empty() ? finish_reason_name(r.finish) : r.error;
    } else if (a.unit.final) {
      d.output = r.text;
      d.finish = r.finish;
    } else {
      d.parts[a.unit.part] = r.text;
    }
    settle(d);
  };

  auto fill = [&] {
    while (int64_t(active.size()) < sp.n_parallel && (primed || active.empty())) {
      if (units.empty()) {
        if (next_doc == docs.size()) return;
        Doc& d = state[next_doc++];
        std::vector<Unit> first;
        prepare(d, first);
        for (auto& u : first) units.push_back(std::move(u));
        if (d.pending == 0) report(d);  // skipped
        continue;
      }
      Unit u = std::move(units.front());
      units.pop_front();
      RequestParams rp;
      rp.prompt = u.prompt;
      rp.n_predict = p_.n_predict;
      rp.sampling = p_.sampling;
      if (u.final) rp.grammar = p_.grammar;  // map parts stay free text
      try {
        auto req = sched.submit(std::move(rp));
        ++prog.n_requests;
        active.push_back({std::move(u), std::move(req)});
      } catch (const std::exception& e) {
        Doc& d = *u.doc;
        --d.pending;
        d.failed = true;
        d.error = e.what();
        settle(d);
      }
    }
  };

  // Drains `a`'s events; true when it ended.
  auto poll = [&](Active& a, milliseconds wait, bool& any) {
    while (auto ev = a.req->next(wait)) {
      any = true;
      primed = true;
      wait = milliseconds(0);
      if (ev->done) {
        end_unit(a, ev->result);
        return true;
      }
    }
    return false;
  };

  for (;;) {
    if (stop.load() && !stopping) {
      stopping = true;
      prog.interrupted = true;
      for (auto& a : active) a.req->cancel();
      units.clear();
    }
    if (!stopping) fill();
    if (active.empty() && (stopping || (units.empty() && next_doc == docs.size()))) break;
    bool any = false;
    for (size_t i = 0; i < active.size();) {
      if (poll(active[i], milliseconds(0), any))
        active.erase(active.begin() + int64_t(i));
      else
        ++i;
    }
    if (!any && !active.empty() && poll(active.front(), milliseconds(20), any))
      active.erase(active.begin());
    prog.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (on_progress) on_progress(prog);
  }
  // Documents begun but not finished (interrupted) produced no line; a rerun does them.
  stats_ = sched.stats();
  prog.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return prog;
}

}  // namespace kvrun
