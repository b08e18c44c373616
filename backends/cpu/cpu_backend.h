// cpu_backend.h — the CPU behind the seam (backend.h): a Device whose memory is host RAM and
// whose "upload" of a weight is packing it into the row-interleaved layout of pack.h, and a
// Backend that runs the cpu:: ops on a ThreadPool. Results are bit-identical to calling the
// cpu:: functions directly (the same functions run, in the same order).
#pragma once

#include <memory>
#include <string>

#include "backend.h"

namespace kvrun::cpu {

/// A CPU device named `name` ("CPU" for the process's own). Each instance keeps its uploads and
/// buffers apart, so a second one can stand in for a GPU in tests (placement, boundary copies,
/// KV storage per device) with the CPU's kernels.
std::unique_ptr<Device> make_device(const std::string& name);

}  // namespace kvrun::cpu
