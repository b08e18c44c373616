// repl_state.h — the state of one REPL conversation: chat template, messages, the tokens held
// in the context, the sampler; one chat turn; saving and loading it (/save, /load).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/generate.h"
#include "engine/sampler.h"
#include "session.h"
#include "text/chat_template.h"

namespace kvrun::tools {

/// One conversation of the REPL.
struct ChatState {
  std::optional<ChatTemplate> tmpl;   ///< the chat template; nullopt: plain completion
  std::string system;                 ///< --system
  std::vector<ChatMessage> messages;  ///< the conversation (system first when set)
  std::vector<int32_t> tokens;        ///< the tokens the context holds, [n_past]
  Sampler sampler;
  GenerateTimings last;  ///< timings of the last reply

  /// The template from --chat-template or the model's tokenizer.chat_template. Throws
  /// std::invalid_argument for an unknown --chat-template, a template that does not parse or
  /// malformed --chat-template-kwargs.
  static ChatState create(const RunOptions& opt, const Loaded& l);
  /// "the model's chat template", "chat template chatml" (--chat-template) or "plain completion
  /// (no chat template in the model)".
  std::string describe() const;
  /// Forgets the conversation and the context (keeps the system prompt).
  void reset(Loaded& l);
  /// Adds the user message, evaluates what the context lacks and generates the reply, streaming
  /// it to `sink`; appends the reply (even a stopped one) to the conversation. On an error
  /// (e.g. the conversation no longer fits the context) the user message is taken back and the
  /// error rethrown.
  GenerateResult turn(const std::string& user, const RunOptions& opt, Loaded& l,
                      const PieceSink& sink);
};

/// Writes the conversation and its KV state to `path` (/save). Throws std::runtime_error.
void save_chat(const std::string& path, const ChatState& st, const Loaded& l);
/// Reads a file written by save_chat for the same model and context type (/load); on any
/// mismatch or damage throws std::runtime_error and leaves `st` and the context unchanged.
void load_chat(const std::string& path, ChatState& st, Loaded& l);

}  // namespace kvrun::tools
