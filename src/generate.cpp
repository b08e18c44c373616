// generate.cpp — the decode loop (see generate.h).
#include "generate.h"

#include <chrono>

namespace kvrun {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// Length of the longest prefix of `s` that does not end inside a UTF-8 sequence.
size_t complete_utf8_prefix(std::string_view s) {
  // Look back at most 3 bytes for the lead byte of a sequence that is still incomplete.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 1;
    if ((c & 0xE0) == 0xC0)
      need = 2;
    else if ((c & 0xF0) == 0xE0)
      need = 3;
    else if ((c & 0xF8) == 0xF0)
      need = 4;
    return need > back ? n - back : n;
  }
  return n;  // no lead byte in the last 3: invalid or complete, release it all
}

}  // namespace

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kEog:
      return "eog";
    case StopReason::kLimit:
      return "limit";
    case StopReason::kContextFull:
      return "context_full";
    case StopReason::kInterrupted:
      return "interrupted";
  }
  return "?";
}

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  const size_t n = complete_utf8_prefix(pending_);
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

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

  Utf8Stream utf8;
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    res.text += piece;
    if (sink) sink(piece);
  };
  t0 = std::chrono::steady_clock::now();
  res.stop = StopReason::kLimit;
  while (params.n_predict < 0 || int64_t(res.tokens.size()) < params.n_predict) {
    if (interrupt && interrupt->load()) {
      res.stop = StopReason::kInterrupted;
      break;
    }
    if (params.n_probs > 0) res.probs.push_back(top_logprobs(logits, size_t(params.n_probs)));
    const int32_t id = sampler.sample(logits);
    sampler.accept(id);
    if (tok.is_eog(id) && !params.ignore_eos) {
      if (params.n_probs > 0) res.probs.pop_back();
      res.stop = StopReason::kEog;
      break;
    }
    res.tokens.push_back(id);
    emit(utf8.push(tok.token_to_piece(id, false)));
    if (params.n_predict >= 0 && int64_t(res.tokens.size()) >= params.n_predict) break;
    if (ctx.n_past() >= ctx.n_ctx()) {
      res.stop = StopReason::kContextFull;
      break;
    }
    const int32_t one[1] = {id};
    logits = ctx.eval(one);
  }
  emit(utf8.flush());
  res.timings.n_gen = int64_t(res.tokens.size());
  res.timings.gen_ms = ms_since(t0);
  return res;
}

}  // namespace kvrun
