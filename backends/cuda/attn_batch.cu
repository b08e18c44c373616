// attn_batch.cu — AttnBatch::set (see attn_batch.h).
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cuda/attn_batch.h"

namespace kvrun::cuda {

void AttnBatch::set(Context& ctx, const SeqRows* seqs, int64_t n_seqs, int64_t block_size,
                    const int32_t* slot_of) {
  if (block_size <= 0) throw std::invalid_argument("AttnBatch: block_size must be positive");
  int64_t rows = 0, n_tab = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    rows += seqs[s].n_q;
    n_tab += (seqs[s].pos0 + seqs[s].n_q + block_size - 1) / block_size;
  }
  // Layout of the one upload: cells (int64) first, then positions, row tables, slot tables.
  const size_t bytes = size_t(rows) * 8 + size_t(rows) * 8 + size_t(n_tab) * 4;
  host_.assign(bytes, 0);
  auto* cells = reinterpret_cast<int64_t*>(host_.data());
  auto* pos = reinterpret_cast<int32_t*>(cells + rows);
  int32_t* row_tab = pos + rows;
  int32_t* tables = row_tab + rows;
  std::vector<bool> seen(size_t(rows), false);
  int64_t tab = 0, max_ctx = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const SeqRows& q = seqs[s];
    if (q.pos0 < 0 || q.n_q < 0 || q.q0 < 0 || q.q0 + q.n_q > rows)
      throw std::invalid_argument("AttnBatch: sequence " + std::to_string(s) + " out of range");
    const int64_t nb = (q.pos0 + q.n_q + block_size - 1) / block_size;
    for (int64_t b = 0; b < nb; ++b) {
      const int32_t id = q.block_table[b];
      const int32_t slot = id < 0 ? -1 : slot_of ? slot_of[id] : id;
      if (id < -1 || (id >= 0 && slot < 0))
        throw std::invalid_argument("AttnBatch: negative block id or slot");
      tables[tab + b] = slot;
    }
    for (int64_t i = 0; i < q.n_q; ++i) {
      const int64_t r = q.q0 + i, p = q.pos0 + i;
      if (seen[size_t(r)]) throw std::invalid_argument("AttnBatch: row in two sequences");
      seen[size_t(r)] = true;
      pos[r] = int32_t(p);
      row_tab[r] = int32_t(tab);
      const int32_t own = tables[tab + p / block_size];
      if (own < 0)
        throw std::invalid_argument("AttnBatch: the block of position " + std::to_string(p) +
                                    " was given back (−1)");
      cells[r] = int64_t(own) * block_size + p % block_size;
      if (p + 1 > max_ctx) max_ctx = p + 1;
    }
    tab += nb;
  }
  // Grown by doubling (at least 4 KiB): its device pointers are part of a recorded decode
  // step's arguments, so a step whose page table gained a block keeps them (and its graph).
  if (buf_.size() < bytes)
    buf_ = DeviceBuffer(ctx, std::max({bytes, 2 * buf_.size(), size_t(4096)}));
  buf_.upload(ctx, host_.data(), bytes);
  n_rows_ = rows;
  block_size_ = block_size;
  max_ctx_ = max_ctx;
  auto* base = static_cast<uint8_t*>(buf_.data());
  cells_ = reinterpret_cast<const int64_t*>(base);
  pos_ = reinterpret_cast<const int32_t*>(base + rows * 8);
  row_tab_ = pos_ + rows;
  tables_ = row_tab_ + rows;
}

}  // namespace kvrun::cuda
