// gguf_split_util.h — writes a GGUF model as the parts of a split model, laid out as llama.cpp's
// gguf-split writes them (examples/gguf-split: every part carries split.no (u16, 0-based),
// split.count (u16) and split.tensors.count (i32); the first part also carries the model's
// metadata; parts are named PREFIX-00001-of-0000N.gguf ...), for tests of split loading.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "gguf.h"

namespace kvrun::test {

/// Part `no` (1-based) of `count`: "PREFIX-0000no-of-0000count.gguf".
inline std::string split_part_path(const std::string& prefix, int no, int count) {
  char tail[48];
  std::snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", no, count);
  return prefix + tail;
}

/// Writes the tensors of `f` in order into `count` parts (part k gets the tensors whose index i
/// has i * count / n_tensors == k, so every part has at least one when n_tensors ≥ count) and
/// returns the paths. Throws what gguf::Writer throws.
inline std::vector<std::string> write_gguf_split(const gguf::File& f, const std::string& prefix,
                                                 int count) {
  const auto& tensors = f.tensors();
  const size_t n = tensors.size();
  std::vector<std::string> paths;
  for (int k = 0; k < count; ++k) {
    gguf::Writer w;
    if (k == 0)
      for (const gguf::KeyValue& kv : f.metadata()) w.set_value(std::string(kv.key), kv.value);
    w.set_u16("split.no", uint16_t(k));
    w.set_u16("split.count", uint16_t(count));
    w.set_i32("split.tensors.count", int32_t(n));
    for (size_t i = 0; i < n; ++i) {
      if (int(i * size_t(count) / n) != k) continue;
      const gguf::TensorInfo& t = tensors[i];
      w.add_tensor(std::string(t.name), t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                   t.data);
    }
    paths.push_back(split_part_path(prefix, k + 1, count));
    w.write(paths.back());
  }
  return paths;
}

}  // namespace kvrun::test
