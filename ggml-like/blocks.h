// blocks.h — the byte layout of every block format, one struct each, sizes asserted.
//
// GGUF block formats follow GGUF's on-disk layout exactly (little-endian; `f16` fields are IEEE
// binary16 bit patterns). Sources: the GGUF specification (ggml docs/gguf.md) and the ggml block
// definitions it refers to; K-quant super-blocks hold QK_K = 256 values.
//
// Value formulas (x = decoded value, q = stored integer):
//   q4_0:  x = d * (q - 8),        q in 0..15; byte j holds element j (low nibble), j+16 (high)
//   q4_1:  x = d * q + m
//   q5_0:  x = d * (q - 16),       q = nibble | (bit j of qh) << 4, same element order as q4_0
//   q5_1:  x = d * q + m
//   q8_0:  x = d * q,              q in -128..127
//   q8_1:  x = d * q, s = d * sum(q) (activation format)
//   iq4_nl: x = d * kvalues_iq4nl[nibble], element order as q4_0
//   iq4_xs: super-block of 256 = 8 sub-blocks of 32; x = d * (ls - 32) * kvalues_iq4nl[nibble],
//           ls the 6-bit scale of the sub-block; each sub-block's nibbles ordered as q4_0
//   mxfp4:  x = 2^(e - 127) * e2m1(nibble) = e8m0_half(e) * kvalues_mxfp4[nibble], order as q4_0
//   K-quants: see quants_k.cpp for the sub-block scale packing of each.
//   iq1_*/iq2_*/iq3_*: grids of 4 or 8 values (iq_grids.h), signs, 4-bit or 3-bit scales; below.
//   nvfp4: x = s2 * e4m3(scale) * e2m1(nibble); element 2i in the low nibble of qs[i], 2i+1 in
//          the high nibble; s2 is the second-level scale held by the container (see dtype.h).
#pragma once

#include <cstdint>
#include <cstring>

namespace kvrun {

using f16_bits = uint16_t;  ///< IEEE 754 binary16 bit pattern

constexpr int QK4_0 = 32;
constexpr int QK4_1 = 32;
constexpr int QK5_0 = 32;
constexpr int QK5_1 = 32;
constexpr int QK8_0 = 32;
constexpr int QK8_1 = 32;
constexpr int QK4_NL = 32;
constexpr int QK_K = 256;  ///< K-quant super-block size
constexpr int K_SCALE_SIZE = 12;
constexpr int QK_NVFP4 = 16;

struct block_q4_0 {
  f16_bits d;
  uint8_t qs[QK4_0 / 2];
};
static_assert(sizeof(block_q4_0) == 18, "wrong q4_0 block size");

struct block_q4_1 {
  f16_bits d;
  f16_bits m;
  uint8_t qs[QK4_1 / 2];
};
static_assert(sizeof(block_q4_1) == 20, "wrong q4_1 block size");

struct block_q5_0 {
  f16_bits d;
  uint8_t qh[4];  ///< 5th bit of each of the 32 quants (little-endian uint32)
  uint8_t qs[QK5_0 / 2];
};
static_assert(sizeof(block_q5_0) == 22, "wrong q5_0 block size");

struct block_q5_1 {
  f16_bits d;
  f16_bits m;
  uint8_t qh[4];
  uint8_t qs[QK5_1 / 2];
};
static_assert(sizeof(block_q5_1) == 24, "wrong q5_1 block size");

struct block_q8_0 {
  f16_bits d;
  int8_t qs[QK8_0];
};
static_assert(sizeof(block_q8_0) == 34, "wrong q8_0 block size");

struct block_q8_1 {
  f16_bits d;
  f16_bits s;  ///< d * sum(qs)
  int8_t qs[QK8_1];
};
static_assert(sizeof(block_q8_1) == 36, "wrong q8_1 block size");

/// 2.625 bits per weight: 16 sub-blocks of 16, 4-bit scale and 4-bit min per sub-block.
struct block_q2_K {
  uint8_t scales[QK_K / 16];  ///< low nibble: scale, high nibble: min
  uint8_t qs[QK_K / 4];       ///< 2-bit quants
  f16_bits d;                 ///< super-block scale for the scales
  f16_bits dmin;              ///< super-block scale for the mins
};
static_assert(sizeof(block_q2_K) == 84, "wrong q2_K block size");

/// 3.4375 bits per weight: 16 sub-blocks of 16, 6-bit signed scales.
struct block_q3_K {
  uint8_t hmask[QK_K / 8];  ///< high bit of each quant
  uint8_t qs[QK_K / 4];     ///< low 2 bits
  uint8_t scales[12];       ///< 16 scales, 6 bits each
  f16_bits d;
};
static_assert(sizeof(block_q3_K) == 110, "wrong q3_K block size");

/// 4.5 bits per weight: 8 sub-blocks of 32, 6-bit scale and min each.
struct block_q4_K {
  f16_bits d;
  f16_bits dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q4_K) == 144, "wrong q4_K block size");

/// 5.5 bits per weight: as q4_K plus one high bit per quant.
struct block_q5_K {
  f16_bits d;
  f16_bits dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q5_K) == 176, "wrong q5_K block size");

/// 6.5625 bits per weight: 16 sub-blocks of 16, 8-bit signed scales.
struct block_q6_K {
  uint8_t ql[QK_K / 2];  ///< low 4 bits
  uint8_t qh[QK_K / 4];  ///< high 2 bits
  int8_t scales[QK_K / 16];
  f16_bits d;
};
static_assert(sizeof(block_q6_K) == 210, "wrong q6_K block size");

/// q4_K / q5_K: the 6-bit scale code `*sc` and min code `*m` of sub-block j (0..7) from the
/// 12-byte `scales` packing (GGUF K-quants): j < 4 has sc = q[j] & 63, m = q[j+4] & 63; j ≥ 4
/// has sc = (q[j+4] & 15) | (q[j−4] >> 6) << 4 and m = (q[j+4] >> 4) | (q[j] >> 6) << 4.
inline void unpack_scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

/// Activation format paired with K-quant weights.
struct block_q8_K {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];  ///< sum of each group of 16 quants
};
static_assert(sizeof(block_q8_K) == 292, "wrong q8_K block size");

struct block_iq4_nl {
  f16_bits d;
  uint8_t qs[QK4_NL / 2];
};
static_assert(sizeof(block_iq4_nl) == 18, "wrong iq4_nl block size");

/// The 16 non-linear levels of iq4_nl (GGUF/ggml `kvalues_iq4nl`).
inline constexpr int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                             1,    13,   25,  38,  53,  69,  89,  113};

/// iq4_xs super-block (GGUF type 23; ggml's block_iq4_xs in ggml-common.h): 4.25 bits per
/// weight. Eight sub-blocks of 32 share the f16 `d`; sub-block j's 6-bit scale code is
/// ls_j = ((scales_l[j/2] >> 4·(j%2)) & 15) | ((scales_h >> 2·j) & 3) << 4, its scale
/// d·(ls_j − 32). The 16 bytes qs[16·j .. 16·j+15] hold its 32 indices into kvalues_iq4nl in
/// the q4_0 element order (byte i: element i low nibble, element i+16 high nibble).
struct block_iq4_xs {
  f16_bits d;
  uint16_t scales_h;            ///< high 2 bits of the 8 scale codes (little-endian)
  uint8_t scales_l[QK_K / 64];  ///< low 4 bits of the 8 scale codes, two per byte
  uint8_t qs[QK_K / 2];         ///< 4-bit indices into kvalues_iq4nl
};
static_assert(sizeof(block_iq4_xs) == 136, "wrong iq4_xs block size");

/// iq4_xs: the 6-bit scale code (0..63; the scale is d·(code − 32)) of sub-block j (0..7).
inline int iq4_xs_scale_code(const block_iq4_xs& b, int j) {
  return ((b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0F) | (((b.scales_h >> (2 * j)) & 3) << 4);
}

// ---- Grid-based i-quants (GGUF types 16..19, 21, 22, 29; ggml's ggml-common.h layouts) ----
// Super-blocks of QK_K = 256. Values come in groups of 8 (iq1/iq2) or 4 (iq3) whose magnitudes
// are one entry of a fixed grid (iq_grids.h); sign bits flip single values. Decoders:
// quants_iq.cpp, which gives each formula.

/// iq2_xxs super-block (type 16), 2.06 bits per weight. Sub-block j (32 values) is the two
/// little-endian uint32 at qs[4j..4j+3]: the first holds 4 grid indices (bytes, into the
/// 256-entry iq2xxs grid of 8 values), the second 4 seven-bit sign codes (bits 7l..7l+6) and
/// the 4-bit scale s in bits 28..31; x = d·(0.5 + s)·0.25 · grid · sign.
struct block_iq2_xxs {
  f16_bits d;
  uint16_t qs[QK_K / 8];
};
static_assert(sizeof(block_iq2_xxs) == 66, "wrong iq2_xxs block size");

/// iq2_xs super-block (type 17), 2.31 bits per weight. qs[4j + l]: bits 0..8 the index into the
/// 512-entry iq2xs grid of 8 values, bits 9..15 the seven-bit sign code; scales[j]: the 4-bit
/// scales of groups l = 0,1 (low nibble) and l = 2,3 (high); x = d·(0.5 + s)·0.25 · grid · sign.
struct block_iq2_xs {
  f16_bits d;
  uint16_t qs[QK_K / 8];
  uint8_t scales[QK_K / 32];
};
static_assert(sizeof(block_iq2_xs) == 74, "wrong iq2_xs block size");

/// iq2_s super-block (type 22; also the blocks of IQ2_M files), 2.56 bits per weight. Group
/// g = 4j + l of 8: grid index qs[g] | ((qh[j] >> 2l) & 3) << 8 into the 1024-entry iq2s grid,
/// sign byte qs[32 + g] (bit i flips value i); scales as iq2_xs; x = d·(0.5 + s)·0.25·grid·sign.
struct block_iq2_s {
  f16_bits d;
  uint8_t qs[QK_K / 4];  ///< 32 grid index low bytes, then 32 sign bytes
  uint8_t qh[QK_K / 32];
  uint8_t scales[QK_K / 32];
};
static_assert(sizeof(block_iq2_s) == 82, "wrong iq2_s block size");

/// iq3_xxs super-block (type 18), 3.06 bits per weight. qs[0..63]: indices into the 256-entry
/// iq3xxs grid of 4 values (8 per sub-block); qs[64 + 4j ..] the little-endian uint32 of
/// sub-block j: 4 seven-bit sign codes (one per 8 values) and the 4-bit scale s in bits 28..31;
/// x = d·(0.5 + s)·0.5 · grid · sign.
struct block_iq3_xxs {
  f16_bits d;
  uint8_t qs[3 * QK_K / 8];
};
static_assert(sizeof(block_iq3_xxs) == 98, "wrong iq3_xxs block size");

/// iq3_s super-block (type 21; also the blocks of IQ3_M files), 3.44 bits per weight. Quad q
/// (4 values, 0..63): grid index qs[q] | ((qh[q / 8] >> (q % 8)) & 1) << 8 into the 512-entry
/// iq3s grid; signs[q / 2] bit 4·(q % 2) + i flips value i; sub-block j (32 values) has the
/// 4-bit scale s = (scales[j / 2] >> 4·(j % 2)) & 15; x = d·(1 + 2s) · grid · sign.
struct block_iq3_s {
  f16_bits d;
  uint8_t qs[QK_K / 4];
  uint8_t qh[QK_K / 32];
  uint8_t signs[QK_K / 8];
  uint8_t scales[QK_K / 64];
};
static_assert(sizeof(block_iq3_s) == 110, "wrong iq3_s block size");

/// iq1_s super-block (type 19), 1.56 bits per weight. Group g = 4j + l of 8: index
/// qs[g] | ((qh[j] >> 3l) & 7) << 8 into the 2048-entry iq1s grid of values −1, 0, 1; qh[j]
/// bits 12..14 the 3-bit scale s, bit 15 the sign of the shift δ = ±1/8;
/// x = d·(2s + 1)·(grid + δ).
struct block_iq1_s {
  f16_bits d;
  uint8_t qs[QK_K / 8];
  uint16_t qh[QK_K / 32];
};
static_assert(sizeof(block_iq1_s) == 50, "wrong iq1_s block size");

/// iq1_m super-block (type 29; IQ1_M files), 1.75 bits per weight. Group g = 4j + l of 8: index
/// qs[g] | ((qh[2j + l/2] >> 4·(l%2)) & 7) << 8 into the iq1s grid, bit 3 of that nibble the
/// sign of δ = ±1/8. The four little-endian uint16 of scales hold 3-bit scales (sub-block j:
/// bits 6·(j%2) and 6·(j%2)+3 of word j/2, for its two halves of 16) and, in their top nibbles,
/// the super-block's f16 d; x = d·(2s + 1)·(grid + δ).
struct block_iq1_m {
  uint8_t qs[QK_K / 8];
  uint8_t qh[QK_K / 16];
  uint8_t scales[QK_K / 32];
};
static_assert(sizeof(block_iq1_m) == 56, "wrong iq1_m block size");

constexpr int QK_MXFP4 = 32;

/// MXFP4 block (GGUF type 39; ggml's block_mxfp4): one MX block of the OCP Microscaling
/// Formats (MX) Specification v1.0 (§5: 32 elements of FP4 E2M1 sharing one E8M0 scale,
/// 2^(e − 127)). ggml stores it as the scale byte then 16 bytes of E2M1 codes, 17 bytes with no
/// padding, in the q4_0 element order (byte i: element i low nibble, element i+16 high).
/// E2M1 code: bit 3 sign, then the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; ggml decodes them as
/// the doubled integers kvalues_mxfp4 times half the E8M0 scale (mxfp4_half_scale), which gives
/// the same products exactly.
struct block_mxfp4 {
  uint8_t e;                 ///< E8M0 shared scale (bias 127)
  uint8_t qs[QK_MXFP4 / 2];  ///< E2M1 codes
};
static_assert(sizeof(block_mxfp4) == 17, "wrong mxfp4 block size");

/// The 16 E2M1 values doubled (OCP MX v1.0 §5.3.3, FP4 E2M1: ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}),
/// as ggml's `kvalues_mxfp4` holds them.
inline constexpr int8_t kvalues_mxfp4[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                             0, -1, -2, -3, -4, -6, -8, -12};

/// Half of the E8M0 scale 2^(e − 127), i.e. 2^(e − 128), as a float (exact; e = 0 and 1 give
/// the subnormals 2^−128 and 2^−127). ggml's convention for MXFP4 (ggml_e8m0_to_fp32_half in
/// ggml-impl.h); the NaN code e = 255 is not special-cased there either (gives 2^127).
inline float mxfp4_half_scale(uint8_t e) {
  const uint32_t bits = e >= 2 ? uint32_t(e - 1) << 23 : (0x00200000u << e);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// NVFP4 block: 16 E2M1 values and one E4M3 block scale (NVIDIA's NVFP4 format: 16-element
/// micro-blocks, FP8 E4M3 scale; the FP32 second-level scale is held outside the block).
struct block_nvfp4 {
  uint8_t scale;             ///< E4M3 block scale
  uint8_t qs[QK_NVFP4 / 2];  ///< E2M1 codes, element 2i low nibble, 2i+1 high nibble
};
static_assert(sizeof(block_nvfp4) == 9, "wrong nvfp4 block size");

}  // namespace kvrun
