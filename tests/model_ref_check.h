// model_ref_check.h — what test_moe_model and test_deepseek2_model share: kvrun's whole forward
// of a synthetic file against a double-precision reference of its architecture, logprob by
// logprob, prompt positions and greedy decode steps; the float64 pieces the references share.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "engine/context.h"
#include "engine/model.h"

namespace kvrun::test {

/// RMSNorm in float64 (Zhang & Sennrich 2019): x · g / sqrt(mean(x²) + eps), g the [x.size()]
/// weight.
inline std::vector<double> rms_norm(const std::vector<double>& x, const float* g, double eps) {
  double s = 0;
  for (double v : x) s += v * v;
  const double r = 1 / std::sqrt(s / double(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * g[i];
  return y;
}

/// x += y (the residual stream), element by element.
inline void add_to(std::vector<double>& x, const std::vector<double>& y) {
  for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
}

/// log_softmax of `x` at `i`.
inline double logprob(std::span<const double> x, size_t i) {
  const double mx = *std::max_element(x.begin(), x.end());
  double z = 0;
  for (double v : x) z += std::exp(v - mx);
  return x[i] - mx - std::log(z);
}

/// kvrun's forward of the model at `path` (f32 KV, exact attention, prefill in chunks of 5)
/// against `ref`, whose `std::vector<double> step(int32_t token)` gives the next position's
/// logits: logprobs of every one of `n_prompt` prompt positions and of 6 greedy decode steps
/// within 1e-4, the same greedy tokens. Prints the largest difference under `label`.
template <typename Ref>
void expect_forward_matches(const std::string& path, Ref& ref, int n_prompt,
                            const std::string& label) {
  using Vec = std::vector<double>;
  const Model m = Model::load(path, {});
  ContextParams cp;
  cp.n_ctx = 64;
  cp.n_batch = 5;  // prefill in chunks
  cp.n_threads = 2;
  cp.flash_attn = FlashAttn::kOff;
  cp.kv.type_k = cp.kv.type_v = DType::F32;
  Context ctx(m, cp);
  const int64_t nv = m.hparams().n_vocab;
  std::vector<int32_t> prompt;
  for (int i = 0; i < n_prompt; ++i) prompt.push_back(int32_t((i * 37 + 5) % nv));
  const std::span<const float> all = ctx.eval(prompt, true);
  ASSERT_EQ(all.size(), prompt.size() * size_t(nv));
  double max_diff = 0;
  auto compare = [&](std::span<const float> got, const Vec& want, const std::string& what) {
    const Vec g(got.begin(), got.end());
    for (size_t i = 0; i < want.size(); ++i) {
      const double diff = std::fabs(logprob(g, i) - logprob(want, i));
      max_diff = std::max(max_diff, diff);
      ASSERT_LT(diff, 1e-4) << what << " token " << i;
    }
  };
  Vec want;
  for (size_t t = 0; t < prompt.size(); ++t) {
    want = ref.step(prompt[t]);
    compare(all.subspan(t * size_t(nv), size_t(nv)), want, "prompt position " + std::to_string(t));
  }
  auto argmax = [](auto b, auto e) { return int32_t(std::max_element(b, e) - b); };
  std::span<const float> lg = all.subspan((prompt.size() - 1) * size_t(nv));
  for (int s = 0; s < 6; ++s) {  // greedy decode, one row per step: the same tokens
    const int32_t next = argmax(want.begin(), want.end());
    ASSERT_EQ(argmax(lg.begin(), lg.end()), next) << "greedy token " << s;
    lg = ctx.eval(std::span<const int32_t>(&next, 1));
    want = ref.step(next);
    compare(lg, want, "decode step " + std::to_string(s));
  }
  std::cout << "[ " << label
            << " ] max |logprob diff| against the double-precision reference: " << max_diff << "\n";
}

}  // namespace kvrun::test
