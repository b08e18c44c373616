// context_state.h — saving and restoring a Context's KV state (the REPL's /save and /load).
//
// Format (little-endian): "KVRUNKV3" (8 bytes), then uint64 fields: file size of the model,
// n_layer, n_head_kv, head_dim, head_dim_v, K type id, V type id, n_tokens, w0; then, per layer,
// its K rows followed by its V rows in position order, each row in its cache type's row format
// (ggml-like/kv_layout.h): positions 0 … n_tokens−1, except for the windowed layers of a cache
// with window tables, which hold positions w0 … n_tokens−1 only (the rest was given back behind
// the window; w0 = 0 otherwise). "KVRUNKV2" files (no w0 field, every position of every layer)
// are read too. Block size and block ids are not saved: a restore takes fresh blocks.
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
/// throws std::runtime_error and `ctx` is unchanged; KvCacheFull when the pool has no room (the
/// context is then reset). With window tables the rows go in n_batch positions at a time, the
/// windowed rows behind the window given back after each, as eval() does; a file without the
/// windowed rows a position's window needs (a w0 past it) is refused.
void read_context_state(std::istream& in, Context& ctx, std::span<const int32_t> tokens);

}  // namespace kvrun
