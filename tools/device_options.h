// device_options.h — where a model runs: -ngl/--n-gpu-layers, -dev/--device, --list-devices,
// -nkvo/--no-kv-offload, shared by every model-running command (the default run and REPL,
// serve, batch, bench, perplexity, info) with llama.cpp's meanings.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/model.h"

namespace kvrun::tools {

/// The raw option values, as typed.
struct DeviceOptions {
  std::string n_gpu_layers = "0";  ///< -ngl: N, "all" or "auto"
  std::string device;              ///< -dev: a device name (CUDA0, Vulkan0) or "none" / "CPU"
  bool list_devices = false;       ///< --list-devices
  bool no_kv_offload = false;      ///< -nkvo
};

/// A device option that cannot be honoured (exit code 2, one line).
class DeviceOptionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Registers the options on `app`.
void add_device_options(CLI::App& app, DeviceOptions& o);

/// Checks `o` against this build and machine and returns the model placement it asks for:
/// -ngl N (the last N layers; N > n_layer also places the output head), "all" (every layer and
/// the output), "auto" (0 for now: sizing to free memory is not written; a note on stderr when a
/// GPU exists), on the -dev device or the first GPU. Throws DeviceOptionError naming what is missing: no GPU
/// backend built, no GPU device found, an unknown device name, a value that is not a count.
/// `n_layer` is the model's layer count (-1 before it is known: "all" becomes a large count).
ModelParams resolve_device_options(const DeviceOptions& o, int64_t n_layer = -1);

/// Prints the devices for --list-devices ("no GPU devices" when there are none). Returns 0.
int print_devices();

}  // namespace kvrun::tools
