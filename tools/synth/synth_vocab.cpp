// synth_vocab.cpp — tokenizer metadata of synthetic models (see synth_vocab.h).
#include "tools/synth/synth_vocab.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tools/synth/synth.h"

namespace kvrun {

void synth_minimal_vocab(gguf::Writer& w, int64_t n_vocab, std::string_view arch) {
  if (n_vocab < kSynthMinVocab)
    throw SynthError("a minimal vocabulary needs at least " + std::to_string(kSynthMinVocab) +
                     " tokens, the shape has " + std::to_string(n_vocab));
  // Token types (GGUF / llama.cpp): 1 normal, 2 unknown, 3 control, 6 byte.
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  tokens.reserve(size_t(n_vocab));
  types.reserve(size_t(n_vocab));
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.emplace_back(buf);
    types.push_back(6);
  }
  for (int c = 0x20; c < 0x7F; ++c) {
    tokens.push_back(c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, char(c)));
    types.push_back(1);
  }
  for (int64_t i = int64_t(tokens.size()); i < n_vocab; ++i) {
    tokens.push_back("<synth_" + std::to_string(i) + ">");
    types.push_back(1);
  }
  if (arch == "phi3" && n_vocab > kSynthMinVocab) {
    tokens.back() = "<|endoftext|>";
    types.back() = 3;
  }
  // SentencePiece scores: specials and bytes 0, the rest decreasing with the id (only their
  // order matters to the merge).
  std::vector<float> scores(size_t(n_vocab), 0.0f);
  for (int64_t i = 259; i < n_vocab; ++i) scores[size_t(i)] = -float(i - 259);

  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_f32_array("tokenizer.ggml.scores", scores);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
}

void synth_wordpiece_vocab(gguf::Writer& w, int64_t n_vocab) {
  if (n_vocab < kSynthMinWordPieceVocab)
    throw SynthError("a WordPiece vocabulary needs at least " +
                     std::to_string(kSynthMinWordPieceVocab) + " tokens, the shape has " +
                     std::to_string(n_vocab));
  // Token types (GGUF / llama.cpp): 1 normal, 3 control.
  std::vector<std::string> tokens = {"[PAD]"};
  std::vector<int32_t> types = {3};
  int unused = 0;
  for (int i = 1; i < 100; ++i, ++unused) {
    tokens.push_back("[unused" + std::to_string(unused) + "]");
    types.push_back(1);
  }
  for (const char* special : {"[UNK]", "[CLS]", "[SEP]", "[MASK]"}) {
    tokens.emplace_back(special);
    types.push_back(3);
  }
  const std::string word_start = "\xE2\x96\x81";  // U+2581
  for (const bool initial : {true, false})
    for (int c = 0x21; c < 0x7F; ++c) {
      if (c >= 'A' && c <= 'Z') continue;
      tokens.push_back((initial ? word_start : std::string()) + char(c));
      types.push_back(1);
    }
  for (const char* piece :
       {"_once", "_upon",   "_time", "_there", "_was",   "_little", "_robot", "_who",
        "_the",  "_sky",    "_is",   "_blue",  "_hello", "_my",     "_name",  "_embed",
        "_text", "_search", "ing",   "ed",     "er",     "s",       "ly",     "_un",
        "_in",   "bed",     "ding",  "_rob",   "ot"}) {
    std::string t = piece;
    if (t[0] == '_') t = word_start + t.substr(1);
    if (std::find(tokens.begin(), tokens.end(), t) != tokens.end()) continue;
    tokens.push_back(t);
    types.push_back(1);
  }
  while (int64_t(tokens.size()) < n_vocab) {
    tokens.push_back("[unused" + std::to_string(unused++) + "]");
    types.push_back(1);
  }
  w.set_u32("tokenizer.ggml.token_type_count", 2);
  w.set_string("tokenizer.ggml.model", "bert");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.bos_token_id", 101);
  w.set_u32("tokenizer.ggml.cls_token_id", 101);
  w.set_u32("tokenizer.ggml.seperator_token_id", 102);  // sic: llama.cpp's key
  w.set_u32("tokenizer.ggml.unknown_token_id", 100);
  w.set_u32("tokenizer.ggml.padding_token_id", 0);
  w.set_u32("tokenizer.ggml.mask_token_id", 103);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
}

int64_t synth_copy_vocab(const gguf::File& from, gguf::Writer& w) {
  const gguf::Value* tokens = from.find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != gguf::ValueType::ARRAY ||
      tokens->elem_type != gguf::ValueType::STRING)
    throw SynthError(from.path() + ": no tokenizer.ggml.tokens array (not a vocabulary file)");
  for (const gguf::KeyValue& kv : from.metadata())
    if (kv.key.starts_with("tokenizer.")) w.set_value(std::string(kv.key), kv.value);
  return int64_t(tokens->count);
}

}  // namespace kvrun
