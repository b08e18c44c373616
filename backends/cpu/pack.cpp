// pack.cpp — the row-interleaved weight layout of the CPU backend (see pack.h).
#include "cpu/pack.h"

#include <cstring>
#include <stdexcept>

#include "blocks.h"
#include "cpu/cpu_traits.h"

namespace kvrun::cpu {

namespace {

/// Bytes of one block of a 16-row group.
size_t group_block_bytes(DType t) {
  return size_t(kPackRows) * (t == DType::Q4_0 ? sizeof(block_q4_0) : sizeof(block_q8_0));
}

}  // namespace

bool pack_supported(const Tensor& w) {
  if ((w.type != DType::Q4_0 && w.type != DType::Q8_0) || !w.data || w.ne[2] != 1 || w.ne[3] != 1)
    return false;
  if (w.ne[0] % 32 != 0 || w.ne[1] % kPackRows != 0 || w.ne[1] == 0) return false;
  if (w.nb[1] != size_t(w.ne[0] / 32) * traits(w.type).block_bytes) return false;
  const CpuTypeTraits* ct = cpu_traits(w.type);
  return ct && ct->packed_tile;
}

Buffer pack_weight(const Tensor& w) {
  if (!pack_supported(w)) throw std::invalid_argument("pack_weight: this tensor cannot be packed");
  const int64_t nb = w.ne[0] / 32, groups = w.ne[1] / kPackRows;
  const size_t gb = group_block_bytes(w.type);
  Buffer out(size_t(groups * nb) * gb);
  uint8_t* dst = static_cast<uint8_t*>(out.data());
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t b = 0; b < nb; ++b, dst += gb)
      for (int64_t r = 0; r < kPackRows; ++r) {
        if (w.type == DType::Q4_0) {
          const block_q4_0& src = static_cast<const block_q4_0*>(w.row(g * kPackRows + r))[b];
          std::memcpy(dst + 2 * r, &src.d, 2);
          for (int q = 0; q < 4; ++q) std::memcpy(dst + 32 + 64 * q + 4 * r, src.qs + 4 * q, 4);
        } else {
          const block_q8_0& src = static_cast<const block_q8_0*>(w.row(g * kPackRows + r))[b];
          std::memcpy(dst + 2 * r, &src.d, 2);
          for (int i = 0; i < 8; ++i)
            for (int e = 0; e < 4; ++e)
              dst[32 + 64 * i + 4 * r + e] = uint8_t(src.qs[4 * i + e]) ^ 0x80;  // q + 128
        }
      }
  return out;
}

size_t packed_group_bytes(DType t, int64_t k) { return size_t(k / 32) * group_block_bytes(t); }

int64_t pack_act_offsets_per_row(DType t, int64_t k) {
  return (k / 32) * (t == DType::Q4_0 ? 1 : 8);
}

void pack_act_offsets(DType t, const void* act, size_t act_row, int64_t n, int64_t k,
                      int32_t* out) {
  const int64_t nb = k / 32;
  for (int64_t j = 0; j < n; ++j) {
    const block_q8_0* xb =
        reinterpret_cast<const block_q8_0*>(static_cast<const uint8_t*>(act) + j * act_row);
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* q = xb[b].qs;
      if (t == DType::Q4_0) {
        int32_t sum = 0;
        for (int i = 0; i < 32; ++i) sum += q[i];
        *out++ = 8 * sum;
      } else {
        for (int i = 0; i < 8; ++i)
          *out++ = -128 * (q[4 * i] + q[4 * i + 1] + q[4 * i + 2] + q[4 * i + 3]);
      }
    }
  }
}

}  // namespace kvrun::cpu
