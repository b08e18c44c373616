// device_options.h — how a model is loaded: where it runs (-ngl/--n-gpu-layers, -dev/--device,
// --list-devices, -nkvo/--no-kv-offload) and its RoPE scaling overrides (rope_options.h), shared
// by every model-running command (the default run and REPL, serve, batch, bench, perplexity,
// embed, info) with llama.cpp's meanings.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/model.h"
#include "rope_options.h"

namespace kvrun {
struct ModelInfo;
}

namespace kvrun::tools {

/// The raw option values, as typed.
struct DeviceOptions {
  std::string n_gpu_layers = "0";  ///< -ngl: N, "all" or "auto"
  std::string device;              ///< -dev: a device name (CUDA0, Vulkan0) or "none" / "CPU"
  bool list_devices = false;       ///< --list-devices
  bool no_kv_offload = false;      ///< -nkvo
  /// -ot / --override-tensor, each "PATTERN=DEVICE[,PATTERN=DEVICE…]" (llama.cpp's syntax)
  std::vector<std::string> override_tensor;
  RopeOverrides rope;  ///< --rope-scaling, --rope-scale, --yarn-* … (rope_options.h)
  /// --kernels: the CPU matmuls' summation order, "exact" or "fast" (cpu_level.h KernelOrder;
  /// apply_cpu_options checks and sets it)
  std::string kernels = "exact";
  /// --thp: transparent huge pages for the host's weight buffers, "on" or "off" (ggml-like/tensor.h
  /// set_huge_pages; apply_cpu_options checks and sets it)
  std::string thp = "on";
};

/// A device option that cannot be honoured (exit code 2, one line).
class DeviceOptionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What `-ngl auto` sizes the GPU layers against: the model file, the context and the KV cache
/// types (eval/model_info.h fit_gpu_layers).
struct AutoFit {
  std::string model_path;
  int64_t n_ctx = 0;  ///< ≤ 0: default_n_ctx (session.h), what -c 0 means
  DType type_k = DType::F16, type_v = DType::F16;
  int64_t n_batch = 512;
  int64_t n_seqs = 1;  ///< sessions whose KV the cache holds at once (serve / batch: -np)
  /// --kv-mem with --kv-host-tier: the KV bytes (every layer) the GPU holds at most, the rest
  /// being in host memory; 0: the GPU holds every position's rows
  int64_t kv_fast_bytes = 0;
};

/// Counts at most the positions whose rows fit fit.kv_fast_bytes (--kv-mem with --kv-host-tier:
/// the GPU's fast tier; the rest live in host memory) in mi.kv_tokens; unchanged when
/// kv_fast_bytes ≤ 0. One position more than fits whole, as the block pool rounds up.
void cap_to_fast_tier(ModelInfo& mi, const AutoFit& fit);

/// The GPU named `name` (-dev), or the first one when `name` is empty; null for "none" / "CPU"
/// and when there is no GPU. Throws DeviceOptionError for a name no device has.
Device* pick_gpu(const std::string& name);

/// The layer count an -ngl value asks for: N, or `all` (n_layer + 1: the output head too) for
/// "all"; nullopt for "auto". Throws DeviceOptionError for anything else.
std::optional<int64_t> parse_ngl(const std::string& v, int64_t all);

/// Registers the options on `app` (the RoPE overrides too).
void add_device_options(CLI::App& app, DeviceOptions& o);

/// Checks `o` against this build and machine and returns the model placement it asks for:
/// -ngl N (the last N layers; N > n_layer also places the output head), "all" (every layer and
/// the output), "auto" (with `fit`: as many of the last layers as fit the device's free memory
/// after their KV rows and scratch, printed on stderr; 0 without a GPU, when the device does not
/// say its free memory, or without `fit`), on the -dev device or the first GPU. Throws
/// DeviceOptionError naming what is missing: no GPU backend built, no GPU device found, an unknown
/// device name, a value that is not a count, a bad -ot rule (parse_tensor_overrides); with
/// `fit`, also an -ngl N / all whose weights and KV rows (plan_gpu) exceed the device's free
/// memory (the bytes needed and available named). `n_layer` is the model's layer count (-1
/// before it is known: "all" becomes a large count).
ModelParams resolve_device_options(const DeviceOptions& o, int64_t n_layer = -1,
                                   const AutoFit* fit = nullptr);

/// The -ot rules of `specs` (each "PATTERN=DEVICE[,PATTERN=DEVICE…]"; DEVICE is CPU or a GPU's
/// name as --list-devices prints it). Throws DeviceOptionError for a rule without '=', an empty
/// pattern, a pattern that is not an ECMAScript regular expression, or an unknown device.
std::vector<TensorOverride> parse_tensor_overrides(const std::vector<std::string>& specs);

/// [n_layer] the layers whose FFN the -ot `rules` keep in host memory (all false without rules),
/// for the GPU plans. Throws DeviceOptionError for rules the model cannot honour
/// (ffn_override_rules).
std::vector<bool> ffn_kept_on_host(const gguf::File& file, int64_t n_layer,
                                   const std::vector<TensorOverride>& rules);
/// What -ngl all on `gpu` keeps on the host because `gpu` lacks it (models/llama.h
/// fit_placement_to_devices; the model loader applies the same rule).
struct GpuFallback {
  std::vector<bool> ffn_on_host;   ///< [n_layer] the layer's FFN runs on the host
  int64_t gpu_layers = 0;          ///< layers whose attention stays on `gpu`
  std::vector<std::string> lines;  ///< what moved, a line each (empty: nothing)
};
/// gpu_fallback of the model `file`, KV rows of GPU layers on `gpu` unless !kv_on_gpu (-nkvo).
/// Throws DeviceOptionError for a model the loader would refuse (an unknown architecture).
GpuFallback gpu_fallback(Device& gpu, const gguf::File& file, bool kv_on_gpu);
/// ffn_kept_on_host of `rules`, with the FFNs `fb` keeps on the host too: the layers whose FFN
/// tensors a GPU plan leaves out.
std::vector<bool> ffn_kept_on_host(const gguf::File& file, int64_t n_layer,
                                   const std::vector<TensorOverride>& rules, const GpuFallback& fb);

/// Sets the process's CPU kernel order from o.kernels (cpu::set_kernel_order) and its huge-page
/// setting from o.thp (set_huge_pages, ggml-like/tensor.h). Throws DeviceOptionError for a
/// kernels value other than "exact" or "fast", a thp value other than "on" or "off".
void apply_cpu_options(const DeviceOptions& o);

/// Prints the devices for --list-devices ("no GPU devices" when there are none). Returns 0, or 2
/// with one line on stderr when a device cannot say its free memory (a malformed
/// KVRUN_VULKAN_BUDGET).
int print_devices();

}  // namespace kvrun::tools
