// embed.h — `kvrun embed`: embeddings of texts from the command line (src/engine/embed.h).
#pragma once

#include <string>

#include "kv_options.h"

namespace CLI {
class App;
}

namespace kvrun::tools {

/// Options of `kvrun embed`.
struct EmbedOptions {
  std::string model;       ///< -m
  std::string prompt;      ///< -p: one text
  std::string file;        ///< -f: one text per line (else stdin, one per line)
  std::string pooling;     ///< --pooling none|mean|cls|last ("" = the model's, else mean)
  int embd_normalize = 2;  ///< --embd-normalize (llama.cpp's values; -1 = none)
  int64_t n_ctx = 0;       ///< -c (0: min(4096, n_ctx_train))
  int64_t n_batch = 512;   ///< -b
  int n_threads = 0;       ///< -t
  bool json = false;       ///< --json: OpenAI's embeddings response shape
  KvCacheOptions kv;       ///< -ctk/-ctv, devices, ...
};

/// Adds the `embed` subcommand.
CLI::App* add_embed_command(CLI::App& app, EmbedOptions& o);

/// Prints one embedding per text: a line of numbers, or with --json one object
/// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}.
/// Returns 0, 1 on an error (one line on stderr).
int cmd_embed(const EmbedOptions& o);

}  // namespace kvrun::tools
