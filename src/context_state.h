// context_state.h — saving and restoring a Context's KV state (the REPL's /save and /load).
//
// Format (little-endian): "KVRUNKV1" (8 bytes), then uint64 fields: file size of the model,
// n_layer, n_head_kv, head_dim, head_dim_v, KV dtype id, n_past; then, per layer, the n_past K
// rows followed by the n_past V rows exactly as the store holds them.
#pragma once

#include <cstdint>
#include <iosfwd>

#include "context.h"

namespace kvrun {

/// Writes the KV rows of positions [0, n_past) of `ctx`. Throws std::runtime_error on a write
/// failure.
void write_context_state(std::ostream& out, const Context& ctx);

/// Reads state written by write_context_state into `ctx`, which must be over the same model file
/// (size and shape) with the same KV type and n_ctx ≥ the saved n_past, and the saved n_past must
/// equal `expected_n_past`. Everything is read and checked before the context is touched: on any
/// mismatch or truncation it throws std::runtime_error and `ctx` is unchanged.
void read_context_state(std::istream& in, Context& ctx, int64_t expected_n_past);

}  // namespace kvrun
