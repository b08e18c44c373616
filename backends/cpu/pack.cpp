// pack.cpp — the row-interleaved weight layout of the CPU backend (see pack.h).
#include "cpu/pack.h"

#include <cstring>
#include <stdexcept>

#include "blocks.h"
#include "cpu/cpu_traits.h"

namespace kvrun::cpu {

namespace {

constexpr size_t kGroupBlockBytes = size_t(kPackRows) * sizeof(block_q4_0);  // 288

}  // namespace

bool pack_supported(const Tensor& w) {
  if (w.type != DType::Q4_0 || !w.data || w.ne[2] != 1 || w.ne[3] != 1) return false;
  if (w.ne[0] % QK4_0 != 0 || w.ne[1] % kPackRows != 0 || w.ne[1] == 0) return false;
  if (w.nb[1] != size_t(w.ne[0] / QK4_0) * sizeof(block_q4_0)) return false;
  const CpuTypeTraits* ct = cpu_traits(w.type);
  return ct && ct->packed_tile;
}

Buffer pack_weight(const Tensor& w) {
  if (!pack_supported(w)) throw std::invalid_argument("pack_weight: this tensor cannot be packed");
  const int64_t nb = w.ne[0] / QK4_0, groups = w.ne[1] / kPackRows;
  Buffer out(size_t(groups * nb) * kGroupBlockBytes);
  uint8_t* dst = static_cast<uint8_t*>(out.data());
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t b = 0; b < nb; ++b, dst += kGroupBlockBytes)
      for (int64_t r = 0; r < kPackRows; ++r) {
        const block_q4_0& src = static_cast<const block_q4_0*>(w.row(g * kPackRows + r))[b];
        std::memcpy(dst + 2 * r, &src.d, 2);
        for (int q = 0; q < 4; ++q) std::memcpy(dst + 32 + 64 * q + 4 * r, src.qs + 4 * q, 4);
      }
  return out;
}

}  // namespace kvrun::cpu
