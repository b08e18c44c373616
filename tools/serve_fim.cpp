// serve_fim.cpp — see serve_fim.h.
#include "serve_fim.h"

#include <algorithm>

namespace kvrun::tools {

namespace {

using Tokens = std::vector<int32_t>;

void append(Tokens& out, const Tokens& more) { out.insert(out.end(), more.begin(), more.end()); }

/// The repository context before FIM_PRE (see fim_prompt).
Tokens extra_context(const Tokenizer& tok, const std::vector<FimChunk>& extra) {
  const auto text = [&](const std::string& s) { return tok.tokenize(s, false, false); };
  const int32_t rep = tok.fim_repo(), sep = tok.fim_file_sep();
  Tokens out;
  if (rep >= 0) {
    out.push_back(rep);
    append(out, text("myproject\n"));
  }
  for (const FimChunk& c : extra) {
    if (sep >= 0) {
      out.push_back(sep);
      append(out, text((c.filename.empty() ? "tmp" : c.filename) + "\n"));
      append(out, text(c.text));
    } else {
      std::string s = c.filename.empty() ? "" : "// " + c.filename + "\n";
      s += c.text;
      if (!s.empty() && s.back() != '\n') s += '\n';
      append(out, text(s));
    }
  }
  if (sep >= 0) {  // the file being edited
    out.push_back(sep);
    append(out, text("filename\n"));
  }
  return out;
}

}  // namespace

bool has_fim_tokens(const Tokenizer& tok) {
  return tok.fim_prefix() >= 0 && tok.fim_suffix() >= 0 && tok.fim_middle() >= 0;
}

std::vector<int32_t> fim_prompt(const Tokenizer& tok, const FimInput& in, const FimBudget& b,
                                FimOrder order) {
  const Tokens prompt = tok.tokenize(in.prompt, false, true);
  Tokens prefix = tok.tokenize(in.prefix, false, false);
  Tokens suffix = tok.tokenize(in.suffix, false, false);
  const Tokens extra = extra_context(tok, in.extra);

  const int64_t n_batch = std::max<int64_t>(0, std::min(b.n_batch, b.n_ctx));
  const int64_t n_predict = std::max<int64_t>(0, b.n_predict);
  const int64_t n_prefix = std::min<int64_t>(int64_t(prefix.size()), 3 * (n_batch / 4));
  const int64_t n_suffix = std::min<int64_t>(
      int64_t(suffix.size()), std::max<int64_t>(0, n_batch / 4 - 2 - int64_t(prompt.size())));
  const int64_t n_extra = std::min<int64_t>(
      int64_t(extra.size()), std::max<int64_t>(0, b.n_ctx - n_batch - 2 * n_predict));

  Tokens out;
  if (tok.add_bos() && tok.bos() >= 0) out.push_back(tok.bos());
  out.insert(out.end(), extra.end() - n_extra, extra.end());
  Tokens pre{tok.fim_prefix()}, suf{tok.fim_suffix()};
  pre.insert(pre.end(), prefix.end() - n_prefix, prefix.end());
  append(pre, prompt);
  suf.insert(suf.end(), suffix.begin(), suffix.begin() + n_suffix);
  append(out, order == FimOrder::kSpm ? suf : pre);
  append(out, order == FimOrder::kSpm ? pre : suf);
  out.push_back(tok.fim_middle());
  return out;
}

}  // namespace kvrun::tools
