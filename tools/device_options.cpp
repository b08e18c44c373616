// device_options.cpp — see device_options.h.
#include "device_options.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "backend.h"
#include "commands.h"
#include "cpu/cpu_level.h"
#include "eval/model_info.h"
#include "gguf.h"
#include "kv_layout.h"
#include "models/arch.h"
#include "models/llama.h"
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
int64_t auto_layers(Device& gpu, const AutoFit* fit, bool kv_on_gpu,
                    const std::vector<TensorOverride>& rules) {
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
  // What the GPU lacks stays on the host (MoE FFNs: their experts are left out of the plan).
  const GpuFallback fb = gpu_fallback(gpu, file, kv_on_gpu);
  if (fb.gpu_layers == 0) {
    for (const std::string& line : fb.lines)
      std::fprintf(stderr, "kvrun: -ngl auto: %s\n", line.c_str());
    std::fprintf(stderr, "kvrun: -ngl auto: running every layer on the CPU\n");
    return 0;
  }
  const std::vector<bool> on_host = ffn_kept_on_host(file, mi.hp.n_layer, rules, fb);
  mi.kv_tokens *= std::max<int64_t>(1, fit->n_seqs);
  cap_to_fast_tier(mi, *fit);
  const int64_t n =
      fit_gpu_layers(mi, file, fit->type_k, fit->type_v, kv_on_gpu, free, fit->n_batch, &on_host);
  const GpuPlan p =
      plan_gpu(mi, file, n, fit->type_k, fit->type_v, kv_on_gpu, fit->n_batch, &on_host);
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
                          bool kv_on_gpu, const std::vector<TensorOverride>& rules) {
  const int64_t free = gpu.free_memory();
  if (free < 0) return;
  const gguf::File file = gguf::File::open_metadata_only(fit.model_path);
  const int64_t n_ctx = fit.n_ctx > 0 ? fit.n_ctx : default_n_ctx(load_hparams(file).n_ctx_train);
  ModelInfo mi = describe_model(file, n_ctx);
  mi.kv_tokens *= std::max<int64_t>(1, fit.n_seqs);
  cap_to_fast_tier(mi, fit);
  const std::vector<bool> on_host =
      ffn_kept_on_host(file, mi.hp.n_layer, rules, gpu_fallback(gpu, file, kv_on_gpu));
  const GpuPlan p = plan_gpu(mi, file, n, fit.type_k, fit.type_v, kv_on_gpu, fit.n_batch, &on_host);
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

void cap_to_fast_tier(ModelInfo& mi, const AutoFit& fit) {
  if (fit.kv_fast_bytes <= 0) return;
  const Hparams::KvRows r = mi.hp.kv_rows();
  const int64_t per_token = kv_bytes_per_token(fit.type_k, fit.type_v, mi.hp.n_layer, r.n_head_kv,
                                               r.head_dim, r.head_dim_v);
  if (per_token > 0) mi.kv_tokens = std::min(mi.kv_tokens, fit.kv_fast_bytes / per_token + 1);
}

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
  app.add_option("--override-tensor", o.override_tensor,
                 "(-ot) PATTERN=DEVICE[,...]: run the FFN of each layer whose tensors match the "
                 "regex PATTERN on DEVICE (CPU or a GPU name), e.g. -ot \"ffn_.*_exps=CPU\" "
                 "keeps MoE experts on the CPU")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--kernels", o.kernels,
                 "CPU matmul summation order: exact (bit-identical to the scalar reference and "
                 "llama.cpp's order) or fast (packed q8_0/q4_K/q5_K/q6_K/mxfp4 weights at avx2 "
                 "and avx512 in an order that differs in the last bits; docs/architecture.md)")
      ->capture_default_str();
  app.add_option("--thp,--transparent-huge-pages", o.thp,
                 "on: the weights the CPU backend repacks (and other buffers of 2 MiB or more) "
                 "ask Linux for transparent huge pages (madvise), fewer TLB misses when decode "
                 "streams them; off: 4 KiB pages")
      ->capture_default_str();
  add_rope_options(app, o.rope);
}

void apply_cpu_options(const DeviceOptions& o) {
  const std::optional<cpu::KernelOrder> order = cpu::parse_kernel_order(o.kernels);
  if (!order) throw DeviceOptionError("--kernels " + o.kernels + ": expected exact or fast");
  if (o.thp != "on" && o.thp != "off")
    throw DeviceOptionError("--thp " + o.thp + ": expected on or off");
  cpu::set_kernel_order(*order);
  set_huge_pages(o.thp == "on");
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

std::vector<TensorOverride> parse_tensor_overrides(const std::vector<std::string>& specs) {
  std::vector<TensorOverride> out;
  for (const std::string& spec : specs) {
    size_t start = 0;
    while (start <= spec.size()) {
      const size_t comma = std::min(spec.find(',', start), spec.size());
      const std::string rule = spec.substr(start, comma - start);
      start = comma + 1;
      const size_t eq = rule.rfind('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == rule.size())
        throw DeviceOptionError("-ot " + rule + ": expected PATTERN=DEVICE (e.g. ffn_.*_exps=CPU)");
      TensorOverride r{rule.substr(0, eq), nullptr};
      const std::string name = rule.substr(eq + 1);
      try {
        std::regex check(r.pattern, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        throw DeviceOptionError("-ot " + rule + ": " + r.pattern +
                                " is not a regular expression (" + e.what() + ")");
      }
      std::string lower = name;
      for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
      if (lower == "cpu") r.device = &cpu_device();
      for (Device* d : gpu_devices())
        if (!r.device && d->name() == name) r.device = d;
      if (!r.device)
        throw DeviceOptionError("-ot " + rule + ": no device " + name +
                                " (CPU, or a GPU that kvrun --list-devices prints)");
      out.push_back(r);
    }
  }
  return out;
}

GpuFallback gpu_fallback(Device& gpu, const gguf::File& file, bool kv_on_gpu) {
  Hparams hp;
  ArchSpec spec;
  try {
    hp = load_hparams(file);
    spec = configure_arch(file, hp);
  } catch (const ModelError& e) {
    throw DeviceOptionError(e.what());
  }
  Placement p = Placement::split(cpu_device(), gpu, hp.n_layer, hp.n_layer + 1, kv_on_gpu);
  GpuFallback fb;
  fb.lines = fit_placement_to_devices(p, cpu_device(), file, hp, spec);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    fb.ffn_on_host.push_back(p.ffn[size_t(il)] != &gpu);
    fb.gpu_layers += p.layers[size_t(il)] == &gpu;
  }
  return fb;
}

std::vector<bool> ffn_kept_on_host(const gguf::File& file, int64_t n_layer,
                                   const std::vector<TensorOverride>& rules,
                                   const GpuFallback& fb) {
  std::vector<bool> on_host = ffn_kept_on_host(file, n_layer, rules);
  for (size_t il = 0; il < on_host.size() && il < fb.ffn_on_host.size(); ++il)
    on_host[il] = on_host[il] || fb.ffn_on_host[il];
  return on_host;
}

std::vector<bool> ffn_kept_on_host(const gguf::File& file, int64_t n_layer,
                                   const std::vector<TensorOverride>& rules) {
  std::vector<bool> on_host(size_t(n_layer), false);
  if (rules.empty()) return on_host;
  std::vector<int64_t> by;
  try {
    by = ffn_override_rules(file, n_layer, rules);
  } catch (const ModelError& e) {
    throw DeviceOptionError(e.what());
  }
  for (int64_t il = 0; il < n_layer; ++il)
    on_host[size_t(il)] =
        by[size_t(il)] >= 0 && rules[size_t(by[size_t(il)])].device->host_memory();
  return on_host;
}

ModelParams resolve_device_options(const DeviceOptions& o, int64_t n_layer, const AutoFit* fit) {
  ModelParams mp;
  mp.kv_offload = !o.no_kv_offload;
  mp.overrides = parse_tensor_overrides(o.override_tensor);
  mp.rope = o.rope;
  const std::string& v = o.n_gpu_layers;
  Device* gpu = pick_gpu(o.device);
  const int64_t all = n_layer >= 0 ? n_layer + 1 : int64_t(1) << 30;
  const std::optional<int64_t> asked = parse_ngl(v, all);
  if (!asked && !gpu) return mp;  // auto without a GPU: the CPU
  const int64_t n = asked ? *asked : auto_layers(*gpu, fit, mp.kv_offload, mp.overrides);
  if (n == 0) return mp;
  if (!gpu)
    throw DeviceOptionError(
        "-ngl " + v + ": " +
        (o.device.empty() ? no_gpu_reason() : "-dev " + o.device + " is not a GPU"));
  if (asked && fit) check_placement_fits(*gpu, *fit, v, n, mp.kv_offload, mp.overrides);
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
