// quants_k.cpp — scalar reference codecs of GGUF's K-quants: q2_K, q3_K, q4_K, q5_K, q6_K, q8_K.
//
// Sources for the layouts: the GGUF specification (ggml docs/gguf.md) and the ggml block
// definitions / dequantize_row_q*_K descriptions it refers to (read for facts only; no code
// copied). Block structs: blocks.h. All K-quants hold QK_K = 256 values per super-block; all
// multi-byte fields are little-endian and `d` / `dmin` are IEEE binary16 unless noted.
//
// Element index i runs over 0..255 inside one super-block. "Sub-block" s is i / 16 for the
// 16-value types (q2_K, q3_K, q6_K) and i / 32 for the 32-value types (q4_K, q5_K).
//
// q2_K (84 bytes: scales[16], qs[64], d, dmin). 16 sub-blocks of 16 values.
//   scales[s]: low nibble = scale code sc (0..15), high nibble = min code m (0..15).
//   Quants are 2-bit, q in 0..3. The 256 values form two halves of 128 (h = i / 128); inside a
//   half, value r = i % 128 sits in byte qs[32 h + r % 32] at bit position 2 * (r / 32). So byte
//   qs[32 h + l] holds values 128 h + l, +32, +64, +96 in bit pairs 0-1, 2-3, 4-5, 6-7.
//   x = (d * sc) * q - (dmin * m).
//
// q3_K (110 bytes: hmask[32], qs[64], scales[12], d). 16 sub-blocks of 16 values.
//   Scales: 16 6-bit codes u (0..63), value u - 32 (so -32..31), packed into 12 bytes:
//     low 4 bits of u_s:  s < 8: scales[s] & 0x0F;   s >= 8: scales[s - 8] >> 4;
//     high 2 bits of u_s: bits 2 * (s / 4) .. +1 of scales[8 + s % 4].
//   Quants are 3-bit, q in -4..3: the low 2 bits lie in qs exactly like q2_K's (byte
//   qs[32 h + r % 32], bit position 2 * (r / 32)); the high bit of value i is bit
//   4 * h + r / 32 of hmask[i % 32]. q = low2 when that bit is SET, and q = low2 - 4 when it is
//   NOT set.  x = (d * (u_s - 32)) * q.
//
// q4_K (144 bytes: d, dmin, scales[12], qs[128]). 8 sub-blocks of 32 values.
//   Scales and mins: 8 6-bit scale codes sc_s and 8 6-bit min codes m_s in 12 bytes:
//     s < 4:  sc_s = scales[s] & 63,            m_s = scales[s + 4] & 63;
//     s >= 4: sc_s = (scales[s + 4] & 0x0F) | ((scales[s - 4] >> 6) << 4),
//             m_s  = (scales[s + 4] >> 4)   | ((scales[s]     >> 6) << 4).
//   I.e. bytes 0..3 hold sc_0..3 plus the top 2 bits of sc_4..7, bytes 4..7 hold m_0..3 plus
//   the top 2 bits of m_4..7, bytes 8..11 hold the low nibbles of sc_4..7 (low) / m_4..7 (high).
//   Quants are 4-bit, q in 0..15, in 4 chunks of 64 values (c = i / 64): chunk c uses bytes
//   qs[32 c .. 32 c + 31]; its first 32 values (sub-block 2c) are the low nibbles, its last 32
//   (sub-block 2c + 1) the high nibbles.  x = (d * sc_s) * q - (dmin * m_s).
//
// q5_K (176 bytes: d, dmin, scales[12], qh[32], qs[128]). As q4_K (same scale/min packing, same
//   nibble order), plus a fifth bit: the high bit of value i is bit i / 32 of qh[i % 32];
//   q = nibble + 16 * bit, 0..31.  x = (d * sc_s) * q - (dmin * m_s).
//
// q6_K (210 bytes: ql[128], qh[64], scales[16] int8, d). 16 sub-blocks of 16 values.
//   Quants are 6-bit, stored u in 0..63, value q = u - 32. Two halves of 128 (h = i / 128);
//   inside a half, r = i % 128, k = r / 32 (0..3), l = r % 32:
//     low 4 bits:  ql[64 h + l + 32 * (k & 1)], low nibble for k < 2, high nibble for k >= 2;
//     high 2 bits: bits 2 k .. 2 k + 1 of qh[32 h + l].
//   x = (d * scales[s]) * q with scales[s] a signed int8.
//
// q8_K (292 bytes: float32 d, qs[256] int8, bsums[16] int16). x = d * q; bsums[s] is the sum of
//   the 16 quants of group s (used by dot products; the decoder ignores it).
//
// Floating-point evaluation order: the decoders form the sub-block factors first, exactly as
// written above (d * sc, dmin * m), then one multiply and one subtract per value, so they give
// the same float results as GGUF's reference decoders.
//
// The quantizers are kvrun's own. Per sub-block a small search over candidate scales picks the
// quants; each candidate's scale (and offset) is then refit by least squares and the candidate
// with the lowest squared error wins. The sub-block scales (and mins) are quantized to their
// codes relative to an f16 super-block scale (the largest one maps to the top code), and the
// values are re-quantized against the final decoded scales, so the stored block is what the
// error bounds are about. For the types with mins (q2_K, q4_K, q5_K) the offset x ≈ s q - m is
// tried both ways: m >= 0 with dmin >= 0 (the usual form) and m <= 0 with dmin < 0 (helps
// all-positive data); the super-block with the smaller error is kept. Both are valid blocks: the
// decoder formula is the same. q8_K: d = absmax / 127 (float), q = round(x / d). Inputs are
// expected finite; super-block scales too large for f16 saturate to ±65504.
#include <cmath>
#include <cstring>

#include "fp16.h"
#include "quants.h"
#include "quants_k_search.h"

namespace kvrun {
namespace {

// ---- shared scale packings ----

/// Inverse of unpack_scale_min_k4 (blocks.h): packs 8 scale codes and 8 min codes (each 0..63).
void pack_scale_min_k4(const int* sc, const int* m, uint8_t* q) {
  std::memset(q, 0, K_SCALE_SIZE);
  for (int j = 0; j < 4; ++j) {
    q[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = uint8_t(m[j] | ((m[j + 4] >> 4) << 6));
    q[j + 8] = uint8_t((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
  }
}

/// q3_K: the 6-bit code u (0..63) of scale s (0..15); the scale's value is u - 32.
int unpack_scale_q3(int s, const uint8_t* scales) {
  const int low = s < 8 ? (scales[s] & 0x0F) : (scales[s - 8] >> 4);
  const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return low | (high << 4);
}

/// Inverse of unpack_scale_q3: packs 16 codes u (0..63) into 12 bytes.
void pack_scales_q3(const int* u, uint8_t* scales) {
  std::memset(scales, 0, 12);
  for (int s = 0; s < 16; ++s) {
    if (s < 8)
      scales[s] |= uint8_t(u[s] & 0x0F);
    else
      scales[s - 8] |= uint8_t((u[s] & 0x0F) << 4);
    scales[8 + s % 4] |= uint8_t((u[s] >> 4) << (2 * (s / 4)));
  }
}

// ---- element positions inside the quant arrays ----

/// q2_K / q3_K: byte of `qs` and bit shift holding the 2 low bits of value i.
inline int qs2_byte(int i) { return 32 * (i / 128) + i % 32; }
inline int qs2_shift(int i) { return 2 * ((i % 128) / 32); }
/// q3_K: bit of hmask[i % 32] holding the high bit of value i.
inline int q3_hbit(int i) { return 4 * (i / 128) + (i % 128) / 32; }
/// q4_K / q5_K: byte of `qs` and bit shift holding the nibble of value i.
inline int qs4_byte(int i) { return 32 * (i / 64) + i % 32; }
inline int qs4_shift(int i) { return (i % 64) < 32 ? 0 : 4; }
/// q6_K: byte of `ql` and shift of the low nibble of value i; byte of `qh` and shift of its
/// high 2 bits.
inline int q6_ql_byte(int i) { return 64 * (i / 128) + i % 32 + 32 * (((i % 128) / 32) & 1); }
inline int q6_ql_shift(int i) { return (i % 128) < 64 ? 0 : 4; }
inline int q6_qh_byte(int i) { return 32 * (i / 128) + i % 32; }
inline int q6_qh_shift(int i) { return 2 * ((i % 128) / 32); }

}  // namespace

// ---- per-sub-block fitting (kvrun's own; declared in quants_k_search.h) ----

namespace kquants {

// The searches below are where quantizing spends its time (kvrun synth writes billions of
// values). On x86-64 they are also compiled for AVX2 (no FMA: the same roundings) and picked at
// load time; the code and its results are the same at both levels.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KVRUN_SEARCH_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KVRUN_SEARCH_CLONES
#endif

/// Symmetric fit x ≈ scale * q with integer q in [qlo, qhi] (qlo = -qhi - 1). Candidate inverse
/// scales map the largest-magnitude element near either end of the range; for each, q is
/// rounded and the scale refit by least squares (scale = Σxq / Σqq). Returns the best scale
/// (may be negative; 0 for an all-zero sub-block). The candidates are evaluated side by side
/// (one pass over x, one accumulator set per candidate, each summed in element order), which
/// gives the same sums as one pass per candidate at a fraction of the latency.
KVRUN_SEARCH_CLONES float fit_symmetric(const float* x, int n, int qlo, int qhi) {
  float amax = 0.0f;  // signed value of largest magnitude
  double sxx = 0.0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(amax)) amax = x[i];
    sxx += double(x[i]) * x[i];
  }
  if (amax == 0.0f) return 0.0f;
  float iscale[2 * kLanes] = {};
  int n_cand = 0;
  for (int side = 0; side < 2; ++side) {
    const float end = side == 0 ? float(qlo) : float(qhi);
    for (int t = -10; t <= 10; ++t) {
      const float target = end + (end < 0 ? -0.1f : 0.1f) * float(t);
      if (target == 0.0f || (target < 0) != (end < 0)) continue;
      iscale[n_cand++] = target / amax;
    }
  }
  double sxq[2 * kLanes] = {};
  int sqq[2 * kLanes] = {};  // a sum of integers: exact, as the double sum it stands for
  for (int i = 0; i < n; ++i) {
    const double xi = x[i];
    for (int c = 0; c < 2 * kLanes; ++c) {
      const int q = round_clamp(iscale[c] * x[i], qlo, qhi);
      sxq[c] += xi * q;
      sqq[c] += q * q;
    }
  }
  float best_scale = 0.0f;
  double best_err = sxx;
  for (int c = 0; c < n_cand; ++c) {
    if (sqq[c] == 0) continue;
    const double err = sxx - sxq[c] * sxq[c] / double(sqq[c]);
    if (err < best_err) {
      best_err = err;
      best_scale = float(sxq[c] / double(sqq[c]));
    }
  }
  return best_scale;
}

/// Affine fit x ≈ scale * q + offset with q in [0, qmax], scale >= 0 and the offset's sign
/// constrained: `offset_sign` > 0 means offset >= 0, otherwise offset <= 0. Candidate inverse
/// scales spread [lo, hi] over qmax ± 1 steps; each candidate's q are refit by 2x2 least
/// squares (with the offset pinned to 0 when the free fit breaks the sign constraint), and the
/// refit is scored by the squared error of re-rounding x against it. As in fit_symmetric, the
/// candidates are evaluated side by side, each sum in element order.
KVRUN_SEARCH_CLONES Fit fit_affine(const float* x, int n, int qmax, int offset_sign) {
  double sx = 0.0, sxx = 0.0;
  float xmin = x[0], xmax = x[0];
  for (int i = 0; i < n; ++i) {
    sx += x[i];
    sxx += double(x[i]) * x[i];
    xmin = std::fmin(xmin, x[i]);
    xmax = std::fmax(xmax, x[i]);
  }
  Fit best;  // scale 0: every value decodes to the offset
  const double mean = sx / n;
  best.offset = (offset_sign > 0) == (mean > 0) ? float(mean) : 0.0f;
  best.err = sxx - 2.0 * best.offset * sx + double(best.offset) * best.offset * n;
  const float lo = offset_sign > 0 ? std::fmax(xmin, 0.0f) : std::fmin(xmin, 0.0f);
  if (!(xmax > lo)) return best;
  constexpr int kC = kLanes;
  float iscale[kC] = {};
  for (int c = 0; c < kSearchSteps; ++c)
    iscale[c] = (float(qmax) + 0.1f * float(c - 10)) / (xmax - lo);
  int isq[kC] = {}, isqq[kC] = {};  // sums of integers: exact, as the double sums they stand for
  double sxq[kC] = {};
  for (int i = 0; i < n; ++i) {
    const float d = x[i] - lo;
    const double xi = x[i];
    for (int c = 0; c < kC; ++c) {
      const int q = round_clamp(d * iscale[c], 0, qmax);
      isq[c] += q;
      isqq[c] += q * q;
      sxq[c] += xi * q;
    }
  }
  // The refit of each candidate; `valid` false for one the search skips.
  float scale[kC], offset[kC], inv[kC];
  bool valid[kC];
  for (int c = 0; c < kC; ++c) {
    scale[c] = offset[c] = inv[c] = 0.0f;
    valid[c] = false;
    if (c >= kSearchSteps) continue;
    const double sq = isq[c], sqq = isqq[c];
    const double det = n * sqq - sq * sq;
    if (det <= 0.0) continue;
    double sc = (n * sxq[c] - sq * sx) / det;
    double off = (sqq * sx - sq * sxq[c]) / det;
    if ((offset_sign > 0 && off < 0) || (offset_sign <= 0 && off > 0)) {
      off = 0.0;
      sc = sxq[c] / sqq;
    }
    if (sc <= 0.0) continue;
    valid[c] = true;
    scale[c] = float(sc);
    offset[c] = float(off);
    inv[c] = scale[c] != 0.0f ? 1.0f / scale[c] : 0.0f;
  }
  double err[kC] = {};
  for (int i = 0; i < n; ++i) {
    const double xi = x[i];
    for (int c = 0; c < kC; ++c) {
      const int q = round_clamp((x[i] - offset[c]) * inv[c], 0, qmax);
      const double e = xi - (double(scale[c]) * q + offset[c]);
      err[c] += e * e;
    }
  }
  for (int c = 0; c < kC; ++c)
    if (valid[c] && err[c] < best.err) best = {scale[c], offset[c], err[c]};
  return best;
}

}  // namespace kquants

namespace {

using kquants::Fit;
using kquants::fit_affine;
using kquants::fit_symmetric;
using kquants::round_clamp;

// ---- super-block helpers ----

/// Quantizes non-negative sub-block factors v[0..n) to codes 0..max_code relative to an f16
/// super-block scale (the largest factor maps to max_code). `sign` (+1 or -1) is applied to the
/// stored scale, so the decoded factor of code c is fp16(d) * c with fp16(d) of that sign.
/// Writes codes[n]; returns the f16 bits of d.
uint16_t quantize_factors(const float* v, int n, int max_code, float sign, int* codes) {
  float vmax = 0.0f;  // v[j] > vmax: std::fmax's result here (vmax starts at +0, v[j] >= +0)
  for (int j = 0; j < n; ++j) vmax = v[j] > vmax ? v[j] : vmax;
  const uint16_t dh = f32_to_fp16_sat(sign * vmax / float(max_code));
  const float d = std::fabs(fp16_to_f32(dh));
  for (int j = 0; j < n; ++j) codes[j] = d > 0.0f ? round_clamp(v[j] / d, 0, max_code) : 0;
  return dh;
}

/// Signed sub-block scales s[0..n) to codes in [-half, half - 1] relative to an f16 super-block
/// scale chosen so that the largest-magnitude scale maps to -half exactly. Returns f16 bits.
uint16_t quantize_signed_factors(const float* s, int n, int half, int* codes) {
  float smax = 0.0f;
  for (int j = 0; j < n; ++j)
    if (std::fabs(s[j]) > std::fabs(smax)) smax = s[j];
  const uint16_t dh = f32_to_fp16_sat(smax / float(-half));
  const float d = fp16_to_f32(dh);
  for (int j = 0; j < n; ++j) codes[j] = d != 0.0f ? round_clamp(s[j] / d, -half, half - 1) : 0;
  return dh;
}

/// Decoded scale/min codes of one "affine" super-block (q2_K, q4_K, q5_K), before packing.
struct AffineCodes {
  uint16_t d = 0, dmin = 0;
  int sc[16] = {};
  int m[16] = {};
  uint8_t q[QK_K] = {};
};

/// Quantizes 256 values as `n_sub` sub-blocks of affine codes (q in 0..qmax, scale/min codes in
/// 0..max_code) with the offset sign `offset_sign` (see fit_affine). Returns the squared error
/// of the decoded super-block.
double quantize_affine_superblock(const float* x, int n_sub, int qmax, int max_code,
                                  int offset_sign, AffineCodes* out) {
  const int len = QK_K / n_sub;
  float scales[16], mins[16];
  for (int j = 0; j < n_sub; ++j) {
    const Fit f = fit_affine(x + j * len, len, qmax, offset_sign);
    scales[j] = f.scale;
    mins[j] = std::fabs(f.offset);  // the stored min is -offset / sign(dmin)
  }
  out->d = quantize_factors(scales, n_sub, max_code, 1.0f, out->sc);
  out->dmin = quantize_factors(mins, n_sub, max_code, offset_sign > 0 ? -1.0f : 1.0f, out->m);
  const float d = fp16_to_f32(out->d), dmin = fp16_to_f32(out->dmin);
  double err = 0.0;
  for (int j = 0; j < n_sub; ++j) {
    const float dl = d * float(out->sc[j]);  // same order as the decoder
    const float ml = dmin * float(out->m[j]);
    const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
    for (int l = 0; l < len; ++l) {
      const int i = j * len + l;
      const int q = round_clamp((x[i] + ml) * idl, 0, qmax);
      out->q[i] = uint8_t(q);
      const double e = double(x[i]) - double(dl * float(q) - ml);
      err += e * e;
    }
  }
  return err;
}

/// A lower bound of quantize_affine_superblock's error with offset_sign > 0, without the search.
/// With the offset >= 0 every decoded value dl·q − ml is >= 0 (d and the scale codes are >= 0,
/// dmin <= 0 and the min codes >= 0), so a negative x_i leaves an error term e·e >= x_i·x_i (the
/// double rounding of x − D and of e·e is monotonic) and a non-negative one a term >= 0. Σ x_i²
/// over the negative x_i is formed in 4 interleaved double sums (no serial chain of 256 adds):
/// each x_i² is exact in double, and both that sum and the error's element-order sum of
/// non-negative terms are within 300·2^-53 (relative) of their exact values, so the 4-way sum
/// times (1 − 1e-12) stays below the error's rounded sum for every finite input.
double positive_offset_error_bound(const float* x) {
  double lb[4] = {};
  for (int i = 0; i < QK_K; i += 4)
    for (int k = 0; k < 4; ++k) {
      const double xi = x[i + k];
      lb[k] += x[i + k] < 0.0f ? xi * xi : 0.0;
    }
  return ((lb[0] + lb[1]) + (lb[2] + lb[3])) * (1.0 - 1e-12);
}

/// Best of the two offset signs for one affine super-block (the positive-offset form replaces
/// the negative one only when its error is strictly smaller). The positive-offset search is
/// skipped when positive_offset_error_bound already reaches the negative form's error: it could
/// not win, so the block is the same. On zero-mean data (most weights) that halves the work.
void quantize_affine_best(const float* x, int n_sub, int qmax, int max_code, AffineCodes* out) {
  const double e_neg = quantize_affine_superblock(x, n_sub, qmax, max_code, -1, out);
  if (positive_offset_error_bound(x) >= e_neg) return;
  AffineCodes alt;
  const double e_pos = quantize_affine_superblock(x, n_sub, qmax, max_code, +1, &alt);
  if (e_pos < e_neg) *out = alt;
}

/// Symmetric super-block (q3_K, q6_K): 16 sub-blocks of 16, q in [-qhalf, qhalf - 1], signed
/// scale codes in [-shalf, shalf - 1]. Writes the f16 d, 16 codes and 256 quants.
uint16_t quantize_symmetric_superblock(const float* x, int qhalf, int shalf, int* codes, int* q) {
  float scales[16];
  for (int j = 0; j < 16; ++j) scales[j] = fit_symmetric(x + 16 * j, 16, -qhalf, qhalf - 1);
  const uint16_t dh = quantize_signed_factors(scales, 16, shalf, codes);
  const float d = fp16_to_f32(dh);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * float(codes[j]);
    const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
    for (int l = 0; l < 16; ++l)
      q[16 * j + l] = dl != 0.0f ? round_clamp(x[16 * j + l] * idl, -qhalf, qhalf - 1) : 0;
  }
  return dh;
}

}  // namespace

// ---- q2_K ----

void dequantize_row_q2_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q2_K*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const block_q2_K& blk = blocks[b];
    const float d = fp16_to_f32(blk.d), dmin = fp16_to_f32(blk.dmin);
    float* y = dst + b * QK_K;
    for (int i = 0; i < QK_K; ++i) {
      const uint8_t sc = blk.scales[i / 16];
      const float dl = d * float(sc & 0x0F);
      const float ml = dmin * float(sc >> 4);
      const int q = (blk.qs[qs2_byte(i)] >> qs2_shift(i)) & 3;
      y[i] = dl * float(q) - ml;
    }
  }
}

void quantize_row_q2_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<block_q2_K*>(dst);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    AffineCodes c;
    quantize_affine_best(src + b * QK_K, 16, 3, 15, &c);
    block_q2_K& blk = blocks[b];
    std::memset(&blk, 0, sizeof(blk));
    blk.d = c.d;
    blk.dmin = c.dmin;
    for (int j = 0; j < 16; ++j) blk.scales[j] = uint8_t(c.sc[j] | (c.m[j] << 4));
    for (int i = 0; i < QK_K; ++i) blk.qs[qs2_byte(i)] |= uint8_t(c.q[i] << qs2_shift(i));
  }
}

// ---- q3_K ----

void dequantize_row_q3_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q3_K*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const block_q3_K& blk = blocks[b];
    const float d = fp16_to_f32(blk.d);
    float* y = dst + b * QK_K;
    for (int i = 0; i < QK_K; ++i) {
      const float dl = d * float(unpack_scale_q3(i / 16, blk.scales) - 32);
      const int low2 = (blk.qs[qs2_byte(i)] >> qs2_shift(i)) & 3;
      const bool high = (blk.hmask[i % 32] >> q3_hbit(i)) & 1;
      y[i] = dl * float(high ? low2 : low2 - 4);
    }
  }
}

void quantize_row_q3_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<block_q3_K*>(dst);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    int codes[16], q[QK_K];
    block_q3_K& blk = blocks[b];
    std::memset(&blk, 0, sizeof(blk));
    blk.d = quantize_symmetric_superblock(src + b * QK_K, 4, 32, codes, q);
    int u[16];
    for (int j = 0; j < 16; ++j) u[j] = codes[j] + 32;
    pack_scales_q3(u, blk.scales);
    for (int i = 0; i < QK_K; ++i) {
      const int v = q[i] + 4;  // 0..7: low 2 bits in qs, bit 2 in hmask
      blk.qs[qs2_byte(i)] |= uint8_t((v & 3) << qs2_shift(i));
      blk.hmask[i % 32] |= uint8_t((v >> 2) << q3_hbit(i));
    }
  }
}

// ---- q4_K ----

void dequantize_row_q4_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q4_K*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const block_q4_K& blk = blocks[b];
    const float d = fp16_to_f32(blk.d), dmin = fp16_to_f32(blk.dmin);
    float* y = dst + b * QK_K;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      unpack_scale_min_k4(j, blk.scales, &sc, &m);
      const float dl = d * float(sc);
      const float ml = dmin * float(m);
      for (int i = 32 * j; i < 32 * j + 32; ++i) {
        const int q = (blk.qs[qs4_byte(i)] >> qs4_shift(i)) & 0x0F;
        y[i] = dl * float(q) - ml;
      }
    }
  }
}

void quantize_row_q4_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<block_q4_K*>(dst);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    AffineCodes c;
    quantize_affine_best(src + b * QK_K, 8, 15, 63, &c);
    block_q4_K& blk = blocks[b];
    std::memset(&blk, 0, sizeof(blk));
    blk.d = c.d;
    blk.dmin = c.dmin;
    pack_scale_min_k4(c.sc, c.m, blk.scales);
    for (int i = 0; i < QK_K; ++i) blk.qs[qs4_byte(i)] |= uint8_t(c.q[i] << qs4_shift(i));
  }
}

// ---- q5_K ----

void dequantize_row_q5_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q5_K*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const block_q5_K& blk = blocks[b];
    const float d = fp16_to_f32(blk.d), dmin = fp16_to_f32(blk.dmin);
    float* y = dst + b * QK_K;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      unpack_scale_min_k4(j, blk.scales, &sc, &m);
      const float dl = d * float(sc);
      const float ml = dmin * float(m);
      for (int i = 32 * j; i < 32 * j + 32; ++i) {
        const int low = (blk.qs[qs4_byte(i)] >> qs4_shift(i)) & 0x0F;
        const int high = (blk.qh[i % 32] >> (i / 32)) & 1;
        y[i] = dl * float(low | (high << 4)) - ml;
      }
    }
  }
}

void quantize_row_q5_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<block_q5_K*>(dst);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    AffineCodes c;
    quantize_affine_best(src + b * QK_K, 8, 31, 63, &c);
    block_q5_K& blk = blocks[b];
    std::memset(&blk, 0, sizeof(blk));
    blk.d = c.d;
    blk.dmin = c.dmin;
    pack_scale_min_k4(c.sc, c.m, blk.scales);
    for (int i = 0; i < QK_K; ++i) {
      blk.qs[qs4_byte(i)] |= uint8_t((c.q[i] & 0x0F) << qs4_shift(i));
      blk.qh[i % 32] |= uint8_t((c.q[i] >> 4) << (i / 32));
    }
  }
}

// ---- q6_K ----

void dequantize_row_q6_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q6_K*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const block_q6_K& blk = blocks[b];
    const float d = fp16_to_f32(blk.d);
    float* y = dst + b * QK_K;
    for (int i = 0; i < QK_K; ++i) {
      const int low = (blk.ql[q6_ql_byte(i)] >> q6_ql_shift(i)) & 0x0F;
      const int high = (blk.qh[q6_qh_byte(i)] >> q6_qh_shift(i)) & 3;
      const int q = (low | (high << 4)) - 32;
      y[i] = d * float(blk.scales[i / 16]) * float(q);
    }
  }
}

void quantize_row_q6_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<block_q6_K*>(dst);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    int codes[16], q[QK_K];
    block_q6_K& blk = blocks[b];
    std::memset(&blk, 0, sizeof(blk));
    blk.d = quantize_symmetric_superblock(src + b * QK_K, 32, 128, codes, q);
    for (int j = 0; j < 16; ++j) blk.scales[j] = int8_t(codes[j]);
    for (int i = 0; i < QK_K; ++i) {
      const int u = q[i] + 32;  // 0..63
      blk.ql[q6_ql_byte(i)] |= uint8_t((u & 0x0F) << q6_ql_shift(i));
      blk.qh[q6_qh_byte(i)] |= uint8_t((u >> 4) << q6_qh_shift(i));
    }
  }
}

// ---- q8_K ----

void dequantize_row_q8_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q8_K*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    for (int i = 0; i < QK_K; ++i) dst[b * QK_K + i] = blocks[b].d * float(blocks[b].qs[i]);
  }
}

void quantize_row_q8_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<block_q8_K*>(dst);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float* x = src + b * QK_K;
    block_q8_K& blk = blocks[b];
    float amax = 0.0f;
    for (int i = 0; i < QK_K; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    blk.d = amax / 127.0f;
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < QK_K; ++i) blk.qs[i] = int8_t(round_clamp(x[i] * id, -127, 127));
    for (int s = 0; s < QK_K / 16; ++s) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += blk.qs[16 * s + l];
      blk.bsums[s] = int16_t(sum);
    }
  }
}

}  // namespace kvrun
