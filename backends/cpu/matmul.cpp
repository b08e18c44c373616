// matmul.cpp — quantized-weight matmul on the CPU (see matmul.h).
#include "cpu/matmul.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/cpu_traits.h"
#include "cpu/pack.h"

namespace kvrun::cpu {

namespace {

/// Multiply-adds below which a chunk is not worth a thread wake-up.
constexpr int64_t kMinWorkPerChunk = 32 * 1024;

/// Weight rows a thread dots with every activation row before moving on (16 rows of a 2048-wide
/// q8_0 matrix are 34 KiB).
constexpr int64_t kRowBlock = 16;

}  // namespace

bool matmul_supports(DType t, int64_t k) {
  const CpuTypeTraits* ct = cpu_traits(t);
  return ct && k > 0 && k % traits(t).block_elems == 0 && k % traits(ct->act_type).block_elems == 0;
}

void matmul(ThreadPool& pool, const Tensor& w, const float* x, int64_t n, float* y) {
  matmul(pool, w, x, n, y, cpu_level());
}

void matmul(ThreadPool& pool, const Tensor& w, const float* x, int64_t n, float* y,
            CpuLevel level) {
  const int64_t k = w.ne[0], m = w.ne[1];
  if (!matmul_supports(w.type, k))
    throw std::invalid_argument(std::string("matmul: unsupported weight type ") +
                                traits(w.type).name + " with rows of " + std::to_string(k));
  if (w.ne[2] != 1 || w.ne[3] != 1) throw std::invalid_argument("matmul: weight must be 2-D");
  const CpuTypeTraits& ct = *cpu_traits(w.type, level);
  const size_t act_row = size_t(*row_bytes(ct.act_type, k));

  // Activations in the paired type; kept per calling thread so steady state does not allocate.
  thread_local std::vector<uint8_t> act;
  if (act.size() < act_row * size_t(n)) act.resize(act_row * size_t(n));
  uint8_t* a = act.data();
  pool.run(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t j = begin; j < end; ++j) ct.act_from_float(x + j * k, a + j * act_row, k);
      },
      std::max<int64_t>(1, kMinWorkPerChunk / (k * 4)));

  if (w.packed && ct.packed_tile && m % kPackRows == 0) {
    // Packed weights (pack.h): the offsets of their unsigned storage are taken off per block.
    thread_local std::vector<int32_t> xoff;
    xoff.resize(size_t(n * pack_act_offsets_per_row(w.type, k)));
    pack_act_offsets(w.type, a, act_row, n, k, xoff.data());
    const size_t group_bytes = packed_group_bytes(w.type, k);
    const char* wp = static_cast<const char*>(w.packed);
    const int32_t* xo = xoff.data();
    PackedTileFn tile = ct.packed_tile;
    pool.run(
        m / kPackRows,
        [&](int64_t begin, int64_t end) {
          tile(k, wp + size_t(begin) * group_bytes, end - begin, a, act_row, xo, n,
               y + begin * kPackRows, size_t(m));
        },
        std::max<int64_t>(1, kMinWorkPerChunk / (k * n * kPackRows)));
    return;
  }

  VecDotFn dot = ct.vec_dot;
  DotTileFn tile = ct.vec_dot_tile;
  if (ct.repack_dot && m % 8 == 0) {
    dot = ct.repack_dot;  // llama.cpp repacks such weights at load (cpu_traits.h)
    tile = ct.repack_dot_tile;
  } else if (ct.gemm_dot && n >= 2 && k % 16 == 0 && m % 4 == 0) {
    dot = ct.gemm_dot;
    tile = ct.gemm_dot_tile;
  }
  const char* wdata = static_cast<const char*>(w.data);
  const size_t wstride = w.nb[1];
  // Each thread takes a contiguous range of weight rows and walks it in blocks of kRowBlock
  // rows (small enough to stay in L1/L2) against every activation row, so each weight byte is
  // read from memory once per matmul.
  pool.run(
      m,
      [&](int64_t begin, int64_t end) {
        for (int64_t i0 = begin; i0 < end; i0 += kRowBlock) {
          const int64_t nr = std::min(kRowBlock, end - i0);
          const char* wblock = wdata + size_t(i0) * wstride;
          if (tile) {
            tile(k, wblock, wstride, nr, a, act_row, n, y + i0, size_t(m));
            continue;
          }
          for (int64_t j = 0; j < n; ++j)
            for (int64_t r = 0; r < nr; ++r)
              y[j * m + i0 + r] = dot(k, wblock + size_t(r) * wstride, a + j * act_row);
        }
      },
      std::max<int64_t>(1, kMinWorkPerChunk / (k * n)));
}

}  // namespace kvrun::cpu
