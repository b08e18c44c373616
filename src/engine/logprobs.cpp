// logprobs.cpp — log-softmax over the vocabulary and its top-K (see logprobs.h).
#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace kvrun {

namespace {

/// log Σ_j exp(x_j) computed as max + log Σ exp(x_j − max), in double. −inf for an empty input
/// or one where every entry is −inf.
double log_sum_exp(std::span<const float> x) {
  double max = -std::numeric_limits<double>::infinity();
  for (float v : x) max = std::max(max, static_cast<double>(v));
  if (!std::isfinite(max)) return max;
  double sum = 0.0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - max);
  return max + std::log(sum);
}

}  // namespace

std::vector<float> log_softmax(std::span<const float> logits) {
  const double lse = log_sum_exp(logits);
  std::vector<float> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    out[i] = static_cast<float>(static_cast<double>(logits[i]) - lse);
  }
  return out;
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, size_t k) {
  k = std::min(k, logits.size());
  if (k == 0) return {};
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(
      ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
      [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
  const double lse = log_sum_exp(logits);
  std::vector<TokenLogprob> out(k);
  for (size_t i = 0; i < k; ++i) {
    out[i] = {ids[i], static_cast<float>(static_cast<double>(logits[ids[i]]) - lse)};
  }
  return out;
}

}  // namespace kvrun
