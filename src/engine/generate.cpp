// generate.cpp — the decode loop (see generate.h).
#include "engine/generate.h"

#include <chrono>

namespace kvrun {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

GenerateResult generate(Context& ctx, const Tokenizer& tok, Sampler& sampler,
                        std::span<const int32_t> input, const GenerateParams& params,
                        const PieceSink& sink, const std::atomic<bool>* interrupt) {
  if (input.empty()) throw ContextError("generate needs at least one new token to evaluate");
  GenerateResult res;
  auto t0 = std::chrono::steady_clock::now();
  std::span<const float> logits = ctx.eval(input);
  res.timings.n_prompt = int64_t(input.size());
  res.timings.prompt_ms = ms_since(t0);
  for (int32_t id : input) sampler.accept(id);

  TokenStreamParams tp;
  tp.n_predict = params.n_predict;
  tp.n_probs = params.n_probs;
  tp.ignore_eos = params.ignore_eos;
  tp.grammar = params.grammar;
  TokenStream stream(tok, sampler, tp);
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    res.text += piece;
    if (sink) sink(piece);
  };
  t0 = std::chrono::steady_clock::now();
  FinishReason why = FinishReason::kLength;
  while (params.n_predict != 0) {
    if (interrupt && interrupt->load()) {
      why = FinishReason::kCancelled;
      break;
    }
    const TokenStep t = stream.next(logits, ctx.n_past(), ctx.n_ctx());
    if (t.emitted) {
      res.tokens.push_back(t.id);
      if (params.n_probs > 0) res.probs.push_back(t.top);
      emit(t.text);
    }
    if (t.finish) break;
    const int32_t one[1] = {t.id};
    logits = ctx.eval(one);
  }
  emit(stream.close(why));
  res.stop = *stream.finish();
  res.timings.n_gen = int64_t(res.tokens.size());
  res.timings.gen_ms = ms_since(t0);
  return res;
}

}  // namespace kvrun
