// main.cpp — the kvrun binary: parses the command line (CLI11) and runs a subcommand.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "commands.h"

int main(int argc, char** argv) {
  using namespace kvrun::tools;
  CLI::App app{"kvrun — local LLM inference built around the KV cache", "kvrun"};
  app.require_subcommand(0, 1);

  RunOptions run;
  app.add_option("-m,--model", run.model, "GGUF model file")->check(CLI::ExistingFile);
  auto* prompt = app.add_option("-p,--prompt", run.prompt, "prompt to complete");

  InfoOptions info;
  CLI::App* info_cmd = app.add_subcommand("info", "what a model is and what its KV cache costs");
  info_cmd->add_option("-m,--model", info.model, "GGUF model file")->required();
  info_cmd
      ->add_option("-c,--ctx-size", info.n_ctx,
                   "context length for the KV table (default: the model's n_ctx_train)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 32));
  info_cmd->add_flag("--json", info.json, "print one JSON object");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (info_cmd->parsed()) return cmd_info(info);
  if (run.model.empty()) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  run.has_prompt = prompt->count() > 0;
  return cmd_run(run);
}
