// context.h — one sequence's inference state: a Model, its block table in a paged KV cache,
// scratch buffers and a thread pool; eval() feeds tokens and returns logits.
//
// Positions are implicit: the i-th token ever fed (since reset) sits at position i, so a call
// continues where the previous one stopped. A prompt is processed in chunks of n_batch tokens
// (prefill); a decode step is a call with one token. The context holds at most n_ctx tokens;
// feeding more throws ContextError and leaves the state unchanged. KV blocks are taken from the
// cache's pool as tokens arrive (docs/kv-cache.md); a full pool throws KvCacheFull.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

#include "engine/model.h"
#include "engine/step.h"
#include "kv/kv_cache.h"

namespace kvrun {

/// A request the context cannot serve (overflow, bad token id, bad parameters).
class ContextError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Which softmax the attention uses (PagedAttnParams::flash), as llama.cpp's -fa.
enum class FlashAttn {
  kAuto,  ///< kvrun's choice: flash (as llama.cpp's -fa auto on the CPU)
  kOn,    ///< online softmax (FlashAttention)
  kOff,   ///< exact softmax over a score buffer (llama.cpp's non-flash path, reproduced)
};

/// Whether attention runs the flash scheme for the setting `fa` (kAuto and kOn: yes). The one
/// rule every engine step uses (Context, Scheduler).
inline bool use_flash_attn(FlashAttn fa) { return fa != FlashAttn::kOff; }

/// How to build a Context.
struct ContextParams {
  int64_t n_ctx = 0;      ///< positions held at most; 0 = the model's n_ctx_train
  int64_t n_batch = 512;  ///< tokens per prefill chunk (≥ 1)
  int n_threads = 0;      ///< worker threads; 0 = the machine's physical cores
  FlashAttn flash_attn = FlashAttn::kAuto;
  /// The KV cache of a Context that owns its own (the constructor without a KvCache). Its
  /// budget, when 0, is what n_ctx tokens need (ceil(n_ctx / block_size) blocks).
  KvCacheParams kv;
  /// When every layer of the model attends within a sliding window (Hparams::n_swa; mistral
  /// files with llama.attention.sliding_window, phi3): give blocks that leave the window back
  /// to the pool after each eval, so the KV bytes held stop growing past the window. Off: keep
  /// every block (what `kvrun bench` needs to truncate back to a depth). Off also turns the
  /// per-layer window tables of a mixed model (gemma2/3: KvCacheParams::window_tables) off.
  bool release_window_blocks = true;
  /// Sessions that will share the cache make_context_cache builds (serve, batch: --parallel;
  /// n_ctx is then their total): with window tables, its windowed group gets blocks for the
  /// window and a prefill chunk of each.
  int64_t n_seq = 1;
  /// eval() returns the output-normed hidden states ([n_embd] per row, the embeddings of
  /// src/engine/embed.h) instead of logits. Required for an encoder model (Model::encoder(),
  /// which cannot generate text); its contexts evaluate a whole input in one step (n_batch is
  /// raised to n_ctx) from position 0.
  bool embeddings = false;
};

/// Inference state of one sequence over a Model (which must outlive it).
class Context {
 public:
  /// A context with its own KV cache built from params.kv. Throws ContextError for n_batch < 1
  /// or n_ctx < 1, an encoder model without params.embeddings or with n_ctx past its position
  /// embeddings, std::invalid_argument for bad cache parameters.
  Context(const Model& model, const ContextParams& params);
  /// A context whose blocks come from `cache` (shared with other contexts; must outlive this
  /// one); params.kv is ignored.
  Context(const Model& model, KvCache& cache, const ContextParams& params);
  ~Context();

  /// Runs `tokens` at positions n_past() … n_past()+n−1 and returns the logits: [n_vocab] of the
  /// last token, or with `all_logits` [n, n_vocab] (row i = token i). The span is valid until the
  /// next eval. With ContextParams::embeddings the rows are [n_embd] hidden states instead of
  /// [n_vocab] logits. An encoder model evaluates only from an empty context (n_past() == 0).
  /// Throws ContextError when tokens is empty, an id is outside [0, n_vocab), or
  /// n_past() + n > n_ctx() ("context overflow"); KvCacheFull when the pool has no room. On an
  /// exception the state is unchanged (with window tables, where blocks are taken per chunk, a
  /// full pool takes it back to n_past() — to 0 when that position's window was given back).
  std::span<const float> eval(std::span<const int32_t> tokens, bool all_logits = false);

  /// An encoder's several whole inputs in one step (Model::encoder() with
  /// ContextParams::embeddings, from an empty context): each input from position 0 in a
  /// sequence of its own, its attention within itself (the encoders' attention op keeps the
  /// sequences of a step apart), as llama.cpp batches sequences for embeddings. Returns each
  /// input's rows [n_i, n_embd], valid until the next eval; the sequences' blocks go back before
  /// it returns. Throws ContextError for another model or mode, a non-empty context, an empty
  /// input, an id outside [0, n_vocab), or more than n_batch() tokens in all; KvCacheFull when
  /// the pool has no blocks for them all (nothing changed).
  std::vector<std::span<const float>> eval_each(std::span<const std::vector<int32_t>> inputs);

  /// Reaches a context depth without computing it: positions n_past() … n_past()+n−1 get KV
  /// blocks exactly as eval() of n tokens would take them (same blocks, bytes_held(), tiers; a
  /// sliding window's blocks given back likewise), every layer's K and V rows there are written
  /// with random encoded rows (KvCache::write_synthetic_rows, from `seed`), and n_past() grows
  /// by n, so the next eval() continues at that position. For speed measurements at a depth
  /// (`kvrun bench --depth-fill synthetic`): decode and attention cost do not depend on what the
  /// rows hold, but the model's output over such rows is meaningless. The positions hold token
  /// id KvSequence::kSyntheticToken and are never offered to the prefix cache. Throws
  /// ContextError for n < 1 or n_past() + n > n_ctx() ("context overflow"), KvCacheFull when the
  /// pool has no room; on an exception the state is unchanged.
  void fill_synthetic(int64_t n_tokens, uint64_t seed = 0);

  /// With an empty context: takes the cached KV blocks of the longest full-block prefix of
  /// `tokens` (prefix sharing), leaving at least one token to evaluate. Returns the tokens taken
  /// (the new n_past()); the caller evaluates tokens[n_past() …]. 0 when nothing matches.
  int64_t reuse_prefix(std::span<const int32_t> tokens);

  /// Called after each prefill chunk of an eval() longer than n_batch with the tokens done and
  /// the eval's total (for a progress display); empty to stop.
  void set_progress(std::function<void(int64_t done, int64_t total)> fn) {
    progress_ = std::move(fn);
  }

  /// Tokens held (the position of the next token).
  int64_t n_past() const { return seq_.n_tokens(); }
  /// Forgets tokens from position `n` on (0 ≤ n ≤ n_past()): the next eval continues at n —
  /// or at 0 when the sliding window of position n needs blocks already given back
  /// (ContextParams::release_window_blocks; with window tables, windowed rows given back and
  /// not kept: KvSequence::has_window_rows); callers continue from n_past().
  void truncate(int64_t n);
  /// The sliding window whose blocks this context gives back (0: none).
  int64_t release_window() const { return release_window_; }
  /// Forgets everything (truncate(0)) and gives the blocks back.
  void reset() { truncate(0); }

  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_batch() const { return n_batch_; }
  int n_threads() const { return step_->n_threads(); }
  int64_t n_vocab() const { return model_.hparams().n_vocab; }
  bool flash() const { return flash_; }
  const Model& model() const { return model_; }
  KvCache& cache() { return cache_; }
  const KvCache& cache() const { return cache_; }
  /// This context's block table and tokens.
  const KvSequence& sequence() const { return seq_; }
  KvSequence& sequence() { return seq_; }

 private:
  Context(const Model& model, std::unique_ptr<KvCache> owned, KvCache* shared,
          const ContextParams& params);
  const Model& model_;
  std::unique_ptr<KvCache> owned_cache_;
  KvCache& cache_;
  KvSequence seq_;
  int64_t n_ctx_;
  int64_t n_batch_;
  int64_t release_window_ = 0;  ///< window of an all-windowed model with release on, else 0
  bool flash_;
  std::unique_ptr<Step> step_;
  std::vector<float> logits_;
  std::function<void(int64_t, int64_t)> progress_;
};

/// The KV cache a Context of `params` would own: params.kv with the budgets filled in (blocks for
/// n_ctx tokens when params.kv.mem_bytes is 0, and for the slow tier when an offload directory
/// is given without params.kv.offload_max; with params.kv.host_tier and no offload_max, the
/// n_ctx tokens' blocks the fast tier cannot hold, or no host tier — a note on stderr — when
/// it holds them all). For a model mixing windowed and global layers the
/// windowed layers get window tables (KvCacheParams::window_tables) with params.n_seq × (the
/// window plus an n_batch chunk) blocks, unless release_window_blocks is off, a KV row is on a
/// GPU, or --kv-cache-dir is given (a note on stderr): those keep the uniform layout. Throws as
/// KvCache's constructor.
std::unique_ptr<KvCache> make_context_cache(const Model& model, const ContextParams& params);

}  // namespace kvrun
