// generate.h — the decode loop of one Context (`kvrun -p`, the chat REPL): feed new tokens, then
// sample one token at a time through the shared per-token path (token_stream.h) until an
// end-of-generation token, the token limit, a full context or an interrupt, streaming each piece
// of text as soon as it is complete UTF-8.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/context.h"
#include "engine/logprobs.h"
#include "engine/sampler.h"
#include "engine/token_stream.h"
#include "text/tokenizer.h"

namespace kvrun {

/// Options of one generate() call.
struct GenerateParams {
  int64_t n_predict = -1;   ///< tokens to generate at most; < 0: until EOG or a full context
  int n_probs = 0;          ///< top-K logprobs recorded per generated position (0: none)
  bool ignore_eos = false;  ///< keep going past end-of-generation tokens
  std::shared_ptr<const Grammar> grammar;  ///< constrain the output (GBNF; null: none)
};

/// Timings of one call (wall clock, milliseconds).
struct GenerateTimings {
  int64_t n_prompt = 0;  ///< tokens fed before the first sample
  double prompt_ms = 0;
  int64_t n_gen = 0;  ///< tokens sampled
  double gen_ms = 0;  ///< time of the decode steps (sampling included)
  double prompt_tps() const { return prompt_ms > 0 ? 1e3 * double(n_prompt) / prompt_ms : 0; }
  double gen_tps() const { return gen_ms > 0 ? 1e3 * double(n_gen) / gen_ms : 0; }
};

/// What one generate() call produced.
struct GenerateResult {
  std::vector<int32_t> tokens;                   ///< generated ids (no EOG token)
  std::vector<std::vector<TokenLogprob>> probs;  ///< [n_gen][n_probs] when n_probs > 0
  std::string text;                              ///< the generated text
  FinishReason stop = FinishReason::kLength;     ///< kEog, kLength, kContextFull or kCancelled
  GenerateTimings timings;
};

/// Called with each piece of generated text as soon as it forms complete UTF-8.
using PieceSink = std::function<void(std::string_view piece)>;

/// Evaluates `input` (the tokens not yet in `ctx`; at least one, since the first sample needs the
/// logits of the last prompt token) and generates. The sampler sees `input` through accept()
/// (penalty history, as llama.cpp does) and every sampled token. `interrupt` (may be null) is
/// polled between tokens. Throws ContextError when `input` is empty or does not fit the context.
GenerateResult generate(Context& ctx, const Tokenizer& tok, Sampler& sampler,
                        std::span<const int32_t> input, const GenerateParams& params,
                        const PieceSink& sink, const std::atomic<bool>* interrupt = nullptr);

}  // namespace kvrun
