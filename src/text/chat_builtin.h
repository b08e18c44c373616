// chat_builtin.h — kvrun's built-in chat templates, compiled in from src/text/chat_templates/
// (cmake/embed_chat_templates.cmake writes the table). Internal to src/text/chat.cpp.
#pragma once

#include <cstddef>

namespace kvrun::detail {

/// One built-in template: its `--chat-template` name (the file name without ".jinja") and its
/// Jinja source.
struct BuiltinChatTemplate {
  const char* name;
  const char* source;
};

/// Every built-in template, sorted by name.
extern const BuiltinChatTemplate kBuiltinChatTemplates[];
/// How many kBuiltinChatTemplates holds.
extern const size_t kNumBuiltinChatTemplates;

}  // namespace kvrun::detail
