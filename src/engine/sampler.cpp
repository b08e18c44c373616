// sampler.cpp — the sampler chain (see sampler.h for the order and its source).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string_view>
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

bool penalties_off(const SamplerParams& p) {
  return p.repeat_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f;
}

/// Occurrences of each id of `window` in [0, n_vocab).
std::unordered_map<int32_t, int> window_counts(std::span<const int32_t> window, size_t n_vocab) {
  std::unordered_map<int32_t, int> count;
  for (int32_t t : window) {
    if (t >= 0 && static_cast<size_t>(t) < n_vocab) ++count[t];
  }
  return count;
}

/// One logit of a token seen `n` > 0 times, penalised (see apply_penalties).
float penalised(float l, int n, const SamplerParams& p) {
  l = l > 0.0f ? l / p.repeat_penalty : l * p.repeat_penalty;
  return l - (static_cast<float>(n) * p.frequency_penalty + p.presence_penalty);
}

}  // namespace

void apply_penalties(std::span<float> logits, std::span<const int32_t> window,
                     const SamplerParams& params) {
  if (penalties_off(params)) return;
  for (const auto& [id, n] : window_counts(window, logits.size()))
    logits[id] = penalised(logits[id], n, params);
}

void apply_penalties(std::vector<Candidate>& c, std::span<const int32_t> window,
                     const SamplerParams& params) {
  if (penalties_off(params) || window.empty()) return;
  const auto count = window_counts(window, SIZE_MAX);
  for (auto& x : c) {
    if (auto it = count.find(x.id); it != count.end())
      x.logit = penalised(x.logit, it->second, params);
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

namespace {

/// Keeps the candidates `keep` says yes to, their p renormalized; returns how many stayed.
size_t keep_renormalized(std::vector<Candidate>& c, std::vector<double>& p,
                         const std::function<bool(size_t)>& keep) {
  size_t n = 0;
  double sum = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (!keep(i)) continue;
    c[n] = c[i];
    sum += p[n] = p[i];
    ++n;
  }
  c.resize(n);
  p.resize(n);
  for (auto& v : p) v /= sum;
  return n;
}

/// Step 2 of infill_filter: candidates whose pieces are prefixes of one another combined into
/// the most likely of them (p[j] = 0 for the absorbed ones).
void combine_prefixes(const std::vector<Candidate>& c, const std::vector<std::string>& piece,
                      std::vector<double>& p) {
  const size_t n = c.size();
  std::vector<size_t> by_p(n), by_piece;  // most likely first; pieces in byte order
  for (size_t i = 0; i < n; ++i) {
    by_p[i] = i;
    if (!piece[i].empty()) by_piece.push_back(i);
  }
  std::sort(by_p.begin(), by_p.end(),
            [&](size_t a, size_t b) { return p[a] != p[b] ? p[a] > p[b] : c[a].id < c[b].id; });
  std::sort(by_piece.begin(), by_piece.end(),
            [&](size_t a, size_t b) { return piece[a] < piece[b]; });
  std::unordered_multimap<std::string_view, size_t> of_piece;
  for (size_t i : by_piece) of_piece.emplace(piece[i], i);
  std::vector<bool> alive(n, true);
  auto absorb = [&](size_t into, size_t j) {
    if (j == into || !alive[j]) return;
    p[into] += p[j];
    p[j] = 0.0;
    alive[j] = false;
  };
  for (size_t i : by_p) {
    const std::string_view s = piece[i];
    if (!alive[i] || s.empty()) continue;
    for (size_t len = 1; len <= s.size(); ++len) {  // candidates whose piece is a prefix of s
      auto [lo, hi] = of_piece.equal_range(s.substr(0, len));
      for (auto it = lo; it != hi; ++it) absorb(i, it->second);
    }
    auto it = std::lower_bound(by_piece.begin(), by_piece.end(), s,
                               [&](size_t a, std::string_view v) { return piece[a] < v; });
    for (; it != by_piece.end() && std::string_view(piece[*it]).starts_with(s); ++it)
      absorb(i, *it);  // candidates with s as a prefix
  }
}

}  // namespace

void infill_filter(std::vector<Candidate>& c, const InfillVocab& v) {
  if (c.empty()) return;
  std::vector<double> p = softmax(c);
  std::vector<bool> eog(c.size());
  double p_eog = 0.0, p_txt = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    eog[i] = v.is_eog(c[i].id);
    (eog[i] ? p_eog : p_txt) += p[i];
  }
  const auto set_logits = [&] {
    for (size_t i = 0; i < c.size(); ++i) c[i].logit = float(std::log(p[i]));
  };
  if (3.0 * p_eog * double(c.size()) > p_txt) {  // 1: end here
    keep_renormalized(c, p, [&](size_t i) { return bool(eog[i]); });
    set_logits();
    return;
  }
  std::vector<std::string> piece(c.size());
  for (size_t i = 0; i < c.size(); ++i)
    if (!eog[i]) piece[i] = v.piece(c[i].id);
  combine_prefixes(c, piece, p);  // 2
  size_t n_txt = 0;               // 3: text candidates under 0.2 go
  for (size_t i = 0; i < c.size(); ++i) n_txt += !eog[i] && p[i] >= 0.2;
  if (n_txt == 0) {
    if (v.eot >= 0) {
      c.assign(1, Candidate{v.eot, 0.0f});
    } else if (p_eog > 0.0) {  // no EOT id: the EOG candidates
      keep_renormalized(c, p, [&](size_t i) { return bool(eog[i]); });
      set_logits();
    } else {
      c.assign(1, Candidate{c[size_t(std::max_element(p.begin(), p.end()) - p.begin())].id, 0});
    }
    return;
  }
  const auto keep_over = [&](double threshold) {
    keep_renormalized(c, p, [&](size_t i) { return v.is_eog(c[i].id) || p[i] >= threshold; });
  };
  keep_over(0.2);
  keep_over(1.0 / double(n_txt + 1));
  set_logits();
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
  if (!params_.chain && params_.repeat_last_n != 0) {  // a request's chain places them itself
    const std::vector<int32_t> window(history_.begin(), history_.end());
    apply_penalties(l, window, params_);
  }
  const int32_t first = pick(l);
  if (!filter || filter->allows(first)) return first;
  if (!filter->mask(l)) return -1;
  return pick(l);
}

int32_t Sampler::pick(const std::vector<float>& l) {
  if (params_.chain) return pick_chain(l);
  if (params_.temp <= 0.0f) return argmax(l);

  std::vector<Candidate> c(l.size());
  for (size_t i = 0; i < l.size(); ++i) c[i] = {static_cast<int32_t>(i), l[i]};
  top_k_filter(c, params_.top_k);
  top_p_filter(c, params_.top_p);
  min_p_filter(c, params_.min_p);
  temperature_scale(c, params_.temp);
  return draw(c);
}

int32_t Sampler::pick_chain(const std::vector<float>& l) {
  std::vector<Candidate> c;
  c.reserve(l.size());
  for (size_t i = 0; i < l.size(); ++i)  // tokens masked out (−∞) are not candidates
    if (l[i] != -INFINITY) c.push_back({static_cast<int32_t>(i), l[i]});
  if (c.empty()) return argmax(l);
  const std::vector<int32_t> window(history_.begin(), history_.end());
  for (const SamplerStage stage : *params_.chain) {
    switch (stage) {
      case SamplerStage::kPenalties:
        if (params_.repeat_last_n != 0) apply_penalties(c, window, params_);
        break;
      case SamplerStage::kTopK:
        top_k_filter(c, params_.top_k);
        break;
      case SamplerStage::kTopP:
        top_p_filter(c, params_.top_p);
        break;
      case SamplerStage::kMinP:
        min_p_filter(c, params_.min_p);
        break;
      case SamplerStage::kTemperature:
        if (params_.temp > 0.0f) {
          temperature_scale(c, params_.temp);
        } else {  // llama.cpp's temperature stage at t ≤ 0: only the most likely token stays
          const Candidate best = *std::min_element(c.begin(), c.end(), more_likely);
          c.assign(1, best);
        }
        break;
      case SamplerStage::kInfill:
        if (!infill_.is_eog || !infill_.piece)
          throw std::logic_error("Sampler: the infill stage needs set_infill_vocab");
        infill_filter(c, infill_);
        break;
    }
  }
  return draw(c);
}

int32_t Sampler::draw(const std::vector<Candidate>& c) {
  if (params_.temp <= 0.0f) return std::min_element(c.begin(), c.end(), more_likely)->id;
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
