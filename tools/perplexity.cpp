// perplexity.cpp — `kvrun perplexity`: llama-perplexity's measurement of a text
// (src/eval/perplexity.h), with KL divergence against a saved base run. Also the command-line
// helpers shared with `kvrun bench`: -ctk / -ctv.
#include "eval/perplexity.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "commands.h"
#include "engine/context.h"
#include "engine/model.h"
#include "kv_layout.h"
#include "text/tokenizer.h"

namespace kvrun::tools {

CLI::App* add_perplexity_command(CLI::App& app, PerplexityOptions& o) {
  CLI::App* cmd =
      app.add_subcommand("perplexity", "perplexity of a text (llama-perplexity's method)");
  cmd->add_option("-m,--model", o.model, "GGUF model file")->required();
  cmd->add_option("-f,--file", o.text_file, "text to score")->required();
  cmd->add_option("-c,--ctx-size", o.n_ctx,
                  "tokens per chunk (default: the KL base file's, else min(512, n_ctx_train))")
      ->check(CLI::Range(int64_t(4), int64_t(1) << 24));
  cmd->add_option("-b,--batch-size", o.n_batch, "prefill batch (clamped to -c)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24))
      ->capture_default_str();
  cmd->add_option("--chunks", o.max_chunks, "evaluate at most N chunks (0: all)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  cmd->add_option("-t,--threads", o.n_threads, "threads (default: physical cores)")
      ->check(CLI::Range(0, 1024));
  add_kv_cache_options(*cmd, o.kv);
  cmd->add_flag("--json", o.json, "print one JSON object");
  cmd->add_option("--kl-divergence-base", o.kld_base,
                  "save this run's log-probabilities to FILE (4 bytes × vocabulary per scored "
                  "token) for a later --kl-divergence");
  cmd->add_option("--kl-divergence", o.kld,
                  "compare this run against a base FILE saved by --kl-divergence-base");
  return cmd;
}

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

/// The chunk size: -c, else the base file's, else min(512, n_ctx_train).
int64_t choose_n_ctx(const PerplexityOptions& opt, const Hparams& hp) {
  if (opt.n_ctx > 0) return opt.n_ctx;
  if (!opt.kld.empty()) return read_kld_header(opt.kld).n_ctx;
  return hp.n_ctx_train > 0 ? std::min<int64_t>(512, hp.n_ctx_train) : 512;
}

nlohmann::ordered_json kld_json(const KldResult& k) {
  return {{"count", k.count},
          {"kld_mean", k.kld_mean},
          {"kld_err", k.kld_err},
          {"kld_median", k.kld_median},
          {"kld_p99", k.kld_p99},
          {"kld_max", k.kld_max},
          {"top1", k.top1},
          {"top1_err", k.top1_err},
          {"ppl", k.ppl},
          {"ppl_base", k.ppl_base},
          {"delta_ppl", k.delta_ppl},
          {"delta_ppl_err", k.delta_ppl_err},
          {"rms_dp", k.rms_dp}};
}

void print_kld(const KldResult& k) {
  std::printf("\n====== KL divergence against the base ======\n");
  std::printf("Positions       : %lld\n", (long long)k.count);
  std::printf("PPL(this)       : %10.6f\n", k.ppl);
  std::printf("PPL(base)       : %10.6f\n", k.ppl_base);
  std::printf("PPL(this)-base  : %10.6f +/- %10.6f\n", k.delta_ppl, k.delta_ppl_err);
  std::printf("Mean    KLD     : %10.6f +/- %10.6f\n", k.kld_mean, k.kld_err);
  std::printf("Median  KLD     : %10.6f\n", k.kld_median);
  std::printf("99.0%%   KLD     : %10.6f\n", k.kld_p99);
  std::printf("Maximum KLD     : %10.6f\n", k.kld_max);
  std::printf("RMS dp          : %6.3f %%\n", 100.0 * k.rms_dp);
  std::printf("Same top-1      : %6.3f +/- %5.3f %%\n", 100.0 * k.top1, 100.0 * k.top1_err);
}

void print_json(const PerplexityOptions& opt, const Context& ctx, const PerplexityResult& r,
                const KldResult* kld) {
  nlohmann::ordered_json j;
  j["model"] = opt.model;
  j["text"] = opt.text_file;
  j["n_ctx"] = ctx.n_ctx();
  j["n_batch"] = ctx.n_batch();
  j["cache_type_k"] = opt.kv.type_k;
  j["cache_type_v"] = opt.kv.type_v;
  j["ppl"] = r.ppl;
  j["ppl_err"] = r.ppl_err;
  j["n_chunks"] = r.n_chunks;
  j["n_tokens"] = r.n_tokens;
  j["n_tokens_scored"] = r.n_tokens_scored;
  j["nll_mean"] = r.nll_mean;
  j["nll_sd"] = r.nll_sd;
  j["chunk_ppl"] = r.chunk_ppl;
  j["seconds"] = r.seconds;
  j["tokens_per_second"] = r.seconds > 0 ? double(r.n_chunks * ctx.n_ctx()) / r.seconds : 0.0;
  if (!opt.kld_base.empty()) j["kl_divergence_base"] = opt.kld_base;
  if (kld) j["kl_divergence"] = kld_json(*kld);
  std::printf("%s\n", j.dump().c_str());
}

int run_perplexity(const PerplexityOptions& opt) {
  const std::string text = read_file(opt.text_file);
  const AutoFit fit = auto_fit(opt.kv, opt.model, opt.n_ctx > 0 ? opt.n_ctx : 512, opt.n_batch);
  Model model = Model::load(opt.model, resolve_device_options(opt.kv.dev, -1, &fit));
  const Tokenizer tok = Tokenizer::from_gguf(model.file());
  const int64_t n_ctx = choose_n_ctx(opt, model.hparams());
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_batch = std::min(opt.n_batch, n_ctx);
  cp.n_threads = opt.n_threads;
  apply_kv_cache_options(opt.kv, opt.model, cp);
  const PerplexityInput in = prepare_perplexity(tok, text, n_ctx, opt.max_chunks);
  const KldHeader header = KldHeader::of(tok, in, model.hparams().n_vocab);
  std::unique_ptr<KldComparer> cmp;  // opened first: a mismatched base fails before any work
  if (!opt.kld.empty()) cmp = std::make_unique<KldComparer>(opt.kld, header);
  std::unique_ptr<KldBaseWriter> writer;
  if (!opt.kld_base.empty()) writer = std::make_unique<KldBaseWriter>(opt.kld_base, header);
  Context ctx(model, cp);
  if (!opt.json)
    std::fprintf(stderr,
                 "perplexity: %zu tokens, %lld chunks of n_ctx=%lld, batch_size=%lld, "
                 "%d threads, KV %s/%s\n",
                 in.tokens.size(), (long long)in.n_chunks, (long long)n_ctx,
                 (long long)ctx.n_batch(), ctx.n_threads(), opt.kv.type_k.c_str(),
                 opt.kv.type_v.c_str());
  ChunkObserver observer = [&](const ChunkLogits& c) {
    if (writer) writer->write_chunk(c);
    if (cmp) cmp->compare_chunk(c);
  };
  ChunkProgress progress;
  if (!opt.json)
    progress = [](int64_t chunk, double ppl) {
      std::printf("[%lld]%.4f,", (long long)chunk + 1, ppl);
      std::fflush(stdout);
    };
  const PerplexityResult r = compute_perplexity(ctx, in, observer, progress);
  if (writer) writer->finish();
  std::optional<KldResult> kld;
  if (cmp) kld = cmp->result();
  if (opt.json) {
    print_json(opt, ctx, r, kld ? &*kld : nullptr);
    return 0;
  }
  std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
  if (kld) print_kld(*kld);
  std::fprintf(stderr, "perplexity: %lld tokens scored, %.2f s (%.1f t/s)%s%s\n",
               (long long)r.n_tokens_scored, r.seconds,
               r.seconds > 0 ? double(r.n_chunks * n_ctx) / r.seconds : 0.0,
               writer ? ", log-probs saved to " : "", writer ? opt.kld_base.c_str() : "");
  return 0;
}

}  // namespace

int cmd_perplexity(const PerplexityOptions& opt) {
  try {
    if (!opt.kld.empty() && !opt.kld_base.empty() && opt.kld == opt.kld_base)
      throw std::invalid_argument("--kl-divergence and --kl-divergence-base name the same file");
    return run_perplexity(opt);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kvrun: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace kvrun::tools
