// step.h — one engine step: the batch builder and the forward over a Model and its KvCache,
// shared by Context (kvrun -p, the REPL, perplexity, bench) and the Scheduler (serve, batch).
//
// A step holds the rows of one or more sequences (each: tokens at positions n_tokens() … of its
// KvSequence, blocks reserved by the caller), builds the step's PageTable once (CSR: row and
// block-table offsets, positions, write slots), runs llama_forward on the model's placement,
// commits every sequence's tokens to its block table and, for an all-windowed model, gives the
// blocks that left the window back to the pool (with window tables, a mixed model's windowed
// layers' rows of those blocks: KvSequence::release_window_before). The logits of the rows that
// asked for them are gathered into one [n_out, n_vocab] array, read per slice with logits().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend.h"
#include "engine/model.h"
#include "kv/kv_cache.h"

namespace kvrun {

/// Which logits a slice of a step wants.
enum class StepLogits {
  kNone,  ///< none (a prefill chunk that is not the prompt's last)
  kLast,  ///< the last token's: [1, n_vocab]
  kAll,   ///< every token's: [n_tokens, n_vocab]
};

/// How an engine runs its steps.
struct StepParams {
  int n_threads = 0;      ///< CPU threads (0: physical cores)
  int64_t n_batch = 512;  ///< rows per step at most (≥ 1)
  bool flash = true;      ///< online softmax (PagedAttnParams::flash)
  int64_t n_ctx = 0;      ///< context per sequence (phi3's LongRoPE switch)
  /// Sliding window of an all-windowed model whose blocks are given back after a step (0: keep).
  int64_t release_window = 0;
  /// Output rows are the output-normed hidden states [n_embd] (embeddings) instead of logits.
  bool embeddings = false;
};

/// The batch builder and forward runner of one engine (its backends and scratch are its own).
class Step {
 public:
  /// Throws std::invalid_argument for n_batch < 1.
  Step(const Model& model, KvCache& cache, const StepParams& params);
  ~Step();

  /// Forgets the rows added since the last run.
  void clear();
  /// Adds `tokens` (≥ 1) of `seq` at positions seq.n_tokens() … (reserved by the caller, which
  /// keeps `seq` and `tokens` alive until run()). Returns the slice's index. Throws
  /// std::invalid_argument past n_batch rows.
  size_t add(KvSequence& seq, std::span<const int32_t> tokens, StepLogits want);
  /// Rows added so far.
  int64_t n_tokens() const { return int64_t(tokens_.size()); }
  /// Runs the forward, commits every slice's tokens and releases window blocks; the slices stay
  /// readable (logits()) until clear().
  void run();
  /// The logits of slice i after run(): [n_out, n_vocab] (n_out = 1 or the slice's tokens; empty
  /// for kNone); with StepParams::embeddings the hidden states [n_out, n_embd] instead.
  std::span<const float> logits(size_t i) const;
  /// Floats per output row: n_vocab, or n_embd with StepParams::embeddings.
  int64_t row_width() const;

  const StepParams& params() const { return params_; }
  int n_threads() const;

 private:
  struct Slice {
    KvSequence* seq;
    std::span<const int32_t> tokens;
    StepLogits want;
    int64_t out0;  // first logits row
  };
  void build_page_table();
  /// True when a block of the page table lies in the host tier of host_layers_ (whose layers
  /// share one slot map).
  bool reads_host_tier() const;
  const Model& model_;
  KvCache& cache_;
  StepParams params_;
  std::vector<KvLayer> layers_;  // [n_layer] the cache's storage views
  // --kv-host-attn cpu: [n_layer] the host tier as the CPU addresses it (empty otherwise)
  std::vector<KvLayer> host_layers_;
  std::unique_ptr<LlamaExec> exec_;
  std::vector<Slice> slices_;
  std::vector<int32_t> tokens_;
  // The page table's arrays (PageTable points into them).
  std::vector<int32_t> seq_indptr_, block_indptr_, block_ids_, last_len_, pos_, out_rows_;
  std::vector<int64_t> write_slot_;
  PageTable pt_;
  std::vector<float> logits_;  // [n_out, n_vocab]
};

}  // namespace kvrun
