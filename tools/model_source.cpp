// model_source.cpp — -hf / --hf-file / -mu and `kvrun pull` (see model_source.h).
#include "model_source.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "tools/pull/pull.h"

namespace kvrun::tools {

void add_model_source_options(CLI::App& cmd, ModelSource& src) {
  cmd.add_option("--hf-repo", src.hf_repo,
                 "(-hf) fetch the model from a Hugging Face repository: owner/name[:QUANT] "
                 "(default quant Q4_K_M; cache: $KVRUN_CACHE or ~/.cache/kvrun)");
  cmd.add_option("--hf-file", src.hf_file, "(-hff) the exact GGUF file of --hf-repo to fetch");
  cmd.add_option("--model-url", src.model_url, "(-mu) fetch the GGUF model from this URL");
}

int resolve_model_source(const ModelSource& src, std::string& model, const char* command) {
  const int n = int(!model.empty()) + int(!src.hf_repo.empty()) + int(!src.model_url.empty());
  if (n == 0 && !src.hf_file.empty()) {
    std::fprintf(stderr, "kvrun %s: --hf-file needs --hf-repo (-hf)\n", command);
    return 2;
  }
  if (n > 1) {
    std::fprintf(stderr, "kvrun %s: give one of -m, -hf and -mu\n", command);
    return 2;
  }
  if (n == 0) return 0;  // the command reports a missing model itself
  if (!model.empty()) return 0;
  try {
    const pull::PullConfig cfg = pull::config_from_env();
    if (!src.model_url.empty()) {
      model = pull::pull_url(cfg, src.model_url);
      return 0;
    }
    // A split model's parts are downloaded side by side; opening the first opens the others.
    const std::vector<std::string> paths = pull::pull_hf(cfg, src.hf_repo, src.hf_file);
    model = paths.front();
    return 0;
  } catch (const pull::PullError& e) {
    std::fprintf(stderr, "kvrun: error: %s\n", e.what());
    return 1;
  }
}

CLI::App* add_pull_command(CLI::App& app, PullOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "pull", "download a GGUF model into the cache and print its path (owner/name[:QUANT])");
  cmd->add_option("ref", o.ref, "Hugging Face repository: owner/name[:QUANT]");
  add_model_source_options(*cmd, o.src);
  return cmd;
}

int cmd_pull(const PullOptions& o) {
  const int n = int(!o.ref.empty()) + int(!o.src.hf_repo.empty()) + int(!o.src.model_url.empty());
  if (n != 1) {
    std::fprintf(stderr, "kvrun pull: give one repository (owner/name[:QUANT]) or --model-url\n");
    return 2;
  }
  try {
    const pull::PullConfig cfg = pull::config_from_env();
    if (!o.src.model_url.empty()) {
      std::printf("%s\n", pull::pull_url(cfg, o.src.model_url).c_str());
      return 0;
    }
    const std::string ref = o.ref.empty() ? o.src.hf_repo : o.ref;
    for (const std::string& p : pull::pull_hf(cfg, ref, o.src.hf_file))
      std::printf("%s\n", p.c_str());
    return 0;
  } catch (const pull::PullError& e) {
    std::fprintf(stderr, "kvrun: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace kvrun::tools
