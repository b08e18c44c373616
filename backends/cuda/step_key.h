// step_key.h — what a decode step's recorded CUDA graph depends on, as a list of words: every
// op's arguments (pointers, sizes, types, parameters) in issue order. Two steps with equal keys
// launch the same kernels with the same arguments, so the second can replay the first's graph
// without recording it again (the per-step inputs — positions, slot tables, write cells, token
// embeddings — are read from device memory uploaded before the launch). The same idea as
// llama.cpp's CUDA backend comparing each ggml node's pointers and parameters with the last
// graph's before re-capturing. Plain C++ header, no CUDA.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend.h"
#include "tensor.h"

namespace kvrun::cuda {

/// The ops a key names (the first word of each op's entry).
enum class KeyOp : uint8_t {
  kRmsNorm = 1,
  kMatmul,
  kMatmulMany,
  kRope,
  kGlu,
  kAdd,
  kAddRow,
  kScale,
  kSoftcap,
  kCopyCols,
  kKvStore,
  kAttention,
  kStep,  ///< the step itself: rows, scratch generation
};

/// An ordered list of 64-bit words; equal keys mean equal arguments in equal order. Fields are
/// added one by one (never a struct's raw bytes, whose padding is undefined).
class StepKey {
 public:
  void clear() { words_.clear(); }
  bool operator==(const StepKey& o) const { return words_ == o.words_; }
  bool operator!=(const StepKey& o) const { return !(*this == o); }
  size_t size() const { return words_.size(); }

  /// Appends op `op` and its arguments.
  template <typename... A>
  void op(KeyOp o, const A&... a) {
    words_.push_back(uint64_t(o));
    (add(a), ...);
  }

  template <typename T>
  std::enable_if_t<std::is_integral_v<T> || std::is_enum_v<T>> add(T v) {
    words_.push_back(uint64_t(v));
  }
  void add(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    words_.push_back(b);
  }
  void add(const void* p) { words_.push_back(uint64_t(reinterpret_cast<uintptr_t>(p))); }
  void add(const Tensor& t) {
    add(t.type);
    for (int i = 0; i < kMaxDims; ++i) add(t.ne[i]), add(uint64_t(t.nb[i]));
    add(t.data);
    add(t.packed);
  }
  void add(const KvLayer& kv) {
    add(kv.k_type), add(kv.v_type), add(kv.k_row_bytes), add(kv.v_row_bytes);
    add(kv.block_size), add(kv.k), add(kv.v), add(kv.slot_of), add(kv.n_fast);
    add(kv.k_slow), add(kv.v_slow), add(kv.mla);
  }
  void add(const PagedAttnParams& p) {
    add(p.attn.n_head), add(p.attn.n_head_kv), add(p.attn.head_dim), add(p.attn.head_dim_v);
    add(p.attn.scale), add(p.flash), add(p.rotate), add(p.window), add(p.softcap);
    add(p.sinks);
  }
  void add(const RopeConfig& c) {
    add(c.n_rot), add(c.freq_base), add(c.freq_scale), add(c.freq_factors), add(c.mscale);
    add(c.neox);
  }

 private:
  std::vector<uint64_t> words_;
};

}  // namespace kvrun::cuda
