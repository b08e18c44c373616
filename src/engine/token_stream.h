// token_stream.h — the one per-token path of every front end (kvrun -p, the REPL, serve,
// batch): sample → end-of-generation → UTF-8 → stop strings → limits. The engine feeds it each
// step's logits of a sequence; it says what text is safe to stream and when and why the
// generation ends. Context-driven loops (generate.h) and the Scheduler both use it, so their
// behaviour and their finish reasons cannot drift apart.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/logprobs.h"
#include "engine/sampler.h"
#include "engine/stop_strings.h"
#include "text/grammar.h"
#include "text/tokenizer.h"

namespace kvrun {

class GrammarTokens;
class TokenTrie;

/// Why a generation ended — one list for every front end.
enum class FinishReason {
  kEog,          ///< end-of-generation token (not part of the output)
  kStopString,   ///< a stop string appeared (not part of the output)
  kLength,       ///< n_predict tokens generated
  kContextFull,  ///< the sequence holds n_ctx tokens
  kCancelled,    ///< cancelled: Ctrl-C, Request::cancel (client gone), scheduler shutdown
  kTimeout,      ///< timeout_s passed
  kError,        ///< the request could not be served (e.g. KV cache full)
};

/// "eog", "stop", "length", "context_full", "cancelled", "timeout", "error".
const char* finish_reason_name(FinishReason r);

/// Buffers bytes and releases the longest prefix that is complete UTF-8 (a multi-byte character
/// split across tokens is held back until its last byte arrives).
class Utf8Stream {
 public:
  /// Appends `bytes`; returns what can be printed now.
  std::string push(std::string_view bytes);
  /// Whatever is still held (an incomplete sequence at the end of generation).
  std::string flush();

 private:
  std::string pending_;
};

/// Options of one generation.
struct TokenStreamParams {
  int64_t n_predict = -1;         ///< tokens to generate at most; < 0: until EOG or n_ctx
  int n_probs = 0;                ///< top-K logprobs recorded per generated token (0: none)
  bool ignore_eos = false;        ///< keep going past end-of-generation tokens
  std::vector<std::string> stop;  ///< stop strings (empty ones are ignored)
  /// Constrains the output to this grammar (GBNF, text/grammar.h): tokens that cannot continue
  /// a sentence are masked, end-of-generation is allowed only when the text is complete.
  std::shared_ptr<const Grammar> grammar;
  /// The vocabulary's token trie for the grammar (TokenTrie::build of the tokenizer; share one
  /// between generations). Built by the TokenStream when null.
  std::shared_ptr<const TokenTrie> grammar_vocab;
  /// > 0: the generation ends (kLength) at the first character of a line after a newline of the
  /// output that is not a space or tab when fewer than n_indent spaces and tabs precede it on its
  /// line (an empty line counts as indented 0); the output is cut before that character.
  /// llama.cpp's server's n_indent, for code completion at a given indentation.
  int n_indent = 0;
};

/// One sampled token as a front end sees it.
struct TokenStep {
  int32_t id = -1;                     ///< the sampled id (an EOG id when finish == kEog)
  std::string text;                    ///< text safe to stream now (complete UTF-8, no stop string)
  std::vector<TokenLogprob> top;       ///< top n_probs logprobs (n_probs > 0)
  float logprob = 0;                   ///< the sampled token's logprob (n_probs > 0)
  bool emitted = false;                ///< the token is part of the output (false for EOG)
  std::optional<FinishReason> finish;  ///< set when this token ends the generation
};

/// Sampling and text of one generation. The sampler is the caller's (it may have seen the
/// prompt through accept()).
class TokenStream {
 public:
  TokenStream(const Tokenizer& tok, Sampler& sampler, TokenStreamParams params);
  ~TokenStream();

  /// Samples the next token from `logits` [n_vocab] and accepts it; `n_past` is the tokens the
  /// sequence holds (the sampled one not yet included), `n_ctx` its limit. The result says what
  /// to stream and whether this ends the generation (EOG, a stop string, n_predict, a full
  /// context: the order llama.cpp's server checks them in). With a grammar whose text is
  /// complete and cannot go on, the generation ends as kEog; when the grammar allows no token
  /// of the vocabulary at all, as kError (error() says why).
  TokenStep next(std::span<const float> logits, int64_t n_past, int64_t n_ctx);
  /// Ends the generation for `why` (if next() did not already); returns the text still held
  /// (the UTF-8 tail and the stop-string look-behind, cut at a stop string found in it). The
  /// final reason (a held-back stop string may turn kLength into kStopString) is finish().
  std::string close(FinishReason why);
  /// Generated tokens (no EOG).
  int64_t n_generated() const { return n_gen_; }
  /// The reason once the generation ended.
  std::optional<FinishReason> finish() const { return finish_; }
  /// The stop string found ("" when none).
  const std::string& stop_word() const { return stop_.word(); }
  /// Why the generation ended with kError ("" otherwise).
  const std::string& error() const { return error_; }

 private:
  const Tokenizer& tok_;
  Sampler& sampler_;
  TokenStreamParams p_;
  Utf8Stream utf8_;
  StopMatcher stop_;
  int64_t n_gen_ = 0;
  std::optional<FinishReason> finish_;
  std::unique_ptr<GrammarTokens> grammar_;
  std::unique_ptr<TokenFilter> filter_;
  std::string error_;
  // n_indent: spaces and tabs so far at the start of a line after a newline of the output (-1:
  // not in a line's indentation).
  int line_indent_ = -1;
  bool cut_ = false;  // the output was cut by n_indent; nothing more is released
  /// `text` up to where n_indent ends the output (sets cut_ there).
  std::string apply_indent(std::string text);
};

}  // namespace kvrun
