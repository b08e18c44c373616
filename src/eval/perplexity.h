// perplexity.h — perplexity of a text, by llama-perplexity's method, and KL divergence against a
// saved base run.
//
// Method (llama.cpp tools/perplexity, `perplexity()`, commit c392e509; our own code): the whole
// text is tokenized once, with BOS when the vocabulary adds one. It is cut into
// n_chunks = n_tokens / n_ctx chunks of n_ctx tokens (the tail is dropped). Each chunk is
// evaluated from an empty context — its first token replaced by BOS when the vocabulary adds one —
// in prefill batches of the Context's n_batch. Only the second half of a chunk is scored: with
// first = n_ctx / 2, the logits at chunk position j predict the token at j + 1 for
// j = first … n_ctx − 2, so n_ctx − 1 − first positions per chunk (63 at n_ctx = 128). The
// negative log-likelihood of each target is max + log Σ exp(x − max) − x[target], the sum of
// exponentials in double, and NLLs are accumulated in double.
//
//   PPL = exp(mean NLL);   error = PPL · sqrt((mean(NLL²) − mean(NLL)²) / (N − 1))
//
// with N the number of scored positions (llama.cpp's "PPL = X +/- E").
//
// KL divergence: a base run saves, per scored position, the log-softmax of its logits in a file
// (format below); a later run of another model (same vocabulary) or KV cache type on the same
// text and n_ctx reads it back and compares position by position:
//   KLD(position) = Σ_i p_base(i) · (log p_base(i) − log p(i))   (KL(base ‖ this), in double)
// and reports its mean with the standard error of the mean, the top-1 agreement (argmax equal;
// ties broken towards the lower id) and PPL(this) − PPL(base) with its uncertainty (the
// covariance of the two NLL series taken into account, as llama-perplexity does).
//
// KL base file format, version 1 (all integers little-endian):
//   offset  0  char[8]  magic "KVRUNKLD"
//           8  u32      version (1)
//          12  u32      n_vocab
//          16  u32      n_ctx
//          20  u32      n_chunks
//          24  u32      first scored position (n_ctx / 2)
//          28  u32      scored positions per chunk (n_ctx − 1 − first)
//          32  u64      vocabulary hash: FNV-1a 64 over every token's text followed by a 0 byte
//          40  u64      tokens hash: FNV-1a 64 over the n_chunks · n_ctx evaluated token ids
//                       (int32 little-endian, before the BOS replacement)
//          48  u64      tokens in the whole text (BOS included)
//          56  float32  log-probabilities: n_chunks × scored × n_vocab, chunk after chunk,
//                       position after position, natural log (log-softmax of the logits)
// Size: 56 + 4 · n_chunks · scored · n_vocab bytes — about 4 bytes × vocabulary × half the text's
// tokens (9.4 MB for the 9454-token fixture text with a 512-token vocabulary, but 2.4 GB for
// 10k tokens with a 128k vocabulary). The whole base file is streamed, one chunk at a time, so
// memory stays at one chunk's rows; the disk size is accepted for now.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/context.h"
#include "text/tokenizer.h"

namespace kvrun {

/// The tokenized text and how it is cut into chunks.
struct PerplexityInput {
  std::vector<int32_t> tokens;  ///< the whole text (BOS first when the vocabulary adds one)
  int64_t n_ctx = 0;            ///< tokens per chunk
  int64_t n_chunks = 0;         ///< chunks evaluated: tokens.size() / n_ctx (or fewer, see below)
  int64_t first = 0;            ///< first scored chunk position: n_ctx / 2
  int32_t bos = -1;             ///< the id written over each chunk's first token (−1: none)
  int64_t n_scored_per_chunk() const { return n_ctx - 1 - first; }
};

/// Tokenizes `text` (add_special, no special-token parsing, as llama-perplexity) and cuts it into
/// chunks of n_ctx tokens; `max_chunks` > 0 limits their number. Throws std::invalid_argument
/// when n_ctx < 4, or the text has fewer than 2 · n_ctx tokens (llama-perplexity's requirement),
/// or the tokenizer adds EOS (the method assumes it does not).
PerplexityInput prepare_perplexity(const Tokenizer& tok, std::string_view text, int64_t n_ctx,
                                   int64_t max_chunks = 0);

/// One chunk's scored rows, handed to a ChunkObserver.
struct ChunkLogits {
  int64_t chunk = 0;                 ///< chunk index, from 0
  int64_t n_vocab = 0;               ///< row length
  std::span<const float> logits;     ///< [n_scored, n_vocab]: row r = chunk position first + r
  std::span<const int32_t> targets;  ///< [n_scored]: the token each row predicts
};

/// Called after each chunk (in order) with its scored logits, e.g. to save or compare them.
using ChunkObserver = std::function<void(const ChunkLogits&)>;

/// Called after each chunk with its index (from 0) and the running perplexity over all chunks so
/// far (what llama-perplexity prints as [1]x,[2]y,...).
using ChunkProgress = std::function<void(int64_t chunk, double running_ppl)>;

/// What a perplexity run measured.
struct PerplexityResult {
  double ppl = 0;                 ///< exp(nll_mean)
  double ppl_err = 0;             ///< llama-perplexity's "+/-" (see the file comment)
  double nll_mean = 0;            ///< mean negative log-likelihood (nats per token)
  double nll_sd = 0;              ///< standard deviation of the per-token NLL
  int64_t n_chunks = 0;           ///< chunks evaluated
  int64_t n_tokens = 0;           ///< tokens of the whole text (BOS included)
  int64_t n_tokens_scored = 0;    ///< n_chunks · (n_ctx − 1 − first)
  std::vector<double> chunk_ppl;  ///< running perplexity after each chunk
  double seconds = 0;             ///< wall time of the evaluation
};

/// Runs the method on `ctx` (whose n_ctx must be ≥ in.n_ctx; its n_batch is the prefill batch).
/// The context is reset before each chunk and left holding the last chunk. Throws ContextError
/// (from eval) or std::invalid_argument when the context is too small.
PerplexityResult compute_perplexity(Context& ctx, const PerplexityInput& in,
                                    const ChunkObserver& observer = {},
                                    const ChunkProgress& progress = {});

/// Negative log-likelihood of `target` under softmax(logits): max + log Σ exp(x − max) − x[target],
/// exponentials summed in double.
double token_nll(std::span<const float> logits, int32_t target);

/// FNV-1a 64 over every token text of `tok` followed by a 0 byte (the base file's vocab hash).
uint64_t vocab_hash(const Tokenizer& tok);

/// FNV-1a 64 over the first n_chunks · n_ctx ids of in.tokens as int32 little-endian.
uint64_t tokens_hash(const PerplexityInput& in);

/// The identity fields of a KL base file (its header without magic and version).
struct KldHeader {
  uint32_t n_vocab = 0;
  uint32_t n_ctx = 0;
  uint32_t n_chunks = 0;
  uint32_t first = 0;
  uint32_t n_scored = 0;  ///< scored positions per chunk
  uint64_t vocab_hash = 0;
  uint64_t tokens_hash = 0;
  uint64_t n_text_tokens = 0;

  /// The header a run of `in` with tokenizer `tok` and logit rows of `n_vocab` writes or expects.
  static KldHeader of(const Tokenizer& tok, const PerplexityInput& in, int64_t n_vocab);
  /// Bytes of the log-prob data that follow the header.
  uint64_t data_bytes() const { return uint64_t(n_chunks) * n_scored * n_vocab * 4; }
};

/// Reads the header of KL base file `path` (to learn its n_ctx before a comparison). Throws
/// std::runtime_error when the file cannot be read or is not a version-1 KL base file.
KldHeader read_kld_header(const std::string& path);

/// Writes a KL base file: construct, pass write_chunk as the ChunkObserver (or call it per
/// chunk), then finish(). Throws std::runtime_error when the file cannot be written.
class KldBaseWriter {
 public:
  KldBaseWriter(const std::string& path, const KldHeader& header);
  ~KldBaseWriter();
  KldBaseWriter(const KldBaseWriter&) = delete;
  KldBaseWriter& operator=(const KldBaseWriter&) = delete;

  /// Appends the log-softmax of every row of `c`.
  void write_chunk(const ChunkLogits& c);
  /// Checks that every chunk was written and closes the file. Throws on a short or failed write.
  void finish();

 private:
  std::string path_;
  KldHeader header_;
  std::FILE* f_ = nullptr;
  uint64_t chunks_written_ = 0;
  std::vector<float> row_;
};

/// What a KL divergence comparison measured (this run against the base file).
struct KldResult {
  int64_t count = 0;         ///< positions compared
  double kld_mean = 0;       ///< mean KL(base ‖ this), nats
  double kld_err = 0;        ///< standard error of kld_mean
  double kld_max = 0;        ///< largest per-position KLD
  double kld_median = 0;     ///< median per-position KLD
  double kld_p99 = 0;        ///< 99th percentile of per-position KLD
  double top1 = 0;           ///< fraction of positions with the same argmax (0…1)
  double top1_err = 0;       ///< its binomial standard error
  double ppl = 0;            ///< PPL of this run
  double ppl_base = 0;       ///< PPL of the base run (from its saved log-probs)
  double delta_ppl = 0;      ///< ppl − ppl_base
  double delta_ppl_err = 0;  ///< its uncertainty (covariance included)
  double rms_dp = 0;         ///< RMS over positions of p(target) − p_base(target)
};

/// Reads a KL base file and compares runs against it chunk by chunk: construct (the header is
/// read and checked against `expected`), pass compare_chunk as the ChunkObserver, then result().
class KldComparer {
 public:
  /// Opens `path` and checks magic, version, file size and that the header equals `expected`.
  /// Throws std::runtime_error naming the first mismatch (vocabulary, text, n_ctx, ...).
  KldComparer(const std::string& path, const KldHeader& expected);
  ~KldComparer();
  KldComparer(const KldComparer&) = delete;
  KldComparer& operator=(const KldComparer&) = delete;

  /// Reads the base rows of chunk c.chunk and accumulates the statistics.
  void compare_chunk(const ChunkLogits& c);
  /// The statistics over all chunks compared so far.
  KldResult result() const;

 private:
  std::string path_;
  KldHeader header_;
  std::FILE* f_ = nullptr;
  int64_t next_chunk_ = 0;
  std::vector<float> base_;  // one chunk of base log-probs
  std::vector<double> kld_values_;
  double sum_nll_ = 0, sum_nll2_ = 0, sum_nll_base_ = 0, sum_nll_base2_ = 0, sum_nll_cross_ = 0;
  double sum_kld_ = 0, sum_kld2_ = 0, sum_dp2_ = 0;
  int64_t same_top_ = 0;
};

}  // namespace kvrun
