// tokenizer_bpe.cpp — byte-level BPE (GGUF tokenizer model "gpt2").
//
// Algorithm (GPT-2, openai/gpt-2 encoder.py; Sennrich et al. 2016, "Neural Machine Translation
// of Rare Words with Subword Units"): the text is cut into words by the pre-tokenizer regexes;
// each byte of a word is replaced by its GPT-2 byte-to-unicode character; adjacent symbols are
// merged, always taking the pair with the lowest rank in `tokenizer.ggml.merges` (ties: the
// leftmost), until no adjacent pair is a merge. Each final symbol is a token.
#include <queue>

#include "text/tokenizer_impl.h"
#include "text/unicode_util.h"

namespace kvrun::tok {

namespace {

struct Symbol {
  int prev;
  int next;
  size_t start;
  size_t n;
};

struct Bigram {
  int left;
  int right;
  int32_t rank;
  std::string text;
};

struct BigramGreater {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

// Merges the symbols of one byte-encoded word and appends its tokens.
class BpeWord {
 public:
  BpeWord(const Vocab& vocab, const std::string& word) : vocab_(vocab), word_(word) {}

  void run(bool ignore_merges, std::vector<int32_t>& out) {
    if (ignore_merges) {
      const int32_t id = vocab_.find(word_);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    size_t off = 0;
    int index = 0;
    while (off < word_.size()) {
      const size_t len =
          std::min(unicode::utf8_len(static_cast<uint8_t>(word_[off])), word_.size() - off);
      symbols_.push_back({index - 1, off + len == word_.size() ? -1 : index + 1, off, len});
      off += len;
      ++index;
    }
    for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) add_bigram(i - 1, i);
    while (!queue_.empty()) {
      const Bigram bg = queue_.top();
      queue_.pop();
      Symbol& l = symbols_[bg.left];
      Symbol& r = symbols_[bg.right];
      if (l.n == 0 || r.n == 0) continue;
      if (l.n + r.n != bg.text.size() || word_.compare(l.start, l.n + r.n, bg.text) != 0) {
        continue;  // outdated: one side has changed since the pair was queued
      }
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) symbols_[r.next].prev = bg.left;
      add_bigram(l.prev, bg.left);
      add_bigram(bg.left, l.next);
    }
    for (const Symbol& s : symbols_) {
      if (s.n == 0) continue;
      const std::string text = word_.substr(s.start, s.n);
      const int32_t id = vocab_.find(text);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      for (char c : text) {  // not a token: one token per byte, where the byte is one
        const int32_t bid = vocab_.find(std::string(1, c));
        if (bid >= 0) out.push_back(bid);
      }
    }
  }

 private:
  void add_bigram(int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols_[left];
    const Symbol& r = symbols_[right];
    const std::string_view lt(word_.data() + l.start, l.n);
    const std::string_view rt(word_.data() + r.start, r.n);
    const int32_t rank = vocab_.bpe_rank(lt, rt);
    if (rank < 0) return;
    std::string text(lt);
    text.append(rt);
    queue_.push({left, right, rank, std::move(text)});
  }

  const Vocab& vocab_;
  const std::string& word_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramGreater> queue_;
};

}  // namespace

void bpe_tokenize(const Vocab& vocab, const RegexSplitter& splitter, bool ignore_merges,
                  std::string_view text, std::vector<int32_t>& out) {
  for (const std::string& word : splitter.split(text)) {
    std::string encoded;
    encoded.reserve(word.size() * 2);
    for (unsigned char b : word) encoded += unicode::byte_to_utf8(b);
    BpeWord(vocab, encoded).run(ignore_merges, out);
  }
}

}  // namespace kvrun::tok
