// matmul.cpp — quantized-weight matmul on the CPU (see matmul.h).
#include "cpu/matmul.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/cpu_traits.h"

namespace kvrun::cpu {

namespace {

/// Multiply-adds below which a chunk is not worth a thread wake-up.
constexpr int64_t kMinWorkPerChunk = 32 * 1024;

}  // namespace

bool matmul_supports(DType t, int64_t k) {
  const CpuTypeTraits* ct = cpu_traits(t);
  return ct && k > 0 && k % traits(t).block_elems == 0 && k % traits(ct->act_type).block_elems == 0;
}

void matmul(ThreadPool& pool, const Tensor& w, const float* x, int64_t n, float* y) {
  const int64_t k = w.ne[0], m = w.ne[1];
  if (!matmul_supports(w.type, k))
    throw std::invalid_argument(std::string("matmul: unsupported weight type ") +
                                traits(w.type).name + " with rows of " + std::to_string(k));
  if (w.ne[2] != 1 || w.ne[3] != 1) throw std::invalid_argument("matmul: weight must be 2-D");
  const CpuTypeTraits& ct = *cpu_traits(w.type);
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

  VecDotFn dot = ct.vec_dot;
  if (ct.repack_dot && m % 8 == 0)
    dot = ct.repack_dot;  // llama.cpp repacks such weights at load (cpu_traits.h)
  else if (ct.gemm_dot && n >= 2 && k % 16 == 0 && m % 4 == 0)
    dot = ct.gemm_dot;
  const char* wdata = static_cast<const char*>(w.data);
  const size_t wstride = w.nb[1];
  pool.run(
      m,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const void* wrow = wdata + size_t(i) * wstride;
          for (int64_t j = 0; j < n; ++j) y[j * m + i] = dot(k, wrow, a + j * act_row);
        }
      },
      std::max<int64_t>(1, kMinWorkPerChunk / (k * n)));
}

}  // namespace kvrun::cpu
