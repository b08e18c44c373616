// context.cpp — see context.h.
#include "context.h"

#include <algorithm>
#include <string>

#include "cpu/cpu_info.h"

namespace kvrun {

namespace {

int64_t checked_n_ctx(const Model& m, const ContextParams& p) {
  const int64_t n = p.n_ctx > 0 ? p.n_ctx : m.hparams().n_ctx_train;
  if (n < 1) throw ContextError("n_ctx must be at least 1");
  if (p.kv_type != DType::F16 && p.kv_type != DType::F32)
    throw ContextError(std::string("KV type ") + traits(p.kv_type).name +
                       " is not supported by the contiguous KV store (use f16 or f32)");
  return n;
}

int64_t checked_n_batch(const ContextParams& p) {
  if (p.n_batch < 1) throw ContextError("n_batch must be at least 1");
  return p.n_batch;
}

}  // namespace

Context::Context(const Model& model, const ContextParams& params)
    : model_(model),
      n_batch_(checked_n_batch(params)),
      kv_(model.hparams(), checked_n_ctx(model, params), params.kv_type),
      pool_(params.n_threads > 0 ? params.n_threads : cpu::physical_cores()) {
  n_batch_ = std::min(n_batch_, kv_.n_ctx());
  scratch_ = std::make_unique<LlamaScratch>(model.hparams(), n_batch_);
}

Context::~Context() = default;

void Context::truncate(int64_t n) {
  if (n < 0 || n > n_past_)
    throw ContextError("truncate: " + std::to_string(n) + " outside [0, " +
                       std::to_string(n_past_) + "]");
  n_past_ = n;
}

std::span<const float> Context::eval(std::span<const int32_t> tokens, bool all_logits) {
  const int64_t n = int64_t(tokens.size()), n_vocab = model_.hparams().n_vocab;
  if (n == 0) throw ContextError("eval: no tokens");
  if (n_past_ + n > n_ctx())
    throw ContextError("context overflow: " + std::to_string(n_past_) + " tokens held + " +
                       std::to_string(n) + " new > n_ctx " + std::to_string(n_ctx()));
  for (int32_t id : tokens)
    if (id < 0 || id >= n_vocab)
      throw ContextError("eval: token id " + std::to_string(id) + " outside [0, " +
                         std::to_string(n_vocab) + ")");
  logits_.resize(size_t((all_logits ? n : 1) * n_vocab));
  for (int64_t done = 0; done < n;) {
    const int64_t chunk = std::min(n_batch_, n - done);
    const bool last = done + chunk == n;
    LlamaBatch b;
    b.tokens = tokens.data() + done;
    b.n_tokens = chunk;
    b.pos0 = n_past_ + done;
    b.kv = kv_.layers();
    b.all_logits = all_logits;
    b.logits = all_logits ? logits_.data() + done * n_vocab : (last ? logits_.data() : nullptr);
    llama_forward(model_.hparams(), model_.weights(), pool_, *scratch_, b);
    done += chunk;
  }
  n_past_ += n;
  return logits_;
}

}  // namespace kvrun
