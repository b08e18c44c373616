// commands.h — the kvrun subcommands, each in its own file; main.cpp parses the command line.
#pragma once

#include <cstdint>
#include <string>

namespace kvrun::tools {

/// Options of `kvrun info`.
struct InfoOptions {
  std::string model;  ///< -m: GGUF path
  int64_t n_ctx = 0;  ///< -c: context length for the KV table (0: n_ctx_train)
  bool json = false;  ///< --json: one JSON object instead of text
};

/// `kvrun info`: prints what a model is and what its KV cache costs. Returns the exit code;
/// a file that is not a usable model prints one line on stderr and returns 1.
int cmd_info(const InfoOptions& opt);

/// Options of the default mode (`kvrun -m model.gguf [-p prompt]`).
struct RunOptions {
  std::string model;
  std::string prompt;
  bool has_prompt = false;
};

/// The default mode: chat (REPL) or completion of -p. Returns the exit code.
int cmd_run(const RunOptions& opt);

/// Formats a byte count for people: "1.13 MiB", "42.95 GB" (SI when `si`), exact below 1 KiB.
std::string format_bytes(int64_t bytes, bool si = false);

}  // namespace kvrun::tools
