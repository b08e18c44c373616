// context_state.cpp — KV state save/restore (see context_state.h).
#include "engine/context_state.h"

#include <algorithm>
#include <cstring>
#include <istream>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvrun {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'R', 'U', 'N', 'K', 'V', '3'};
constexpr char kMagicV2[8] = {'K', 'V', 'R', 'U', 'N', 'K', 'V', '2'};  // no w0 field
constexpr int kFields = 9;

void header(const Context& ctx, uint64_t (&h)[kFields]) {
  const Hparams& hp = ctx.model().hparams();
  h[0] = ctx.model().file().file_size();
  h[1] = uint64_t(hp.n_layer);
  h[2] = uint64_t(hp.n_head_kv);
  h[3] = uint64_t(hp.head_dim);
  h[4] = uint64_t(hp.head_dim_v);
  h[5] = uint64_t(ctx.cache().params().type_k);
  h[6] = uint64_t(ctx.cache().params().type_v);
  h[7] = uint64_t(ctx.n_past());
  h[8] = uint64_t(ctx.sequence().n_window_released() * ctx.cache().block_size());
}

/// Calls f(block id, first row in the block, rows) for each block's run of positions [p0, p1)
/// (the rows of consecutive positions of a block are contiguous: one copy a run).
template <typename F>
void for_block_runs(const std::vector<int32_t>& table, int64_t bs, int64_t p0, int64_t p1, F&& f) {
  for (int64_t p = p0; p < p1;) {
    const int64_t end = std::min(p1, (p / bs + 1) * bs);
    f(table[size_t(p / bs)], p % bs, end - p);
    p = end;
  }
}

/// Bytes of layer L's own V rows in a state: none for MLA (V is the latent inside the K row).
int64_t v_state_bytes(const KvLayer& L) { return L.mla ? 0 : L.v_row_bytes; }

/// The first position whose rows layer il has in a state of n positions with windowed rows from
/// w0 on.
int64_t first_row(const Hparams& hp, int64_t il, int64_t w0, int64_t n) {
  return hp.is_swa(il) ? std::min(w0, n) : 0;
}

/// Reserves, fills and commits the saved positions (with window tables n_batch at a time,
/// giving the windowed rows behind the window back after each, as Step::run).
void restore_rows(Context& ctx, const std::vector<char>& data, const std::vector<size_t>& at,
                  int64_t w0, std::span<const int32_t> tokens) {
  KvCache& cache = ctx.cache();
  KvSequence& seq = ctx.sequence();
  const int64_t n = int64_t(tokens.size()), w = cache.window();
  const int64_t step = w > 0 ? ctx.n_batch() : std::max<int64_t>(1, n);
  for (int64_t a = 0; a < n; a += step) {
    const int64_t b = std::min(n, a + step);
    seq.reserve(b - a);
    const auto& table = seq.block_table();
    for (int64_t il = 0; il < cache.n_layer(); ++il) {
      const KvLayer L = cache.layer(il);
      const int64_t p0 = first_row(ctx.model().hparams(), il, w0, n), rows = n - p0;
      const char* k = data.data() + at[size_t(il)];
      const char* v = k + rows * L.k_row_bytes;
      int64_t pos = std::max(a, p0);  // the saved row of each run's first position
      for_block_runs(table, L.block_size, pos, b, [&](int32_t id, int64_t r0, int64_t nr) {
        const int64_t i = pos - p0;
        cache.write_block_rows(il, id, false, r0 * L.k_row_bytes, k + i * L.k_row_bytes,
                               size_t(nr * L.k_row_bytes));
        if (!L.mla)
          cache.write_block_rows(il, id, true, r0 * L.v_row_bytes, v + i * L.v_row_bytes,
                                 size_t(nr * L.v_row_bytes));
        pos += nr;
      });
    }
    seq.commit(tokens.subspan(size_t(a), size_t(b - a)));
    if (w > 0) seq.release_window_before(seq.n_tokens() - w + 1);
  }
}

}  // namespace

void write_context_state(std::ostream& out, const Context& ctx) {
  if (ctx.sequence().n_released() > 0)
    throw std::runtime_error(
        "the KV state cannot be saved: blocks before the sliding window were given back");
  uint64_t h[kFields];
  header(ctx, h);
  out.write(kMagic, sizeof kMagic);
  out.write(reinterpret_cast<const char*>(h), sizeof h);
  const auto& table = ctx.sequence().block_table();
  const int64_t n = ctx.n_past();
  std::vector<char> rows;
  for (int64_t il = 0; il < ctx.cache().n_layer(); ++il) {
    const KvLayer L = ctx.cache().layer(il);
    const int64_t p0 = first_row(ctx.model().hparams(), il, int64_t(h[8]), n);
    for (const bool v : {false, true}) {  // every K row of the layer, then every V row
      if (v && L.mla) break;
      const int64_t rb = v ? L.v_row_bytes : L.k_row_bytes;
      for_block_runs(table, L.block_size, p0, n, [&](int32_t id, int64_t r0, int64_t nr) {
        rows.resize(size_t(nr * rb));  // (GPU rows: downloaded through the cache's backend)
        ctx.cache().read_block_rows(il, id, v, r0 * rb, rows.data(), rows.size());
        out.write(rows.data(), std::streamsize(rows.size()));
      });
    }
  }
  if (!out) throw std::runtime_error("writing the KV state failed");
}

void read_context_state(std::istream& in, Context& ctx, std::span<const int32_t> tokens) {
  char magic[sizeof kMagic];
  uint64_t saved[kFields] = {}, mine[kFields];
  in.read(magic, sizeof magic);
  const bool v2 = in && std::memcmp(magic, kMagicV2, sizeof kMagic) == 0;
  in.read(reinterpret_cast<char*>(saved), std::streamsize(sizeof(uint64_t) * (v2 ? 8 : 9)));
  if (!in || (!v2 && std::memcmp(magic, kMagic, sizeof kMagic) != 0))
    throw std::runtime_error("KV state: missing or damaged header");
  header(ctx, mine);
  static const char* const kWhat[7] = {"model file size", "n_layer", "n_head_kv", "head_dim",
                                       "head_dim_v",      "K type",  "V type"};
  for (int i = 0; i < 7; ++i)
    if (saved[i] != mine[i])
      throw std::runtime_error(std::string("KV state was saved with another ") + kWhat[i] + " (" +
                               std::to_string(saved[i]) + ", this run " + std::to_string(mine[i]) +
                               ")");
  const uint64_t n = saved[7];
  if (n != uint64_t(tokens.size()))
    throw std::runtime_error("KV state holds " + std::to_string(n) + " positions, expected " +
                             std::to_string(tokens.size()));
  if (n > uint64_t(ctx.n_ctx()))
    throw std::runtime_error("KV state holds " + std::to_string(n) +
                             " positions; the context holds " + std::to_string(ctx.n_ctx()));
  const KvCache& cache = ctx.cache();
  const int64_t w0 = int64_t(saved[8]), w = cache.window(), bs = cache.block_size();
  if (w0 > 0 && w == 0)
    throw std::runtime_error(
        "KV state was saved with per-layer window tables (the windowed layers' rows before "
        "position " +
        std::to_string(w0) + " are not in it); this context keeps every row");
  if (w0 > 0 && w0 > std::max<int64_t>(0, int64_t(n) - w + 1) / bs * bs)
    throw std::runtime_error("KV state lacks the windowed layers' rows from position " +
                             std::to_string(w0) + " back to the window of position " +
                             std::to_string(n));
  std::vector<char> data;
  std::vector<size_t> at;  // [n_layer] where the layer's rows start in data
  for (int64_t il = 0; il < cache.n_layer(); ++il) {
    const KvLayer L = cache.layer(il);
    at.push_back(data.size());
    const int64_t rows = int64_t(n) - first_row(ctx.model().hparams(), il, w0, int64_t(n));
    data.resize(data.size() + size_t((L.k_row_bytes + v_state_bytes(L)) * rows));
  }
  in.read(data.data(), std::streamsize(data.size()));
  if (size_t(in.gcount()) != data.size()) throw std::runtime_error("KV state is truncated");

  ctx.reset();
  try {
    restore_rows(ctx, data, at, w0, tokens);
  } catch (...) {
    ctx.reset();
    throw;
  }
}

}  // namespace kvrun
