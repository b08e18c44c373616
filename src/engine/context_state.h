// context_state.h — saving and restoring a Context's KV state (the REPL's /save and /load).
//
// Format (little-endian): "KVRUNKV2" (8 bytes), then uint64 fields: file size of the model,
// n_layer, n_head_kv, head_dim, head_dim_v, K type id, V type id, n_tokens; then, per layer, the
// n_tokens K rows followed by the n_tokens V rows in position order, each row in its cache type's
// row format (ggml-like/kv_layout.h). Block size and block ids are not saved: a restore takes
// fresh blocks.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <span>

#include "engine/context.h"

namespace kvrun {

/// Writes the KV rows of positions [0, n_past) of `ctx`. Throws std::runtime_error on a write
/// failure, or when the context gave back blocks before its sliding window (their rows are gone).
void write_context_state(std::ostream& out, const Context& ctx);

/// Reads state written by write_context_state into `ctx` (which is reset first): same model file
/// (size and shape), same K and V types, and exactly `tokens` (the ids of the saved positions).
/// Everything is read and checked before the context is touched: on a mismatch or truncation it
/// throws std::runtime_error and `ctx` is unchanged; KvCacheFull when the pool has no room.
void read_context_state(std::istream& in, Context& ctx, std::span<const int32_t> tokens);

}  // namespace kvrun
