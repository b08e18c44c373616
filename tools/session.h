// session.h — what `kvrun -p` and the REPL share: loading the model and tokenizer, choosing the
// context size, the Ctrl-C flag, and reporting timings.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "commands.h"
#include "engine/context.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace kvrun::tools {

/// A model with its tokenizer and one context, built from the run options.
struct Loaded {
  Model model;
  Tokenizer tok;
  std::unique_ptr<Context> ctx;
};

/// The context length -c 0 means for a model trained on `n_ctx_train` positions: min(4096,
/// n_ctx_train), or 4096 when the file does not say.
int64_t default_n_ctx(int64_t n_ctx_train);

/// The context length to use for `model` when -c gave `requested` tokens (0: default_n_ctx);
/// warns on stderr when it exceeds n_ctx_train.
int64_t resolve_n_ctx(const Model& model, int64_t requested);

/// The BOS/EOS text a chat template reads ("" for a token the model does not have).
ChatSpecialTokens chat_special_tokens(const Tokenizer& tok);

/// The Jinja source `--chat-template` names: a built-in template's name (kvrun --chat-template
/// list) or the path of a Jinja file. Throws std::invalid_argument when it is neither.
std::string chat_template_source(const std::string& name_or_file);

/// Checks `--chat-template` and `--chat-template-kwargs` before a model is read: the template
/// must exist and parse, the kwargs be a JSON object. Throws std::invalid_argument.
void check_chat_template_options(const std::string& name_or_file, const std::string& kwargs);

/// The chat template for `model`: `requested` (a built-in name or a file, see
/// chat_template_source) when not empty, else the model's tokenizer.chat_template; nullopt when
/// the model has none. `kwargs` ("" or a JSON object) become its default extra variables.
/// Throws std::invalid_argument for an unknown name, a template that does not parse (the
/// message names the template and the line) or malformed kwargs.
std::optional<ChatTemplate> chat_template_for(const Model& model, const Tokenizer& tok,
                                              const std::string& requested,
                                              const std::string& kwargs);

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
