// rope_options.h — the RoPE scaling overrides of every model-running command, with llama.cpp's
// names and meanings: --rope-scaling {none,linear,yarn}, --rope-scale N, --rope-freq-base N,
// --rope-freq-scale N, --yarn-orig-ctx N, --yarn-ext-factor N, --yarn-attn-factor N,
// --yarn-beta-slow N, --yarn-beta-fast N (registered with the device options).
#pragma once

#include <CLI/CLI.hpp>

#include "models/rope_scaling.h"

namespace kvrun::tools {

/// Registers the options on `app`, filling `o` (only the flags given are set). Values CLI11 can
/// reject at parse time (not a number, not positive, unknown scaling type) fail there.
void add_rope_options(CLI::App& app, RopeOverrides& o);

}  // namespace kvrun::tools
