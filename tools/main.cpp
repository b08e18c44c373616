// main.cpp — the kvrun binary: parses the command line (CLI11) and runs a subcommand.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <tuple>

#include "commands.h"
#include "embed.h"
#include "model_source.h"

namespace {

using kvrun::tools::RunOptions;

void add_run_options(CLI::App& app, RunOptions& o) {
  app.add_option("-m,--model", o.model, "GGUF model file");
  app.add_option("-p,--prompt", o.prompt, "prompt to complete (prints the continuation)");
  app.add_option("-f,--file", o.prompt_file, "read the prompt from a file");
  app.add_flag("-i,--interactive", o.interactive, "chat REPL even when stdin is not a terminal");
  app.add_option("--system", o.system, "system prompt of the chat");
  app.add_option("--chat-template", o.chat_template,
                 "chat template for the REPL instead of the model's: a built-in name "
                 "(--chat-template list) or a Jinja file");
  app.add_option("--chat-template-kwargs", o.chat_template_kwargs,
                 "extra chat template variables as a JSON object, e.g. "
                 "'{\"enable_thinking\": false}'");
  app.add_option("-n,--n-predict", o.n_predict, "tokens to generate (-1: until end of text)");
  app.add_option("-c,--ctx-size", o.n_ctx,
                 "context size in tokens (default: min(4096, n_ctx_train))")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  app.add_option("-b,--batch-size", o.n_batch, "prompt tokens per prefill batch")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  app.add_option("-t,--threads", o.n_threads, "threads (default: physical cores)")
      ->check(CLI::Range(0, 1024));
  app.add_flag("--json", o.json, "print one JSON object instead of streaming text");
  app.add_option("--n-probs", o.n_probs, "with --json: top-K logprobs per generated token")
      ->check(CLI::Range(0, 1 << 20));
  app.add_flag("--ignore-eos", o.ignore_eos, "do not stop at end-of-generation tokens");
  app.add_flag("--verbose", o.verbose, "print more detail on stderr");
  app.add_flag("--log-disable", o.log_disable,
               "no progress lines (loading, long prompts); they show only on a terminal anyway");
  auto& s = o.sampling;
  app.add_option("--temp", s.temp, "temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", s.top_k, "top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", s.top_p, "top-p (1: off)")->capture_default_str();
  app.add_option("--min-p", s.min_p, "min-p (0: off)")->capture_default_str();
  app.add_option("--repeat-last-n", s.repeat_last_n, "penalty window in tokens (0: off, -1: all)")
      ->capture_default_str();
  app.add_option("--repeat-penalty", s.repeat_penalty, "repetition penalty (1: off)")
      ->capture_default_str();
  app.add_option("--presence-penalty", s.presence_penalty, "presence penalty")
      ->capture_default_str();
  app.add_option("--frequency-penalty", s.frequency_penalty, "frequency penalty")
      ->capture_default_str();
  app.add_option("-s,--seed", s.seed, "random seed (default: random)");
  add_grammar_options(app, o.grammar);
  add_kv_cache_options(app, o.kv);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvrun::tools;
  CLI::App app{"kvrun — local LLM inference built around the KV cache", "kvrun"};
  app.require_subcommand(0, 1);

  RunOptions run;
  add_run_options(app, run);

  InfoOptions info;
  CLI::App* info_cmd = app.add_subcommand("info", "what a model is and what its KV cache costs");
  info_cmd->add_option("-m,--model", info.model, "GGUF model file")->required();
  info_cmd
      ->add_option("-c,--ctx-size", info.n_ctx,
                   "context length for the KV table (default: the model's n_ctx_train)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 32));
  info_cmd->add_flag("--json", info.json, "print one JSON object");
  info_cmd->add_option("--kv-mem", info.kv_mem,
                       "fast KV tier to plan against, e.g. 8G (default: this machine's available "
                       "memory less the weights)");
  info_cmd->add_flag("--kv-host-tier", info.kv_host_tier,
                     "with -ngl: plan the GPU's KV rows at --kv-mem, the rest in host memory "
                     "(as the run's --kv-host-tier)");
  add_device_options(*info_cmd, info.dev);

  PerplexityOptions ppl;
  CLI::App* ppl_cmd = add_perplexity_command(app, ppl);
  BenchOptions bench;
  CLI::App* bench_cmd = add_bench_command(app, bench);
  ServeOptions serve;
  CLI::App* serve_cmd = add_serve_command(app, serve);
  BatchOptions batch;
  CLI::App* batch_cmd = add_batch_command(app, batch);
  SynthOptions synth;
  CLI::App* synth_cmd = add_synth_command(app, synth);
  kvrun::tools::EmbedOptions embed;
  CLI::App* embed_cmd = kvrun::tools::add_embed_command(app, embed);
  kvrun::tools::PullOptions pull;
  CLI::App* pull_cmd = kvrun::tools::add_pull_command(app, pull);
  // -hf / -mu beside -m (model_source.h).
  kvrun::tools::ModelSource run_src, serve_src, batch_src, embed_src;
  kvrun::tools::add_model_source_options(app, run_src);
  kvrun::tools::add_model_source_options(*serve_cmd, serve_src);
  kvrun::tools::add_model_source_options(*batch_cmd, batch_src);
  kvrun::tools::add_model_source_options(*embed_cmd, embed_src);

  rewrite_short_aliases(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  // The device options of the command that runs: --list-devices, then one clear line (exit 2)
  // for a placement this build or machine cannot honour, before any model is read.
  const DeviceOptions& dev = info_cmd->parsed()    ? info.dev
                             : ppl_cmd->parsed()   ? ppl.kv.dev
                             : bench_cmd->parsed() ? bench.kv.dev
                             : serve_cmd->parsed() ? serve.kv.dev
                             : batch_cmd->parsed() ? batch.kv.dev
                             : embed_cmd->parsed() ? embed.kv.dev
                                                   : run.kv.dev;
  if (dev.list_devices) return print_devices();
  if (pull_cmd->parsed()) return kvrun::tools::cmd_pull(pull);
  try {
    apply_cpu_options(dev);  // --kernels, --thp: every command (info reports them)
  } catch (const DeviceOptionError& e) {
    std::fprintf(stderr, "kvrun: %s\n", e.what());
    return 2;
  }
  if (!synth_cmd->parsed() && !info_cmd->parsed()) {  // info plans -ngl without a GPU too
    try {
      resolve_device_options(dev);
    } catch (const DeviceOptionError& e) {
      std::fprintf(stderr, "kvrun: %s\n", e.what());
      return 2;
    }
  }

  if (info_cmd->parsed()) return cmd_info(info);
  if (ppl_cmd->parsed()) return cmd_perplexity(ppl);
  if (bench_cmd->parsed()) return cmd_bench(bench);
  for (auto [cmd, src, model, name] : {std::tuple{serve_cmd, &serve_src, &serve.model, "serve"},
                                       std::tuple{batch_cmd, &batch_src, &batch.model, "batch"},
                                       std::tuple{embed_cmd, &embed_src, &embed.model, "embed"}}) {
    if (!cmd->parsed()) continue;
    if (int rc = kvrun::tools::resolve_model_source(*src, *model, name)) return rc;
    if (model->empty()) {
      std::fprintf(stderr, "kvrun %s: a model is required: -m FILE, -hf REPO or -mu URL\n", name);
      return 2;
    }
  }
  if (serve_cmd->parsed()) return cmd_serve(serve);
  if (batch_cmd->parsed()) return cmd_batch(batch);
  if (embed_cmd->parsed()) return kvrun::tools::cmd_embed(embed);
  if (synth_cmd->parsed()) return cmd_synth(synth);
  if (run.chat_template == "list") return cmd_list_chat_templates();
  if (int rc = kvrun::tools::resolve_model_source(run_src, run.model, "")) return rc;
  if (run.model.empty()) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  run.has_prompt = app.count("--prompt") > 0 || !run.prompt_file.empty();
  return cmd_run(run);
}
