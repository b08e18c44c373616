// commands.h — the kvrun subcommands, each in its own file; main.cpp parses the command line.
#pragma once

#include <cstdint>
#include <string>

#include "sampler.h"

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

/// Options of the default mode: completion (`-p`, `-f`, piped stdin) or the chat REPL.
struct RunOptions {
  std::string model;          ///< -m
  std::string prompt;         ///< -p, or the contents of -f / piped stdin
  std::string prompt_file;    ///< -f
  bool has_prompt = false;    ///< a prompt was given (-p, -f or piped stdin)
  bool interactive = false;   ///< -i: the REPL even when stdin is not a terminal
  std::string system;         ///< --system: system prompt of the chat
  std::string chat_template;  ///< --chat-template NAME ("" = from the model)
  int64_t n_predict = -1;     ///< -n: tokens to generate (-1: until end of generation)
  int64_t n_ctx = 0;          ///< -c (0: min(4096, n_ctx_train))
  int64_t n_batch = 512;      ///< -b: prefill chunk
  int n_threads = 0;          ///< -t (0: physical cores)
  bool json = false;          ///< --json: one JSON object instead of streamed text
  int n_probs = 0;            ///< --n-probs K: top-K logprobs per generated token (with --json)
  bool ignore_eos = false;    ///< --ignore-eos
  bool verbose = false;       ///< --verbose: more detail on stderr
  SamplerParams sampling;     ///< --temp, --top-k, --top-p, --min-p, penalties, -s
};

/// The default mode. Returns the exit code (0 ok, 1 error).
int cmd_run(const RunOptions& opt);

/// `kvrun --chat-template list`: prints the chat template families kvrun renders.
int cmd_list_chat_templates();

/// Formats a byte count for people: "1.13 MiB", "42.95 GB" (SI when `si`), exact below 1 KiB.
std::string format_bytes(int64_t bytes, bool si = false);

}  // namespace kvrun::tools
