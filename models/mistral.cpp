// mistral.cpp — GGUF arch "llama": Llama 2/3, SmolLM2, and Mistral 7B / Ministral, whose files
// are llama files. When llama.attention.sliding_window is set, every layer attends within that
// window (Jiang et al. 2023, "Mistral 7B", §2: sliding window attention). (llama.cpp ignores the
// key for this arch, so the two agree only while a sequence is shorter than the window.)
#include "models/arch.h"

namespace kvrun {

ArchSpec llama_arch(const gguf::File& f, Hparams& hp) {
  hp.n_swa = read_sliding_window(f, hp, 0);
  hp.swa_layers.assign(size_t(hp.n_layer), hp.n_swa > 0);
  return ArchSpec{};
}

}  // namespace kvrun
