// pack.cpp — the row-interleaved weight layout of the CPU backend (see pack.h).
#include "cpu/pack.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "blocks.h"
#include "cpu/cpu_info.h"
#include "cpu/cpu_traits.h"
#include "fp16.h"

namespace kvrun::cpu {

namespace {

/// Bytes of one block (32 values; 256 for the K-quants) of a 16-row group.
size_t group_block_bytes(DType t) {
  switch (t) {
    case DType::Q4_0:
      return size_t(kPackRows) * sizeof(block_q4_0);
    case DType::Q8_0:
      return size_t(kPackRows) * sizeof(block_q8_0);
    case DType::Q4_K:
      return size_t(kPackRows) * sizeof(block_q4_K);
    case DType::Q5_K:
      return size_t(kPackRows) * sizeof(block_q5_K);
    case DType::MXFP4:
      return size_t(kPackRows) * sizeof(block_mxfp4);
    default:
      return size_t(kPackRows) * sizeof(block_q6_K);
  }
}

bool packable_type(DType t) {
  return t == DType::Q4_0 || t == DType::Q8_0 || t == DType::Q4_K || t == DType::Q5_K ||
         t == DType::Q6_K || t == DType::MXFP4;
}

/// The first 2304 bytes of a q4_K or q5_K super-block of 16 rows (pack.h layout: d, dmin, the
/// scale bytes and the nibbles) from row r's block src[r].
template <typename Block>
void pack_k4_block(const Block* const* src, uint8_t* dst) {
  for (int r = 0; r < kPackRows; ++r) {
    const Block& b = *src[r];
    std::memcpy(dst + 2 * r, &b.d, 2);
    std::memcpy(dst + 32 + 2 * r, &b.dmin, 2);
    for (int t = 0; t < K_SCALE_SIZE; ++t) dst[64 + 16 * t + r] = b.scales[t];
    for (int j2 = 0; j2 < 4; ++j2)
      for (int i = 0; i < 8; ++i)
        std::memcpy(dst + 256 + 64 * (8 * j2 + i) + 4 * r, b.qs + 32 * j2 + 4 * i, 4);
  }
}

/// One q4_K super-block of 16 rows (pack.h layout) from row r's block src[r].
void pack_q4_K_block(const block_q4_K* const* src, uint8_t* dst) { pack_k4_block(src, dst); }

/// One q5_K super-block of 16 rows (pack.h layout) from row r's block src[r]: q4_K's layout,
/// then the high bits qh in 8 chunks of 64 bytes, chunk i holding qh[4i .. 4i+3] of row r at 4·r.
void pack_q5_K_block(const block_q5_K* const* src, uint8_t* dst) {
  pack_k4_block(src, dst);
  for (int r = 0; r < kPackRows; ++r)
    for (int i = 0; i < 8; ++i) std::memcpy(dst + 2304 + 64 * i + 4 * r, src[r]->qh + 4 * i, 4);
}

/// The 256 values of a q6_K block as stored, q + 32 in 0..63, in element order (GGUF bit
/// layout: per half of 128 values, ql's 64 bytes give the low nibbles of values 0..63 (low
/// halves) and 64..127 (high halves), qh's 32 bytes their two high bits in pairs by quarter; the
/// same unpacking as vec_dot_q6_K_q8_K), in four 32-value runs per half.
void q6_K_values(const block_q6_K& blk, uint8_t* u) {
  for (int n = 0; n < 2; ++n) {
    const uint8_t* ql = blk.ql + 64 * n;
    const uint8_t* qh = blk.qh + 32 * n;
    uint8_t* v = u + 128 * n;
    for (int l = 0; l < 32; ++l) {
      v[l] = uint8_t((ql[l] & 0x0F) | ((qh[l] & 3) << 4));
      v[l + 32] = uint8_t((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
      v[l + 64] = uint8_t((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      v[l + 96] = uint8_t((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}

/// One q6_K super-block of 16 rows (pack.h layout) from row r's block src[r].
void pack_q6_K_block(const block_q6_K* const* src, uint8_t* dst) {
  for (int r = 0; r < kPackRows; ++r) {
    const block_q6_K& b = *src[r];
    std::memcpy(dst + 2 * r, &b.d, 2);
    for (int j = 0; j < 16; ++j) dst[32 + 16 * j + r] = uint8_t(b.scales[j]);
    uint8_t u[QK_K];
    q6_K_values(b, u);
    // Per 16 values v of sub-block j, three 4-byte words (byte e of each as commented), formed
    // four bytes at a time: every byte is < 64, and each shift is masked within its byte.
    for (int j = 0; j < 16; ++j) {
      uint8_t* quad = dst + 288 + 192 * j;
      uint32_t w[4];
      std::memcpy(w, u + 16 * j, 16);
      const uint32_t hi2 = 0x03030303u, lo4 = 0x0F0F0F0Fu;
      // q0: v[e] | (v[8 + e] >> 4) << 6; q1: v[4 + e] | (v[12 + e] >> 4) << 6;
      // q2: (v[8 + e] & 15) | (v[12 + e] & 15) << 4.
      const uint32_t q0 = w[0] | ((w[2] >> 4) & hi2) << 6;
      const uint32_t q1 = w[1] | ((w[3] >> 4) & hi2) << 6;
      const uint32_t q2 = (w[2] & lo4) | (w[3] & lo4) << 4;
      std::memcpy(quad + 4 * r, &q0, 4);
      std::memcpy(quad + 64 + 4 * r, &q1, 4);
      std::memcpy(quad + 128 + 4 * r, &q2, 4);
    }
  }
}

/// Super-block b of rows 16·g .. 16·g+15 of `w` packed into dst by `pack` (pack_q4_K_block,
/// pack_q5_K_block, pack_q6_K_block).
template <typename Block>
void pack_super_block(const Tensor& w, int64_t g, int64_t b,
                      void (*pack)(const Block* const*, uint8_t*), uint8_t* dst) {
  const Block* src[kPackRows];
  for (int64_t r = 0; r < kPackRows; ++r)
    src[r] = static_cast<const Block*>(w.row(g * kPackRows + r)) + b;
  pack(src, dst);
}

}  // namespace

bool pack_supported(const Tensor& w) { return pack_supported(w, cpu_level()); }

bool pack_supported(const Tensor& w, CpuLevel level) {
  if (!packable_type(w.type) || !w.data || w.ne[2] != 1 || w.ne[3] != 1) return false;
  const int64_t be = traits(w.type).block_elems;
  if (w.ne[0] % be != 0 || w.ne[1] % kPackRows != 0 || w.ne[1] == 0 || w.ne[0] == 0) return false;
  if (w.nb[1] != size_t(w.ne[0] / be) * traits(w.type).block_bytes) return false;
  if (!cpu_level_supported(level)) return false;
  const CpuTypeTraits* ct = cpu_traits(w.type, level);
  return ct && ct->packed_tile;
}

Buffer pack_weight(const Tensor& w) { return pack_weight(w, cpu_level()); }

namespace {

/// Packs the groups [g0, g1) of w into dst (group g at g · nb · gb bytes).
void pack_groups(const Tensor& w, int64_t g0, int64_t g1, uint8_t* out) {
  const int64_t nb = w.ne[0] / traits(w.type).block_elems;
  const size_t gb = group_block_bytes(w.type);
  uint8_t* dst = out + size_t(g0 * nb) * gb;
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t b = 0; b < nb; ++b, dst += gb) {
      if (w.type == DType::Q4_K) {
        pack_super_block<block_q4_K>(w, g, b, pack_q4_K_block, dst);
        continue;
      }
      if (w.type == DType::Q5_K) {
        pack_super_block<block_q5_K>(w, g, b, pack_q5_K_block, dst);
        continue;
      }
      if (w.type == DType::Q6_K) {
        pack_super_block<block_q6_K>(w, g, b, pack_q6_K_block, dst);
        continue;
      }
      for (int64_t r = 0; r < kPackRows; ++r) {
        if (w.type == DType::Q4_0) {
          const block_q4_0& src = static_cast<const block_q4_0*>(w.row(g * kPackRows + r))[b];
          std::memcpy(dst + 2 * r, &src.d, 2);
          for (int q = 0; q < 4; ++q) std::memcpy(dst + 32 + 64 * q + 4 * r, src.qs + 4 * q, 4);
        } else if (w.type == DType::MXFP4) {
          const block_mxfp4& src = static_cast<const block_mxfp4*>(w.row(g * kPackRows + r))[b];
          dst[r] = src.e;
          for (int q = 0; q < 4; ++q) std::memcpy(dst + 16 + 64 * q + 4 * r, src.qs + 4 * q, 4);
        } else {
          const block_q8_0& src = static_cast<const block_q8_0*>(w.row(g * kPackRows + r))[b];
          std::memcpy(dst + 2 * r, &src.d, 2);
          for (int i = 0; i < 8; ++i)
            for (int e = 0; e < 4; ++e)
              dst[32 + 64 * i + 4 * r + e] = uint8_t(src.qs[4 * i + e]) ^ 0x80;  // q + 128
        }
      }
    }
}

/// Packed bytes a thread of pack_weight gets at least.
constexpr size_t kPackBytesPerThread = size_t(4) << 20;

}  // namespace

Buffer pack_weight(const Tensor& w, CpuLevel level) {
  static const int n = std::min(16, physical_cores());  // read once: sysfs, one file a core
  return pack_weight(w, level, n);
}

Buffer pack_weight(const Tensor& w, CpuLevel level, int n_threads) {
  if (!pack_supported(w, level))
    throw std::invalid_argument("pack_weight: this tensor cannot be packed");
  const int64_t nb = w.ne[0] / traits(w.type).block_elems, groups = w.ne[1] / kPackRows;
  const size_t bytes = size_t(groups * nb) * group_block_bytes(w.type);
  Buffer out = Buffer::uninitialized(bytes);
  auto* dst = static_cast<uint8_t*>(out.data());
  const int64_t t = std::clamp<int64_t>(int64_t(bytes / kPackBytesPerThread), 1,
                                        std::min<int64_t>(std::max(n_threads, 1), groups));
  if (t <= 1) {
    pack_groups(w, 0, groups, dst);
    return out;
  }
  // Contiguous group ranges: each thread reads its rows of the source and first-touches (and so
  // faults in) its part of the copy.
  // A range whose thread could not be started (std::system_error: a thread limit) is packed
  // here after the others.
  std::vector<std::thread> threads;
  threads.reserve(size_t(t - 1));
  int64_t i = 1;
  try {
    for (; i < t; ++i)
      threads.emplace_back(pack_groups, std::cref(w), groups * i / t, groups * (i + 1) / t, dst);
  } catch (const std::system_error&) {
  }
  pack_groups(w, 0, groups / t, dst);
  for (; i < t; ++i) pack_groups(w, groups * i / t, groups * (i + 1) / t, dst);
  for (std::thread& th : threads) th.join();
  return out;
}

size_t packed_group_bytes(DType t, int64_t k) {
  return size_t(k / traits(t).block_elems) * group_block_bytes(t);
}

int64_t pack_act_offsets_per_row(DType t, int64_t k) {
  if (t == DType::Q4_K || t == DType::Q5_K) return 0;  // their kernels read q8_K's bsums
  return t == DType::Q4_0 ? k / 16 : t == DType::Q8_0 || t == DType::MXFP4 ? k / 32 * 9 : k / 4;
}

void pack_act_offsets(DType t, const void* act, size_t act_row, int64_t n, int64_t k,
                      int32_t* out) {
  if (t == DType::Q4_K || t == DType::Q5_K) return;
  if (t == DType::Q6_K) {
    // −32 · Σ of each 4 consecutive activation quants (the +32 of the stored q6_K values).
    for (int64_t j = 0; j < n; ++j) {
      const block_q8_K* xb =
          reinterpret_cast<const block_q8_K*>(static_cast<const uint8_t*>(act) + j * act_row);
      for (int64_t b = 0; b < k / QK_K; ++b) {
        const int8_t* q = xb[b].qs;
        for (int i = 0; i < QK_K / 4; ++i)
          *out++ = -32 * (q[4 * i] + q[4 * i + 1] + q[4 * i + 2] + q[4 * i + 3]);
      }
    }
    return;
  }
  const int64_t nb = k / 32;
  for (int64_t j = 0; j < n; ++j) {
    const block_q8_0* xb =
        reinterpret_cast<const block_q8_0*>(static_cast<const uint8_t*>(act) + j * act_row);
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* q = xb[b].qs;
      if (t == DType::Q4_0) {
        int32_t sum = 0;
        for (int i = 0; i < 32; ++i) sum += q[i];
        *out++ = -8 * sum;
      } else {  // q8_0's stored q + 128, mxfp4's looked-up level + 12
        const int32_t bias = t == DType::MXFP4 ? 12 : 128;
        for (int i = 0; i < 8; ++i)
          *out++ = -bias * (q[4 * i] + q[4 * i + 1] + q[4 * i + 2] + q[4 * i + 3]);
      }
      const float d = fp16_to_f32(xb[b].d);  // then the block's scale, as float bits
      std::memcpy(out++, &d, sizeof d);
    }
  }
}

}  // namespace kvrun::cpu
