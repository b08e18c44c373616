// vec_dot_iq.cpp — the scalar dots of the grid-based i-quants (iq3_s, iq2_s, iq3_xxs, iq2_xxs,
// iq2_xs, iq1_s, iq1_m) against q8_K.
//
// Per super-block of 256: each value is a grid byte (iq_grids.h) with a sign bit; the integer
// products grid·sign·q_x are summed per scale group, weighted by the group's odd integer scale
// factor 1 + 2·s, and summed over the super-block (exact: |isum| < 2^26). Then one float step,
// acc = fma(d_x·d_w, float(isum), acc), with a single accumulator; the format's constant factor
// (1 for iq3_s; 1/8 for the iq2 types, whose scale is d·(0.5 + s)·0.25 = d·(1 + 2·s)/8; 1/4 for
// iq3_xxs, d·(0.5 + s)·0.5; 1/8 for iq1_s / iq1_m, whose values d·(2s + 1)·(grid ± 1/8) are
// summed as (2s + 1)·(8·grid ± 1)) is applied to the total. The SIMD kernels (x86/iq_grid_x86.inl)
// compute the same integers, so they give the same floats. Layouts: blocks.h.
#include <cmath>
#include <cstring>

#include "blocks.h"
#include "cpu/vec_dot.h"
#include "iq_grids.h"

namespace kvrun::cpu {

namespace {

/// Σ_i ±grid byte i · x[i] over `n` values, value i negated when bit i of `signs` is set.
template <typename T>
int signed_grid_dot(T grid_entry, unsigned signs, const int8_t* x, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) {
    const int g = uint8_t(grid_entry >> (8 * i));
    s += ((signs >> i) & 1 ? -g : g) * int(x[i]);
  }
  return s;
}

/// iq3_s: Σ_j (1 + 2·s_j) · Σ over sub-block j of grid·sign·q_x.
int iq3_s_isum(const block_iq3_s& w, const int8_t* x) {
  int total = 0;
  for (int j = 0; j < QK_K / 32; ++j) {
    int sub = 0;
    for (int k = 0; k < 8; ++k) {
      const int q = 8 * j + k;
      const int idx = w.qs[q] | (((w.qh[j] >> k) & 1) << 8);
      sub += signed_grid_dot(kIq3sGrid[idx], w.signs[q / 2] >> (4 * (q % 2)), x + 4 * q, 4);
    }
    total += (1 + 2 * ((w.scales[j / 2] >> (4 * (j % 2))) & 0x0F)) * sub;
  }
  return total;
}

/// iq2_s: Σ_h (1 + 2·s_h) · Σ over half-sub-block h (16 values) of grid·sign·q_x.
int iq2_s_isum(const block_iq2_s& w, const int8_t* x) {
  int total = 0;
  for (int j = 0; j < QK_K / 32; ++j) {
    for (int h = 0; h < 2; ++h) {
      int sub = 0;
      for (int l = 2 * h; l < 2 * h + 2; ++l) {
        const int g = 4 * j + l;
        const int idx = w.qs[g] | (((w.qh[j] >> (2 * l)) & 3) << 8);
        sub += signed_grid_dot(kIq2sGrid[idx], w.qs[QK_K / 8 + g], x + 8 * g, 8);
      }
      total += (1 + 2 * ((w.scales[j] >> (4 * h)) & 0x0F)) * sub;
    }
  }
  return total;
}

/// iq3_xxs: Σ_j (1 + 2·s_j) · Σ over sub-block j of grid·sign·q_x.
int iq3_xxs_isum(const block_iq3_xxs& w, const int8_t* x) {
  int total = 0;
  for (int j = 0; j < QK_K / 32; ++j) {
    uint32_t aux;
    std::memcpy(&aux, w.qs + QK_K / 4 + 4 * j, 4);
    int sub = 0;
    for (int l = 0; l < 4; ++l) {
      const unsigned signs = kIqSigns[(aux >> (7 * l)) & 127];
      const int8_t* xl = x + 32 * j + 8 * l;
      sub += signed_grid_dot(kIq3xxsGrid[w.qs[8 * j + 2 * l]], signs, xl, 4);
      sub += signed_grid_dot(kIq3xxsGrid[w.qs[8 * j + 2 * l + 1]], signs >> 4, xl + 4, 4);
    }
    total += int(1 + 2 * (aux >> 28)) * sub;
  }
  return total;
}

/// iq2_xxs: Σ_j (1 + 2·s_j) · Σ over sub-block j of grid·sign·q_x.
int iq2_xxs_isum(const block_iq2_xxs& w, const int8_t* x) {
  int total = 0;
  for (int j = 0; j < QK_K / 32; ++j) {
    uint32_t aux[2];
    std::memcpy(aux, w.qs + 4 * j, 8);
    int sub = 0;
    for (int l = 0; l < 4; ++l)
      sub += signed_grid_dot(kIq2xxsGrid[(aux[0] >> (8 * l)) & 255],
                             kIqSigns[(aux[1] >> (7 * l)) & 127], x + 32 * j + 8 * l, 8);
    total += int(1 + 2 * (aux[1] >> 28)) * sub;
  }
  return total;
}

/// iq2_xs: Σ_h (1 + 2·s_h) · Σ over half-sub-block h (16 values) of grid·sign·q_x.
int iq2_xs_isum(const block_iq2_xs& w, const int8_t* x) {
  int total = 0;
  for (int h = 0; h < QK_K / 16; ++h) {
    int sub = 0;
    for (int g = 2 * h; g < 2 * h + 2; ++g)
      sub += signed_grid_dot(kIq2xsGrid[w.qs[g] & 511], kIqSigns[w.qs[g] >> 9], x + 8 * g, 8);
    total += (1 + 2 * ((w.scales[h / 2] >> (4 * (h % 2))) & 0x0F)) * sub;
  }
  return total;
}

/// Σ_i (8·grid_i + σ)·x[i] over 8 values, grid_i the int8 bytes of `grid_entry` (−1, 0, 1) and
/// σ = ±1 the sign of the shift: 8× the exact Σ (grid_i ± 1/8)·x[i] of iq1_s / iq1_m.
int shifted_grid_dot(uint64_t grid_entry, int sigma, const int8_t* x) {
  int s = 0;
  for (int i = 0; i < 8; ++i) s += (8 * int(int8_t(grid_entry >> (8 * i))) + sigma) * int(x[i]);
  return s;
}

/// iq1_s: Σ_j (1 + 2·s_j) · Σ over sub-block j of (8·grid + σ_j)·q_x (8× the value sum).
int iq1_s_isum(const block_iq1_s& w, const int8_t* x) {
  int total = 0;
  for (int j = 0; j < QK_K / 32; ++j) {
    const int qh = w.qh[j];
    const int sigma = qh & 0x8000 ? -1 : 1;
    int sub = 0;
    for (int l = 0; l < 4; ++l)
      sub += shifted_grid_dot(kIq1sGrid[w.qs[4 * j + l] | (((qh >> (3 * l)) & 7) << 8)], sigma,
                              x + 32 * j + 8 * l);
    total += (1 + 2 * ((qh >> 12) & 7)) * sub;
  }
  return total;
}

/// iq1_m: Σ_h (1 + 2·s_h) · Σ over half-sub-block h of (8·grid + σ_g)·q_x, σ_g per 8 values.
int iq1_m_isum(const block_iq1_m& w, const int8_t* x) {
  int total = 0;
  for (int h = 0; h < QK_K / 16; ++h) {
    int sub = 0;
    for (int g = 2 * h; g < 2 * h + 2; ++g) {
      const int nib = (w.qh[g / 2] >> (4 * (g % 2))) & 15;
      sub += shifted_grid_dot(kIq1sGrid[w.qs[g] | ((nib & 7) << 8)], nib & 8 ? -1 : 1, x + 8 * g);
    }
    total += (1 + 2 * iq1_m_scale(w, h)) * sub;
  }
  return total;
}

/// The f16 bits of a super-block's d.
template <typename Block>
uint16_t d_bits(const Block& b) {
  return b.d;
}
template <>
uint16_t d_bits(const block_iq1_m& b) {
  return iq1_m_d(b);
}

/// acc = fma(d_x·d_w, float(isum(block)), acc) over the super-blocks, times `factor`.
template <typename Block, int (*isum)(const Block&, const int8_t*)>
float grid_dot(int64_t n, const void* w, const void* x, float factor) {
  const auto* bw = static_cast<const Block*>(w);
  const auto* bx = static_cast<const block_q8_K*>(x);
  float acc = 0.0f;
  for (int64_t b = 0; b < n / QK_K; ++b)
    acc = std::fma(bx[b].d * fp16_lut(d_bits(bw[b])), float(isum(bw[b], bx[b].qs)), acc);
  return acc * factor;
}

}  // namespace

float vec_dot_iq3_s_q8_K(int64_t n, const void* w, const void* x) {
  return grid_dot<block_iq3_s, iq3_s_isum>(n, w, x, 1.0f);
}

float vec_dot_iq2_s_q8_K(int64_t n, const void* w, const void* x) {
  return grid_dot<block_iq2_s, iq2_s_isum>(n, w, x, 0.125f);
}

float vec_dot_iq3_xxs_q8_K(int64_t n, const void* w, const void* x) {
  return grid_dot<block_iq3_xxs, iq3_xxs_isum>(n, w, x, 0.25f);
}

float vec_dot_iq2_xxs_q8_K(int64_t n, const void* w, const void* x) {
  return grid_dot<block_iq2_xxs, iq2_xxs_isum>(n, w, x, 0.125f);
}

float vec_dot_iq2_xs_q8_K(int64_t n, const void* w, const void* x) {
  return grid_dot<block_iq2_xs, iq2_xs_isum>(n, w, x, 0.125f);
}

float vec_dot_iq1_s_q8_K(int64_t n, const void* w, const void* x) {
  return grid_dot<block_iq1_s, iq1_s_isum>(n, w, x, 0.125f);
}

float vec_dot_iq1_m_q8_K(int64_t n, const void* w, const void* x) {
  return grid_dot<block_iq1_m, iq1_m_isum>(n, w, x, 0.125f);
}

}  // namespace kvrun::cpu
