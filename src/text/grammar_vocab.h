// grammar_vocab.h — which tokens of a vocabulary a grammar allows next.
//
// TokenTrie is the vocabulary's token bytes as a prefix tree laid out in preorder, built once per
// tokenizer and shared. GrammarTokens is one generation's grammar state over it: the mask of
// allowed tokens is one depth-first walk of the trie through the matcher's byte automaton
// (grammar_matcher.h), a shared prefix is matched once and a dead prefix skips its whole
// subtree; masks are cached per matcher state, so a state met again (the inside of a JSON
// string, a separator) costs a copy. As in llama.cpp's sampler, the caller is expected to try
// the sampled token first (allows()) and ask for the full mask only when it is rejected.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/grammar_matcher.h"

namespace kvrun {

class Tokenizer;

/// A vocabulary's token pieces as a byte trie. Immutable; share it between generations.
class TokenTrie {
 public:
  /// `pieces[id]` are the bytes of token id (token_to_piece without special text); an empty
  /// piece is a token the grammar never allows. `eog` are the end-of-generation ids, allowed
  /// exactly when the grammar is complete.
  TokenTrie(std::vector<std::string> pieces, std::vector<int32_t> eog);
  /// The trie of `tok`'s vocabulary (O(n_vocab · log n_vocab)).
  static std::shared_ptr<const TokenTrie> build(const Tokenizer& tok);

  int32_t n_vocab() const { return int32_t(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[size_t(id)]; }
  bool is_eog(int32_t id) const { return is_eog_[size_t(id)] != 0; }
  const std::vector<int32_t>& eog() const { return eog_; }

 private:
  friend class GrammarTokens;
  std::vector<std::string> pieces_;
  std::vector<uint8_t> is_eog_;
  std::vector<int32_t> eog_;
  // Nodes in preorder (the root is implicit), one 12-byte record each so the walk reads one
  // cache line per ~5 nodes: the index just past the node's subtree, its first token in
  // tokens_ (its tokens end where the next node's begin; a last sentinel node closes the list),
  // its depth (≥ 1) and the byte on the edge into it.
  struct Node {
    uint32_t skip;
    uint32_t tok_begin;
    uint16_t depth;
    uint8_t byte;
  };
  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;
  uint32_t max_depth_ = 0;
};

/// A bitset over token ids: bit id set = allowed.
using TokenMask = std::vector<uint64_t>;

/// One generation's grammar state over a vocabulary. Not thread-safe.
class GrammarTokens {
 public:
  GrammarTokens(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie);

  /// Whether token `id` may come next (an EOG token: whether the grammar is complete).
  bool allows(int32_t id);
  /// The mask of every token that may come next (cached per state; valid until the next call).
  const TokenMask& mask();
  /// Computes the mask of the current state without the cache (what a cache miss costs; for
  /// benchmarks). `bits` gets n_vocab bits.
  void compute_mask(TokenMask& bits);
  /// Advances over token `id`. Throws GrammarError when the grammar does not allow it.
  void accept(int32_t id);
  /// Back to the start of the grammar (the automaton and the mask cache are kept).
  void reset() { state_ = m_.start(); }
  /// The text so far is a complete sentence: an EOG token may come now.
  bool complete() const { return m_.accepting(state_); }
  /// More text can follow.
  bool can_continue() const { return m_.can_continue(state_); }
  /// The vocabulary.
  const TokenTrie& trie() const { return *trie_; }

 private:
  std::shared_ptr<const TokenTrie> trie_;
  GrammarMatcher m_;
  GrammarMatcher::State state_;
  std::unordered_map<GrammarMatcher::State, TokenMask> cache_;
  std::vector<GrammarMatcher::State> walk_;  // state per trie depth
};

}  // namespace kvrun
