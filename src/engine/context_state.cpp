// context_state.cpp — KV state save/restore (see context_state.h).
#include "engine/context_state.h"

#include <cstring>
#include <istream>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvrun {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'R', 'U', 'N', 'K', 'V', '2'};
constexpr int kFields = 8;

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
}

/// Address of position `pos`'s row in `base` ([n_blocks][block_size][row_bytes]).
uint8_t* row_at(uint8_t* base, const std::vector<int32_t>& table, int64_t block_size,
                int64_t row_bytes, int64_t pos) {
  const int64_t b = table[size_t(pos / block_size)];
  return base + (b * block_size + pos % block_size) * row_bytes;
}

}  // namespace

void write_context_state(std::ostream& out, const Context& ctx) {
  if (!ctx.cache().rows_on_host())
    throw std::runtime_error("the KV state cannot be saved: its KV rows are on a GPU (use -nkvo)");
  if (ctx.sequence().n_released() > 0)
    throw std::runtime_error(
        "the KV state cannot be saved: blocks before the sliding window were given back");
  uint64_t h[kFields];
  header(ctx, h);
  out.write(kMagic, sizeof kMagic);
  out.write(reinterpret_cast<const char*>(h), sizeof h);
  const auto& table = ctx.sequence().block_table();
  const int64_t n = ctx.n_past();
  for (int64_t il = 0; il < ctx.cache().n_layer(); ++il) {
    const KvLayer L = ctx.cache().layer(il);
    for (int64_t pos = 0; pos < n; ++pos)
      out.write(reinterpret_cast<const char*>(row_at(L.k, table, L.block_size, L.k_row_bytes, pos)),
                std::streamsize(L.k_row_bytes));
    for (int64_t pos = 0; pos < n; ++pos)
      out.write(reinterpret_cast<const char*>(row_at(L.v, table, L.block_size, L.v_row_bytes, pos)),
                std::streamsize(L.v_row_bytes));
  }
  if (!out) throw std::runtime_error("writing the KV state failed");
}

void read_context_state(std::istream& in, Context& ctx, std::span<const int32_t> tokens) {
  if (!ctx.cache().rows_on_host())
    throw std::runtime_error(
        "the KV state cannot be restored: its KV rows are on a GPU (use -nkvo)");
  char magic[sizeof kMagic];
  uint64_t saved[kFields], mine[kFields];
  in.read(magic, sizeof magic);
  in.read(reinterpret_cast<char*>(saved), sizeof saved);
  if (!in || std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    throw std::runtime_error("KV state: missing or damaged header");
  header(ctx, mine);
  static const char* const kWhat[kFields - 1] = {
      "model file size", "n_layer", "n_head_kv", "head_dim", "head_dim_v", "K type", "V type"};
  for (int i = 0; i < kFields - 1; ++i)
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
  std::vector<char> data;
  for (int64_t il = 0; il < cache.n_layer(); ++il) {
    const KvLayer L = cache.layer(il);
    data.resize(data.size() + size_t((L.k_row_bytes + L.v_row_bytes) * int64_t(n)));
  }
  in.read(data.data(), std::streamsize(data.size()));
  if (size_t(in.gcount()) != data.size()) throw std::runtime_error("KV state is truncated");

  ctx.reset();
  KvSequence& seq = ctx.sequence();
  seq.reserve(int64_t(n));
  const auto& table = seq.block_table();
  const char* p = data.data();
  for (int64_t il = 0; il < cache.n_layer(); ++il) {
    const KvLayer L = cache.layer(il);
    for (int64_t pos = 0; pos < int64_t(n); ++pos, p += L.k_row_bytes)
      std::memcpy(row_at(L.k, table, L.block_size, L.k_row_bytes, pos), p, size_t(L.k_row_bytes));
    for (int64_t pos = 0; pos < int64_t(n); ++pos, p += L.v_row_bytes)
      std::memcpy(row_at(L.v, table, L.block_size, L.v_row_bytes, pos), p, size_t(L.v_row_bytes));
  }
  seq.commit(tokens);
}

}  // namespace kvrun
