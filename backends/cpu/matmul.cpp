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
static_assert(kRowBlock == kPackRows, "a unit of work is one packed group");

/// Weights one matmul_many call takes.
constexpr int kMaxOuts = 8;

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
  const MatmulOut out{&w, y};
  matmul_many(pool, &out, 1, x, n, level);
}

void matmul_many(ThreadPool& pool, const MatmulOut* outs, int n_outs, const float* x, int64_t n) {
  matmul_many(pool, outs, n_outs, x, n, cpu_level());
}

namespace {

/// One weight of a matmul_many call, ready to run 16-row units.
struct Part {
  const Tensor* w = nullptr;
  float* y = nullptr;
  int64_t m = 0;
  int64_t units = 0;              ///< ceil(m / 16)
  PackedTileFn packed = nullptr;  ///< set: the packed path (pack.h)
  bool reads_xoff = false;        ///< packed reads activation offsets (CpuTypeTraits)
  const int32_t* xoff = nullptr;  ///< its activation offsets
  size_t group_bytes = 0;         ///< packed bytes of 16 rows
  VecDotFn dot = nullptr;         ///< else: the dot of its shape, or its tile form
  DotTileFn tile = nullptr;
};

/// Rows [16·u0, min(m, 16·u1)) of one part against the n activation rows.
void run_units(const Part& p, int64_t u0, int64_t u1, int64_t k, const uint8_t* a, size_t act_row,
               int64_t n) {
  const int64_t m = p.m;
  if (p.packed) {
    p.packed(k, static_cast<const char*>(p.w->packed) + size_t(u0) * p.group_bytes, u1 - u0, a,
             act_row, p.xoff, n, p.y + u0 * kPackRows, size_t(m));
    return;
  }
  const char* wdata = static_cast<const char*>(p.w->data);
  const size_t wstride = p.w->nb[1];
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t i0 = u * kRowBlock, nr = std::min(kRowBlock, m - i0);
    const char* wblock = wdata + size_t(i0) * wstride;
    if (p.tile) {
      p.tile(k, wblock, wstride, nr, a, act_row, n, p.y + i0, size_t(m));
      continue;
    }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t r = 0; r < nr; ++r)
        p.y[j * m + i0 + r] = p.dot(k, wblock + size_t(r) * wstride, a + j * act_row);
  }
}

/// Sets up `p` for weight `w` (output y) against n activation rows of k: the packed path
/// (pack.h; p.xoff is left for the caller; the fast-order kernel when kernel_order() is fast,
/// n ≥ 2 and the level has one) or the dot of its shape.
void choose_kernel(Part& p, const Tensor& w, float* y, const CpuTypeTraits& ct, int64_t n,
                   int64_t k) {
  p.w = &w;
  p.y = y;
  p.m = w.ne[1];
  p.units = (p.m + kRowBlock - 1) / kRowBlock;
  if (w.packed && ct.packed_tile && p.m % kPackRows == 0) {
    const bool fast = ct.packed_fast_tile && n >= 2 && kernel_order() == KernelOrder::fast;
    p.packed = fast ? ct.packed_fast_tile : ct.packed_tile;
    p.reads_xoff = !fast && ct.packed_reads_xoff;  // the fast kernels read none
    p.group_bytes = packed_group_bytes(w.type, k);
  } else if (ct.repack_dot && p.m % 8 == 0) {
    p.dot = ct.repack_dot;  // llama.cpp repacks such weights at load (cpu_traits.h)
    p.tile = ct.repack_dot_tile;
  } else if (ct.gemm_dot && n >= 2 && k % 16 == 0 && p.m % 4 == 0) {
    p.dot = ct.gemm_dot;
    p.tile = ct.gemm_dot_tile;
  } else {
    p.dot = ct.vec_dot;
    p.tile = ct.vec_dot_tile;
  }
}

/// Throws std::invalid_argument unless matmul can use `w` (of any rank).
void check_weight(const Tensor& w) {
  if (!matmul_supports(w.type, w.ne[0]))
    throw std::invalid_argument(std::string("matmul: unsupported weight type ") +
                                traits(w.type).name + " with rows of " + std::to_string(w.ne[0]));
}

}  // namespace

void matmul_many(ThreadPool& pool, const MatmulOut* outs, int n_outs, const float* x, int64_t n,
                 CpuLevel level) {
  if (n_outs <= 0) return;
  if (n_outs > kMaxOuts) throw std::invalid_argument("matmul_many: at most 8 weights");
  const int64_t k = outs[0].w->ne[0];
  const CpuTypeTraits* ct0 = cpu_traits(outs[0].w->type, level);
  for (int i = 0; i < n_outs; ++i) {
    const Tensor& w = *outs[i].w;
    check_weight(w);
    if (w.ne[2] != 1 || w.ne[3] != 1) throw std::invalid_argument("matmul: weight must be 2-D");
    if (w.ne[0] != k || cpu_traits(w.type, level)->act_type != ct0->act_type)
      throw std::invalid_argument(
          "matmul_many: the weights need rows of one length and one activation type");
  }
  const size_t act_row = size_t(*row_bytes(ct0->act_type, k));

  // Activations in the paired type, converted once for every weight; kept per calling thread so
  // steady state does not allocate.
  thread_local std::vector<uint8_t> act;
  if (act.size() < act_row * size_t(n)) act.resize(act_row * size_t(n));
  uint8_t* a = act.data();
  pool.run(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t j = begin; j < end; ++j) ct0->act_from_float(x + j * k, a + j * act_row, k);
      },
      std::max<int64_t>(1, kMinWorkPerChunk / (k * 4)));

  // Per weight: the packed path (pack.h; the offsets of the unsigned storage are computed once
  // per weight type) or the dot of its shape.
  thread_local std::vector<int32_t> xoffs[kMaxOuts];
  Part parts[kMaxOuts];
  int64_t total = 0;
  for (int i = 0; i < n_outs; ++i) {
    const Tensor& w = *outs[i].w;
    Part& p = parts[i];
    choose_kernel(p, w, outs[i].y, *cpu_traits(w.type, level), n, k);
    if (p.reads_xoff) {
      for (int e = 0; e < i && !p.xoff; ++e)  // an earlier weight of the same type has them
        if (parts[e].reads_xoff && parts[e].w->type == w.type) p.xoff = parts[e].xoff;
      if (!p.xoff) {
        std::vector<int32_t>& xo = xoffs[i];
        xo.resize(size_t(n * pack_act_offsets_per_row(w.type, k)));
        pack_act_offsets(w.type, a, act_row, n, k, xo.data());
        p.xoff = xo.data();
      }
    }
    total += p.units;
  }
  // One job over the 16-row units of every weight: each thread takes a contiguous range (its own
  // weight bytes, read from memory once per call) and walks it against every activation row.
  pool.run(
      total,
      [&](int64_t begin, int64_t end) {
        int64_t base = 0;
        for (int i = 0; i < n_outs && begin < end; base += parts[i].units, ++i) {
          const int64_t u0 = std::max(begin, base) - base;
          const int64_t u1 = std::min(end, base + parts[i].units) - base;
          if (u0 < u1) run_units(parts[i], u0, u1, k, a, act_row, n);
        }
      },
      std::max<int64_t>(1, kMinWorkPerChunk / (k * n * kRowBlock)));
}

void matmul_id(ThreadPool& pool, const Tensor& w, const float* x, bool x_per_slot,
               const int32_t* ids, int64_t n, int64_t n_used, float* y) {
  matmul_id(pool, w, x, x_per_slot, ids, n, n_used, y, cpu_level());
}

namespace {

/// The (row, slot) pairs i < n_pairs grouped per expert, in row order (a counting sort):
/// expert e's are order[start[e] … start[e+1]), so each expert's weights are read once for all
/// its rows. Throws std::out_of_range for an id outside [0, n_exp).
void group_by_expert(const int32_t* ids, int64_t n_pairs, int64_t n_exp,
                     std::vector<int64_t>& start, std::vector<int64_t>& order) {
  start.assign(size_t(n_exp + 1), 0);
  order.resize(size_t(n_pairs));
  for (int64_t i = 0; i < n_pairs; ++i) {
    if (ids[i] < 0 || ids[i] >= n_exp)
      throw std::out_of_range("matmul_id: expert id " + std::to_string(ids[i]) +
                              " is outside [0, " + std::to_string(n_exp) + ")");
    ++start[size_t(ids[i]) + 1];
  }
  for (int64_t e = 0; e < n_exp; ++e) start[size_t(e + 1)] += start[size_t(e)];
  thread_local std::vector<int64_t> fill;
  fill.assign(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < n_pairs; ++i) order[size_t(fill[size_t(ids[i])]++)] = i;
}

/// Expert e of the 3-D weight w as a 2-D matrix, with its rows in w's packed copy (pack.h: the
/// experts' 16-row groups one after the other) when w has one.
Tensor expert_view(const Tensor& w, int64_t e) {
  const int64_t k = w.ne[0], m = w.ne[1];
  Tensor t = w;
  t.ne[2] = 1;
  t.nb[2] = t.nb[3] = t.nb[1] * size_t(m);
  t.data = static_cast<char*>(w.data) + size_t(e) * w.nb[2];
  t.packed = w.packed && m % kPackRows == 0
                 ? static_cast<const char*>(w.packed) +
                       size_t(e * (m / kPackRows)) * packed_group_bytes(w.type, k)
                 : nullptr;
  return t;
}

}  // namespace

void matmul_id(ThreadPool& pool, const Tensor& w, const float* x, bool x_per_slot,
               const int32_t* ids, int64_t n, int64_t n_used, float* y, CpuLevel level) {
  check_weight(w);
  if (w.ne[3] != 1) throw std::invalid_argument("matmul_id: weight must be 3-D");
  const int64_t k = w.ne[0], m = w.ne[1], n_exp = w.ne[2], n_pairs = n * n_used;
  if (n_pairs <= 0) return;
  const CpuTypeTraits& ct = *cpu_traits(w.type, level);
  const size_t act_row = size_t(*row_bytes(ct.act_type, k));

  // Scratch kept per calling thread (steady state does not allocate); the pool's lambdas reach
  // it through these references, not as their own threads' thread_locals.
  thread_local std::vector<int64_t> tl_start, tl_order;
  std::vector<int64_t>& start = tl_start;
  std::vector<int64_t>& order = tl_order;
  group_by_expert(ids, n_pairs, n_exp, start, order);

  // Each pair's input row in the paired activation type, in grouped order.
  thread_local std::vector<uint8_t> act;
  if (act.size() < act_row * size_t(n_pairs)) act.resize(act_row * size_t(n_pairs));
  uint8_t* a = act.data();
  pool.run(
      n_pairs,
      [&](int64_t begin, int64_t end) {
        for (int64_t q = begin; q < end; ++q) {
          const int64_t i = order[size_t(q)], src = x_per_slot ? i : i / n_used;
          ct.act_from_float(x + src * k, a + q * act_row, k);
        }
      },
      std::max<int64_t>(1, kMinWorkPerChunk / (k * 4)));

  // One part per expert with rows: its matrix (and packed copy) as a 2-D view.
  thread_local std::vector<Tensor> tl_slices;
  thread_local std::vector<Part> tl_parts;
  thread_local std::vector<int32_t> tl_xoff;
  thread_local std::vector<float> tl_out;
  std::vector<Tensor>& slices = tl_slices;
  std::vector<Part>& parts = tl_parts;
  std::vector<int32_t>& xoff = tl_xoff;
  std::vector<float>& out = tl_out;
  slices.assign(size_t(n_exp), Tensor{});
  parts.assign(size_t(n_exp), Part{});
  if (out.size() < size_t(n_pairs * m)) out.resize(size_t(n_pairs * m));
  const int64_t per_row =
      w.packed && ct.packed_tile && ct.packed_reads_xoff ? pack_act_offsets_per_row(w.type, k) : 0;
  if (per_row > 0) {
    xoff.resize(size_t(n_pairs * per_row));
    pack_act_offsets(w.type, a, act_row, n_pairs, k, xoff.data());
  }
  int64_t total = 0, n_active = 0;
  for (int64_t e = 0; e < n_exp; ++e) {
    const int64_t s0 = start[size_t(e)], cnt = start[size_t(e + 1)] - s0;
    if (cnt == 0) continue;
    Tensor& t = slices[size_t(e)];
    t = expert_view(w, e);
    Part& p = parts[size_t(e)];
    choose_kernel(p, t, out.data() + s0 * m, ct, cnt, k);
    if (p.reads_xoff) p.xoff = xoff.data() + s0 * per_row;
    total += p.units;
    ++n_active;
  }
  // One job over every expert's 16-row units, each walked against that expert's rows.
  pool.run(
      total,
      [&](int64_t begin, int64_t end) {
        int64_t base = 0;
        for (int64_t e = 0; e < n_exp && begin < end; ++e) {
          const Part& p = parts[size_t(e)];
          if (p.units == 0) continue;
          const int64_t u0 = std::max(begin, base) - base;
          const int64_t u1 = std::min(end, base + p.units) - base;
          const int64_t s0 = start[size_t(e)];
          if (u0 < u1)
            run_units(p, u0, u1, k, a + s0 * act_row, act_row, start[size_t(e + 1)] - s0);
          base += p.units;
        }
      },
      std::max<int64_t>(1, kMinWorkPerChunk * n_active / (k * n_pairs * kRowBlock)));
  for (int64_t q = 0; q < n_pairs; ++q)
    std::copy_n(out.data() + q * m, m, y + order[size_t(q)] * m);
}

}  // namespace kvrun::cpu
