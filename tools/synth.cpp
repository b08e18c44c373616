// synth.cpp — `kvrun synth --shape NAME --type T -o out.gguf [--vocab-from F] [--seed S]`:
// writes a GGUF with random weights of a real model's shape (tools/synth/synth.h).
#include "tools/synth/synth.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "commands.h"
#include "session.h"

namespace kvrun::tools {

namespace {

std::string shape_names() {
  std::string s;
  for (const SynthShape& sh : synth_shapes()) s += (s.empty() ? "" : ", ") + sh.name;
  return s;
}

}  // namespace

CLI::App* add_synth_command(CLI::App& app, SynthOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "synth", "write a GGUF with random weights of a real model's shape (for benchmarks)");
  cmd->add_option("--shape", o.shape, "model shape: " + shape_names())->required();
  cmd->add_option(
         "--type", o.type,
         "weight type: " + synth_file_type_names() +
             " (the i-quants without a kvrun quantizer, IQ3_S, IQ2_S, IQ3_XXS, IQ2_XXS, "
             "IQ2_XS, IQ1_S, IQ1_M: random valid blocks of the same RMS, not quantized values)")
      ->capture_default_str();
  cmd->add_option("-o,--output", o.output, "GGUF file to write")->required();
  cmd->add_option("--vocab-from", o.vocab_from,
                  "copy the tokenizer.* metadata from this GGUF (its token count must equal the "
                  "shape's vocab size; default: a minimal byte-fallback vocabulary)");
  cmd->add_option("-s,--seed", o.seed, "random seed of the weights")->capture_default_str();
  cmd->add_option("-t,--threads", o.n_threads, "threads (default: physical cores)")
      ->check(CLI::Range(0, 1024));
  return cmd;
}

int cmd_synth(const SynthOptions& opt) {
  const SynthShape* shape = find_synth_shape(opt.shape);
  if (!shape) {
    std::fprintf(stderr, "kvrun: error: unknown shape '%s' (known: %s)\n", opt.shape.c_str(),
                 shape_names().c_str());
    return 1;
  }
  const auto type = synth_file_type_from_name(opt.type);
  if (!type) {
    std::fprintf(stderr, "kvrun: error: unknown type '%s' (known: %s)\n", opt.type.c_str(),
                 synth_file_type_names().c_str());
    return 1;
  }
  SynthParams p;
  p.shape = shape;
  p.type = *type;
  p.out_path = opt.output;
  p.vocab_from = opt.vocab_from;
  p.seed = opt.seed;
  p.n_threads = opt.n_threads;
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  double last = -1;
  p.progress = [&](const SynthProgress& pr) {
    if (!tty || pr.seconds - last < 0.25) return;
    last = pr.seconds;
    std::fprintf(stderr, "\rkvrun synth: %zu/%zu tensors, %s / %s, %.1f s   ", pr.tensor + 1,
                 pr.n_tensors, format_bytes(int64_t(pr.bytes_done)).c_str(),
                 format_bytes(int64_t(pr.bytes_total)).c_str(), pr.seconds);
  };
  InterruptGuard interrupts;  // Ctrl-C stops between chunks; the temp file is removed
  p.cancel = &g_interrupted;
  try {
    const SynthResult r = write_synth_model(p);
    if (tty && last >= 0) std::fputc('\n', stderr);
    std::fprintf(stderr,
                 "kvrun synth: wrote %s: %s %s, %zu tensors (%zu in a fallback type), %s, seed "
                 "%llu, %.1f s\n",
                 opt.output.c_str(), shape->name.c_str(), synth_file_type_name(*type), r.n_tensors,
                 r.n_fallback, format_bytes(int64_t(r.file_bytes)).c_str(),
                 (unsigned long long)opt.seed, r.seconds);
    return 0;
  } catch (const std::exception& e) {
    if (tty && last >= 0) std::fputc('\n', stderr);
    std::fprintf(stderr, "kvrun: error: %s: %s\n", opt.output.c_str(), e.what());
    return 1;
  }
}

}  // namespace kvrun::tools
