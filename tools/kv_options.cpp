// kv_options.cpp — see kv_options.h.
#include "kv_options.h"

#include <cctype>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kv/prefix_store.h"
#include "kv_layout.h"

namespace kvrun::tools {

void add_kv_cache_options(CLI::App& app, KvCacheOptions& o) {
  add_device_options(app, o.dev);
  const std::string types = "f32, f16, bf16, q8_0, q4_0, fp8 (= fp8_e4m3), fp8_e5m2, nvfp4";
  // CLI11 2.1 cannot declare "-ctk": main() rewrites it to the long form (rewrite_short_aliases).
  app.add_option("--cache-type-k", o.type_k, "(-ctk) K cache type: " + types)
      ->capture_default_str();
  app.add_option("--cache-type-v", o.type_v, "(-ctv) V cache type: " + types)
      ->capture_default_str();
  app.add_option("--kv-block-size", o.block_size, "tokens per KV block")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 16))
      ->capture_default_str();
  app.add_option("--kv-mem", o.mem,
                 "KV budget of the fast tier (RAM; the GPU's memory for KV rows on a GPU), e.g. "
                 "512M or 8G (default: what the context size needs)");
  app.add_option("--kv-offload-dir", o.offload_dir,
                 "slow KV tier: blocks past --kv-mem go to a file in DIR (mapped; 0600, removed "
                 "on exit)");
  app.add_option("--kv-offload-max", o.offload_max,
                 "budget of the --kv-offload-dir file, e.g. 16G (default: what the context size "
                 "needs)");
  app.add_flag("--kv-host-tier", o.host_tier,
               "slow KV tier for KV rows on a GPU (-ngl): blocks past --kv-mem live in pinned "
               "host RAM that the GPU reads in place (the CPU's slow tier is --kv-offload-dir)");
  app.add_option("--kv-host-max", o.host_max,
                 "budget of the --kv-host-tier memory, e.g. 16G (default: what the context size "
                 "needs beyond --kv-mem)");
  app.add_option("--kv-host-attn", o.host_attn,
                 "attention over the --kv-host-tier blocks: gpu (the GPU reads them over PCIe) "
                 "or cpu (the CPU reads them in host RAM while the GPU attends to its own, "
                 "merged by log-sum-exp)")
      ->check(CLI::IsMember({"gpu", "cpu"}))
      ->capture_default_str();
  app.add_flag("--no-prefix-cache", o.no_prefix_cache, "do not reuse cached KV blocks of prefixes");
  app.add_option("--kv-cache-dir", o.cache_dir,
                 "persistent prefix cache: write full KV blocks to DIR and reuse them in later "
                 "runs with the same model and cache types");
  app.add_option("--kv-cache-dir-max", o.cache_dir_max,
                 "budget of --kv-cache-dir; least recently used blocks are removed past it")
      ->capture_default_str();
  app.add_flag("--kv-rotate", o.rotate,
               "Hadamard-rotate K and Q along head_dim before K is quantized");
  app.add_option(
         "--flash-attn", o.flash_attn,
         "(-fa) attention: on (flash kernel, online softmax), off (llama.cpp's exact non-flash "
         "softmax), auto (= on)")
      ->capture_default_str();
}

void rewrite_short_aliases(int argc, char** argv) {
  static const std::pair<const char*, const char*> kAliases[] = {
      {"-ctk", "--cache-type-k"},   {"-ctv", "--cache-type-v"},  {"-fa", "--flash-attn"},
      {"-np", "--parallel"},        {"-ngl", "--n-gpu-layers"},  {"-dev", "--device"},
      {"-nkvo", "--no-kv-offload"}, {"-hf", "--hf-repo"},        {"-hff", "--hf-file"},
      {"-mu", "--model-url"},       {"-ot", "--override-tensor"}};
  static std::vector<std::unique_ptr<char[]>> storage;  // rewritten "-ctk=T" strings
  for (int i = 1; i < argc; ++i) {
    for (const auto& [alias, full] : kAliases) {
      const size_t n = std::strlen(alias);
      if (std::strncmp(argv[i], alias, n) != 0) continue;
      if (argv[i][n] != '\0' && argv[i][n] != '=') continue;
      const std::string s = std::string(full) + (argv[i] + n);
      storage.push_back(std::make_unique<char[]>(s.size() + 1));
      std::memcpy(storage.back().get(), s.c_str(), s.size() + 1);
      argv[i] = storage.back().get();
      break;
    }
  }
}

int64_t parse_size(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == 0 || i > 18) throw std::invalid_argument("bad size '" + s + "'");
  int64_t v = std::stoll(s.substr(0, i));
  std::string unit = s.substr(i);
  for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  if (unit.ends_with("IB"))
    unit.resize(unit.size() - 2);
  else if (unit.ends_with("B"))
    unit.resize(unit.size() - 1);
  int shift = 0;
  if (unit == "K")
    shift = 10;
  else if (unit == "M")
    shift = 20;
  else if (unit == "G")
    shift = 30;
  else if (unit == "T")
    shift = 40;
  else if (!unit.empty())
    throw std::invalid_argument("bad size unit in '" + s + "'");
  if (v > (int64_t(1) << (62 - shift))) throw std::invalid_argument("size '" + s + "' too large");
  return v << shift;
}

namespace {

/// The KV cache type `name` of option `opt`; throws std::invalid_argument naming both.
DType kv_type_option(const std::string& name, const char* opt) {
  auto t = kv_type_from_name(name);
  if (!t)
    throw std::invalid_argument(std::string(opt) + ": unknown KV cache type '" + name +
                                "' (f32, f16, bf16, q8_0, q4_0, fp8, fp8_e4m3, fp8_e5m2, nvfp4)");
  return *t;
}

}  // namespace

AutoFit auto_fit(const KvCacheOptions& o, const std::string& model_path, int64_t n_ctx,
                 int64_t n_batch) {
  AutoFit f;
  f.model_path = model_path;
  f.n_ctx = n_ctx;
  f.type_k = kv_type_option(o.type_k, "--cache-type-k");
  f.type_v = kv_type_option(o.type_v, "--cache-type-v");
  f.n_batch = n_batch;
  if (o.host_tier && !o.mem.empty()) f.kv_fast_bytes = parse_size(o.mem);  // the rest: host RAM
  return f;
}

void apply_kv_cache_options(const KvCacheOptions& o, const std::string& model_path,
                            ContextParams& params) {
  auto type = [](const std::string& name, const char* opt) { return kv_type_option(name, opt); };
  params.kv.type_k = type(o.type_k, "--cache-type-k");
  params.kv.type_v = type(o.type_v, "--cache-type-v");
  params.kv.block_size = o.block_size;
  params.kv.mem_bytes = o.mem.empty() ? 0 : parse_size(o.mem);
  if (!o.mem.empty() && params.kv.mem_bytes <= 0)
    throw std::invalid_argument("--kv-mem must be positive");
  if (!o.offload_max.empty() && o.offload_dir.empty())
    throw std::invalid_argument("--kv-offload-max needs --kv-offload-dir");
  params.kv.offload_dir = o.offload_dir;
  params.kv.offload_max = o.offload_max.empty() ? 0 : parse_size(o.offload_max);
  if (!o.offload_max.empty() && params.kv.offload_max <= 0)
    throw std::invalid_argument("--kv-offload-max must be positive");
  if (!o.host_max.empty() && !o.host_tier)
    throw std::invalid_argument("--kv-host-max needs --kv-host-tier");
  if (o.host_tier && !o.offload_dir.empty())
    throw std::invalid_argument(
        "--kv-host-tier and --kv-offload-dir cannot be combined (the host tier is the slow tier "
        "of KV rows on a GPU, the file that of KV rows on the CPU)");
  if (o.host_tier && o.dev.no_kv_offload)
    throw std::invalid_argument(
        "--kv-host-tier: -nkvo keeps every KV row on the CPU (use "
        "--kv-offload-dir for its slow tier)");
  params.kv.host_tier = o.host_tier;
  if (o.host_attn != "gpu" && !o.host_tier)
    throw std::invalid_argument("--kv-host-attn needs --kv-host-tier");
  params.kv.host_attn_cpu = o.host_attn == "cpu";
  if (o.host_tier) {
    params.kv.offload_max = o.host_max.empty() ? 0 : parse_size(o.host_max);
    if (!o.host_max.empty() && params.kv.offload_max <= 0)
      throw std::invalid_argument("--kv-host-max must be positive");
  }
  params.kv.prefix_cache = !o.no_prefix_cache;
  params.kv.rotate = o.rotate;
  if (!o.cache_dir.empty()) {
    params.kv.cache_dir = o.cache_dir;
    params.kv.cache_dir_max = parse_size(o.cache_dir_max);
    if (params.kv.cache_dir_max <= 0)
      throw std::invalid_argument("--kv-cache-dir-max must be positive");
    params.kv.model_id = model_file_id(model_path);
  }
  if (o.flash_attn == "on")
    params.flash_attn = FlashAttn::kOn;
  else if (o.flash_attn == "off")
    params.flash_attn = FlashAttn::kOff;
  else if (o.flash_attn == "auto")
    params.flash_attn = FlashAttn::kAuto;
  else
    throw std::invalid_argument("--flash-attn: expected on, off or auto, got '" + o.flash_attn +
                                "'");
}

}  // namespace kvrun::tools
