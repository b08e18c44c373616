// quants_legacy.cpp — scalar reference codecs of GGUF's legacy block quants: q4_0, q4_1, q5_0,
// q5_1, q8_0, q8_1, and the 4-bit non-linear formats iq4_nl, iq4_xs (its 256-value super-block
// of iq4_nl-coded sub-blocks) and mxfp4 (OCP MX FP4).
//
// Layouts and value formulas: blocks.h (source: the GGUF specification, ggml docs/gguf.md, and
// the ggml block definitions it refers to). All blocks hold 32 values. The decoders follow
// those formulas exactly, so they decode real GGUF files bit for bit. Element order in the
// 4-bit formats (q4_0, q4_1, q5_0, q5_1, iq4_nl): byte j of `qs` holds element j in its low
// nibble and element j + 16 in its high nibble. In q5_0/q5_1 the fifth bit of element i is
// bit i of `qh` read as a little-endian uint32.
//
// The quantizers are kvrun's own:
//   q8_0, q8_1: d = absmax / 127, q = round(x / d) (ties away from zero).
//   q4_0, q5_0: the symmetric absmax rule of GGUF's reference quantizer: take m, the value of
//               largest magnitude *with its sign*, and d = m / -8 (q4_0) or m / -16 (q5_0), so m
//               lands exactly on the extreme level q = 0; q = floor(x / d + 8.5) (or + 16.5),
//               clamped to 0..15 (0..31).
//   q4_1, q5_1: min/max: m = min, d = (max - min) / 15 (or / 31), q = round((x - m) / d).
//   iq4_nl:     a small least-squares search over candidate scales (see iq4nl_search).
//   iq4_xs:     the same search per sub-block, then 6-bit sub-block scales (quantize_block_iq4_xs).
//   mxfp4:      a power-of-two scale from the block's absmax (quantize_block_mxfp4).
// Scales are rounded to f16 first and the quants are computed against the rounded scale, so the
// quantization error bounds hold for the stored block. A scale too large for f16 saturates to
// the largest finite f16 (65504). Inputs are expected finite.
#include <cmath>
#include <cstring>
#include <initializer_list>

#include "fp16.h"
#include "quants.h"

namespace kvrun {
namespace {

/// floor(v) clamped to [lo, hi]; NaN gives lo.
int floor_clamp(float v, int lo, int hi) {
  v = std::floor(v);
  if (!(v >= static_cast<float>(lo))) return lo;
  if (v > static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

/// The element of largest magnitude, with its sign (the first one on ties).
float signed_absmax(const float* x, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(m)) m = x[i];
  return m;
}

void min_max(const float* x, int n, float* mn, float* mx) {
  *mn = x[0];
  *mx = x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < *mn) *mn = x[i];
    if (x[i] > *mx) *mx = x[i];
  }
}

float inverse_or_zero(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

/// Symmetric absmax quantization of 32 values to `bits`-bit codes (4 or 5): d = m / -2^(bits-1),
/// q = floor(x / d + 2^(bits-1) + 0.5) clamped to 0..2^bits-1. Writes q[32], returns f16 d.
uint16_t quantize_symmetric(const float* x, int bits, uint8_t* q) {
  const float half = static_cast<float>(1 << (bits - 1));
  const uint16_t dh = f32_to_fp16_sat(signed_absmax(x, 32) / -half);
  const float id = inverse_or_zero(fp16_to_f32(dh));
  const int qmax = (1 << bits) - 1;
  for (int i = 0; i < 32; ++i) q[i] = uint8_t(floor_clamp(x[i] * id + half + 0.5f, 0, qmax));
  return dh;
}

/// Min/max quantization of 32 values to `bits`-bit codes: x ≈ d * q + m. Writes q[32], d, m.
void quantize_minmax(const float* x, int bits, uint8_t* q, uint16_t* dh, uint16_t* mh) {
  const int qmax = (1 << bits) - 1;
  float mn, mx;
  min_max(x, 32, &mn, &mx);
  *dh = f32_to_fp16_sat((mx - mn) / static_cast<float>(qmax));
  *mh = f32_to_fp16_sat(mn);
  const float id = inverse_or_zero(fp16_to_f32(*dh));
  const float m = fp16_to_f32(*mh);
  for (int i = 0; i < 32; ++i) q[i] = uint8_t(floor_clamp((x[i] - m) * id + 0.5f, 0, qmax));
}

/// Packs 32 4-bit codes: byte j = q[j] | q[j + 16] << 4.
void pack_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
}

/// Unpacks 32 4-bit codes (inverse of pack_nibbles).
void unpack_nibbles(const uint8_t* qs, uint8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 0x0f;
    q[j + 16] = qs[j] >> 4;
  }
}

/// Packs 32 5-bit codes: the low nibbles as pack_nibbles, bit 4 of q[i] into bit i of qh.
void pack_5bit(const uint8_t* q, uint8_t* qs, uint8_t* qh) {
  pack_nibbles(q, qs);
  uint32_t h = 0;
  for (int i = 0; i < 32; ++i) h |= uint32_t((q[i] >> 4) & 1u) << i;
  for (int k = 0; k < 4; ++k) qh[k] = uint8_t(h >> (8 * k));  // little-endian
}

/// Unpacks 32 5-bit codes (inverse of pack_5bit).
void unpack_5bit(const uint8_t* qs, const uint8_t* qh, uint8_t* q) {
  unpack_nibbles(qs, q);
  const uint32_t h =
      uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
  for (int i = 0; i < 32; ++i) q[i] = uint8_t(q[i] | (((h >> i) & 1u) << 4));
}

/// q8 codes of 32 values at absmax / 127; returns the f16 scale, writes q[32] and sum(q).
uint16_t quantize_q8(const float* x, int8_t* q, int* sum) {
  const uint16_t dh = f32_to_fp16_sat(std::fabs(signed_absmax(x, 32)) / 127.0f);
  const float id = inverse_or_zero(fp16_to_f32(dh));
  *sum = 0;
  for (int i = 0; i < 32; ++i) {
    const float v = std::round(x[i] * id);  // ties away from zero
    q[i] = int8_t(v > 127.0f ? 127 : (v < -127.0f ? -127 : static_cast<int>(v)));
    *sum += q[i];
  }
  return dh;
}

/// Index of the iq4_nl level nearest to v (levels are sorted ascending; the lower one when v is
/// halfway): a binary search over the midpoints between neighbouring levels.
int nearest_iq4nl(float v) {
  int lo = 0, hi = 15;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (v > 0.5f * static_cast<float>(kvalues_iq4nl[mid] + kvalues_iq4nl[mid + 1]))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/// Squared error of the n values x coded with scale d (nearest iq4_nl level each); writes the
/// codes to q.
double iq4nl_error(const float* x, int n, float d, uint8_t* q) {
  const float id = inverse_or_zero(d);
  double err = 0.0;
  for (int i = 0; i < n; ++i) {
    q[i] = uint8_t(nearest_iq4nl(x[i] * id));
    const double e = double(x[i]) - double(d) * kvalues_iq4nl[q[i]];
    err += e * e;
  }
  return err;
}

/// The iq4_nl level search (iq4_nl blocks and iq4_xs sub-blocks, n ≤ 32 values): candidate
/// scales d = m / c, with m the signed absmax and c around the extreme levels (-127 maps m to
/// the lowest level, +113 to the highest), each followed by one least-squares refit
/// d = Σ x·l / Σ l·l of its code assignment. Each candidate is scored as `stored(d)`, the scale
/// the format will hold (f16-rounded for iq4_nl); the smallest squared error wins (the zero
/// scale when nothing beats it). Returns that scale and writes its codes to q.
float iq4nl_search(const float* x, int n, float (*stored)(float), uint8_t* q) {
  const float m = signed_absmax(x, n);
  uint8_t cand[32];
  float best_d = 0.0f;
  double best_err = iq4nl_error(x, n, 0.0f, q);  // the all-zero block
  auto consider = [&](float d) {
    d = stored(d);
    const double err = iq4nl_error(x, n, d, cand);
    if (err < best_err) {
      best_err = err;
      best_d = d;
      std::memcpy(q, cand, size_t(n));
    }
  };
  if (m == 0.0f) return best_d;
  for (const float c0 : {-127.0f, 113.0f}) {
    for (int k = -8; k <= 8; ++k) {
      consider(m / (c0 + static_cast<float>(k)));  // leaves that candidate's codes in cand
      double sxl = 0.0, sll = 0.0;
      for (int i = 0; i < n; ++i) {
        sxl += double(x[i]) * kvalues_iq4nl[cand[i]];
        sll += double(kvalues_iq4nl[cand[i]]) * kvalues_iq4nl[cand[i]];
      }
      if (sll > 0.0) consider(static_cast<float>(sxl / sll));
    }
  }
  return best_d;
}

float f16_stored(float d) { return fp16_to_f32(f32_to_fp16_sat(d)); }
float as_is(float d) { return d; }

/// iq4_nl: the level search at f16 scales.
void quantize_block_iq4_nl(const float* x, block_iq4_nl* y) {
  uint8_t q[32];
  y->d = f32_to_fp16_sat(iq4nl_search(x, 32, f16_stored, q));
  pack_nibbles(q, y->qs);
}

/// iq4_xs: the level search per sub-block of 32 at a free scale s_j; the super-block scale
/// d = f16(m / −32), m the s_j of largest magnitude (so m gets code 0, i.e. d·(0 − 32) = m);
/// each sub-block's code is round(s_j / d) + 32 or a neighbour (clamped to 0..63), whichever
/// codes the sub-block with the smaller squared error.
void quantize_block_iq4_xs(const float* x, block_iq4_xs* y) {
  float s[8];
  uint8_t q[32];
  for (int j = 0; j < 8; ++j) s[j] = iq4nl_search(x + 32 * j, 32, as_is, q);
  y->d = f32_to_fp16_sat(signed_absmax(s, 8) / -32.0f);
  const float d = fp16_to_f32(y->d);
  const float id = inverse_or_zero(d);
  y->scales_h = 0;
  std::memset(y->scales_l, 0, sizeof(y->scales_l));
  for (int j = 0; j < 8; ++j) {
    const int ls0 = static_cast<int>(std::lround(s[j] * id)) + 32;
    int best_ls = 32;
    uint8_t best_q[32];
    double best_err = iq4nl_error(x + 32 * j, 32, 0.0f, best_q);
    for (int ls = ls0 - 1; ls <= ls0 + 1; ++ls) {
      if (ls < 0 || ls > 63) continue;
      const double err = iq4nl_error(x + 32 * j, 32, d * static_cast<float>(ls - 32), q);
      if (err < best_err) {
        best_err = err;
        best_ls = ls;
        std::memcpy(best_q, q, sizeof(q));
      }
    }
    y->scales_l[j / 2] = uint8_t(y->scales_l[j / 2] | (best_ls & 0x0F) << (4 * (j % 2)));
    y->scales_h = uint16_t(y->scales_h | (best_ls >> 4) << (2 * j));
    pack_nibbles(best_q, y->qs + 16 * j);
  }
}

/// Index of the mxfp4 level (doubled E2M1, kvalues_mxfp4) nearest to v; the first on ties, which
/// is the level of smaller magnitude (0 before ±1, +m before −m is never a tie). Counting the
/// midpoints 0.5, 1.5, 2.5, 3.5, 5, 7, 10 that |v| exceeds gives the magnitude's index 0..7; a
/// negative v takes the index 8 higher (kvalues_mxfp4 holds −L at the index of L plus 8), except 0.
/// NaN gives 0. Same result as the 16-level search |v − L| < best for every float with |v| < 16
/// (tests/test_quants_iq.cpp Mxfp4EqualsLevelSearch checks the two agree; quantize_block_mxfp4
/// only asks that range).
int nearest_mxfp4(float v) {
  const float a = std::fabs(v);
  const int m = int(a > 0.5f) + int(a > 1.5f) + int(a > 2.5f) + int(a > 3.5f) + int(a > 5.0f) +
                int(a > 7.0f) + int(a > 10.0f);
  return (v < 0.0f && m > 0) ? m + 8 : m;
}

/// Codes of 32 values at E8M0 exponent e (nearest level each) into q, and the squared error
/// summed in element order (double). mxfp4_errors_2 runs two exponents at once: two independent
/// sums, each in the same order as one call per exponent, so the results are identical.
void mxfp4_errors_2(const float* x, const int e[2], uint8_t q[2][32], double err[2]) {
  const float h0 = mxfp4_half_scale(uint8_t(e[0])), h1 = mxfp4_half_scale(uint8_t(e[1]));
  for (int i = 0; i < 32; ++i) {
    q[0][i] = uint8_t(nearest_mxfp4(x[i] / h0));
    q[1][i] = uint8_t(nearest_mxfp4(x[i] / h1));
  }
  double s0 = 0.0, s1 = 0.0;
  for (int i = 0; i < 32; ++i) {
    const double r0 = double(x[i]) - double(h0) * kvalues_mxfp4[q[0][i]];
    const double r1 = double(x[i]) - double(h1) * kvalues_mxfp4[q[1][i]];
    s0 += r0 * r0;
    s1 += r1 * r1;
  }
  err[0] = s0;
  err[1] = s1;
}

/// mxfp4: the power-of-two scale 2^(e − 127) with e = floor(log2 max|x|) − 2 + 127 (max|x| lands
/// in E2M1's [4, 8) binade, the OCP MX v1.0 §6.3 rule) or one step larger (no clipping above
/// 6), whichever codes the block with the smaller squared error (the first on ties); e clamped
/// to 0..254.
void quantize_block_mxfp4(const float* x, block_mxfp4* y) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) {
    const float a = std::fabs(x[i]);
    amax = a > amax ? a : amax;  // as fmax: a NaN never wins
  }
  uint8_t q[2][32] = {};
  int best = 0, e[2] = {0, 0};
  if (amax > 0.0f) {
    const int e0 = std::ilogb(amax) - 2 + 127;
    for (int k = 0; k < 2; ++k) e[k] = e0 + k < 0 ? 0 : (e0 + k > 254 ? 254 : e0 + k);
    double err[2];
    mxfp4_errors_2(x, e, q, err);
    best = err[1] < err[0] ? 1 : 0;
  }
  y->e = uint8_t(e[best]);
  pack_nibbles(q[best], y->qs);
}

}  // namespace

/// q4_0 → float: x = d * (q - 8).
void dequantize_row_q4_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q4_0*>(src);
  uint8_t q[32];
  for (int64_t ib = 0; ib < n / QK4_0; ++ib, dst += QK4_0) {
    const float d = fp16_to_f32(b[ib].d);
    unpack_nibbles(b[ib].qs, q);
    for (int i = 0; i < 32; ++i) dst[i] = d * static_cast<float>(int(q[i]) - 8);
  }
}

/// float → q4_0 (symmetric absmax rule, see the file comment).
void quantize_row_q4_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_q4_0*>(dst);
  uint8_t q[32];
  for (int64_t ib = 0; ib < n / QK4_0; ++ib, src += QK4_0) {
    b[ib].d = quantize_symmetric(src, 4, q);
    pack_nibbles(q, b[ib].qs);
  }
}

/// q4_1 → float: x = d * q + m.
void dequantize_row_q4_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q4_1*>(src);
  uint8_t q[32];
  for (int64_t ib = 0; ib < n / QK4_1; ++ib, dst += QK4_1) {
    const float d = fp16_to_f32(b[ib].d);
    const float m = fp16_to_f32(b[ib].m);
    unpack_nibbles(b[ib].qs, q);
    for (int i = 0; i < 32; ++i) dst[i] = d * static_cast<float>(q[i]) + m;
  }
}

/// float → q4_1 (min/max).
void quantize_row_q4_1(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_q4_1*>(dst);
  uint8_t q[32];
  for (int64_t ib = 0; ib < n / QK4_1; ++ib, src += QK4_1) {
    quantize_minmax(src, 4, q, &b[ib].d, &b[ib].m);
    pack_nibbles(q, b[ib].qs);
  }
}

/// q5_0 → float: x = d * (q - 16), q = nibble | qh bit << 4.
void dequantize_row_q5_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q5_0*>(src);
  uint8_t q[32];
  for (int64_t ib = 0; ib < n / QK5_0; ++ib, dst += QK5_0) {
    const float d = fp16_to_f32(b[ib].d);
    unpack_5bit(b[ib].qs, b[ib].qh, q);
    for (int i = 0; i < 32; ++i) dst[i] = d * static_cast<float>(int(q[i]) - 16);
  }
}

/// float → q5_0 (symmetric absmax rule).
void quantize_row_q5_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_q5_0*>(dst);
  uint8_t q[32];
  for (int64_t ib = 0; ib < n / QK5_0; ++ib, src += QK5_0) {
    b[ib].d = quantize_symmetric(src, 5, q);
    pack_5bit(q, b[ib].qs, b[ib].qh);
  }
}

/// q5_1 → float: x = d * q + m.
void dequantize_row_q5_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q5_1*>(src);
  uint8_t q[32];
  for (int64_t ib = 0; ib < n / QK5_1; ++ib, dst += QK5_1) {
    const float d = fp16_to_f32(b[ib].d);
    const float m = fp16_to_f32(b[ib].m);
    unpack_5bit(b[ib].qs, b[ib].qh, q);
    for (int i = 0; i < 32; ++i) dst[i] = d * static_cast<float>(q[i]) + m;
  }
}

/// float → q5_1 (min/max).
void quantize_row_q5_1(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_q5_1*>(dst);
  uint8_t q[32];
  for (int64_t ib = 0; ib < n / QK5_1; ++ib, src += QK5_1) {
    quantize_minmax(src, 5, q, &b[ib].d, &b[ib].m);
    pack_5bit(q, b[ib].qs, b[ib].qh);
  }
}

/// q8_0 → float: x = d * q.
void dequantize_row_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q8_0*>(src);
  for (int64_t ib = 0; ib < n / QK8_0; ++ib, dst += QK8_0) {
    const float d = fp16_to_f32(b[ib].d);
    for (int i = 0; i < 32; ++i) dst[i] = d * static_cast<float>(b[ib].qs[i]);
  }
}

/// float → q8_0 (d = absmax / 127).
void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_q8_0*>(dst);
  int sum;
  for (int64_t ib = 0; ib < n / QK8_0; ++ib, src += QK8_0)
    b[ib].d = quantize_q8(src, b[ib].qs, &sum);
}

/// q8_1 → float: x = d * q (the stored sum `s` is not needed to decode).
void dequantize_row_q8_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q8_1*>(src);
  for (int64_t ib = 0; ib < n / QK8_1; ++ib, dst += QK8_1) {
    const float d = fp16_to_f32(b[ib].d);
    for (int i = 0; i < 32; ++i) dst[i] = d * static_cast<float>(b[ib].qs[i]);
  }
}

/// float → q8_1 (d = absmax / 127, s = f16(d * sum(q)) with the stored, f16-rounded d).
void quantize_row_q8_1(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_q8_1*>(dst);
  int sum;
  for (int64_t ib = 0; ib < n / QK8_1; ++ib, src += QK8_1) {
    b[ib].d = quantize_q8(src, b[ib].qs, &sum);
    b[ib].s = f32_to_fp16_sat(fp16_to_f32(b[ib].d) * static_cast<float>(sum));
  }
}

/// iq4_nl → float: x = d * kvalues_iq4nl[nibble].
void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_iq4_nl*>(src);
  uint8_t q[32];
  for (int64_t ib = 0; ib < n / QK4_NL; ++ib, dst += QK4_NL) {
    const float d = fp16_to_f32(b[ib].d);
    unpack_nibbles(b[ib].qs, q);
    for (int i = 0; i < 32; ++i) dst[i] = d * static_cast<float>(kvalues_iq4nl[q[i]]);
  }
}

/// float → iq4_nl (scale search minimizing squared error, see quantize_block_iq4_nl).
void quantize_row_iq4_nl(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_iq4_nl*>(dst);
  for (int64_t ib = 0; ib < n / QK4_NL; ++ib, src += QK4_NL) quantize_block_iq4_nl(src, &b[ib]);
}

/// iq4_xs → float: x = d · (ls_j − 32) · kvalues_iq4nl[nibble] for sub-block j, computed as
/// ggml does it (the sub-block scale d·(ls_j − 32) rounded to float first).
void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_iq4_xs*>(src);
  uint8_t q[32];
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const float d = fp16_to_f32(b[ib].d);
    for (int j = 0; j < 8; ++j, dst += 32) {
      const float dl = d * static_cast<float>(iq4_xs_scale_code(b[ib], j) - 32);
      unpack_nibbles(b[ib].qs + 16 * j, q);
      for (int i = 0; i < 32; ++i) dst[i] = dl * static_cast<float>(kvalues_iq4nl[q[i]]);
    }
  }
}

/// float → iq4_xs (level search per sub-block, see quantize_block_iq4_xs).
void quantize_row_iq4_xs(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_iq4_xs*>(dst);
  for (int64_t ib = 0; ib < n / QK_K; ++ib, src += QK_K) quantize_block_iq4_xs(src, &b[ib]);
}

/// mxfp4 → float: x = mxfp4_half_scale(e) · kvalues_mxfp4[nibble] (= 2^(e−127) · E2M1).
void dequantize_row_mxfp4(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_mxfp4*>(src);
  uint8_t q[32];
  for (int64_t ib = 0; ib < n / QK_MXFP4; ++ib, dst += QK_MXFP4) {
    const float h = mxfp4_half_scale(b[ib].e);
    unpack_nibbles(b[ib].qs, q);
    for (int i = 0; i < 32; ++i) dst[i] = h * static_cast<float>(kvalues_mxfp4[q[i]]);
  }
}

/// float → mxfp4 (power-of-two scale choice, see quantize_block_mxfp4).
void quantize_row_mxfp4(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_mxfp4*>(dst);
  for (int64_t ib = 0; ib < n / QK_MXFP4; ++ib, src += QK_MXFP4) quantize_block_mxfp4(src, &b[ib]);
}

}  // namespace kvrun
