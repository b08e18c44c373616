// synth_util.h — synthetic GGUF models for tests (tools/synth), written into a test::TempDir.
// Separate from test_util.h: the CUDA-only test build (cmake/cuda_tests_only.cmake) has no
// tools/ library.
#pragma once

#include <string>

#include "test_util.h"
#include "tools/synth/synth.h"

namespace kvrun::test {

/// Writes the synthetic model `shape` (tools/synth/synth_shapes.cpp) with weights of `type` into
/// `dir` as <shape>-<type>.gguf and returns its path. Throws SynthError as write_synth_model.
inline std::string synth_model(const TempDir& dir, const std::string& shape,
                               SynthFileType type = SynthFileType::Q8_0, int n_threads = 2) {
  SynthParams p;
  p.shape = find_synth_shape(shape);
  p.type = type;
  p.n_threads = n_threads;
  p.out_path = (dir / (shape + "-" + synth_file_type_name(type) + ".gguf")).string();
  write_synth_model(p);
  return p.out_path;
}

}  // namespace kvrun::test
