// model.cpp — see model.h.
#include "model.h"

#include <utility>

namespace kvrun {

Model Model::from_file(gguf::File file) {
  Hparams hp = load_hparams(file);
  const ArchSpec spec = configure_arch(file, hp);
  const std::string& st = hp.rope.scaling_type;
  if (st != "none" && st != "linear" && st != "llama3")
    throw ModelError("rope scaling type '" + st + "' is not supported");
  if (!(hp.rope.scaling_factor > 0.0f)) throw ModelError("rope.scaling.factor must be positive");
  LlamaWeights w = load_llama_weights(file, hp, spec);
  pack_llama_weights(w, !file.path().empty());  // path() is empty for an in-memory image
  return Model(std::move(file), std::move(hp), std::move(w));
}

Model Model::load(const std::string& path) { return from_file(gguf::File::open(path)); }

}  // namespace kvrun
