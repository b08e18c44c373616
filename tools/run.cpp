// run.cpp — the default mode. Text generation and the chat REPL are not implemented yet: this
// loads and validates the model, prints a summary, and says so.
#include <cstdio>
#include <exception>
#include <system_error>

#include "commands.h"
#include "gguf.h"
#include "model_info.h"

namespace kvrun::tools {

int cmd_run(const RunOptions& opt) {
  try {
    gguf::File file = gguf::File::open(opt.model);
    ModelInfo mi = describe_model(file, 0);
    std::printf("kvrun: %s: %s, %lld layers, n_embd %lld, %lld tensors (%s)\n", opt.model.c_str(),
                mi.hp.arch.c_str(), (long long)mi.hp.n_layer, (long long)mi.hp.n_embd,
                (long long)mi.n_tensors, format_bytes(mi.weight_bytes).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvrun: error: %s: %s\n", opt.model.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr,
               "kvrun: text generation and the chat REPL are not implemented yet in this build "
               "(the tensor core, GGUF reader and `kvrun info` are); see `kvrun info -m MODEL`\n");
  return opt.has_prompt ? 2 : 0;
}

}  // namespace kvrun::tools
