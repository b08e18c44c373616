// kv_options.h — the KV cache and attention options every model-running command shares
// (-ctk, -ctv, --kv-block-size, --kv-mem, --kv-offload-dir, --kv-offload-max, --kv-host-tier,
// --kv-host-max, --kv-cache-dir, --kv-cache-dir-max, --no-prefix-cache, --kv-rotate, -fa), parsed
// once:
// `kvrun` (completion and chat), `kvrun perplexity` and `kvrun bench` all use these.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "device_options.h"
#include "engine/context.h"

namespace kvrun::tools {

/// The raw option values, as typed.
struct KvCacheOptions {
  std::string type_k = "f16";        ///< -ctk
  std::string type_v = "f16";        ///< -ctv
  int64_t block_size = 16;           ///< --kv-block-size
  std::string mem;                   ///< --kv-mem SIZE ("" = what n_ctx needs)
  bool no_prefix_cache = false;      ///< --no-prefix-cache
  bool rotate = false;               ///< --kv-rotate
  std::string flash_attn = "auto";   ///< -fa on|off|auto
  std::string cache_dir;             ///< --kv-cache-dir DIR ("" = off)
  std::string cache_dir_max = "8G";  ///< --kv-cache-dir-max SIZE
  std::string offload_dir;           ///< --kv-offload-dir DIR ("" = one tier)
  std::string offload_max;           ///< --kv-offload-max SIZE ("" = what the context needs)
  bool host_tier = false;            ///< --kv-host-tier (KV rows on a GPU: pinned host tier)
  std::string host_max;              ///< --kv-host-max SIZE ("" = what --kv-mem leaves of -c)
  std::string host_attn = "gpu";     ///< --kv-host-attn gpu|cpu (who attends to host blocks)
  DeviceOptions dev;                 ///< -ngl, -dev, --list-devices, -nkvo
};

/// Registers the options on `app` (the device options too).
void add_kv_cache_options(CLI::App& app, KvCacheOptions& o);

/// Fills params.kv and params.flash_attn from `o`; with --kv-cache-dir, params.kv.model_id is the
/// model_file_id() of `model_path`. Throws std::invalid_argument naming the bad option (unknown
/// cache type, bad size, bad -fa value), std::runtime_error when the model cannot be read.
void apply_kv_cache_options(const KvCacheOptions& o, const std::string& model_path,
                            ContextParams& params);

/// The `-ngl auto` inputs of a command (device_options.h AutoFit): its model, context (≤ 0:
/// min(4096, n_ctx_train), the default of run, REPL, serve and batch), KV cache types (an unknown
/// name throws std::invalid_argument as apply_kv_cache_options does) and prefill batch.
AutoFit auto_fit(const KvCacheOptions& o, const std::string& model_path, int64_t n_ctx,
                 int64_t n_batch);

/// Rewrites the multi-letter single-dash options CLI11 (2.1) cannot declare (-ctk, -ctv, -fa, -np,
/// also as -ctk=T) to their long forms, in place, before parsing.
void rewrite_short_aliases(int argc, char** argv);

/// Parses a byte size: a number with an optional K, M, G or T suffix (powers of 1024, with or
/// without a trailing "B"/"iB"), e.g. "512M", "4G", "1048576". Throws std::invalid_argument.
int64_t parse_size(const std::string& s);

}  // namespace kvrun::tools
