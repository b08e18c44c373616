// arch.cpp — the architecture registry (see arch.h).
#include "models/arch.h"

namespace kvrun {

namespace {

struct ArchEntry {
  const char* name;
  ArchSpec (*configure)(const gguf::File&, Hparams&);
};

constexpr ArchEntry kArchs[] = {
    {"llama", llama_arch},       {"qwen2", qwen2_arch},     {"qwen3", qwen3_arch},
    {"phi3", phi3_arch},         {"gemma2", gemma2_arch},   {"gemma3", gemma3_arch},
    {"qwen3moe", qwen3moe_arch}, {"gpt-oss", gptoss_arch},  {"deepseek2", deepseek2_arch},
    {"bert", bert_arch},         {"nomic-bert", bert_arch},
};

}  // namespace

const char* supported_archs() {
  return "llama, qwen2, qwen3, qwen3moe, gpt-oss, deepseek2, phi3, gemma2, gemma3, bert, "
         "nomic-bert";
}

bool is_encoder_arch(std::string_view arch) { return arch == "bert" || arch == "nomic-bert"; }

ArchSpec configure_arch(const gguf::File& file, Hparams& hp) {
  for (const ArchEntry& e : kArchs)
    if (hp.arch == e.name) {
      ArchSpec spec = e.configure(file, hp);
      spec.name = hp.arch;
      return spec;
    }
  throw ModelError("architecture '" + hp.arch +
                   "' is not supported (supported: " + supported_archs() + ")");
}

int64_t read_sliding_window(const gguf::File& file, const Hparams& hp, int64_t fallback) {
  const std::string key = hp.arch + ".attention.sliding_window";
  const auto v = file.get_int(key);
  if (!v) return fallback;
  if (*v < 0 || *v > (int64_t(1) << 40))
    throw ModelError(key + " = " + std::to_string(*v) + " is out of range");
  return *v;
}

}  // namespace kvrun
