// session.h — what `kvrun -p` and the REPL share: loading the model and tokenizer, choosing the
// context size, the Ctrl-C flag, and reporting timings.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "text/chat_template.h"
#include "commands.h"
#include "engine/context.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "text/tokenizer.h"

namespace kvrun::tools {

/// A model with its tokenizer and one context, built from the run options.
struct Loaded {
  Model model;
  Tokenizer tok;
  std::unique_ptr<Context> ctx;
};

/// The context length to use for `model` when -c gave `requested` tokens (0: min(4096,
/// n_ctx_train), 4096 when the file does not say); warns on stderr when it exceeds n_ctx_train.
int64_t resolve_n_ctx(const Model& model, int64_t requested);

/// The BOS/EOS text a chat template reads ("" for a token the model does not have).
ChatSpecialTokens chat_special_tokens(const Tokenizer& tok);

/// Throws std::invalid_argument unless `name` is a chat template family kvrun renders.
void check_chat_template_name(const std::string& name);

/// The chat template family for `model`: `requested` (checked as above) when not empty, else the
/// family detected from the model's tokenizer.chat_template; nullopt when the model has none or
/// kvrun does not render it.
std::optional<std::string> chat_family_for(const Model& model, const std::string& requested);

/// Loads opt.model, its tokenizer and a context of the chosen size (-c, default
/// min(4096, n_ctx_train); a warning on stderr when it exceeds n_ctx_train). Throws on errors.
Loaded load(const RunOptions& opt);

/// Set by SIGINT while interrupts are armed (see InterruptGuard).
extern std::atomic<bool> g_interrupted;

/// While true (the REPL waits for input), SIGINT ends the process at once with status 0 after
/// printing a newline, instead of setting g_interrupted.
extern std::atomic<bool> g_exit_on_interrupt;

/// While alive, SIGINT sets g_interrupted (or exits, see g_exit_on_interrupt) instead of ending
/// the process with the signal.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
};

/// Prints "prompt: N tokens in X ms (Y t/s) | generation: ..." on stderr.
void print_timings(const GenerateTimings& t);

}  // namespace kvrun::tools
