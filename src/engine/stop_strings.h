// stop_strings.h — stop strings over streamed text: finds the first occurrence of any stop
// string in generated text and holds back the tail that could still become one, so text streamed
// to a client never contains (part of) a stop string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvrun {

/// Scans generated text, piece by piece, for stop strings (empty strings are ignored).
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  /// Appends `piece` to the pending text. Returns the text that is now safe to release: with
  /// a stop string found, everything before it (and stopped() becomes true); otherwise the
  /// pending text minus its longest suffix that is a proper prefix of some stop string.
  std::string push(std::string_view piece);
  /// The text still held back (at the end of generation it is released).
  std::string flush();
  /// A stop string was found; later pushes return "".
  bool stopped() const { return !word_.empty(); }
  /// The stop string found ("" when none).
  const std::string& word() const { return word_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  std::string word_;
};

}  // namespace kvrun
