// chat_template.h — recognise the family of a model's Jinja chat template and render prompts.
//
// kvrun does not embed a Jinja engine. It recognises the family of `tokenizer.chat_template` from
// distinctive substrings and renders conversations with a per-family formatter that reproduces,
// byte for byte, what the template renders (checked against Jinja2 in tests/test_chat_template).
// A template kvrun cannot reproduce exactly is reported as unsupported, never rendered wrongly.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvrun {

/// One message of a conversation. Roles: "system" (only as the first message), "user",
/// "assistant".
struct ChatMessage {
  std::string role;     ///< "system", "user" or "assistant"
  std::string content;  ///< the message text
};

/// The special-token strings a template reads (`bos_token`, `eos_token`), as the model's
/// vocabulary spells them (e.g. "<s>" / "</s>", "<|begin_of_text|>", "<bos>").
struct ChatSpecialTokens {
  std::string bos;  ///< text of the BOS token
  std::string eos;  ///< text of the EOS token
};

/// Options of a render beyond the conversation itself.
struct ChatRenderOptions {
  /// The day templates that call `strftime_now` see, as "YYYY-MM-DD"; empty means today (local
  /// time). Families that print a date (llama3.2, granite, gpt-oss, apertus) use it.
  std::string today;
};

/// The family name of a Jinja chat template, or nullopt when kvrun does not recognise it or
/// cannot render it exactly (see unsupported_chat_template for the reason).
std::optional<std::string> detect_chat_template(std::string_view jinja);

/// For a template detect_chat_template rejects: a short name and the reason kvrun does not
/// support it (e.g. "command-r: needs tool definitions"), or "unknown" when nothing matched.
/// Returns nullopt when the template is supported.
std::optional<std::string> unsupported_chat_template(std::string_view jinja);

/// Renders `messages` the way templates of `family` do. With `add_generation_prompt` the text
/// that opens the assistant's turn is appended. Throws std::invalid_argument for an unknown
/// family or a conversation the family cannot express (a system message where the template
/// raises, a missing system message where kvrun does not reproduce the model's default one, a
/// role other than system/user/assistant, a system message that is not first, …).
std::string render_chat(std::string_view family, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const ChatSpecialTokens& tokens,
                        const ChatRenderOptions& options = {});

/// Every family name render_chat accepts (for `--chat-template NAME`), sorted.
std::vector<std::string> chat_template_names();

}  // namespace kvrun
