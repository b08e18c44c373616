// model_source.h — where the model comes from: -m FILE, or fetched with -hf REPO[:QUANT]
// (--hf-file) or -mu URL into the cache (tools/pull/pull.h), and `kvrun pull`.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace kvrun::tools {

/// -hf / --hf-file / -mu of one command.
struct ModelSource {
  std::string hf_repo;    ///< --hf-repo (-hf) owner/name[:QUANT]
  std::string hf_file;    ///< --hf-file (-hff) exact file in the repository
  std::string model_url;  ///< --model-url (-mu) a GGUF file's URL
};

/// Adds --hf-repo, --hf-file and --model-url (their short forms -hf, -hff, -mu go through
/// rewrite_short_aliases) to `cmd`.
void add_model_source_options(CLI::App& cmd, ModelSource& src);

/// Sets `model` to the fetched file when -hf or -mu was given (-m and either of them together
/// is an error). Returns 0, or an exit code after printing one line on stderr: 2 for a usage
/// error (none or several sources; `command` names the command in the message), 1 when fetching
/// fails or the model is split into several files (downloaded, but not loadable yet).
int resolve_model_source(const ModelSource& src, std::string& model, const char* command);

/// Options of `kvrun pull`.
struct PullOptions {
  std::string ref;  ///< positional owner/name[:QUANT]
  ModelSource src;  ///< --hf-file, --model-url (and --hf-repo, the same as the positional)
};

/// Adds the `pull` subcommand to `app`.
CLI::App* add_pull_command(CLI::App& app, PullOptions& o);

/// `kvrun pull`: downloads (or finds in the cache) and prints each local path on stdout.
/// Returns 0, 1 on a fetch error, 2 on a usage error.
int cmd_pull(const PullOptions& o);

}  // namespace kvrun::tools
