// kv_contiguous.h — the simple KV store: per layer, K and V as contiguous rows of n_ctx
// positions (row p = the token at position p), f16 by default or f32.
//
// Layout per layer: K [n_ctx, n_head_kv · head_dim], V [n_ctx, n_head_kv · head_dim_v], each
// element 2 (f16) or 4 (f32) bytes; one Buffer per layer holds K then V. Memory:
// n_layer · n_ctx · n_head_kv · (head_dim + head_dim_v) · element bytes, allocated (and zeroed)
// up front. The paged KV cache of a later issue replaces it; the model sees only
// cpu::KvLayerView.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/attention.h"
#include "models/hparams.h"
#include "tensor.h"

namespace kvrun {

/// Contiguous K/V rows for every layer of one sequence.
class KvContiguous {
 public:
  /// Allocates n_ctx positions per layer of element type `type` (F16 or F32). Throws
  /// std::invalid_argument for another type or n_ctx < 1, std::bad_alloc when out of memory.
  KvContiguous(const Hparams& hp, int64_t n_ctx, DType type = DType::F16);

  /// The store of layer `il` (0 ≤ il < n_layer).
  const cpu::KvLayerView& layer(int64_t il) const { return views_[size_t(il)]; }
  /// All layers' views, [n_layer].
  const cpu::KvLayerView* layers() const { return views_.data(); }
  int64_t n_ctx() const { return n_ctx_; }
  DType type() const { return type_; }
  /// Bytes allocated for all layers.
  size_t bytes() const { return bytes_; }

 private:
  int64_t n_ctx_;
  DType type_;
  size_t bytes_ = 0;
  std::vector<Buffer> buffers_;          // [n_layer]
  std::vector<cpu::KvLayerView> views_;  // [n_layer]
};

}  // namespace kvrun
