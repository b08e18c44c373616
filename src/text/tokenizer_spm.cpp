// tokenizer_spm.cpp — SentencePiece-style BPE over token scores (GGUF tokenizer model "llama").
//
// Algorithm (SentencePiece, bpe_model.cc, as used for Llama; described in prose): start from one
// symbol per UTF-8 character; keep a priority queue of adjacent pairs whose concatenation is a
// vocabulary token, ordered by that token's score (highest first, then leftmost); pop a pair,
// skip it if either side has changed since it was queued, otherwise merge and queue the new
// pairs with the neighbours. Afterwards a symbol that is not itself a token is split back into
// the two symbols it was merged from (recursively), and symbols that still are not tokens are
// emitted as byte-fallback tokens <0xXX>.
#include <cstdio>
#include <queue>
#include <unordered_map>

#include "text/tokenizer_impl.h"
#include "text/unicode_util.h"

namespace kvrun::tok {

int32_t spm_byte_token(const Vocab& vocab, uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
  int32_t id = vocab.find(buf);
  if (id >= 0) return id;
  id = vocab.find(std::string(1, static_cast<char>(b)));
  return id >= 0 ? id : vocab.unk;
}

namespace {

struct Symbol {
  int prev;
  int next;
  size_t start;  // byte offset into the text
  size_t n;      // byte length (0 once merged away)
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;
};

struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

class SpmSession {
 public:
  SpmSession(const Vocab& vocab, const std::string& text) : vocab_(vocab), text_(text) {}

  void run(std::vector<int32_t>& out) {
    size_t off = 0;
    int index = 0;
    while (off < text_.size()) {
      const size_t len =
          std::min(unicode::utf8_len(static_cast<uint8_t>(text_[off])), text_.size() - off);
      symbols_.push_back({index - 1, off + len == text_.size() ? -1 : index + 1, off, len});
      off += len;
      ++index;
    }
    for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) try_add(i - 1, i);
    while (!queue_.empty()) {
      const Bigram bg = queue_.top();
      queue_.pop();
      Symbol& l = symbols_[bg.left];
      Symbol& r = symbols_[bg.right];
      if (l.n == 0 || r.n == 0 || l.n + r.n != bg.size) continue;
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) symbols_[r.next].prev = bg.left;
      try_add(l.prev, bg.left);
      try_add(bg.left, l.next);
    }
    if (symbols_.empty()) return;
    for (int i = 0; i != -1; i = symbols_[i].next) resegment(i, out);
  }

 private:
  std::string sym_text(int i) const { return text_.substr(symbols_[i].start, symbols_[i].n); }

  void try_add(int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols_[left];
    const std::string s = text_.substr(l.start, l.n + symbols_[right].n);
    const int32_t id = vocab_.find(s);
    if (id < 0) return;
    queue_.push({left, right, vocab_.tokens[id].score, s.size()});
    rev_merge_[s] = {left, right};
  }

  void resegment(int i, std::vector<int32_t>& out) {
    const std::string s = sym_text(i);
    const int32_t id = vocab_.find(s);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
    auto it = rev_merge_.find(s);
    if (it == rev_merge_.end()) {
      for (unsigned char b : s) {
        const int32_t bt = spm_byte_token(vocab_, b);
        if (bt >= 0) out.push_back(bt);
      }
      return;
    }
    resegment(it->second.first, out);
    resegment(it->second.second, out);
  }

  const Vocab& vocab_;
  const std::string& text_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue_;
  std::unordered_map<std::string, std::pair<int, int>> rev_merge_;
};

}  // namespace

void spm_tokenize(const Vocab& vocab, const std::string& text, std::vector<int32_t>& out) {
  SpmSession session(vocab, text);
  session.run(out);
}

}  // namespace kvrun::tok
