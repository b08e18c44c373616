// synth_vocab.h — the tokenizer metadata of a synthetic model.
//
// Either copied from another GGUF (every `tokenizer.*` key: model, pre, tokens, scores,
// token_type, merges, special token ids, add_*_token flags, chat_template …; GGUF spec,
// "Tokenizer" section), or a minimal SentencePiece-style ("llama") vocabulary that kvrun and
// llama.cpp both load:
//   0 "<unk>" (unknown), 1 "<s>" (control, BOS), 2 "</s>" (control, EOS),
//   3 … 258 byte tokens "<0x00>" … "<0xFF>" (type byte),
//   259 … 353 the printable ASCII characters, space written as U+2581 (normal),
//   then "<synth_N>" filler tokens (normal) up to n_vocab; for arch phi3 the last one is
//   "<|endoftext|>" (control), a token llama.cpp's vocabulary setup looks up by name for
//   Phi-3 models (it fails to load the vocabulary without it).
// Any text tokenizes (characters or byte fallback); the filler tokens are only reachable by
// sampling.
#pragma once

#include <cstdint>
#include <string_view>

#include "gguf.h"

namespace kvrun {

/// Smallest vocabulary synth_minimal_vocab can write (3 specials + 256 bytes + 95 ASCII).
constexpr int64_t kSynthMinVocab = 3 + 256 + 95;

/// Writes the minimal vocabulary of `n_vocab` tokens (tokenizer.ggml.model "llama", tokens,
/// scores, token_type, bos/eos/unk ids, add_bos_token true, add_eos_token false). Throws
/// SynthError when n_vocab < kSynthMinVocab. `arch`: general.architecture (see above).
void synth_minimal_vocab(gguf::Writer& w, int64_t n_vocab, std::string_view arch = {});

/// Smallest vocabulary synth_wordpiece_vocab can write (its fixed tokens, see there).
constexpr int64_t kSynthMinWordPieceVocab = 320;

/// Writes a WordPiece vocabulary of `n_vocab` tokens (tokenizer.ggml.model "bert"), laid out as
/// BERT's uncased vocabularies are: 0 "[PAD]", 1 … 99 "[unused0]" … "[unused98]", 100
/// "[UNK]", 101 "[CLS]", 102 "[SEP]", 103 "[MASK]" (control; BOS / CLS = 101, separator 102,
/// unknown 100, padding 0, mask 103), then for every printable ASCII character except space and
/// A–Z (the tokenizer lowercases) a word-initial piece "▁c" (U+2581 marks a word start in GGUF
/// WordPiece vocabularies) and a continuation piece "c", then some whole words and suffixes
/// ("▁once", "▁robot", "ing", …) so that the longest-match rule matters, then "[unusedN]"
/// fillers up to n_vocab (normal; unreachable, since '[' is split off as punctuation). Any ASCII
/// text tokenizes; other characters that are not stripped (CJK, …) become [UNK]. Also
/// tokenizer.ggml.token_type_count 2, add_bos_token true, add_eos_token false. Throws
/// SynthError when n_vocab < kSynthMinWordPieceVocab.
void synth_wordpiece_vocab(gguf::Writer& w, int64_t n_vocab);

/// Copies every `tokenizer.*` key of `from` into `w` and returns the token count
/// (tokenizer.ggml.tokens). Throws SynthError when `from` has no tokenizer.ggml.tokens array.
int64_t synth_copy_vocab(const gguf::File& from, gguf::Writer& w);

}  // namespace kvrun
