// run.cpp — the default mode: complete a prompt (-p, -f, or piped stdin), streaming the
// continuation or printing one JSON object (--json); with no prompt on a terminal (or -i), the
// chat REPL (repl.cpp).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "repl.h"
#include "session.h"
#include "text/chat_template.h"

namespace kvrun::tools {
namespace {

/// The --json "stop" names of completion mode (documented in the README): "eog", "limit",
/// "context_full", "interrupted".
const char* cli_stop_name(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return "limit";
    case FinishReason::kCancelled:
      return "interrupted";
    default:
      return finish_reason_name(r);
  }
}

nlohmann::ordered_json result_json(const Tokenizer& tok, const std::vector<int32_t>& prompt,
                                   const GenerateResult& r) {
  nlohmann::ordered_json j;
  j["prompt_tokens"] = prompt;
  j["tokens"] = r.tokens;
  j["text"] = r.text;
  j["stop"] = cli_stop_name(r.stop);
  j["timings"] = {{"prompt_n", r.timings.n_prompt},       {"prompt_ms", r.timings.prompt_ms},
                  {"prompt_tps", r.timings.prompt_tps()}, {"gen_n", r.timings.n_gen},
                  {"gen_ms", r.timings.gen_ms},           {"gen_tps", r.timings.gen_tps()}};
  if (!r.probs.empty()) {
    nlohmann::ordered_json probs = nlohmann::ordered_json::array();
    for (const auto& pos : r.probs) {
      nlohmann::ordered_json top = nlohmann::ordered_json::array();
      for (const TokenLogprob& p : pos)
        top.push_back(
            {{"id", p.id}, {"token", tok.token_to_piece(p.id, true)}, {"logprob", p.logprob}});
      probs.push_back(top);
    }
    j["probs"] = probs;
  }
  return j;
}

int complete(const RunOptions& opt, Loaded& l, std::shared_ptr<const Grammar> grammar) {
  const std::vector<int32_t> prompt = l.tok.tokenize(opt.prompt, true, true);
  if (prompt.empty()) throw ContextError("the prompt is empty");
  if (int64_t(prompt.size()) > l.ctx->n_ctx())
    throw ContextError("the prompt is " + std::to_string(prompt.size()) +
                       " tokens but the context holds " + std::to_string(l.ctx->n_ctx()) +
                       " (raise -c)");
  Sampler sampler(opt.sampling);
  GenerateParams gp;
  gp.n_predict = opt.n_predict;
  gp.n_probs = opt.json ? opt.n_probs : 0;
  gp.ignore_eos = opt.ignore_eos;
  gp.grammar = std::move(grammar);
  InterruptGuard guard;
  PieceSink sink;
  if (!opt.json)
    sink = [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    };
  // Blocks of the prompt's prefix found in the persistent prefix cache (--kv-cache-dir) are not
  // computed again; the sampler still sees every prompt token.
  const int64_t reused = l.ctx->reuse_prefix(prompt);
  for (int64_t i = 0; i < reused; ++i) sampler.accept(prompt[size_t(i)]);
  GenerateResult r = generate(*l.ctx, l.tok, sampler, std::span(prompt).subspan(size_t(reused)), gp,
                              sink, &g_interrupted);
  const KvSequence& seq = l.ctx->sequence();
  const KvCache& cache = l.ctx->cache();
  const int64_t blocks_fast = seq.n_fast_blocks();
  const int64_t blocks_slow = int64_t(seq.block_table().size()) - seq.n_released() - blocks_fast;
  const KvTierStats ts = cache.tier_stats();
  if (opt.json) {
    nlohmann::ordered_json j = result_json(l.tok, prompt, r);
    j["kv"] = {{"n_tokens", seq.n_tokens()},
               {"prompt_tokens_reused", reused},
               {"blocks", int64_t(seq.block_table().size()) - seq.n_released()},
               {"blocks_released", seq.n_released()},
               {"block_size", cache.block_size()},
               {"bytes_per_token", cache.bytes_per_token()},
               {"bytes_held", seq.bytes_held()},
               {"blocks_fast", blocks_fast},
               {"blocks_slow", blocks_slow},
               {"moves_out", ts.moves_out},
               {"moves_in", ts.moves_in}};
    if (cache.window() > 0)  // window tables: the windowed layers' blocks (in bytes_held too)
      j["kv"]["window"] = {{"blocks", seq.n_window_blocks()},
                           {"blocks_released", seq.n_window_released()},
                           {"bytes_per_block", cache.window_bytes_per_block()}};
    // A token's piece may be part of a UTF-8 sequence (byte tokens like <0xE2>): such bytes are
    // written as U+FFFD; "tokens" keeps the exact ids.
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
    print_timings(r.timings);
    std::fprintf(stderr,
                 "kvrun: KV cache: %lld tokens in %lld blocks of %lld, %s held (%lld bytes)\n",
                 (long long)seq.n_tokens(),
                 (long long)(int64_t(seq.block_table().size()) - seq.n_released()),
                 (long long)cache.block_size(), format_bytes(seq.bytes_held()).c_str(),
                 (long long)seq.bytes_held());
    if (cache.window() > 0)
      std::fprintf(stderr,
                   "kvrun: window tables: %lld windowed layers hold %lld blocks (%lld given back "
                   "behind the window of %lld)\n",
                   (long long)cache.n_window_layers(), (long long)seq.n_window_blocks(),
                   (long long)seq.n_window_released(), (long long)cache.window());
    if (seq.n_released() > 0)
      std::fprintf(stderr,
                   "kvrun: %lld blocks before the sliding window (%lld tokens) were given back\n",
                   (long long)seq.n_released(), (long long)l.ctx->release_window());
    if (ts.n_slow > 0)
      std::fprintf(stderr,
                   "kvrun: KV tiers: %lld blocks fast (%s), %lld in %s (%s); %lld blocks moved "
                   "out, %lld back\n",
                   (long long)blocks_fast,
                   format_bytes(blocks_fast * cache.bytes_per_block()).c_str(),
                   (long long)blocks_slow, cache.offload_path().c_str(),
                   format_bytes(blocks_slow * cache.bytes_per_block()).c_str(),
                   (long long)ts.moves_out, (long long)ts.moves_in);
    if (reused > 0)
      std::fprintf(stderr, "kvrun: %lld prompt tokens taken from the prefix cache\n",
                   (long long)reused);
  }
  return 0;
}

std::string read_all(std::istream& in) {
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

int cmd_run(const RunOptions& opt_in) {
  RunOptions opt = opt_in;
  try {
    check_chat_template_options(opt.chat_template, opt.chat_template_kwargs);
    if (!opt.prompt_file.empty()) {
      std::ifstream f(opt.prompt_file, std::ios::binary);
      if (!f) throw std::runtime_error("cannot read " + opt.prompt_file);
      opt.prompt = read_all(f);
    } else if (!opt.has_prompt && !opt.interactive && !isatty(STDIN_FILENO)) {
      opt.prompt = read_all(std::cin);  // piped stdin without -i is a prompt
      opt.has_prompt = true;
    }
    std::shared_ptr<const Grammar> grammar;
    try {  // a bad grammar is a usage error: one line, exit 2, before the model loads
      grammar = compile_grammar_source(opt.grammar);
      if (grammar && (!opt.has_prompt || opt.interactive))
        throw GrammarSourceError("a grammar applies to completions (-p, -f), not the chat REPL");
    } catch (const GrammarSourceError& e) {
      std::fprintf(stderr, "kvrun: error: %s\n", e.what());
      return 2;
    }
    Loaded l = load(opt);
    if (opt.has_prompt && !opt.interactive) return complete(opt, l, std::move(grammar));
    return run_repl(opt, l);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvrun: error: %s\n", e.what());
    return 1;
  }
}

int cmd_list_chat_templates() {
  for (const std::string& name : chat_template_names()) std::printf("%s\n", name.c_str());
  return 0;
}

}  // namespace kvrun::tools
