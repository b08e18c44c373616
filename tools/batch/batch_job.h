// batch_job.h — `kvrun batch`'s engine: runs many documents through the continuous-batching
// Scheduler (src/engine/scheduler.h), up to n_parallel at once, and hands each finished document's
// result line to a callback as soon as it is done.
//
// Every prompt is the same template around the document ({text}), so all prompts share their
// head (chat template, system prompt, the part of --prompt before {text}). The job submits one
// request alone first and waits for its prompt to be read: its KV blocks are then in the prefix
// cache and every later request takes the shared full blocks instead of computing them again.
//
// A document whose prompt does not fit the context (n_ctx minus room for the answer) is split
// into chunks that are summarized and whose summaries are summarized again (map-reduce,
// recursively, up to 3 levels), truncated to its head, or skipped, as BatchLongMode says. Split
// falls back to truncation when summarizing would not shrink the text (n_predict ≥ the chunk
// size, or a level's summaries as long as its text).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/scheduler.h"
#include "kv/kv_cache.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "tools/batch/batch_input.h"

namespace kvrun {

/// What to do with a document whose prompt is longer than the context allows.
enum class BatchLongMode { kSplit, kTruncate, kSkip };

/// Parses "split", "truncate" or "skip"; nullopt otherwise.
std::optional<BatchLongMode> parse_batch_long_mode(const std::string& s);

/// Builds prompts: `prompt` with "{text}" replaced by a document (appended after a blank line
/// when it has no "{text}"), as the user turn of the chat template `chat` (with `system`
/// first), or as plain text (system prompt, a newline, the user text) when there is none.
struct BatchPromptParams {
  std::string prompt = "Summarize the text below.\n\n{text}";  ///< the user turn
  std::string system;                                          ///< system prompt ("" = none)
  std::optional<ChatTemplate> chat;                            ///< the chat template
};

/// The prompt text for `text` (see BatchPromptParams). Throws jinja::JinjaError when the
/// template raises.
std::string batch_prompt_text(const BatchPromptParams& p, const std::string& text);

/// How to run a batch.
struct BatchParams {
  SchedulerParams sched;     ///< n_ctx (per session), n_parallel, n_batch, threads
  BatchPromptParams prompt;  ///< prompt template
  int64_t n_predict = 256;   ///< tokens per summary at most
  SamplerParams sampling;    ///< temperature etc.
  /// Constrains each document's final output (null: none); map parts stay free text.
  std::shared_ptr<const Grammar> grammar;
  BatchLongMode long_mode = BatchLongMode::kSplit;
  int64_t chunk_tokens = 0;  ///< tokens of document per chunk (0: as many as fit)
};

/// Running totals, for progress lines and the final summary.
struct BatchProgress {
  int64_t n_total = 0;              ///< documents to process in this run
  int64_t n_done = 0;               ///< written (including skipped)
  int64_t n_skipped = 0;            ///< too long with --long skip
  int64_t n_failed = 0;             ///< ended with an error (not written; a rerun retries)
  int64_t n_truncated = 0;          ///< cut to their head (--long truncate)
  int64_t n_split = 0;              ///< summarized by map-reduce (--long split)
  int64_t n_prompt_tokens = 0;      ///< prompt tokens of every request
  int64_t n_cached_tokens = 0;      ///< of which taken from the prefix cache
  int64_t n_completion_tokens = 0;  ///< tokens generated
  int64_t n_requests = 0;           ///< requests submitted (a split document makes several)
  double elapsed_s = 0;             ///< since the run started
  bool interrupted = false;         ///< stopped by the stop flag
};

/// Runs documents through a Scheduler built over `model`, `tok` and `cache`.
class BatchJob {
 public:
  /// `index` numbers the documents of run(); `record` is the output line (nullopt: none, the
  /// document failed or was cancelled).
  using ResultFn = std::function<void(int64_t index, const std::optional<nlohmann::ordered_json>&)>;
  using ProgressFn = std::function<void(const BatchProgress&)>;

  BatchJob(const Model& model, const Tokenizer& tok, KvCache& cache, BatchParams params);

  /// Processes `docs` in order, up to n_parallel at once; calls `on_result` once per document
  /// as it finishes and `on_progress` often (every poll, ~20 ms). When `stop` becomes true,
  /// submits nothing more, cancels running requests and returns (progress.interrupted). Errors
  /// of single documents are reported through on_result / `errors`, never thrown.
  BatchProgress run(const std::vector<BatchDoc>& docs, const ResultFn& on_result,
                    const ProgressFn& on_progress, const std::atomic<bool>& stop);

  /// Messages about failed documents ("id: why"), in the order they happened.
  const std::vector<std::string>& errors() const { return errors_; }
  /// The scheduler's counters after run() (prefill tokens computed, cached, ...).
  const SchedulerStats& stats() const { return stats_; }
  /// Prompt tokens available to the document part and the template (n_ctx minus answer room).
  int64_t prompt_budget() const { return budget_; }
  /// Document tokens per chunk for --long split.
  int64_t chunk_tokens() const { return chunk_; }

 private:
  struct Doc;
  struct Unit;
  struct Active;
  std::vector<int32_t> tokens_for(const std::string& text) const;
  void prepare(Doc& d, std::vector<Unit>& out);
  void plan(Doc& d, const std::string& text, int depth, std::vector<Unit>& out);

  const Model& model_;
  const Tokenizer& tok_;
  KvCache& cache_;
  BatchParams p_;
  int64_t budget_ = 0;
  int64_t overhead_ = 0;
  int64_t chunk_ = 0;
  std::vector<std::string> errors_;
  SchedulerStats stats_;
};

}  // namespace kvrun
