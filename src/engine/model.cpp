// model.cpp — see model.h.
#include "engine/model.h"

#include <cstdio>
#include <string>
#include <utility>

#include "models/rope_scaling.h"

namespace kvrun {

Model Model::from_file(gguf::File file, const ModelParams& mp) {
  Hparams hp = load_hparams(file);
  const ArchSpec spec = configure_arch(file, hp);
  apply_rope_overrides(hp.rope, mp.rope);
  check_rope_params(hp.rope);
  LlamaWeights w = load_llama_weights(file, hp, spec);
  if (mp.n_gpu_layers > 0 && !mp.gpu)
    throw ModelError("-ngl " + std::to_string(mp.n_gpu_layers) + " needs a GPU device");
  Placement p = mp.n_gpu_layers > 0 ? Placement::split(cpu_device(), *mp.gpu, hp.n_layer,
                                                       mp.n_gpu_layers, mp.kv_offload)
                                    : Placement::all_on(cpu_device(), hp.n_layer);
  // What the GPU lacks runs on the host (a line each on stderr), then the -ot rules.
  if (mp.n_gpu_layers > 0)
    for (const std::string& line : fit_placement_to_devices(p, cpu_device(), file, hp, spec))
      std::fprintf(stderr, "kvrun: %s\n", line.c_str());
  if (!mp.overrides.empty())
    apply_tensor_overrides(p, file, hp.n_layer, spec.encoder, mp.overrides);
  // path() is empty for an in-memory image (nothing mapped to give back)
  upload_llama_weights(w, p, !file.path().empty(), mp.progress);
  return Model(std::move(file), std::move(hp), std::move(w), std::move(p));
}

Model Model::load(const std::string& path, const ModelParams& mp) {
  return from_file(gguf::File::open(path), mp);
}

}  // namespace kvrun
