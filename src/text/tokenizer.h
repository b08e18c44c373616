// tokenizer.h — text ↔ token ids for the tokenizers stored in GGUF files.
//
// Three tokenizer models, named by `tokenizer.ggml.model` (GGUF spec, docs/gguf.md, "Tokenizer"):
//   "llama"  SentencePiece-style BPE over token scores, spaces written as U+2581, byte fallback
//            tokens <0xXX> (Llama 1/2, Mistral, Phi-3, TinyLlama, stories*);
//   "gpt2"   byte-level BPE with ranked merges and a regex pre-tokenizer chosen by
//            `tokenizer.ggml.pre` (GPT-2, Llama 3, Qwen 2, DeepSeek, Falcon, StarCoder, ...);
//   "bert"   WordPiece (BERT-style embedding models).
// The behaviour — defaults for absent keys, special-token splitting, the pre-tokenizer regexes,
// detokenization clean-up — matches llama.cpp (src/llama-vocab.cpp, commit c392e509), so that
// ids agree with llama.cpp's for the same model file. The implementation is our own.
//
// Errors: construction throws std::runtime_error with a message naming the offending key when
// tokenizer metadata is missing or invalid. Tokenizing does not throw on bad input: malformed
// UTF-8 is read as U+FFFD per bad byte (only a PCRE2 resource failure, such as its 20 MB default
// heap limit, would throw std::runtime_error). Ids passed to the id-taking functions must lie in
// [0, n_vocab()); others throw std::out_of_range.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvrun {

namespace gguf {
class File;
}

/// Tokenizer metadata as stored under `tokenizer.ggml.*` in a GGUF file. Optional fields are
/// the keys that may be absent; empty vectors mean "key absent".
struct TokenizerConfig {
  std::string model;                 ///< tokenizer.ggml.model: "llama", "gpt2" or "bert"
  std::string pre;                   ///< tokenizer.ggml.pre ("" when absent)
  std::string general_name;          ///< general.name (selects Phi-3's strip attributes)
  std::vector<std::string> tokens;   ///< tokenizer.ggml.tokens (required)
  std::vector<float> scores;         ///< tokenizer.ggml.scores (SPM merge priorities)
  std::vector<int32_t> token_types;  ///< tokenizer.ggml.token_type (1 normal ... 6 byte)
  std::vector<std::string> merges;   ///< tokenizer.ggml.merges, "left right" (gpt2: required)
  // Special token ids (*_token_id keys). Values outside [0, n_vocab) are ignored, as llama.cpp
  // does (converters write 0xFFFFFFFF for "none").
  std::optional<int64_t> bos, eos, eot, eom, unk, sep, pad, mask;
  std::optional<int64_t> fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
  std::optional<bool> add_bos;           ///< tokenizer.ggml.add_bos_token
  std::optional<bool> add_eos;           ///< tokenizer.ggml.add_eos_token
  std::optional<bool> add_space_prefix;  ///< tokenizer.ggml.add_space_prefix
};

/// A loaded tokenizer. Immutable and thread-safe after construction; movable, not copyable.
class Tokenizer {
 public:
  /// The algorithm family.
  enum class Kind { kSpm, kBpe, kWpm };

  /// Reads TokenizerConfig from `file`'s metadata and builds the tokenizer. Throws
  /// std::runtime_error ("tokenizer: ...") when tokenizer.ggml.model or .tokens is missing, a key
  /// has the wrong type, array lengths disagree, the model or pre-tokenizer is unknown, or a
  /// gpt2 vocabulary has no merges.
  static Tokenizer from_gguf(const gguf::File& file);
  /// Builds the tokenizer from explicit metadata (same checks as from_gguf).
  static Tokenizer from_config(const TokenizerConfig& config);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Token ids of UTF-8 `text`. With `add_special`, BOS/EOS are added as add_bos()/add_eos()
  /// say (WPM: always [CLS] ... [SEP]). With `parse_special`, text equal to a control token's
  /// text (e.g. "<s>", "<|endoftext|>") becomes that token; user-defined tokens are always split
  /// out. Longer special texts are matched first. SPM prefixes a space (add_space_prefix) to the
  /// text and to every piece of text that follows a special token.
  std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const;

  /// The bytes token `id` stands for: SPM U+2581 → ' ' and <0xXX> → that byte; BPE GPT-2
  /// characters → bytes; user-defined tokens verbatim. Control and unknown tokens give their
  /// text when `special`, else "". May be a partial UTF-8 sequence.
  std::string token_to_piece(int32_t id, bool special) const;

  /// Concatenated pieces of `ids`. `remove_special` drops a leading BOS / trailing EOS that the
  /// tokenizer would add (and then keeps an SPM leading space); otherwise the leading space added
  /// by add_space_prefix is removed. `unparse_special` renders control tokens as their text.
  /// BPE/WPM vocabularies with clean-up (clean_spaces) drop the space in " ?", " !", " .", " ,",
  /// " 's", " 'm", " 're", " 've" and around a lone " ' " (HF clean_up_tokenization_spaces).
  std::string detokenize(const std::vector<int32_t>& ids, bool remove_special,
                         bool unparse_special = false) const;

  int32_t n_vocab() const;
  Kind kind() const;
  const std::string& model_name() const;  ///< "llama", "gpt2" or "bert"
  const std::string& pre_name() const;    ///< tokenizer.ggml.pre as given ("" when absent)

  // Special ids; -1 when the vocabulary has none.
  int32_t bos() const;
  int32_t eos() const;
  int32_t eot() const;  ///< end of turn (key, or found by text: "<|eot_id|>", "<|im_end|>", ...)
  int32_t unk() const;
  int32_t sep() const;
  int32_t pad() const;
  int32_t fim_prefix() const;  ///< fill-in-the-middle prefix ("<|fim_prefix|>", "<PRE>", ...)
  int32_t fim_suffix() const;
  int32_t fim_middle() const;
  /// Repo-level FIM: the repository-name token ("<|repo_name|>", ...) and the file separator
  /// ("<|file_sep|>"), as in Qwen2.5-Coder's layout (arXiv 2409.12186).
  int32_t fim_repo() const;
  int32_t fim_file_sep() const;

  bool add_bos() const;           ///< tokenize(add_special) adds BOS
  bool add_eos() const;           ///< tokenize(add_special) adds EOS
  bool add_space_prefix() const;  ///< SPM prefixes a space

  /// The token's stored text (not decoded).
  const std::string& token_text(int32_t id) const;
  /// True for control tokens (type 3, plus tokens llama.cpp promotes to control, e.g. EOT).
  bool is_control(int32_t id) const;
  /// True for tokens that end generation (EOS, EOT, EOM, FIM pad/repo/sep).
  bool is_eog(int32_t id) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvrun
