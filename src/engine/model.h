// model.h — a loaded model: the mapped GGUF file, its hyperparameters and weight views.
//
// Weights are zero-copy Tensor views into the read-only mapping, in their stored types. The
// architecture (general.architecture) picks the weight layout; today "llama" (the llama-family
// layout of models/llama.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gguf.h"
#include "models/hparams.h"
#include "models/llama.h"
#include "models/rope_scaling.h"

namespace kvrun {

/// Where a model runs (the -ngl / -dev / -nkvo flags, resolved to a device by the tools).
struct ModelParams {
  /// Layers on `gpu`, the last ones (llama.cpp's -ngl); more than n_layer also places the
  /// output head there. 0: everything on the host CPU. What `gpu` cannot run of them (a weight
  /// type, the MoE ops, MLA, attention sinks) runs on the host instead, with a line on stderr
  /// (models/llama.h fit_placement_to_devices).
  int64_t n_gpu_layers = 0;
  /// The device of those layers; required when n_gpu_layers > 0. Must outlive the model.
  Device* gpu = nullptr;
  /// false (-nkvo): the KV rows and attention of GPU layers stay on the host.
  bool kv_offload = true;
  /// -ot / --override-tensor rules, applied after the -ngl split (apply_tensor_overrides): the
  /// FFN of layers whose tensors match runs on the rule's device. Devices must outlive the model.
  std::vector<TensorOverride> overrides;
  /// RoPE settings from the command line that replace the GGUF's (--rope-scaling, --yarn-*…).
  RopeOverrides rope;
  /// Called while the weights are placed (packed, copied to a device) with the bytes done and
  /// the total; for a progress display. May be empty.
  std::function<void(int64_t done, int64_t total)> progress;
};

/// A model ready for Context. Movable (views stay valid: the mapping does not move).
class Model {
 public:
  /// Maps and checks `path`. Throws gguf::GgufError (bad file), std::system_error (cannot
  /// open), or ModelError (unsupported architecture or RoPE scaling, a bad mp.rope override,
  /// missing/mis-shaped tensor).
  /// `mp` places the layers (default: all on the host CPU); the weights of every part are
  /// uploaded to its device here (the CPU packs them), and a device that lacks a weight type
  /// is a ModelError naming both.
  static Model load(const std::string& path, const ModelParams& mp = {});
  /// Same from an already opened file (takes ownership).
  static Model from_file(gguf::File file, const ModelParams& mp = {});

  const gguf::File& file() const { return file_; }
  const Hparams& hparams() const { return hp_; }
  const LlamaWeights& weights() const { return weights_; }
  /// Which device runs each part (and holds each layer's KV rows).
  const Placement& placement() const { return placement_; }
  /// True for an encoder (bert, nomic-bert: models/bert.h): an embedding model that cannot
  /// generate text (Context refuses it without ContextParams::embeddings).
  bool encoder() const { return weights_.spec.encoder; }

 private:
  Model(gguf::File file, Hparams hp, LlamaWeights w, Placement p)
      : file_(std::move(file)),
        hp_(std::move(hp)),
        weights_(std::move(w)),
        placement_(std::move(p)) {}
  gguf::File file_;
  Hparams hp_;
  LlamaWeights weights_;
  Placement placement_;
};

}  // namespace kvrun
