// device_options.cpp — see device_options.h.
#include "device_options.h"

#include <cstdio>
#include <string>
#include <vector>

#include "backend.h"

namespace kvrun::tools {
namespace {

std::string list_names(const std::vector<Device*>& devs) {
  std::string s;
  for (const Device* d : devs) s += (s.empty() ? "" : ", ") + d->name();
  return s.empty() ? "none" : s;
}

/// The GPU named `name`, or the first one when `name` is empty; null for "none"/"CPU".
Device* pick_gpu(const std::string& name) {
  if (name == "none" || name == "CPU" || name == "cpu") return nullptr;
  const std::vector<Device*> gpus = gpu_devices();
  if (name.empty()) return gpus.empty() ? nullptr : gpus.front();
  for (Device* d : gpus)
    if (d->name() == name) return d;
  throw DeviceOptionError("-dev " + name + ": no such device (available: " + list_names(gpus) +
                          "; kvrun --list-devices)");
}

/// Why no GPU can take layers here, for the error line.
std::string no_gpu_reason() {
  if (gpu_backends_built().empty())
    return "this kvrun has no GPU backend behind its device seam yet (the CUDA and Vulkan "
           "backends are not wired to -ngl); run without -ngl";
  return "no GPU device found (kvrun --list-devices)";
}

}  // namespace

void add_device_options(CLI::App& app, DeviceOptions& o) {
  // CLI11 2.1 cannot declare "-ngl", "-dev", "-nkvo": main() rewrites them to the long forms
  // (rewrite_short_aliases).
  app.add_option("--n-gpu-layers,--gpu-layers", o.n_gpu_layers,
                 "(-ngl) layers to run on the GPU: N (the last N; more than the model has also "
                 "places the output), all, or auto (for now: 0, with a note when a GPU exists)")
      ->capture_default_str();
  app.add_option("--device", o.device, "(-dev) GPU device for -ngl (kvrun --list-devices)");
  app.add_flag("--list-devices", o.list_devices, "print the available devices and exit");
  app.add_flag("--no-kv-offload", o.no_kv_offload,
               "(-nkvo) keep the KV cache and attention of GPU layers on the host");
}

ModelParams resolve_device_options(const DeviceOptions& o, int64_t n_layer) {
  ModelParams mp;
  mp.kv_offload = !o.no_kv_offload;
  const std::string& v = o.n_gpu_layers;
  Device* gpu = pick_gpu(o.device);
  const int64_t all = n_layer >= 0 ? n_layer + 1 : int64_t(1) << 30;
  int64_t n = 0;
  if (v == "auto") {
    // As many as fit the free memory is not written yet (docs/cuda.md): the CPU runs every
    // layer, and with a GPU present the user is told so rather than left to guess.
    if (gpu)
      std::fprintf(stderr,
                   "kvrun: -ngl auto: sizing the layers to %s's free memory is not implemented "
                   "yet; running every layer on the CPU (give -ngl N or -ngl all)\n",
                   gpu->name().c_str());
    return mp;
  } else if (v == "all") {
    n = all;
  } else {
    size_t used = 0;
    try {
      n = std::stoll(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != v.size() || v.empty() || n < 0)
      throw DeviceOptionError("-ngl " + v + ": expected a layer count, all or auto");
  }
  if (n == 0) return mp;
  if (!gpu)
    throw DeviceOptionError(
        "-ngl " + v + ": " +
        (o.device.empty() ? no_gpu_reason() : "-dev " + o.device + " is not a GPU"));
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
    const int64_t free = d->free_memory();  // −1: the driver does not say
    std::printf("  %s: %s (%lld MiB, %s)\n", d->name().c_str(), d->description().c_str(),
                (long long)(d->total_memory() >> 20),
                free < 0 ? "free unknown" : (std::to_string(free >> 20) + " MiB free").c_str());
  }
  const Device& cpu = cpu_device();
  std::printf("  %s: %s (host)\n", cpu.name().c_str(), cpu.description().c_str());
  return 0;
}

}  // namespace kvrun::tools
