// logprobs.h — log-probabilities of the next token, as the CLI prints them per generated position.
//
// The numbers are a log-softmax over the whole vocabulary of the *raw* logits (before any
// penalty, truncation or temperature), which is what llama-server reports for `n_probs` /
// OpenAI-style `logprobs` (llama.cpp tools/server, probabilities of the unmodified distribution).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvrun {

/// One entry of a top-K list: a token id and its natural-log probability (≤ 0).
struct TokenLogprob {
  int32_t id = 0;        ///< token id, an index into the logits
  float logprob = 0.0f;  ///< log p(id), natural log
};

/// log_softmax(x)_i = x_i − max(x) − log Σ_j exp(x_j − max(x)), the sum accumulated in double.
/// Shape: one value per vocabulary entry, same length as `logits`. An empty input gives an empty
/// output. Entries of −inf give −inf. Formula: the standard numerically stable log-sum-exp.
std::vector<float> log_softmax(std::span<const float> logits);

/// The `k` most likely tokens of log_softmax(logits), most likely first (ties: lower id first).
/// Returns min(k, logits.size()) entries; k = 0 gives an empty list.
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, size_t k);

}  // namespace kvrun
