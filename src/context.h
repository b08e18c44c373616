// context.h — one sequence's inference state: a Model, its KV store, scratch buffers and a
// thread pool; eval() feeds tokens and returns logits.
//
// Positions are implicit: the i-th token ever fed (since reset) sits at position i, so a call
// continues where the previous one stopped. A prompt is processed in chunks of n_batch tokens
// (prefill); a decode step is a call with one token. The context holds at most n_ctx tokens;
// feeding more throws ContextError and leaves the state unchanged.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

#include "cpu/thread_pool.h"
#include "kv_contiguous.h"
#include "model.h"

namespace kvrun {

/// A request the context cannot serve (overflow, bad token id, bad parameters).
class ContextError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// How to build a Context.
struct ContextParams {
  int64_t n_ctx = 0;           ///< positions held; 0 = the model's n_ctx_train
  int64_t n_batch = 512;       ///< tokens per prefill chunk (≥ 1)
  int n_threads = 0;           ///< worker threads; 0 = the machine's physical cores
  DType kv_type = DType::F16;  ///< KV element type: F16 (default) or F32
};

/// Inference state of one sequence over a Model (which must outlive it).
class Context {
 public:
  /// Throws ContextError for n_batch < 1, n_ctx < 1 or an unsupported kv_type.
  Context(const Model& model, const ContextParams& params);
  ~Context();

  /// Runs `tokens` at positions n_past() … n_past()+n−1 and returns the logits: [n_vocab] of the
  /// last token, or with `all_logits` [n, n_vocab] (row i = token i). The span is valid until the
  /// next eval. Throws ContextError when tokens is empty, an id is outside [0, n_vocab), or
  /// n_past() + n > n_ctx() ("context overflow").
  std::span<const float> eval(std::span<const int32_t> tokens, bool all_logits = false);

  /// Tokens held (the position of the next token).
  int64_t n_past() const { return n_past_; }
  /// Forgets tokens from position `n` on (0 ≤ n ≤ n_past()): the next eval continues at n.
  void truncate(int64_t n);
  /// Forgets everything (truncate(0)).
  void reset() { truncate(0); }
  /// Declares that the KV store holds valid rows for positions [0, n) — written directly by
  /// read_context_state (context_state.h) — so the next eval continues at n. 0 ≤ n ≤ n_ctx().
  /// Defined in context_state.cpp.
  void set_n_past(int64_t n);

  int64_t n_ctx() const { return kv_.n_ctx(); }
  int64_t n_batch() const { return n_batch_; }
  int n_threads() const { return pool_.size(); }
  int64_t n_vocab() const { return model_.hparams().n_vocab; }
  const Model& model() const { return model_; }
  const KvContiguous& kv() const { return kv_; }

 private:
  const Model& model_;
  int64_t n_batch_;
  KvContiguous kv_;
  cpu::ThreadPool pool_;
  std::unique_ptr<LlamaScratch> scratch_;
  std::vector<float> logits_;
  int64_t n_past_ = 0;
};

}  // namespace kvrun
