// step.cpp — see step.h.
#include "engine/step.h"

#include <stdexcept>
#include <string>

#include "kv_layout.h"

namespace kvrun {

Step::Step(const Model& model, KvCache& cache, const StepParams& params)
    : model_(model), cache_(cache), params_(params) {
  if (params.n_batch < 1) throw std::invalid_argument("n_batch must be at least 1");
  const Hparams& hp = model.hparams();
  const KvCacheParams& kp = cache.params();
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    // Asked before anything runs: a device without these KV types is an error, never a slow path.
    Device& d = *model.placement().kv[size_t(il)];
    if (!d.supports(Op::kKvStore, kp.type_k, kp.type_v) ||
        !d.supports(Op::kPagedAttention, kp.type_k, kp.type_v))
      throw std::invalid_argument(d.name() + " has no paged attention over K " +
                                  kv_type_name(kp.type_k) + " / V " + kv_type_name(kp.type_v));
    layers_.push_back(cache.layer(il));
    if (kp.host_attn_cpu) host_layers_.push_back(cache.host_tier_layer(il));
  }
  exec_ = std::make_unique<LlamaExec>(hp, model.placement(), params.n_threads, params.n_batch);
}

Step::~Step() = default;

int Step::n_threads() const { return exec_->n_threads(); }

void Step::clear() {
  slices_.clear();
  tokens_.clear();
  out_rows_.clear();
}

size_t Step::add(KvSequence& seq, std::span<const int32_t> tokens, StepLogits want) {
  if (tokens.empty()) throw std::invalid_argument("step: a slice needs at least one token");
  if (n_tokens() + int64_t(tokens.size()) > params_.n_batch)
    throw std::invalid_argument("step: more than n_batch = " + std::to_string(params_.n_batch) +
                                " rows");
  const int64_t row0 = n_tokens(), n = int64_t(tokens.size());
  slices_.push_back({&seq, tokens, want, int64_t(out_rows_.size())});
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  if (want == StepLogits::kAll)
    for (int64_t j = 0; j < n; ++j) out_rows_.push_back(int32_t(row0 + j));
  else if (want == StepLogits::kLast)
    out_rows_.push_back(int32_t(row0 + n - 1));
  return slices_.size() - 1;
}

void Step::build_page_table() {
  const int64_t bs = cache_.block_size();
  seq_indptr_.assign(1, 0);
  block_indptr_.assign(1, 0);
  block_ids_.clear();
  last_len_.clear();
  pos_.clear();
  write_slot_.clear();
  for (const Slice& sl : slices_) {
    const std::vector<int32_t>& table = sl.seq->block_table();
    const int64_t pos0 = sl.seq->n_tokens(), end = pos0 + int64_t(sl.tokens.size());
    const int64_t n_blocks = (end + bs - 1) / bs;  // reserved by the caller
    block_ids_.insert(block_ids_.end(), table.begin(), table.begin() + n_blocks);
    for (int64_t p = pos0; p < end; ++p) {
      pos_.push_back(int32_t(p));
      write_slot_.push_back(int64_t(table[size_t(p / bs)]) * bs + p % bs);
    }
    seq_indptr_.push_back(int32_t(pos_.size()));
    block_indptr_.push_back(int32_t(block_ids_.size()));
    last_len_.push_back(int32_t(end - (n_blocks - 1) * bs));
  }
  pt_.n_seqs = int64_t(slices_.size());
  pt_.n_tokens = int64_t(pos_.size());
  pt_.block_size = bs;
  pt_.seq_indptr = seq_indptr_.data();
  pt_.block_indptr = block_indptr_.data();
  pt_.block_ids = block_ids_.data();
  pt_.last_block_len = last_len_.data();
  pt_.pos = pos_.data();
  pt_.write_slot = write_slot_.data();
}

void Step::run() {
  if (slices_.empty()) return;
  build_page_table();
  const Hparams& hp = model_.hparams();
  logits_.resize(out_rows_.size() * size_t(row_width()));
  LlamaBatch b;
  b.tokens = tokens_.data();
  b.pt = &pt_;
  b.out_rows = out_rows_.data();
  b.n_out = int64_t(out_rows_.size());
  (params_.embeddings ? b.embd : b.logits) = logits_.data();
  b.kv = layers_.data();
  if (reads_host_tier()) b.kv_host = host_layers_.data();
  b.flash = params_.flash;
  b.rotate = cache_.params().rotate;
  b.n_ctx = params_.n_ctx;
  llama_forward(hp, model_.weights(), model_.placement(), *exec_, b);
  for (const Slice& sl : slices_) {
    sl.seq->commit(sl.tokens);
    // Sliding window on every layer: the next query (position n_tokens()) sees positions from
    // n_tokens() − window + 1 on; blocks wholly before that go back to the pool.
    if (params_.release_window > 0)
      sl.seq->release_before(sl.seq->n_tokens() - params_.release_window + 1);
    // Window tables (a mixed model): the windowed layers' rows of those blocks go back.
    if (const int64_t w = cache_.window(); w > 0)
      sl.seq->release_window_before(sl.seq->n_tokens() - w + 1);
  }
}

bool Step::reads_host_tier() const {
  for (const KvLayer& l : host_layers_) {
    if (!l.k_slow) continue;
    for (const int32_t id : block_ids_)
      if (id >= 0 && l.in_tier(id, KvTier::kSlow)) return true;
    return false;  // (the layers with a host tier share the cache's one slot map)
  }
  return false;
}

int64_t Step::row_width() const {
  return params_.embeddings ? model_.hparams().n_embd : model_.hparams().n_vocab;
}

std::span<const float> Step::logits(size_t i) const {
  const Slice& sl = slices_.at(i);
  const size_t n_vocab = size_t(row_width());
  const size_t n = sl.want == StepLogits::kAll    ? sl.tokens.size()
                   : sl.want == StepLogits::kLast ? 1
                                                  : 0;
  return std::span<const float>(logits_).subspan(size_t(sl.out0) * n_vocab, n * n_vocab);
}

}  // namespace kvrun
