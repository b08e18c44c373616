// commands.h — the kvrun subcommands, each in its own file; main.cpp parses the command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "kv_options.h"
#include "serve_extras.h"
#include "tools/grammar/grammar_source.h"

namespace kvrun::tools {

/// Options of `kvrun info`.
struct InfoOptions {
  std::string model;   ///< -m: GGUF path
  int64_t n_ctx = 0;   ///< -c: context length for the KV table (0: n_ctx_train)
  bool json = false;   ///< --json: one JSON object instead of text
  std::string kv_mem;  ///< --kv-mem: the fast tier to split the table against ("" = this machine)
  /// --kv-host-tier: the -ngl plan counts the GPU's KV rows only up to --kv-mem (the run's
  /// GPU host tier keeps the rest in host memory)
  bool kv_host_tier = false;
  DeviceOptions dev;  ///< -ngl, -dev, --list-devices, -nkvo
};

/// `kvrun info`: prints what a model is and what its KV cache costs. Returns the exit code;
/// a file that is not a usable model prints one line on stderr and returns 1.
int cmd_info(const InfoOptions& opt);

/// Options of the default mode: completion (`-p`, `-f`, piped stdin) or the chat REPL.
struct RunOptions {
  std::string model;                 ///< -m
  std::string prompt;                ///< -p, or the contents of -f / piped stdin
  std::string prompt_file;           ///< -f
  bool has_prompt = false;           ///< a prompt was given (-p, -f or piped stdin)
  bool interactive = false;          ///< -i: the REPL even when stdin is not a terminal
  std::string system;                ///< --system: system prompt of the chat
  std::string chat_template;         ///< --chat-template NAME|FILE ("" = from the model)
  std::string chat_template_kwargs;  ///< --chat-template-kwargs JSON object ("" = none)
  int64_t n_predict = -1;            ///< -n: tokens to generate (-1: until end of generation)
  int64_t n_ctx = 0;                 ///< -c (0: min(4096, n_ctx_train))
  int64_t n_batch = 512;             ///< -b: prefill chunk
  int n_threads = 0;                 ///< -t (0: physical cores)
  bool json = false;                 ///< --json: one JSON object instead of streamed text
  int n_probs = 0;           ///< --n-probs K: top-K logprobs per generated token (with --json)
  bool ignore_eos = false;   ///< --ignore-eos
  bool verbose = false;      ///< --verbose: more detail on stderr
  bool log_disable = false;  ///< --log-disable: no progress lines
  SamplerParams sampling;    ///< --temp, --top-k, --top-p, --min-p, penalties, -s
  GrammarSource grammar;     ///< --grammar, --grammar-file, --json-schema, --json-schema-file
  KvCacheOptions kv;         ///< -ctk, -ctv, --kv-block-size, --kv-mem, -fa, ...
};

/// Registers --grammar, --grammar-file, --json-schema, --json-schema-file on `app`.
void add_grammar_options(CLI::App& app, GrammarSource& g);

/// The default mode. Returns the exit code (0 ok, 1 error).
int cmd_run(const RunOptions& opt);

/// `kvrun --chat-template list`: prints the names of kvrun's built-in chat templates.
int cmd_list_chat_templates();

/// Options of `kvrun perplexity`.
struct PerplexityOptions {
  std::string model;       ///< -m
  std::string text_file;   ///< -f: the text to score
  int64_t n_ctx = 0;       ///< -c: chunk size (0: the KL base's, else min(512, n_ctx_train))
  int64_t n_batch = 2048;  ///< -b: prefill batch (clamped to n_ctx)
  int64_t max_chunks = 0;  ///< --chunks: evaluate at most this many chunks (0: all)
  int n_threads = 0;       ///< -t (0: physical cores)
  KvCacheOptions kv;       ///< -ctk / -ctv
  bool json = false;       ///< --json: one JSON object instead of text
  std::string kld_base;    ///< --kl-divergence-base FILE: save this run's log-probs
  std::string kld;         ///< --kl-divergence FILE: compare this run against a saved base
};

/// Registers `kvrun perplexity` on `app`, parsing into `o`; returns the subcommand.
CLI::App* add_perplexity_command(CLI::App& app, PerplexityOptions& o);

/// `kvrun perplexity`: llama-perplexity's measurement (src/eval/perplexity.h). Returns the exit
/// code.
int cmd_perplexity(const PerplexityOptions& opt);

/// Options of `kvrun bench`.
struct BenchOptions {
  std::string model;                   ///< -m
  std::vector<int64_t> n_prompt{512};  ///< -p: prompt lengths (pp tests; 0 skips)
  std::vector<int64_t> n_gen{128};     ///< -n: generation lengths (tg tests; 0 skips)
  std::vector<int64_t> depth{0};       ///< -d: tokens already in the context before a test
  int reps = 3;                        ///< -r: repetitions per test
  int64_t n_batch = 512;               ///< -b: prefill batch (llama-bench's n_ubatch)
  int64_t n_ctx = 0;                   ///< -c: fixed context size (0: d + max(p, n) per depth)
  int n_threads = 0;                   ///< -t (0: physical cores)
  KvCacheOptions kv;                   ///< -ctk / -ctv
  bool json = false;                   ///< --json: one JSON array instead of the table
  bool bandwidth = false;  ///< --bandwidth: STREAM triad, and each tg test's share of it
  /// --depth-fill: how a depth is reached, "prefill" (evaluate d random tokens) or "synthetic"
  /// (random encoded KV rows written directly: Context::fill_synthetic).
  std::string depth_fill = "prefill";
};

/// Registers `kvrun bench` on `app`, parsing into `o`; returns the subcommand.
CLI::App* add_bench_command(CLI::App& app, BenchOptions& o);

/// `kvrun bench`: prompt (pp) and generation (tg) speed at context depths, llama-bench's meaning.
int cmd_bench(const BenchOptions& opt);

/// Options of `kvrun serve`.
struct ServeOptions {
  std::string model;                 ///< -m
  std::string host = "127.0.0.1";    ///< --host (loopback by default)
  int port = 8080;                   ///< --port (0: any free port, printed on stderr)
  int n_parallel = 4;                ///< -np/--parallel: sessions generating at once
  int max_queue = 64;                ///< --max-queue: requests waiting beyond -np (then 503)
  int64_t n_ctx = 0;                 ///< -c: context length of each session (0: min(4096, train))
  int64_t n_batch = 512;             ///< -b: tokens per forward step (decodes + prefill chunks)
  int n_threads = 0;                 ///< -t (0: physical cores)
  std::string api_key;               ///< --api-key: require "Authorization: Bearer KEY"
  std::string max_body = "1M";       ///< --max-body SIZE: largest request body (else 413)
  double timeout_s = 600;            ///< --timeout: seconds a request may take (0: no limit)
  std::string chat_template;         ///< --chat-template NAME|FILE ("" = the model's)
  std::string chat_template_kwargs;  ///< --chat-template-kwargs JSON object ("" = none)
  std::string reasoning_format = "deepseek";  ///< --reasoning-format none|deepseek
  bool spm_infill = false;    ///< --spm-infill: FIM prompts suffix-prefix-middle (serve_fim.h)
  KvCacheOptions kv;          ///< -ctk / -ctv / --kv-mem / --no-prefix-cache / -fa ...
  ServeExtrasOptions extras;  ///< --cors-origin, --log-format/-file/-disable, --pooling
};

/// Registers `kvrun serve` on `app`, parsing into `o`; returns the subcommand.
CLI::App* add_serve_command(CLI::App& app, ServeOptions& o);

/// `kvrun serve`: the HTTP server (tools/serve.cpp, docs/http-api.md). Runs until SIGINT or
/// SIGTERM; returns the exit code (1 when the model cannot be loaded or the port bound).
int cmd_serve(const ServeOptions& opt);

/// Options of `kvrun batch`.
struct BatchOptions {
  std::string model;   ///< -m
  std::string input;   ///< -i: a JSON-lines file or a folder of .txt/.md files
  std::string output;  ///< -o: JSON-lines results (appended; a rerun resumes)
  /// --prompt: the user turn, {text} = the document; "\\n", "\\t" and "\\\\" are expanded
  std::string prompt = "Summarize the text below.\\n\\n{text}";
  std::string system;                ///< --system
  std::string chat_template;         ///< --chat-template NAME|FILE ("" = the model's)
  std::string chat_template_kwargs;  ///< --chat-template-kwargs JSON object ("" = none)
  int n_parallel = 4;                ///< -np/--parallel: documents at once
  int64_t n_predict = 256;           ///< -n: tokens per summary at most
  int64_t n_ctx = 0;                 ///< -c: context per session (0: min(4096, n_ctx_train))
  int64_t n_batch = 512;             ///< -b: tokens per forward step
  int n_threads = 0;                 ///< -t (0: physical cores)
  bool ordered = false;              ///< --ordered: write in input order
  std::string long_mode = "split";   ///< --long split|truncate|skip
  int64_t chunk_tokens = 0;          ///< --chunk-tokens (0: as many as fit)
  double progress_s = 5;             ///< --progress-interval: seconds between plain progress lines
  SamplerParams sampling;            ///< --temp (default 0), --top-k, --top-p, --min-p, -s
  GrammarSource grammar;             ///< constrains each document's final output
  KvCacheOptions kv;                 ///< -ctk / -ctv / --kv-mem / --no-prefix-cache / -fa ...
};

/// Registers `kvrun batch` on `app`, parsing into `o`; returns the subcommand.
CLI::App* add_batch_command(CLI::App& app, BatchOptions& o);

/// `kvrun batch`: summarizes many documents (tools/batch.cpp). Returns 0 when every document
/// was done, 1 on a setup error or when documents failed, 130 when stopped by SIGINT/SIGTERM.
int cmd_batch(const BatchOptions& opt);
/// Options of `kvrun synth`.
struct SynthOptions {
  std::string shape;         ///< --shape: a name from tools/synth/synth_shapes.h
  std::string type = "F16";  ///< --type: F32, F16, Q8_0, Q4_0, Q4_K, Q6_K
  std::string output;        ///< -o
  std::string vocab_from;    ///< --vocab-from: GGUF to copy tokenizer.* from ("" = minimal)
  uint64_t seed = 42;        ///< -s / --seed
  int n_threads = 0;         ///< -t (0: physical cores)
};

/// Registers `kvrun synth` on `app`, parsing into `o`; returns the subcommand.
CLI::App* add_synth_command(CLI::App& app, SynthOptions& o);

/// `kvrun synth`: writes a synthetic GGUF (tools/synth/synth.h). Returns the exit code (1 on any
/// error, with one line on stderr and no file left at the output path).
int cmd_synth(const SynthOptions& opt);

/// Formats a byte count for people: "1.13 MiB", "42.95 GB" (SI when `si`), exact below 1 KiB.
std::string format_bytes(int64_t bytes, bool si = false);

}  // namespace kvrun::tools
