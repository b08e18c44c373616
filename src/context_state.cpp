// context_state.cpp — KV state save/restore (see context_state.h).
#include "context_state.h"

#include <cstring>
#include <istream>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvrun {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'R', 'U', 'N', 'K', 'V', '1'};
constexpr int kFields = 7;

void header(const Context& ctx, uint64_t (&h)[kFields]) {
  const Hparams& hp = ctx.model().hparams();
  h[0] = ctx.model().file().file_size();
  h[1] = uint64_t(hp.n_layer);
  h[2] = uint64_t(hp.n_head_kv);
  h[3] = uint64_t(hp.head_dim);
  h[4] = uint64_t(hp.head_dim_v);
  h[5] = uint64_t(ctx.kv().type());
  h[6] = uint64_t(ctx.n_past());
}

size_t elem_bytes(const Context& ctx) { return size_t(traits(ctx.kv().type()).block_bytes); }

}  // namespace

void write_context_state(std::ostream& out, const Context& ctx) {
  uint64_t h[kFields];
  header(ctx, h);
  out.write(kMagic, sizeof kMagic);
  out.write(reinterpret_cast<const char*>(h), sizeof h);
  const Hparams& hp = ctx.model().hparams();
  const size_t k_row = size_t(hp.n_head_kv * hp.head_dim) * elem_bytes(ctx);
  const size_t v_row = size_t(hp.n_head_kv * hp.head_dim_v) * elem_bytes(ctx);
  const size_t n = size_t(ctx.n_past());
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const cpu::KvLayerView& kv = ctx.kv().layer(il);
    out.write(static_cast<const char*>(kv.k), std::streamsize(k_row * n));
    out.write(static_cast<const char*>(kv.v), std::streamsize(v_row * n));
  }
  if (!out) throw std::runtime_error("writing the KV state failed");
}

void read_context_state(std::istream& in, Context& ctx, int64_t expected_n_past) {
  char magic[sizeof kMagic];
  uint64_t saved[kFields], mine[kFields];
  in.read(magic, sizeof magic);
  in.read(reinterpret_cast<char*>(saved), sizeof saved);
  if (!in || std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    throw std::runtime_error("KV state: missing or damaged header");
  header(ctx, mine);
  static const char* const kWhat[kFields - 1] = {"model file size", "n_layer",    "n_head_kv",
                                                 "head_dim",        "head_dim_v", "KV type"};
  for (int i = 0; i < kFields - 1; ++i)
    if (saved[i] != mine[i])
      throw std::runtime_error(std::string("KV state was saved with another ") + kWhat[i] + " (" +
                               std::to_string(saved[i]) + ", this run " + std::to_string(mine[i]) +
                               ")");
  const uint64_t n = saved[6];
  if (n != uint64_t(expected_n_past))
    throw std::runtime_error("KV state holds " + std::to_string(n) + " positions, expected " +
                             std::to_string(expected_n_past));
  if (n > uint64_t(ctx.n_ctx()))
    throw std::runtime_error("KV state holds " + std::to_string(n) +
                             " positions; the context holds " + std::to_string(ctx.n_ctx()));
  const Hparams& hp = ctx.model().hparams();
  const size_t k_bytes = size_t(hp.n_head_kv * hp.head_dim) * elem_bytes(ctx) * size_t(n);
  const size_t v_bytes = size_t(hp.n_head_kv * hp.head_dim_v) * elem_bytes(ctx) * size_t(n);
  std::vector<char> data((k_bytes + v_bytes) * size_t(hp.n_layer));
  in.read(data.data(), std::streamsize(data.size()));
  if (size_t(in.gcount()) != data.size()) throw std::runtime_error("KV state is truncated");
  const char* p = data.data();
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const cpu::KvLayerView& kv = ctx.kv().layer(il);
    std::memcpy(kv.k, p, k_bytes);
    p += k_bytes;
    std::memcpy(kv.v, p, v_bytes);
    p += v_bytes;
  }
  ctx.set_n_past(int64_t(n));
}

}  // namespace kvrun

namespace kvrun {

void Context::set_n_past(int64_t n) {
  if (n < 0 || n > n_ctx())
    throw ContextError("set_n_past(" + std::to_string(n) + ") outside [0, n_ctx]");
  n_past_ = n;
}

}  // namespace kvrun
