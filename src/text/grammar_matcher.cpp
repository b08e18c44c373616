// grammar_matcher.cpp — see grammar_matcher.h.
#include "text/grammar_matcher.h"

#include <algorithm>

namespace kvrun {
namespace {

/// Expansion work per new stack set at most: a grammar that needs more is refused rather than
/// left to exhaust memory.
constexpr size_t kMaxExpansion = 1u << 20;

/// The smallest code point of a UTF-8 sequence of each length (shorter forms are overlong).
constexpr uint32_t kMinOfLength[5] = {0, 0, 0x80, 0x800, 0x10000};

bool ends_alternative(GrammarOp op) { return op == GrammarOp::kEnd || op == GrammarOp::kAlt; }

}  // namespace

size_t GrammarMatcher::VecHash::operator()(const std::vector<int32_t>& v) const {
  uint64_t h = 1469598103934665603ull;
  for (int32_t x : v) h = (h ^ uint32_t(x)) * 1099511628211ull;
  return size_t(h);
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : g_(std::move(grammar)) {
  std::vector<uint32_t> rule_start;
  for (const auto& rule : g_->rules) {
    rule_start.push_back(uint32_t(elems_.size()));
    elems_.insert(elems_.end(), rule.begin(), rule.end());
  }
  alts_.resize(g_->rules.size());
  for (size_t r = 0; r < g_->rules.size(); ++r) {
    uint32_t at = rule_start[r];
    alts_[r].push_back(at);
    for (const auto& e : g_->rules[r]) {
      ++at;
      if (e.op == GrammarOp::kAlt) alts_[r].push_back(at);
    }
  }
  nodes_.push_back({UINT32_MAX, 0});
  visit_.push_back(0);
  std::vector<int32_t> ready;
  for (uint32_t a : alts_[g_->root]) expand(push_node(a, 0), ready);
  start_ = ready.empty() ? kDead : intern_state(intern_set(ready), 0, 0, 0);
}

int32_t GrammarMatcher::push_node(uint32_t pos, int32_t parent) {
  if (ends_alternative(elems_[pos].op)) return parent;  // the alternative is done: pop
  const uint64_t key = (uint64_t(pos) << 32) | uint32_t(parent);
  auto [it, fresh] = node_ids_.try_emplace(key, int32_t(nodes_.size()));
  if (fresh) {
    nodes_.push_back({pos, parent});
    visit_.push_back(0);
  }
  return it->second;
}

/// Appends to `out` every stack reachable from `node` without consuming input whose top is a
/// character group (or the empty stack, 0).
void GrammarMatcher::expand(int32_t node, std::vector<int32_t>& out) {
  ++epoch_;
  work_.assign(1, node);
  size_t steps = 0;
  while (!work_.empty()) {
    const int32_t n = work_.back();
    work_.pop_back();
    if (visit_[size_t(n)] == epoch_) continue;
    visit_[size_t(n)] = epoch_;
    if (++steps > kMaxExpansion) throw GrammarError("grammar: expansion too large");
    if (n == 0) {
      out.push_back(0);
      continue;
    }
    const Node nd = nodes_[size_t(n)];
    const GrammarElement& e = elems_[nd.pos];
    if (e.op != GrammarOp::kRuleRef) {
      out.push_back(n);
      continue;
    }
    const int32_t cont = push_node(nd.pos + 1, nd.parent);
    for (uint32_t a : alts_[e.value]) work_.push_back(push_node(a, cont));
  }
}

int32_t GrammarMatcher::intern_set(std::vector<int32_t>& nodes) {
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  auto it = set_ids_.find(nodes);
  if (it != set_ids_.end()) return it->second;
  const auto id = int32_t(sets_.size());
  set_accepts_.push_back(!nodes.empty() && nodes.front() == 0);
  set_continues_.push_back(!nodes.empty() && nodes.back() != 0);
  sets_.push_back(nodes);
  set_ids_.emplace(nodes, id);
  return id;
}

GrammarMatcher::State GrammarMatcher::intern_state(int32_t set, uint32_t bits, uint32_t rem,
                                                   uint32_t len) {
  const uint64_t key =
      (uint64_t(uint32_t(set)) << 32) | (uint64_t(bits) << 5) | (uint64_t(len) << 2) | rem;
  auto [it, fresh] = state_ids_.try_emplace(key, int32_t(states_.size()));
  if (fresh) {
    states_.push_back({set, bits, rem, len});
    trans_.resize(trans_.size() + 256, kUnknown);
  }
  return it->second;
}

bool GrammarMatcher::group_matches(uint32_t pos, uint32_t cp) const {
  return group_meets(pos, cp, cp);
}

/// Whether the character group at `pos` matches some code point in [lo, hi].
bool GrammarMatcher::group_meets(uint32_t pos, uint32_t lo, uint32_t hi) const {
  const GrammarElement& first = elems_[pos];
  if (first.op == GrammarOp::kCharAny) return true;
  const bool negated = first.op == GrammarOp::kCharNot;
  // Negated: walk x up past every excluded range containing it; some code point is left when
  // x stays ≤ hi. Positive: some range intersects [lo, hi].
  uint32_t x = lo;
  for (bool moved = true; moved;) {
    moved = false;
    uint32_t i = pos;
    while (true) {
      const uint32_t a = elems_[i].value;
      uint32_t b = a;
      if (elems_[i + 1].op == GrammarOp::kCharRangeUpper) b = elems_[++i].value;
      ++i;
      if (!negated && a <= hi && b >= lo) return true;
      if (negated && a <= x && x <= b) {
        x = b + 1;
        moved = true;
      }
      if (elems_[i].op != GrammarOp::kCharAlt) break;
    }
    if (!negated) return false;
  }
  return x <= hi;
}

GrammarMatcher::State GrammarMatcher::advance(int32_t set, uint32_t cp) {
  std::vector<int32_t> next;
  for (int32_t n : sets_[size_t(set)]) {
    if (n == 0 || !group_matches(nodes_[size_t(n)].pos, cp)) continue;
    uint32_t end = nodes_[size_t(n)].pos;  // skip the rest of the group
    if (elems_[end].op != GrammarOp::kCharAny) {
      ++end;
      while (elems_[end].op == GrammarOp::kCharAlt || elems_[end].op == GrammarOp::kCharRangeUpper)
        ++end;
    } else {
      ++end;
    }
    expand(push_node(end, nodes_[size_t(n)].parent), next);
  }
  if (next.empty()) return kDead;
  return intern_state(intern_set(next), 0, 0, 0);
}

GrammarMatcher::State GrammarMatcher::partial(int32_t set, uint32_t bits, uint32_t rem,
                                              uint32_t len) {
  // The code points the sequence can still become, without overlong forms (RFC 3629).
  const uint32_t lo = std::max(bits << (6 * rem), kMinOfLength[len]);
  const uint32_t hi = std::min((bits << (6 * rem)) | ((1u << (6 * rem)) - 1), 0x10FFFFu);
  if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) return kDead;  // nothing, or surrogates only
  for (int32_t n : sets_[size_t(set)])
    if (n != 0 && group_meets(nodes_[size_t(n)].pos, lo, hi))
      return intern_state(set, bits, rem, len);
  return kDead;
}

GrammarMatcher::State GrammarMatcher::compute(State s, uint8_t byte) {
  const StateInfo st = states_[size_t(s)];
  if (st.rem == 0) {
    if (byte < 0x80) return advance(st.set, byte);
    if ((byte & 0xE0) == 0xC0) return partial(st.set, byte & 0x1Fu, 1, 2);
    if ((byte & 0xF0) == 0xE0) return partial(st.set, byte & 0x0Fu, 2, 3);
    if ((byte & 0xF8) == 0xF0) return partial(st.set, byte & 0x07u, 3, 4);
    return kDead;  // a continuation byte or 0xF8-0xFF cannot start a code point
  }
  if ((byte & 0xC0) != 0x80) return kDead;
  const uint32_t bits = (st.partial << 6) | (byte & 0x3Fu);
  if (st.rem == 1) {
    if (bits < kMinOfLength[st.len] || (bits >= 0xD800 && bits <= 0xDFFF)) return kDead;
    return advance(st.set, bits);
  }
  return partial(st.set, bits, st.rem - 1, st.len);
}

GrammarMatcher::State GrammarMatcher::step(State s, std::string_view bytes) {
  for (char c : bytes) {
    s = step(s, static_cast<uint8_t>(c));
    if (s == kDead) break;
  }
  return s;
}

bool GrammarMatcher::accepting(State s) const {
  return s >= 0 && states_[size_t(s)].rem == 0 && set_accepts_[size_t(states_[size_t(s)].set)];
}

bool GrammarMatcher::can_continue(State s) const {
  return s >= 0 && (states_[size_t(s)].rem > 0 || set_continues_[size_t(states_[size_t(s)].set)]);
}

std::shared_ptr<const Grammar> compile_grammar(std::string_view text) {
  auto g = std::make_shared<const Grammar>(parse_grammar(text));
  GrammarMatcher start(g);
  return g;
}

}  // namespace kvrun
