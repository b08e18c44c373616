// grammar_vocab.cpp — see grammar_vocab.h.
#include "text/grammar_vocab.h"

#include <algorithm>
#include <numeric>

#include "text/tokenizer.h"

namespace kvrun {
namespace {

/// Longer pieces are left out of the trie (never allowed): depths are 16-bit.
constexpr size_t kMaxPiece = 65535;

/// Masks cached per generation at most (each is n_vocab bits); the cache is emptied beyond it.
constexpr size_t kMaxCachedMasks = 4096;

}  // namespace

TokenTrie::TokenTrie(std::vector<std::string> pieces, std::vector<int32_t> eog)
    : pieces_(std::move(pieces)), is_eog_(pieces_.size(), 0) {
  for (int32_t id : eog) {
    if (id < 0 || size_t(id) >= pieces_.size() || is_eog_[size_t(id)]) continue;
    is_eog_[size_t(id)] = 1;
    eog_.push_back(id);
  }
  std::vector<int32_t> order;
  for (size_t id = 0; id < pieces_.size(); ++id)
    if (!pieces_[id].empty() && pieces_[id].size() <= kMaxPiece && !is_eog_[id])
      order.push_back(int32_t(id));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return pieces_[size_t(a)] != pieces_[size_t(b)] ? pieces_[size_t(a)] < pieces_[size_t(b)]
                                                    : a < b;
  });
  // Sorted pieces make the trie in preorder: each piece shares its longest common prefix with
  // the one before; the nodes below that prefix are closed (their subtree ends here).
  std::vector<uint32_t> path;  // node index per depth - 1
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& p = pieces_[size_t(id)];
    size_t lcp = 0;
    if (prev)
      while (lcp < p.size() && lcp < prev->size() && p[lcp] == (*prev)[lcp]) ++lcp;
    while (path.size() > lcp) {
      nodes_[path.back()].skip = uint32_t(nodes_.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < p.size(); ++d) {
      path.push_back(uint32_t(nodes_.size()));
      nodes_.push_back({0, uint32_t(tokens_.size()), uint16_t(d + 1), static_cast<uint8_t>(p[d])});
    }
    tokens_.push_back(id);
    max_depth_ = std::max(max_depth_, uint32_t(p.size()));
    prev = &p;
  }
  for (uint32_t n : path) nodes_[n].skip = uint32_t(nodes_.size());
  nodes_.push_back({0, uint32_t(tokens_.size()), 0, 0});  // sentinel: ends the last token list
}

std::shared_ptr<const TokenTrie> TokenTrie::build(const Tokenizer& tok) {
  std::vector<std::string> pieces(size_t(tok.n_vocab()));
  std::vector<int32_t> eog;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (tok.is_eog(id))
      eog.push_back(id);
    else
      pieces[size_t(id)] = tok.token_to_piece(id, false);
  }
  return std::make_shared<const TokenTrie>(std::move(pieces), std::move(eog));
}

GrammarTokens::GrammarTokens(std::shared_ptr<const Grammar> grammar,
                             std::shared_ptr<const TokenTrie> trie)
    : trie_(std::move(trie)), m_(std::move(grammar)), state_(m_.start()) {
  walk_.resize(trie_->max_depth_ + 1);
}

bool GrammarTokens::allows(int32_t id) {
  if (id < 0 || id >= trie_->n_vocab()) return false;
  if (trie_->is_eog(id)) return m_.accepting(state_);
  const std::string& p = trie_->piece(id);
  return !p.empty() && p.size() <= kMaxPiece && m_.step(state_, p) != GrammarMatcher::kDead;
}

void GrammarTokens::compute_mask(TokenMask& bits) {
  const TokenTrie& t = *trie_;
  bits.assign((size_t(t.n_vocab()) + 63) / 64, 0);
  if (m_.accepting(state_))
    for (int32_t id : t.eog_) bits[size_t(id) >> 6] |= 1ull << (id & 63);
  walk_[0] = state_;
  const TokenTrie::Node* nodes = t.nodes_.data();
  const uint32_t n = uint32_t(t.nodes_.size()) - 1;  // without the sentinel
  for (uint32_t i = 0; i < n;) {
    const TokenTrie::Node& nd = nodes[i];
    const GrammarMatcher::State s = m_.step(walk_[nd.depth - 1], nd.byte);
    if (s == GrammarMatcher::kDead) {
      i = nd.skip;
      continue;
    }
    walk_[nd.depth] = s;
    for (uint32_t k = nd.tok_begin; k < nodes[i + 1].tok_begin; ++k) {
      const int32_t id = t.tokens_[k];
      bits[size_t(id) >> 6] |= 1ull << (id & 63);
    }
    ++i;
  }
}

const TokenMask& GrammarTokens::mask() {
  auto it = cache_.find(state_);
  if (it != cache_.end()) return it->second;
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();
  TokenMask& bits = cache_[state_];
  compute_mask(bits);
  return bits;
}

void GrammarTokens::accept(int32_t id) {
  if (!allows(id))
    throw GrammarError("grammar: token " + std::to_string(id) + " is not allowed here");
  if (trie_->is_eog(id)) return;
  state_ = m_.step(state_, trie_->piece(id));
}

}  // namespace kvrun
