// grammar_matcher.h — a GBNF grammar (grammar.h) as an incremental matcher over UTF-8 bytes.
//
// The matcher is the pushdown design of llama.cpp's GBNF sampler (src/llama-grammar.cpp): the
// parse is a set of stacks of grammar positions; a stack's top is a character group the next
// code point must match, and an empty stack means the input so far is a complete sentence.
// kvrun's own construction makes it fast on a vocabulary:
//   * stacks are persistent linked lists whose nodes are hash-consed (position, parent), so
//     equal stacks are one id and pushing/popping copies nothing;
//   * sets of stacks are hash-consed too, and with a pending partial UTF-8 sequence they form a
//     *state*; the byte transitions of each state are memoised in a 256-entry table, so the
//     matcher becomes a lazily built DFA over bytes (an ASCII character inside a JSON string
//     is one table lookup).
// Partial UTF-8: a state may hold the first bytes of a multi-byte code point; it is kept only
// when some stack's character group could still match a code point starting with those bytes,
// so a token that ends inside a character is accepted exactly when its bytes can be completed.
// Only well-formed UTF-8 is accepted (RFC 3629): no overlong forms (E0 81 BB for '{'), no
// surrogates, nothing above U+10FFFF.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/grammar.h"

namespace kvrun {

/// The lazily built byte automaton of one grammar. Not thread-safe (its memo tables grow on
/// use): give every generation its own.
class GrammarMatcher {
 public:
  /// A matcher state: an index, or kDead (the input can no longer match).
  using State = int32_t;
  static constexpr State kDead = -1;

  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  /// The state before any input.
  State start() const { return start_; }

  /// The state after `byte` (kDead stays kDead). Amortised O(1): one table lookup once the
  /// transition was computed.
  State step(State s, uint8_t byte) {
    if (s < 0) return kDead;
    const size_t i = size_t(s) * 256 + byte;
    if (trans_[i] == kUnknown) {
      const State t = compute(s, byte);  // may grow trans_
      trans_[i] = t;
    }
    return trans_[i];
  }
  /// The state after all of `bytes`.
  State step(State s, std::string_view bytes);

  /// The input so far is a complete sentence of the grammar (no partial code point pending).
  bool accepting(State s) const;
  /// More input can follow (some stack is not empty, or a code point is incomplete).
  bool can_continue(State s) const;
  /// `text` is a complete sentence of the grammar.
  bool matches(std::string_view text) { return accepting(step(start_, text)); }
  /// `text` is a prefix of some sentence (possibly ending inside a UTF-8 sequence).
  bool accepts_prefix(std::string_view text) { return step(start_, text) != kDead; }

  /// Number of states built so far (memory grows with it: 1 KiB each).
  size_t n_states() const { return states_.size(); }

 private:
  static constexpr int32_t kUnknown = -2;
  struct Node {
    uint32_t pos;    // index into elems_
    int32_t parent;  // node below, 0 = bottom
  };
  struct StateInfo {
    int32_t set;       // index into sets_
    uint32_t partial;  // bits of a pending code point
    uint32_t rem;      // continuation bytes still missing (0: none pending)
    uint32_t len;      // length of the pending sequence (2-4; 0: none pending)
  };
  struct VecHash {
    size_t operator()(const std::vector<int32_t>& v) const;
  };

  State compute(State s, uint8_t byte);
  State advance(int32_t set, uint32_t cp);
  State partial(int32_t set, uint32_t bits, uint32_t rem, uint32_t len);
  State intern_state(int32_t set, uint32_t bits, uint32_t rem, uint32_t len);
  int32_t intern_set(std::vector<int32_t>& nodes);
  int32_t push_node(uint32_t pos, int32_t parent);
  void expand(int32_t node, std::vector<int32_t>& out);
  bool group_matches(uint32_t pos, uint32_t cp) const;
  bool group_meets(uint32_t pos, uint32_t lo, uint32_t hi) const;

  std::shared_ptr<const Grammar> g_;
  std::vector<GrammarElement> elems_;        // all rules, concatenated
  std::vector<std::vector<uint32_t>> alts_;  // [rule] start of each alternative in elems_
  std::vector<Node> nodes_;                  // [0] is the empty stack
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<std::vector<int32_t>> sets_;  // sorted node ids; 0 = the empty stack
  std::vector<uint8_t> set_accepts_, set_continues_;
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> set_ids_;
  std::vector<StateInfo> states_;
  std::unordered_map<uint64_t, int32_t> state_ids_;
  std::vector<int32_t> trans_;   // [state * 256 + byte]
  std::vector<uint32_t> visit_;  // expand(): per node, the call that saw it
  uint32_t epoch_ = 0;
  std::vector<int32_t> work_, scratch_;
  State start_ = kDead;
};

/// Parses GBNF `text` (parse_grammar) and builds its matcher's start state once, so a grammar
/// whose first expansion exceeds the matcher's bounds is refused now rather than at the first
/// token. Throws GrammarError for either.
std::shared_ptr<const Grammar> compile_grammar(std::string_view text);

}  // namespace kvrun
