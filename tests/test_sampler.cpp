// test_sampler.cpp — the sampler chain stages, seeded draws, greedy, penalties and logprobs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/logprobs.h"
#include "engine/sampler.h"
#include "test_util.h"

namespace kvrun {
namespace {

using test::random_floats;

/// Softmax of `l / temp` in double, full vocabulary (the test's own reference).
std::vector<double> ref_softmax(const std::vector<float>& l, double temp = 1.0) {
  double max = *std::max_element(l.begin(), l.end());
  std::vector<double> p(l.size());
  double sum = 0.0;
  for (size_t i = 0; i < l.size(); ++i) sum += p[i] = std::exp((l[i] - max) / temp);
  for (auto& v : p) v /= sum;
  return p;
}

/// Token ids sorted most likely first.
std::vector<int32_t> ids_by_logit(const std::vector<float>& l) {
  std::vector<int32_t> ids(l.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  return ids;
}

/// Params with every truncation off and temperature 1: a plain draw from softmax(logits).
SamplerParams plain(uint32_t seed) {
  SamplerParams p;
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

/// `n` draws from one fixed row of logits, counted per token id.
std::map<int32_t, int> draw_counts(const SamplerParams& params, const std::vector<float>& l,
                                   int n) {
  Sampler s(params);
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) ++counts[s.sample(l)];
  return counts;
}

std::vector<Candidate> candidates(const std::vector<float>& l) {
  std::vector<Candidate> c;
  for (size_t i = 0; i < l.size(); ++i) c.push_back({static_cast<int32_t>(i), l[i]});
  return c;
}

TEST(Sampler, DefaultsAreLlamaCpps) {
  const SamplerParams p;
  EXPECT_FLOAT_EQ(p.temp, 0.8f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.top_p, 0.95f);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_EQ(p.repeat_last_n, 64);
  EXPECT_FLOAT_EQ(p.repeat_penalty, 1.0f);
  EXPECT_EQ(p.seed, kRandomSeed);
}

TEST(Sampler, GreedyIsArgmaxFirstOnTies) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const auto l = random_floats(500, seed, 2.0f);
    int32_t best = 0;
    for (size_t i = 1; i < l.size(); ++i) {
      if (l[i] > l[best]) best = static_cast<int32_t>(i);
    }
    SamplerParams p;  // other defaults on: they must not change the argmax
    p.temp = 0.0f;
    p.seed = seed;
    Sampler s(p);
    EXPECT_EQ(s.sample(l), best);
    EXPECT_EQ(s.sample(l), best);
  }
  auto l = random_floats(50, 7);
  const float top = *std::max_element(l.begin(), l.end()) + 1.0f;
  l[31] = top;
  l[12] = top;
  Sampler s({.temp = 0.0f, .seed = 3});
  EXPECT_EQ(s.sample(l), 12);
  EXPECT_THROW(s.sample(std::vector<float>{}), std::invalid_argument);
}

TEST(Sampler, TopKNeverDrawsOutsideTheKLargest) {
  const auto l = random_floats(200, 11, 1.0f);
  const auto order = ids_by_logit(l);
  for (int32_t k : {1, 3, 8}) {
    auto c = candidates(l);
    top_k_filter(c, k);
    ASSERT_EQ(c.size(), static_cast<size_t>(k));
    for (int32_t i = 0; i < k; ++i) EXPECT_EQ(c[i].id, order[i]);

    SamplerParams p = plain(100 + k);
    p.top_k = k;
    const auto counts = draw_counts(p, l, 4000);
    EXPECT_EQ(counts.size(), static_cast<size_t>(k));  // every one of the k is reachable
    for (const auto& [id, n] : counts) {
      EXPECT_NE(std::find(order.begin(), order.begin() + k, id), order.begin() + k) << id;
    }
  }
}

TEST(Sampler, TopPKeepsTheSmallestPrefixWithMassAtLeastP) {
  const auto l = random_floats(300, 21, 2.0f);
  const auto order = ids_by_logit(l);
  const auto prob = ref_softmax(l);
  for (float top_p : {0.1f, 0.5f, 0.8f, 0.95f}) {
    auto c = candidates(l);
    top_p_filter(c, top_p);
    ASSERT_FALSE(c.empty());
    double mass = 0.0;
    for (size_t i = 0; i < c.size(); ++i) {
      EXPECT_EQ(c[i].id, order[i]);
      mass += prob[order[i]];
    }
    EXPECT_GE(mass, top_p - 1e-6);
    EXPECT_LT(mass - prob[order[c.size() - 1]], top_p);  // one fewer is not enough

    SamplerParams p = plain(7);
    p.top_p = top_p;
    for (const auto& [id, n] : draw_counts(p, l, 2000)) {
      EXPECT_NE(std::find(order.begin(), order.begin() + c.size(), id), order.begin() + c.size());
    }
  }
}

TEST(Sampler, MinPDropsTokensBelowMinPTimesPMax) {
  const auto l = random_floats(400, 31, 2.0f);
  const auto prob = ref_softmax(l);
  const double pmax = *std::max_element(prob.begin(), prob.end());
  for (float min_p : {0.05f, 0.2f, 0.6f}) {
    auto c = candidates(l);
    min_p_filter(c, min_p);
    size_t expected = 0;
    for (double v : prob) expected += v >= min_p * pmax;
    EXPECT_EQ(c.size(), expected);
    EXPECT_LT(c.size(), l.size());
    for (const auto& x : c) EXPECT_GE(prob[x.id], min_p * pmax * (1 - 1e-5));

    SamplerParams p = plain(9);
    p.min_p = min_p;
    for (const auto& [id, n] : draw_counts(p, l, 2000)) {
      EXPECT_GE(prob[id], min_p * pmax * (1 - 1e-5)) << id;
    }
  }
}

TEST(Sampler, TemperatureScalesTheEmpiricalDistribution) {
  const auto l = random_floats(6, 41, 1.0f);
  constexpr int kDraws = 40000;
  double prev_top_freq = 2.0;
  const int32_t top = ids_by_logit(l)[0];
  for (float temp : {0.5f, 1.0f, 2.0f}) {
    SamplerParams p = plain(1234);
    p.temp = temp;
    const auto counts = draw_counts(p, l, kDraws);
    const auto expect = ref_softmax(l, temp);
    for (size_t id = 0; id < l.size(); ++id) {
      const auto it = counts.find(static_cast<int32_t>(id));
      const double f = it == counts.end() ? 0.0 : static_cast<double>(it->second) / kDraws;
      const double sigma = std::sqrt(expect[id] * (1 - expect[id]) / kDraws);
      EXPECT_NEAR(f, expect[id], 5 * sigma + 1e-4) << "temp " << temp << " id " << id;
    }
    const double top_freq = static_cast<double>(counts.at(top)) / kDraws;
    EXPECT_LT(top_freq, prev_top_freq);  // hotter → flatter
    prev_top_freq = top_freq;
  }
}

TEST(Sampler, PenaltiesFollowTheFormula) {
  const auto raw = random_floats(64, 51, 2.0f);
  const std::vector<int32_t> window = {3, 9, 3, 40, 3, 9, 63, 1000, -2};
  SamplerParams p;
  p.repeat_penalty = 1.3f;
  p.frequency_penalty = 0.25f;
  p.presence_penalty = 0.6f;
  auto l = raw;
  apply_penalties(l, window, p);
  for (size_t id = 0; id < raw.size(); ++id) {
    const auto n = std::count(window.begin(), window.end(), static_cast<int32_t>(id));
    double want = raw[id];
    if (n > 0) {
      want = want > 0 ? want / 1.3 : want * 1.3;
      want -= n * 0.25 + 0.6;
    }
    EXPECT_NEAR(l[id], want, 1e-5) << id;
  }
  EXPECT_NE(l[3], raw[3]);
}

TEST(Sampler, PenaltyWindowIsTheLastNAccepted) {
  std::vector<float> l = {1.0f, 3.0f, 2.9f, 0.5f};
  SamplerParams p;
  p.temp = 0.0f;
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 2;
  p.seed = 1;
  Sampler s(p);
  EXPECT_EQ(s.sample(l), 1);
  s.accept(1);
  EXPECT_EQ(s.sample(l), 2);  // 3.0 / 2 < 2.9
  s.accept(0);
  s.accept(3);  // token 1 has left the 2-token window
  EXPECT_EQ(s.sample(l), 1);
  s.accept(1);
  s.reset();
  EXPECT_EQ(s.sample(l), 1);
}

std::vector<int32_t> run(uint32_t seed, int n) {
  SamplerParams p;
  p.temp = 1.0f;
  p.repeat_penalty = 1.1f;
  p.seed = seed;
  Sampler s(p);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const auto l = random_floats(256, 1000 + i, 1.0f);
    out.push_back(s.sample(l));
    s.accept(out.back());
  }
  return out;
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  const auto a = run(42, 200);
  EXPECT_EQ(a, run(42, 200));
  EXPECT_NE(a, run(43, 200));
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 5u);  // really sampling

  Sampler s({.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 5});
  const auto l = random_floats(256, 77);
  std::vector<int32_t> first, second;
  for (int i = 0; i < 50; ++i) first.push_back(s.sample(l));
  s.reset();
  for (int i = 0; i < 50; ++i) second.push_back(s.sample(l));
  EXPECT_EQ(first, second);
  EXPECT_EQ(s.seed(), 5u);
  EXPECT_NE(Sampler(SamplerParams{}).seed(), kRandomSeed);
}

TEST(Logprobs, TopKMatchesDoublePrecisionReference) {
  for (uint32_t seed : {61u, 62u, 63u}) {
    const auto l = random_floats(5000, seed, 4.0f);
    double max = *std::max_element(l.begin(), l.end());
    double sum = 0.0;
    for (float v : l) sum += std::exp(static_cast<double>(v) - max);
    const double lse = max + std::log(sum);
    const auto order = ids_by_logit(l);

    const auto top = top_logprobs(l, 10);
    ASSERT_EQ(top.size(), 10u);
    for (size_t i = 0; i < top.size(); ++i) {
      EXPECT_EQ(top[i].id, order[i]);
      EXPECT_NEAR(top[i].logprob, l[order[i]] - lse, 1e-5);
    }
    const auto all = log_softmax(l);
    double total = 0.0;
    for (size_t i = 0; i < l.size(); ++i) {
      EXPECT_NEAR(all[i], l[i] - lse, 1e-5);
      total += std::exp(static_cast<double>(all[i]));
    }
    EXPECT_NEAR(total, 1.0, 1e-4);
  }
  EXPECT_EQ(top_logprobs(std::vector<float>{0.5f, 1.5f}, 5).size(), 2u);
  EXPECT_TRUE(top_logprobs(std::vector<float>{}, 3).empty());
}

// ---- a request's chain (llama-server's `samplers`) and the infill stage ----

/// A vocabulary for infill_filter: ids with these pieces, EOG ids ≥ 100, EOT 100.
InfillVocab test_vocab(std::vector<std::string> pieces) {
  return {[](int32_t id) { return id >= 100; },
          [pieces](int32_t id) { return id < int32_t(pieces.size()) ? pieces[size_t(id)] : ""; },
          100};
}

/// Candidates with these (id, weight) pairs: logit ln(weight), so softmax p = weight / Σ.
std::vector<Candidate> weighted(std::vector<std::pair<int32_t, double>> w) {
  std::vector<Candidate> c;
  for (auto [id, x] : w) c.push_back({id, float(std::log(x))});
  return c;
}

/// The candidates' distribution as id → p (softmax of their logits).
std::map<int32_t, double> distribution(const std::vector<Candidate>& c) {
  double sum = 0.0;
  for (const auto& x : c) sum += std::exp(double(x.logit));
  std::map<int32_t, double> out;
  for (const auto& x : c) out[x.id] = std::exp(double(x.logit)) / sum;
  return out;
}

void expect_distribution(const std::vector<Candidate>& c, std::map<int32_t, double> want) {
  const auto got = distribution(c);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [id, p] : want) {
    ASSERT_TRUE(got.count(id)) << id;
    EXPECT_NEAR(got.at(id), p, 1e-6) << id;
  }
}

TEST(SamplerInfill, LlamaHsExampleCombinesPrefixes) {
  // llama.h: "hel" .5, "hell" .2, "hello" .1, "dummy" .1 → "hel" .8, "dummy" .1; then "dummy"
  // (.1/.9 < 0.2) goes, and "hel" alone is left.
  auto c = weighted({{0, .5}, {1, .2}, {2, .1}, {3, .1}});
  infill_filter(c, test_vocab({"hel", "hell", "hello", "dummy"}));
  expect_distribution(c, {{0, 1.0}});
}

TEST(SamplerInfill, CombinesThenDropsUnlikelyTextKeepingEog) {
  // Weights a .28, ab .10, b .35, bc .05, c .22, EOG .01 (Σ 1.01). p(EOG)·3·6 = .178 < .99: no
  // early end. Combined: b .40, a .38, c .22 (/1.01 each). c = .218 survives 0.2 (3 text
  // tokens), not 1/(3+1); left b .40, a .38, EOG .01 over .79.
  auto c = weighted({{0, .28}, {1, .10}, {2, .35}, {3, .05}, {4, .22}, {100, .01}});
  infill_filter(c, test_vocab({"a", "ab", "b", "bc", "c"}));
  expect_distribution(c, {{2, .40 / .79}, {0, .38 / .79}, {100, .01 / .79}});
}

TEST(SamplerInfill, EndsWhenEogIsLikelyWithLlamaCppsFactorThree) {
  // Text .8, EOG .2, n = 2: 3 · .2 · 2 = 1.2 > .8 → only EOG (without the factor 3 of
  // llama.cpp's code, .4 < .8 would have kept the text).
  auto c = weighted({{0, .8}, {100, .2}});
  infill_filter(c, test_vocab({"x"}));
  expect_distribution(c, {{100, 1.0}});
  c = weighted({{0, .5}, {1, .3}, {100, .1}, {101, .1}});  // two EOG ids share the mass
  infill_filter(c, test_vocab({"x", "y"}));
  expect_distribution(c, {{100, .5}, {101, .5}});
  c = weighted({{0, .95}, {100, .05}});  // 3 · .05 · 2 = .3 < .95: the text stays
  infill_filter(c, test_vocab({"x"}));
  expect_distribution(c, {{0, .95}, {100, .05}});
}

TEST(SamplerInfill, NoLikelyTextTokenGivesEot) {
  std::vector<std::pair<int32_t, double>> w;
  std::vector<std::string> pieces;
  for (int32_t i = 0; i < 8; ++i) {  // eight unrelated pieces of p .125 < 0.2
    w.push_back({i, 1.0});
    pieces.push_back(std::string(1, char('a' + i)));
  }
  auto c = weighted(w);
  infill_filter(c, test_vocab(pieces));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].id, 100);  // the vocabulary's EOT, though it was no candidate
  InfillVocab no_eot = test_vocab(pieces);
  no_eot.eot = -1;
  w[5].second = 1.5;  // without an EOT id: the most likely candidate
  c = weighted(w);
  infill_filter(c, no_eot);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].id, 5);
}

TEST(SamplerChain, StagesRunInTheGivenOrder) {
  // Token 0 leads (3.0 > 2.9) until the repetition penalty halves it (1.5).
  const std::vector<float> l = {3.0f, 2.9f, 1.0f, 0.0f};
  SamplerParams p{.temp = 0.0f, .top_k = 1, .repeat_penalty = 2.0f, .seed = 1};
  auto pick = [&](std::optional<std::vector<SamplerStage>> chain) {
    p.chain = std::move(chain);
    Sampler s(p);
    s.accept(0);
    return s.sample(l);
  };
  using S = SamplerStage;
  EXPECT_EQ(pick(std::nullopt), 1);                             // default: penalties first
  EXPECT_EQ(pick(std::vector<S>{S::kPenalties, S::kTopK}), 1);  // the same order
  EXPECT_EQ(pick(std::vector<S>{S::kTopK, S::kPenalties}), 0);  // top-k kept 0 alone first
  EXPECT_EQ(pick(std::vector<S>{S::kTopK}), 0);                 // no penalties stage: none
}

TEST(SamplerChain, TemperatureOnlyWhereTheChainNamesIt) {
  // logits 1, 0, −5 with top-k 2: without a temperature stage the draw is from softmax at 1,
  // p(1) = 1 / (1 + e) = 0.2689; with one at 0.01, token 0 always.
  const std::vector<float> l = {1.0f, 0.0f, -5.0f};
  SamplerParams p{.temp = 0.01f, .top_k = 2, .top_p = 1.0f, .min_p = 0.0f, .seed = 42};
  p.chain = std::vector<SamplerStage>{SamplerStage::kTopK};
  Sampler s(p);
  int ones = 0;
  for (int i = 0; i < 4000; ++i) {
    const int32_t t = s.sample(l);
    ASSERT_NE(t, 2);
    ones += t == 1;
  }
  EXPECT_NEAR(ones / 4000.0, 1.0 / (1.0 + std::exp(1.0)), 0.035);  // > 5 standard deviations
  p.chain->push_back(SamplerStage::kTemperature);
  Sampler hot(p);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(hot.sample(l), 0);
}

TEST(SamplerChain, TheDefaultOrderWrittenOutDrawsAsTheDefault) {
  using S = SamplerStage;
  const auto l = random_floats(400, 5, 3.0f);
  SamplerParams p{.temp = 0.9f,
                  .top_k = 30,
                  .top_p = 0.9f,
                  .min_p = 0.02f,
                  .repeat_penalty = 1.3f,
                  .presence_penalty = 0.2f,
                  .seed = 77};
  Sampler dflt(p);
  p.chain = std::vector<S>{S::kPenalties, S::kTopK, S::kTopP, S::kMinP, S::kTemperature};
  Sampler chain(p);
  for (int i = 0; i < 300; ++i) {
    const int32_t a = dflt.sample(l), b = chain.sample(l);
    ASSERT_EQ(a, b) << "draw " << i;
    dflt.accept(a);
    chain.accept(b);
  }
}

TEST(SamplerChain, InfillStageNeedsItsVocabulary) {
  SamplerParams p{.seed = 1};
  p.chain = std::vector<SamplerStage>{SamplerStage::kTopK, SamplerStage::kInfill};
  Sampler s(p);
  const std::vector<float> l = {float(std::log(.5)), float(std::log(.2)), float(std::log(.1)),
                                float(std::log(.1))};
  EXPECT_THROW(s.sample(l), std::logic_error);
  s.set_infill_vocab(test_vocab({"hel", "hell", "hello", "dummy"}));
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(l), 0);  // only "hel" is left to draw
}

}  // namespace
}  // namespace kvrun
