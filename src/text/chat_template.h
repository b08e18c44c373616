// chat_template.h — chat prompts rendered by kvrun's Jinja engine (text/jinja.h) from a model's
// `tokenizer.chat_template` or one of kvrun's built-in templates (src/text/chat_templates/).
//
// The variables a template sees follow Hugging Face transformers' apply_chat_template and
// llama.cpp's server: `messages` (OpenAI-style objects; an assistant's tool-call `arguments`
// given as a JSON string are passed as the parsed object), `tools` (the tool list or None),
// `add_generation_prompt`, `bos_token` / `eos_token` (the vocabulary's texts), the extra
// variables of `chat_template_kwargs` (e.g. enable_thinking), and the globals raise_exception and
// strftime_now. A template that fails to parse or raises is a jinja::JinjaError naming its line.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja.h"

namespace kvrun {

/// JSON as chat requests carry it (key order kept).
using ChatJson = nlohmann::ordered_json;

/// One plain message of a conversation (the REPL's and `kvrun batch`'s): role "system", "user"
/// or "assistant", and its text.
struct ChatMessage {
  std::string role;     ///< "system", "user" or "assistant"
  std::string content;  ///< the message text
};

/// The special-token strings a template reads (`bos_token`, `eos_token`), as the model's
/// vocabulary spells them (e.g. "<s>" / "</s>", "<|begin_of_text|>", "<bos>").
struct ChatSpecialTokens {
  std::string bos;  ///< text of the BOS token ("" when the model has none)
  std::string eos;  ///< text of the EOS token
};

/// What one render is given beyond the template.
struct ChatInputs {
  ChatJson messages = ChatJson::array();  ///< OpenAI-style message objects
  ChatJson tools;                         ///< an array of tool definitions, or null (None)
  bool add_generation_prompt = true;      ///< open the assistant's turn at the end
  ChatJson kwargs = ChatJson::object();   ///< extra template variables (chat_template_kwargs)
  /// The day strftime_now sees, "YYYY-MM-DD"; empty: the local time now.
  std::string today;
};

/// A parsed chat template with the special tokens it renders with.
class ChatTemplate {
 public:
  /// Parses `source`; `name` says where it came from ("model", a built-in name or a file path),
  /// for messages and /save files. Throws jinja::JinjaError (with the line) when it does not
  /// parse.
  static ChatTemplate parse(const std::string& source, std::string name, ChatSpecialTokens tokens);

  /// Renders `in`. Throws jinja::JinjaError when the template raises or fails (the message names
  /// the template line), std::invalid_argument for a malformed `today` or a kwargs value that
  /// is not an object.
  std::string render(const ChatInputs& in) const;

  /// Renders plain messages (no tools, no kwargs). Throws as render(ChatInputs).
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  /// Extra variables every render gets (`--chat-template-kwargs`); a request's kwargs win over
  /// them. Throws std::invalid_argument unless `kwargs` is an object or null.
  void set_default_kwargs(ChatJson kwargs);

  const std::string& name() const { return name_; }            ///< where it came from
  const std::string& source() const { return source_; }        ///< the Jinja text
  const ChatSpecialTokens& tokens() const { return tokens_; }  ///< bos/eos texts

 private:
  jinja::Template tmpl_;
  std::string source_;
  std::string name_;
  ChatSpecialTokens tokens_;
  ChatJson defaults_ = ChatJson::object();
};

/// The Jinja source of the built-in template `name` (`--chat-template NAME`), or nullopt.
std::optional<std::string_view> builtin_chat_template(std::string_view name);

/// Every built-in template name, sorted (`kvrun --chat-template list`).
std::vector<std::string> chat_template_names();

/// A JSON value as a template value (objects keep their key order; big unsigned integers wrap
/// to int64 as Python would not, which chat requests never reach).
jinja::Value json_to_jinja(const ChatJson& j);

/// `messages` as OpenAI-style message objects {"role", "content"}.
ChatJson messages_json(const std::vector<ChatMessage>& messages);

}  // namespace kvrun
