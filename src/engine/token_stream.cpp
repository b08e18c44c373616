// token_stream.cpp — see token_stream.h.
#include "engine/token_stream.h"

#include <algorithm>
#include <limits>

#include "text/grammar_vocab.h"

namespace kvrun {
namespace {

/// The grammar's tokens as the sampler's filter.
class GrammarFilter final : public TokenFilter {
 public:
  explicit GrammarFilter(GrammarTokens& g) : g_(g) {}
  bool allows(int32_t id) override { return g_.allows(id); }
  bool mask(std::span<float> logits) override {
    const TokenMask& m = g_.mask();
    bool any = false;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (i < m.size() * 64 && (m[i >> 6] >> (i & 63)) & 1)
        any = true;
      else
        logits[i] = -std::numeric_limits<float>::infinity();
    }
    return any;
  }

 private:
  GrammarTokens& g_;
};

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

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kEog:
      return "eog";
    case FinishReason::kStopString:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kContextFull:
      return "context_full";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kTimeout:
      return "timeout";
    case FinishReason::kError:
      return "error";
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

TokenStream::TokenStream(const Tokenizer& tok, Sampler& sampler, TokenStreamParams params)
    : tok_(tok), sampler_(sampler), p_(std::move(params)), stop_(p_.stop) {
  if (const auto& chain = sampler_.params().chain;
      chain && std::find(chain->begin(), chain->end(), SamplerStage::kInfill) != chain->end()) {
    const Tokenizer* t = &tok_;
    sampler_.set_infill_vocab({[t](int32_t id) { return t->is_eog(id); },
                               [t](int32_t id) { return t->token_to_piece(id, false); },
                               t->eot() >= 0 ? t->eot() : t->eos()});
  }
  if (p_.grammar) {
    if (!p_.grammar_vocab) p_.grammar_vocab = TokenTrie::build(tok);
    try {
      grammar_ = std::make_unique<GrammarTokens>(p_.grammar, p_.grammar_vocab);
      filter_ = std::make_unique<GrammarFilter>(*grammar_);
    } catch (const GrammarError& e) {  // expansion limit at the start: next() reports it
      error_ = e.what();
    }
  }
}

TokenStream::~TokenStream() = default;

TokenStep TokenStream::next(std::span<const float> logits, int64_t n_past, int64_t n_ctx) {
  TokenStep t;
  if (p_.grammar && !grammar_) {
    t.finish = finish_ = FinishReason::kError;
    return t;
  }
  if (p_.n_probs > 0) t.top = top_logprobs(logits, size_t(p_.n_probs));
  if (grammar_ && grammar_->complete() && !grammar_->can_continue() && !p_.ignore_eos) {
    t.id = tok_.eos() >= 0 ? tok_.eos() : tok_.eot();  // nothing but EOG may follow
    t.finish = finish_ = FinishReason::kEog;
    return t;
  }
  try {
    t.id = sampler_.sample(logits, filter_.get());
  } catch (const GrammarError& e) {  // the grammar's expansion exceeded its limit
    error_ = e.what();
    t.finish = finish_ = FinishReason::kError;
    return t;
  }
  if (t.id < 0) {  // no token may follow: a complete text ends here (even without an EOG id)
    if (grammar_->complete()) {
      t.id = tok_.eos() >= 0 ? tok_.eos() : tok_.eot();
      t.finish = finish_ = FinishReason::kEog;
      return t;
    }
    error_ = "the grammar allows no token of the vocabulary here";
    t.finish = finish_ = FinishReason::kError;
    return t;
  }
  sampler_.accept(t.id);
  if (grammar_) {
    try {
      grammar_->accept(t.id);
    } catch (const GrammarError& e) {  // every allowed logit −∞ or NaN, or expansion limit
      error_ = e.what();
      t.finish = finish_ = FinishReason::kError;
      return t;
    }
  }
  if (tok_.is_eog(t.id) && !p_.ignore_eos) {
    t.finish = finish_ = FinishReason::kEog;
    return t;
  }
  if (p_.n_probs > 0) t.logprob = log_softmax(logits)[size_t(t.id)];
  t.emitted = true;
  ++n_gen_;
  t.text = apply_indent(stop_.push(utf8_.push(tok_.token_to_piece(t.id, false))));
  if (stop_.stopped())
    t.finish = FinishReason::kStopString;
  else if (cut_)
    t.finish = FinishReason::kLength;
  else if (p_.n_predict >= 0 && n_gen_ >= p_.n_predict)
    t.finish = FinishReason::kLength;
  else if (n_past >= n_ctx)
    t.finish = FinishReason::kContextFull;
  if (t.finish) finish_ = t.finish;
  return t;
}

std::string TokenStream::close(FinishReason why) {
  if (!finish_) finish_ = why;
  if (*finish_ == FinishReason::kStopString || *finish_ == FinishReason::kError || cut_) return "";
  std::string tail = stop_.push(utf8_.flush());
  if (stop_.stopped())
    finish_ = FinishReason::kStopString;
  else
    tail += stop_.flush();
  const std::string kept = apply_indent(tail);
  if (cut_ && *finish_ != FinishReason::kStopString) finish_ = FinishReason::kLength;
  return kept;
}

std::string TokenStream::apply_indent(std::string text) {
  if (p_.n_indent <= 0 || cut_) return text;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (line_indent_ >= 0) {  // in a line's indentation
      if (c == ' ' || c == '\t') {
        ++line_indent_;
        continue;
      }
      if (line_indent_ < p_.n_indent) {
        cut_ = true;
        text.resize(i);
        return text;
      }
      line_indent_ = -1;
    }
    if (c == '\n') line_indent_ = 0;
  }
  return text;
}

}  // namespace kvrun
