// context.cpp — see context.h.
#include "engine/context.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "kv_layout.h"

namespace kvrun {
namespace {

int64_t checked_n_ctx(const Model& m, const ContextParams& p) {
  const int64_t n = p.n_ctx > 0 ? p.n_ctx : m.hparams().n_ctx_train;
  if (n < 1) throw ContextError("n_ctx must be at least 1");
  return n;
}

int64_t checked_n_batch(const ContextParams& p) {
  if (p.n_batch < 1) throw ContextError("n_batch must be at least 1");
  return p.n_batch;
}

/// The step size of a context: n_batch up to n_ctx; for an encoder n_ctx, since its
/// bidirectional attention sees a whole input in one step (as llama.cpp requires n_ubatch ≥ the
/// input for non-causal models). Refuses an encoder outside embeddings mode, and a context
/// longer than a bert's position rows.
int64_t context_n_batch(const Model& m, const ContextParams& p, int64_t n_ctx) {
  const int64_t n_batch = std::min(checked_n_batch(p), n_ctx);
  if (!m.encoder()) return n_batch;
  const Hparams& hp = m.hparams();
  if (!p.embeddings)
    throw ContextError(hp.arch +
                       " is an embedding (encoder-only) model: it cannot generate text; use "
                       "`kvrun embed` or `kvrun serve`'s /v1/embeddings");
  if (m.weights().pos_embd.data && n_ctx > hp.n_ctx_train)
    throw ContextError("n_ctx " + std::to_string(n_ctx) + " exceeds the " +
                       std::to_string(hp.n_ctx_train) + " positions of this " + hp.arch +
                       " model (its position embeddings)");
  return n_ctx;
}

}  // namespace

std::unique_ptr<KvCache> make_context_cache(const Model& model, const ContextParams& params) {
  KvCacheParams kp = params.kv;
  const Hparams& hp = model.hparams();
  // Window tables give windowed rows back after each step: not where every block is kept, and
  // not (yet) with a prefix store or KV rows on another device than the host CPU (a GPU); those
  // keep the uniform layout.
  if (!params.release_window_blocks) kp.window_tables = false;
  for (const Device* d : model.placement().kv)
    if (d && d != &cpu_device()) kp.window_tables = false;
  if (kv_window_table_layers(hp, kp) > 0 && !kp.cache_dir.empty() && kp.prefix_cache) {
    std::fprintf(stderr,
                 "kvrun: --kv-cache-dir: the windowed layers keep every position (per-layer "
                 "window tables are not supported with the prefix store yet)\n");
    kp.window_tables = false;
  }
  const int64_t n_win = kv_window_table_layers(hp, kp);
  const bool need_offload_size = (!kp.offload_dir.empty() || kp.host_tier) && kp.offload_max == 0;
  if (kp.mem_bytes == 0 || need_offload_size || (n_win > 0 && kp.window_blocks == 0)) {
    const int64_t n_ctx = checked_n_ctx(model, params), bs = kp.block_size;
    if (bs < 1) throw std::invalid_argument("KV block size must be at least 1");
    auto per_block = [&](int64_t layers) {
      const Hparams::KvRows r = hp.kv_rows();
      return bs * kv_bytes_per_token(kp.type_k, kp.type_v, layers, r.n_head_kv, r.head_dim,
                                     r.head_dim_v);
    };
    const int64_t whole = (n_ctx + bs - 1) / bs * per_block(hp.n_layer - n_win);
    if (n_win > 0 && kp.window_blocks == 0) {
      // Each session holds its window and a prefill chunk, with their partial ends.
      const int64_t n_seq = std::max<int64_t>(1, params.n_seq);
      const int64_t ctx_seq = (n_ctx + n_seq - 1) / n_seq;
      const int64_t per_seq = std::min((ctx_seq + bs - 1) / bs + 1,
                                       (hp.n_swa - 1 + checked_n_batch(params) + bs - 1) / bs + 2);
      kp.window_blocks = n_seq * per_seq;
    }
    if (kp.mem_bytes == 0) kp.mem_bytes = whole + kp.window_blocks * per_block(n_win);
    if (need_offload_size) kp.offload_max = whole;
    if (need_offload_size && kp.host_tier) {     // pinned memory: only what the fast tier leaves
      const int64_t pb = per_block(hp.n_layer);  // (no window tables with KV rows on a GPU)
      kp.offload_max = whole - kp.mem_bytes / pb * pb;
      bool on_gpu = false;  // (without a GPU layer, KvCache refuses --kv-host-tier)
      for (const Device* d : model.placement().kv) on_gpu = on_gpu || (d && !d->host_memory());
      if (kp.offload_max <= 0 && on_gpu) {
        std::fprintf(stderr,
                     "kvrun: --kv-host-tier: the fast tier (--kv-mem, default: what -c needs) "
                     "holds the whole context; no host tier\n");
        kp.host_tier = false;
        kp.host_attn_cpu = false;  // (nothing in the host tier to attend to)
        kp.offload_max = 0;
      }
    }
  }
  return std::make_unique<KvCache>(hp, kp, model.placement().kv);
}

Context::Context(const Model& model, const ContextParams& params)
    : Context(model, make_context_cache(model, params), nullptr, params) {}

Context::Context(const Model& model, KvCache& cache, const ContextParams& params)
    : Context(model, nullptr, &cache, params) {}

Context::Context(const Model& model, std::unique_ptr<KvCache> owned, KvCache* shared,
                 const ContextParams& params)
    : model_(model),
      owned_cache_(std::move(owned)),
      cache_(owned_cache_ ? *owned_cache_ : *shared),
      seq_(cache_),
      n_ctx_(checked_n_ctx(model, params)),
      n_batch_(context_n_batch(model, params, n_ctx_)),
      flash_(use_flash_attn(params.flash_attn)) {
  release_window_ = params.release_window_blocks ? model.hparams().all_swa_window() : 0;
  StepParams sp;
  sp.n_threads = params.n_threads;
  sp.n_batch = n_batch_;
  sp.flash = flash_;
  sp.n_ctx = n_ctx_;
  sp.release_window = release_window_;
  sp.embeddings = params.embeddings;
  step_ = std::make_unique<Step>(model, cache_, sp);
}

Context::~Context() = default;

void Context::truncate(int64_t n) {
  if (n < 0 || n > n_past())
    throw ContextError("truncate: " + std::to_string(n) + " outside [0, " +
                       std::to_string(n_past()) + "]");
  const int64_t bs = cache_.block_size();
  if (release_window_ > 0 && seq_.n_released() > 0 &&
      std::max<int64_t>(0, n - release_window_ + 1) / bs < seq_.n_released())
    n = 0;  // the window of position n is partly gone: start over
  // Window tables: the same for the windowed layers' rows (given back, and not kept since).
  if (!seq_.has_window_rows(n)) n = 0;
  seq_.truncate(n);
}

int64_t Context::reuse_prefix(std::span<const int32_t> tokens) {
  if (n_past() != 0) throw ContextError("reuse_prefix needs an empty context");
  const int64_t n = int64_t(tokens.size());
  return seq_.attach_prefix(tokens.first(size_t(std::min(n, n_ctx_))));
}

void Context::fill_synthetic(int64_t n, uint64_t seed) {
  if (n < 1)
    throw ContextError("fill_synthetic: n_tokens must be at least 1 (got " + std::to_string(n) +
                       ")");
  const int64_t pos0 = n_past();
  if (n > n_ctx() - pos0)
    throw ContextError("context overflow: " + std::to_string(pos0) + " tokens held + " +
                       std::to_string(n) + " new > n_ctx " + std::to_string(n_ctx()));
  // With window tables in chunks of n_batch, as eval(): the windowed rows go back after each.
  const int64_t w = cache_.window(), step = w > 0 ? n_batch_ : n;
  for (int64_t done = 0; done < n; done += step) {
    const int64_t m = std::min(step, n - done), at = pos0 + done;
    try {
      seq_.reserve(m);  // as eval(): a full pool throws here
      cache_.write_synthetic_rows(seq_.block_table(), at, m, seed);
    } catch (...) {
      truncate(pos0);  // gives back the reservation (window tables: or starts over)
      throw;
    }
    seq_.commit_synthetic(m);
    // As Step::run after each chunk: blocks wholly before the next query's window go back.
    if (release_window_ > 0) seq_.release_before(seq_.n_tokens() - release_window_ + 1);
    if (w > 0) seq_.release_window_before(seq_.n_tokens() - w + 1);
  }
}

std::span<const float> Context::eval(std::span<const int32_t> tokens, bool all_logits) {
  const int64_t n = int64_t(tokens.size()), n_vocab = model_.hparams().n_vocab;
  const int64_t width = step_->row_width();
  if (n == 0) throw ContextError("eval: no tokens");
  if (model_.encoder() && n_past() != 0)
    throw ContextError("eval: an encoder (" + model_.hparams().arch +
                       ") embeds one whole input per eval; reset() first");
  if (n_past() + n > n_ctx())
    throw ContextError("context overflow: " + std::to_string(n_past()) + " tokens held + " +
                       std::to_string(n) + " new > n_ctx " + std::to_string(n_ctx()));
  for (int32_t id : tokens)
    if (id < 0 || id >= n_vocab)
      throw ContextError("eval: token id " + std::to_string(id) + " outside [0, " +
                         std::to_string(n_vocab) + ")");
  // All blocks up front: a full pool throws here with nothing changed. With window tables per
  // chunk (the windowed rows behind the window go back after each step), going back to n_past()
  // on a full pool (or to 0 when the windowed rows of that position's window are gone).
  const bool per_chunk = cache_.window() > 0;
  const int64_t pos0 = n_past();
  if (!per_chunk) seq_.reserve(n);
  logits_.resize(size_t((all_logits ? n : 1) * width));
  for (int64_t done = 0; done < n;) {
    const int64_t chunk = std::min(n_batch_, n - done);
    if (per_chunk) {
      try {
        seq_.reserve(chunk);
      } catch (const KvCacheFull&) {
        truncate(pos0);
        throw;
      }
    }
    const bool last = done + chunk == n;
    step_->clear();
    step_->add(seq_, tokens.subspan(size_t(done), size_t(chunk)),
               all_logits ? StepLogits::kAll : (last ? StepLogits::kLast : StepLogits::kNone));
    step_->run();
    const std::span<const float> out = step_->logits(0);
    std::copy(out.begin(), out.end(), logits_.begin() + (all_logits ? done * width : 0));
    done += chunk;
    if (progress_ && n > n_batch_) progress_(done, n);
  }
  return logits_;
}

std::vector<std::span<const float>> Context::eval_each(
    std::span<const std::vector<int32_t>> inputs) {
  if (!model_.encoder() || !step_->params().embeddings)
    throw ContextError("eval_each: only an encoder's embeddings context evaluates inputs apart");
  if (n_past() != 0) throw ContextError("eval_each: the context must be empty; reset() first");
  const int64_t n_vocab = model_.hparams().n_vocab, width = step_->row_width();
  int64_t total = 0;
  for (const auto& in : inputs) {
    if (in.empty()) throw ContextError("eval_each: an input has no tokens");
    for (int32_t id : in)
      if (id < 0 || id >= n_vocab)
        throw ContextError("eval_each: token id " + std::to_string(id) + " outside [0, " +
                           std::to_string(n_vocab) + ")");
    total += int64_t(in.size());
  }
  if (total > n_batch_)
    throw ContextError("eval_each: " + std::to_string(total) + " tokens in all > n_batch " +
                       std::to_string(n_batch_));
  std::vector<std::unique_ptr<KvSequence>> seqs;  // their blocks go back when they go
  for (const auto& in : inputs) {
    seqs.push_back(std::make_unique<KvSequence>(cache_));
    seqs.back()->reserve(int64_t(in.size()));  // KvCacheFull: the earlier ones go back
  }
  step_->clear();
  for (size_t i = 0; i < inputs.size(); ++i) step_->add(*seqs[i], inputs[i], StepLogits::kAll);
  step_->run();
  logits_.resize(size_t(total * width));
  std::vector<std::span<const float>> out;
  size_t at = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::span<const float> rows = step_->logits(i);
    std::copy(rows.begin(), rows.end(), logits_.begin() + long(at));
    out.push_back(std::span<const float>(logits_).subspan(at, rows.size()));
    at += rows.size();
  }
  return out;
}

}  // namespace kvrun
