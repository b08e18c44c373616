// device_options.cpp — see device_options.h.
#include "device_options.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "backend.h"
#include "commands.h"
#include "eval/model_info.h"
#include "gguf.h"
#include "models/arch.h"
#include "session.h"

namespace kvrun::tools {
namespace {

std::string list_names(const std::vector<Device*>& devs) {
  std::string s;
  for (const Device* d : devs) s += (s.empty() ? "" : ", ") + d->name();
  return s.empty() ? "none" : s;
}

}  // namespace

Device* pick_gpu(const std::string& name) {
  if (name == "none" || name == "CPU" || name == "cpu") return nullptr;
  const std::vector<Device*> gpus = gpu_devices();
  if (name.empty()) return gpus.empty() ? nullptr : gpus.front();
  for (Device* d : gpus)
    if (d->name() == name) return d;
  throw DeviceOptionError("-dev " + name + ": no such device (available: " + list_names(gpus) +
                          "; kvrun --list-devices)");
}

namespace {

/// Why no GPU can take layers here, for the error line.
std::string no_gpu_reason() {
  if (gpu_backends_built().empty())
    return "this kvrun has no GPU backend behind its device seam yet (the CUDA and Vulkan "
           "backends are not wired to -ngl); run without -ngl";
  return "no GPU device found (kvrun --list-devices)";
}

/// -ngl auto on `gpu`: the layers that fit its free memory (eval/model_info.h), with one line on
/// stderr saying what was planned; 0 when the device does not say its free memory (with a line)
/// or no model facts were given (main()'s early check of the options: silent).
int64_t auto_layers(Device& gpu, const AutoFit* fit, bool kv_on_gpu) {
  if (!fit) return 0;  // main()'s check of the options before the command runs
  const int64_t free = gpu.free_memory();
  if (free < 0) {
    std::fprintf(stderr,
                 "kvrun: -ngl auto: %s does not report its free memory; running every layer on "
                 "the CPU (give -ngl N)\n",
                 gpu.name().c_str());
    return 0;
  }
  const gguf::File file = gguf::File::open_metadata_only(fit->model_path);
  const int64_t n_ctx = fit->n_ctx > 0 ? fit->n_ctx : default_n_ctx(load_hparams(file).n_ctx_train);
  ModelInfo mi = describe_model(file, n_ctx);
  if (mi.hp.n_expert > 0 && !(gpu.supports(Op::kMoeRoute) && gpu.supports(Op::kMatmulId))) {
    std::fprintf(stderr,
                 "kvrun: -ngl auto: %s does not run mixture-of-experts layers yet (moe_route, "
                 "matmul_id); running every layer on the CPU\n",
                 gpu.name().c_str());
    return 0;
  }
  if (is_encoder_arch(mi.hp.arch) &&
      !(gpu.supports(Op::kLayerNorm) && gpu.supports(Op::kGelu) && gpu.supports(Op::kAttention))) {
    std::fprintf(stderr,
                 "kvrun: -ngl auto: %s does not run encoder (%s) layers yet (layer_norm, gelu, "
                 "attention); running every layer on the CPU\n",
                 gpu.name().c_str(), mi.hp.arch.c_str());
    return 0;
  }
  mi.kv_tokens *= std::max<int64_t>(1, fit->n_seqs);
  const int64_t n =
      fit_gpu_layers(mi, file, fit->type_k, fit->type_v, kv_on_gpu, free, fit->n_batch);
  const GpuPlan p = plan_gpu(mi, file, n, fit->type_k, fit->type_v, kv_on_gpu, fit->n_batch);
  std::fprintf(stderr,
               "kvrun: -ngl auto: %lld of %lld layers%s on %s: weights %s, KV %s (%lld positions), "
               "scratch ~%s; %s free\n",
               (long long)p.layers, (long long)mi.hp.n_layer, p.output ? " and the output" : "",
               gpu.name().c_str(), format_bytes(p.weight_bytes).c_str(),
               format_bytes(p.kv_bytes).c_str(), (long long)mi.kv_tokens,
               format_bytes(p.scratch_bytes).c_str(), format_bytes(free).c_str());
  return n;
}

/// Throws DeviceOptionError when the weights and KV rows that -ngl `v` (n layers) puts on `gpu`
/// (eval/model_info.h plan_gpu, which counts the bytes the backends allocate for them) exceed
/// the memory the device says is free, naming both byte counts: before any upload, instead of a
/// driver's allocation failure halfway through the load. The step's scratch (an estimate) is not
/// counted; a device that does not report free memory (−1) is not checked.
void check_placement_fits(Device& gpu, const AutoFit& fit, const std::string& v, int64_t n,
                          bool kv_on_gpu) {
  const int64_t free = gpu.free_memory();
  if (free < 0) return;
  const gguf::File file = gguf::File::open_metadata_only(fit.model_path);
  const int64_t n_ctx = fit.n_ctx > 0 ? fit.n_ctx : default_n_ctx(load_hparams(file).n_ctx_train);
  ModelInfo mi = describe_model(file, n_ctx);
  mi.kv_tokens *= std::max<int64_t>(1, fit.n_seqs);
  const GpuPlan p = plan_gpu(mi, file, n, fit.type_k, fit.type_v, kv_on_gpu, fit.n_batch);
  const int64_t need = p.weight_bytes + p.kv_bytes;
  if (need <= free) return;
  throw DeviceOptionError(
      "-ngl " + v + ": out of " + gpu.name() + " memory: " + std::to_string(p.layers) + " layers" +
      (p.output ? " and the output" : "") + " need " + std::to_string(need) + " bytes (weights " +
      format_bytes(p.weight_bytes) + ", KV " + format_bytes(p.kv_bytes) + " for " +
      std::to_string(mi.kv_tokens) + " positions) but " + std::to_string(free) + " bytes (" +
      format_bytes(free) +
      ") are available; give fewer layers, -ngl auto, a smaller "
      "-c or -nkvo");
}

}  // namespace

void add_device_options(CLI::App& app, DeviceOptions& o) {
  // CLI11 2.1 cannot declare "-ngl", "-dev", "-nkvo": main() rewrites them to the long forms
  // (rewrite_short_aliases).
  app.add_option("--n-gpu-layers,--gpu-layers", o.n_gpu_layers,
                 "(-ngl) layers to run on the GPU: N (the last N; more than the model has also "
                 "places the output), all, or auto (as many as fit the free memory)")
      ->capture_default_str();
  app.add_option("--device", o.device, "(-dev) GPU device for -ngl (kvrun --list-devices)");
  app.add_flag("--list-devices", o.list_devices, "print the available devices and exit");
  app.add_flag("--no-kv-offload", o.no_kv_offload,
               "(-nkvo) keep the KV cache and attention of GPU layers on the host");
  add_rope_options(app, o.rope);
}

std::optional<int64_t> parse_ngl(const std::string& v, int64_t all) {
  if (v == "auto") return std::nullopt;
  if (v == "all") return all;
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || n < 0)
    throw DeviceOptionError("-ngl " + v + ": expected a layer count, all or auto");
  return n;
}

ModelParams resolve_device_options(const DeviceOptions& o, int64_t n_layer, const AutoFit* fit) {
  ModelParams mp;
  mp.kv_offload = !o.no_kv_offload;
  mp.rope = o.rope;
  const std::string& v = o.n_gpu_layers;
  Device* gpu = pick_gpu(o.device);
  const int64_t all = n_layer >= 0 ? n_layer + 1 : int64_t(1) << 30;
  const std::optional<int64_t> asked = parse_ngl(v, all);
  if (!asked && !gpu) return mp;  // auto without a GPU: the CPU
  const int64_t n = asked ? *asked : auto_layers(*gpu, fit, mp.kv_offload);
  if (n == 0) return mp;
  if (!gpu)
    throw DeviceOptionError(
        "-ngl " + v + ": " +
        (o.device.empty() ? no_gpu_reason() : "-dev " + o.device + " is not a GPU"));
  if (asked && fit) check_placement_fits(*gpu, *fit, v, n, mp.kv_offload);
  mp.n_gpu_layers = n;
  mp.gpu = gpu;
  return mp;
}

int print_devices() {
  const std::vector<Device*> gpus = gpu_devices();
  std::printf("Available devices:\n");
  if (gpus.empty()) {
    std::printf("  no GPU devices");
    if (gpu_backends_built().empty())
      std::printf(" (this build has no GPU backend behind the device seam)");
    std::printf("\n");
  }
  for (const Device* d : gpus) {
    int64_t free = -1;  // −1: the driver does not say
    try {
      free = d->free_memory();
    } catch (const std::exception& e) {  // e.g. a malformed KVRUN_VULKAN_BUDGET
      std::fprintf(stderr, "kvrun: %s\n", e.what());
      return 2;
    }
    std::printf("  %s: %s (%lld MiB, %s)\n", d->name().c_str(), d->description().c_str(),
                (long long)(d->total_memory() >> 20),
                free < 0 ? "free unknown" : (std::to_string(free >> 20) + " MiB free").c_str());
  }
  const Device& cpu = cpu_device();
  std::printf("  %s: %s (host)\n", cpu.name().c_str(), cpu.description().c_str());
  return 0;
}

}  // namespace kvrun::tools
