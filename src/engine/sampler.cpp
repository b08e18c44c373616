// sampler.cpp — the sampler chain (see sampler.h for the order and its source).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

namespace kvrun {

namespace {

/// Most likely first; ties by lower id so results do not depend on the sort algorithm.
bool more_likely(const Candidate& a, const Candidate& b) {
  return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
}

/// Softmax of the candidates' logits in double (max subtracted first).
std::vector<double> softmax(const std::vector<Candidate>& c) {
  double max = c.front().logit;
  for (const auto& x : c) max = std::max(max, static_cast<double>(x.logit));
  std::vector<double> p(c.size());
  double sum = 0.0;
  for (size_t i = 0; i < c.size(); ++i) sum += p[i] = std::exp(c[i].logit - max);
  for (auto& v : p) v /= sum;
  return p;
}

}  // namespace

void apply_penalties(std::span<float> logits, std::span<const int32_t> window,
                     const SamplerParams& params) {
  if (params.repeat_penalty == 1.0f && params.frequency_penalty == 0.0f &&
      params.presence_penalty == 0.0f) {
    return;
  }
  std::unordered_map<int32_t, int> count;
  for (int32_t t : window) {
    if (t >= 0 && static_cast<size_t>(t) < logits.size()) ++count[t];
  }
  for (const auto& [id, n] : count) {
    float& l = logits[id];
    l = l > 0.0f ? l / params.repeat_penalty : l * params.repeat_penalty;
    l -= static_cast<float>(n) * params.frequency_penalty + params.presence_penalty;
  }
}

void top_k_filter(std::vector<Candidate>& c, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= c.size()) {
    std::sort(c.begin(), c.end(), more_likely);
    return;
  }
  std::partial_sort(c.begin(), c.begin() + k, c.end(), more_likely);
  c.resize(static_cast<size_t>(k));
}

void top_p_filter(std::vector<Candidate>& c, float p) {
  if (p >= 1.0f || c.empty()) return;
  std::sort(c.begin(), c.end(), more_likely);
  const std::vector<double> prob = softmax(c);
  double mass = 0.0;
  size_t keep = c.size();
  for (size_t i = 0; i < c.size(); ++i) {
    mass += prob[i];
    if (mass >= p) {
      keep = i + 1;
      break;
    }
  }
  c.resize(keep);
}

void min_p_filter(std::vector<Candidate>& c, float min_p) {
  if (min_p <= 0.0f || c.empty()) return;
  float max = c.front().logit;
  for (const auto& x : c) max = std::max(max, x.logit);
  const float threshold = max + std::log(min_p);
  std::erase_if(c, [&](const Candidate& x) { return x.logit < threshold && x.logit != max; });
}

void temperature_scale(std::vector<Candidate>& c, float temp) {
  for (auto& x : c) x.logit /= temp;
}

int32_t argmax(std::span<const float> logits) {
  if (logits.empty()) throw std::invalid_argument("argmax: empty logits");
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Sampler::Sampler(const SamplerParams& params) : params_(params) {
  seed_ = params.seed != kRandomSeed ? params.seed : std::random_device{}();
  rng_.seed(seed_);
}

int32_t Sampler::sample(std::span<const float> logits, TokenFilter* filter) {
  if (logits.empty()) throw std::invalid_argument("Sampler::sample: empty logits");
  std::vector<float> l(logits.begin(), logits.end());
  if (params_.repeat_last_n != 0) {
    const std::vector<int32_t> window(history_.begin(), history_.end());
    apply_penalties(l, window, params_);
  }
  const int32_t first = pick(l);
  if (!filter || filter->allows(first)) return first;
  if (!filter->mask(l)) return -1;
  return pick(l);
}

int32_t Sampler::pick(const std::vector<float>& l) {
  if (params_.temp <= 0.0f) return argmax(l);

  std::vector<Candidate> c(l.size());
  for (size_t i = 0; i < l.size(); ++i) c[i] = {static_cast<int32_t>(i), l[i]};
  top_k_filter(c, params_.top_k);
  top_p_filter(c, params_.top_p);
  min_p_filter(c, params_.min_p);
  temperature_scale(c, params_.temp);

  const std::vector<double> prob = softmax(c);
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  double cum = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    cum += prob[i];
    if (u < cum) return c[i].id;
  }
  return c.back().id;  // u within rounding of 1
}

void Sampler::accept(int32_t token) {
  if (params_.repeat_last_n == 0) return;
  history_.push_back(token);
  if (params_.repeat_last_n > 0 && history_.size() > static_cast<size_t>(params_.repeat_last_n)) {
    history_.pop_front();
  }
}

void Sampler::reset() {
  history_.clear();
  rng_.seed(seed_);
}

}  // namespace kvrun
