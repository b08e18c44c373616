// serve_fim.h — the fill-in-the-middle prompt of `kvrun serve`: /infill (input_prefix,
// input_suffix, input_extra, prompt), /v1/completions' `suffix` and ollama's `suffix` all build
// their prompt here, so the editor plugins (llama.vim, llama.vscode) see one layout whichever
// endpoint they use. Layout and budgets follow llama.cpp's server (examples/server/utils.hpp,
// format_infill); the field by field reference is docs/http-api.md ("POST /infill").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace kvrun::tools {

/// One file of repository context (an `input_extra` entry): its name and its text.
struct FimChunk {
  std::string filename;  ///< "" when the request gave none
  std::string text;
};

/// What a fill-in-the-middle request gives.
struct FimInput {
  std::string prefix;           ///< text before the cursor (cut from its start to fit)
  std::string suffix;           ///< text after the cursor (cut from its end to fit)
  std::string prompt;           ///< text right before the cursor, after the prefix; never cut
  std::vector<FimChunk> extra;  ///< other files, oldest first (cut from the front to fit)
};

/// The sizes the layout fits in (tokens).
struct FimBudget {
  int64_t n_batch = 0;    ///< prefix + prompt + suffix fit one batch (clamped to n_ctx)
  int64_t n_ctx = 0;      ///< a session's context
  int64_t n_predict = 0;  ///< tokens the request may generate (< 0 counts as 0)
};

/// The order of the FIM prompt's parts (llama.cpp's --spm-infill chooses SPM).
enum class FimOrder {
  kPsm,  ///< prefix-suffix-middle: FIM_PRE prefix FIM_SUF suffix FIM_MID (the default)
  kSpm,  ///< suffix-prefix-middle: FIM_SUF suffix FIM_PRE prefix FIM_MID (some models, e.g.
         ///< trained with SPM as in Bavarian et al. 2022, arXiv 2207.14255, §3)
};

/// True when the vocabulary has the three FIM tokens (prefix, suffix, middle) a FIM prompt
/// needs; the repo-level tokens (fim_repo, fim_file_sep) are optional.
bool has_fim_tokens(const Tokenizer& tok);

/// The fill-in-the-middle prompt (PSM order by default), token ids:
///   [BOS] extra [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]
/// where `extra`, with the repo-level tokens, is
///   [FIM_REP] "myproject\n" ([FIM_SEP] filename "\n" text)... [FIM_SEP] "filename\n"
/// (the repo-name line only with FIM_REP; a chunk without a name is called "tmp") and, without
/// FIM_SEP, each chunk as "// filename\n" text "\n" (no comment line for a chunk without a
/// name). BOS only when the vocabulary adds one. Budgets, as llama.cpp's server takes them: the
/// prefix keeps its last 3·(n_batch/4) tokens, the suffix its first n_batch/4 − 2 − |prompt|
/// tokens (none when that is negative), the extra context its last
/// n_ctx − n_batch − 2·n_predict tokens (none when that is negative), n_batch taken as
/// min(n_batch, n_ctx). Text is tokenized without special tokens except in `prompt`. Layout:
/// Qwen2.5-Coder's repo-level format (arXiv 2409.12186) as llama.cpp's server writes it,
/// except that BOS comes first rather than after the extra context. The caller checks
/// has_fim_tokens. With FimOrder::kSpm the two parts swap, as llama.cpp's server lays out
/// --spm-infill: [BOS] extra [FIM_SUF] suffix [FIM_PRE] prefix prompt [FIM_MID] (same budgets).
std::vector<int32_t> fim_prompt(const Tokenizer& tok, const FimInput& in, const FimBudget& b,
                                FimOrder order = FimOrder::kPsm);

}  // namespace kvrun::tools
