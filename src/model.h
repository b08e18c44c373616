// model.h — a loaded model: the mapped GGUF file, its hyperparameters and weight views.
//
// Weights are zero-copy Tensor views into the read-only mapping, in their stored types. The
// architecture (general.architecture) picks the weight layout; today "llama" (the llama-family
// layout of models/llama.h).
#pragma once

#include <string>

#include "gguf.h"
#include "models/hparams.h"
#include "models/llama.h"

namespace kvrun {

/// A model ready for Context. Movable (views stay valid: the mapping does not move).
class Model {
 public:
  /// Maps and checks `path`. Throws gguf::GgufError (bad file), std::system_error (cannot
  /// open), or ModelError (unsupported architecture or RoPE scaling, missing/mis-shaped tensor).
  static Model load(const std::string& path);
  /// Same from an already opened file (takes ownership).
  static Model from_file(gguf::File file);

  const gguf::File& file() const { return file_; }
  const Hparams& hparams() const { return hp_; }
  const LlamaWeights& weights() const { return weights_; }

 private:
  Model(gguf::File file, Hparams hp, LlamaWeights w)
      : file_(std::move(file)), hp_(std::move(hp)), weights_(std::move(w)) {}
  gguf::File file_;
  Hparams hp_;
  LlamaWeights weights_;
};

}  // namespace kvrun
