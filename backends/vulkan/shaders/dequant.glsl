// dequant.glsl — element i of a weight row in the stored type (one of WTYPE_F32, WTYPE_F16,
// WTYPE_BF16, WTYPE_Q8_0, WTYPE_Q4_0, WTYPE_Q4_1, WTYPE_Q5_0, WTYPE_Q5_1, WTYPE_Q2_K,
// WTYPE_Q3_K, WTYPE_Q4_K, WTYPE_Q5_K, WTYPE_Q6_K, WTYPE_IQ4_NL, WTYPE_IQ4_XS, WTYPE_MXFP4,
// WTYPE_IQ2_XXS, WTYPE_IQ2_XS, WTYPE_IQ2_S, WTYPE_IQ3_XXS, WTYPE_IQ3_S, WTYPE_IQ1_S,
// WTYPE_IQ1_M defined by the build), the row starting at byte `row` of `w`; `g` is the type's
// value grid (the grid i-quants only, vk_grids.h; unused by the others). Block layouts:
// ggml-like/blocks.h (ggml's formats); each decode is the operation order of ggml-like's
// reference dequantize_row_* (quants_*.cpp).
#include "common.glsl"
#include "dequant_iq.glsl"

#if defined(WTYPE_Q4_K) || defined(WTYPE_Q5_K)
// 6-bit scale and min of sub-block j (0..7) from the 12 scale bytes at `s`
// (unpack_scale_min_k4 in ggml-like/blocks.h).
void scale_min_k4(U32Buf w, uint s, uint j, out float sc, out float m) {
  if (j < 4u) {
    sc = float(rd8(w, s + j) & 63u);
    m = float(rd8(w, s + j + 4u) & 63u);
  } else {
    sc = float((rd8(w, s + j + 4u) & 0x0Fu) | ((rd8(w, s + j - 4u) >> 6) << 4));
    m = float((rd8(w, s + j + 4u) >> 4) | ((rd8(w, s + j) >> 6) << 4));
  }
}
#endif

#if defined(WTYPE_IQ4_NL) || defined(WTYPE_IQ4_XS)
// iq4_nl's 16 non-linear levels (kvalues_iq4nl, ggml-like/blocks.h).
const int kIq4nl[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69,
                               89, 113);
#endif
#if defined(WTYPE_MXFP4)
// The E2M1 values doubled (kvalues_mxfp4, ggml-like/blocks.h; OCP MX v1.0).
const int kMxfp4[16] = int[16](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
#endif
#if defined(WTYPE_Q4_1) || defined(WTYPE_Q5_0) || defined(WTYPE_Q5_1) || \
    defined(WTYPE_IQ4_NL) || defined(WTYPE_IQ4_XS) || defined(WTYPE_MXFP4)
// Code j (0..31) of a block's 16 nibble bytes at `qs`: low nibbles are 0..15, high 16..31.
uint nibble32(U32Buf w, uint qs, uint j) {
  return (rd8(w, qs + j % 16u) >> (j < 16u ? 0u : 4u)) & 0x0Fu;
}
#endif
#if defined(WTYPE_Q5_0) || defined(WTYPE_Q5_1)
// Bit j of the little-endian 32-bit qh at byte `o` (the 5th bit of code j).
uint bit5(U32Buf w, uint o, uint j) { return (rd8(w, o + j / 8u) >> (j % 8u)) & 1u; }
#endif

float dq(U32Buf w, U32Buf g, uint row, uint i) {
#if defined(WTYPE_F32)
  return uintBitsToFloat(w.v[(row >> 2) + i]);
#elif defined(WTYPE_F16)
  return rdf16(w, row + 2u * i);
#elif defined(WTYPE_BF16)
  return rdbf16(w, row + 2u * i);
#elif defined(WTYPE_Q8_0)
  const uint b = row + (i / 32u) * 34u;  // f16 d, int8 qs[32]
  return rdf16(w, b) * float(rd8s(w, b + 2u + i % 32u));
#elif defined(WTYPE_Q4_0)
  const uint b = row + (i / 32u) * 18u;  // f16 d, nibbles qs[16]: low = 0..15, high = 16..31
  const uint j = i % 32u;
  const uint q = (rd8(w, b + 2u + j % 16u) >> (j < 16u ? 0u : 4u)) & 0x0Fu;
  return rdf16(w, b) * float(int(q) - 8);
#elif defined(WTYPE_Q4_1)
  const uint b = row + (i / 32u) * 20u;  // f16 d, f16 m, qs[16]
  return rdf16(w, b) * float(nibble32(w, b + 4u, i % 32u)) + rdf16(w, b + 2u);
#elif defined(WTYPE_Q5_0)
  const uint b = row + (i / 32u) * 22u;  // f16 d, qh[4], qs[16]
  const uint j = i % 32u;
  return rdf16(w, b) * float(int(nibble32(w, b + 6u, j) | (bit5(w, b + 2u, j) << 4)) - 16);
#elif defined(WTYPE_Q5_1)
  const uint b = row + (i / 32u) * 24u;  // f16 d, f16 m, qh[4], qs[16]
  const uint j = i % 32u;
  return rdf16(w, b) * float(nibble32(w, b + 8u, j) | (bit5(w, b + 4u, j) << 4)) +
         rdf16(w, b + 2u);
#elif defined(WTYPE_IQ4_NL)
  const uint b = row + (i / 32u) * 18u;  // f16 d, qs[16]
  return rdf16(w, b) * float(kIq4nl[nibble32(w, b + 2u, i % 32u)]);
#elif defined(WTYPE_MXFP4)
  const uint b = row + (i / 32u) * 17u;  // E8M0 e, qs[16]
  const uint e = rd8(w, b);              // half the scale: 2^(e − 128) (mxfp4_half_scale)
  const float h = uintBitsToFloat(e >= 2u ? (e - 1u) << 23 : (0x00200000u << e));
  return h * float(kMxfp4[nibble32(w, b + 1u, i % 32u)]);
#elif defined(WTYPE_Q2_K)
  const uint b = row + (i / 256u) * 84u;  // scales[16], qs[64], f16 d, f16 dmin
  const uint e = i % 256u;
  const uint sc = rd8(w, b + e / 16u);
  const float dl = rdf16(w, b + 80u) * float(sc & 15u), ml = rdf16(w, b + 82u) * float(sc >> 4);
  const uint q = (rd8(w, b + 16u + 32u * (e / 128u) + e % 32u) >> (2u * ((e % 128u) / 32u))) & 3u;
  return dl * float(q) - ml;
#elif defined(WTYPE_Q3_K)
  const uint b = row + (i / 256u) * 110u;  // hmask[32], qs[64], scales[12], f16 d
  const uint e = i % 256u, s = e / 16u;
  const uint lo = s < 8u ? rd8(w, b + 96u + s) & 15u : rd8(w, b + 88u + s) >> 4;
  const uint hi = (rd8(w, b + 104u + s % 4u) >> (2u * (s / 4u))) & 3u;
  const float dl = rdf16(w, b + 108u) * float(int(lo | (hi << 4)) - 32);
  const uint qb = rd8(w, b + 32u + 32u * (e / 128u) + e % 32u);
  const int low2 = int((qb >> (2u * ((e % 128u) / 32u))) & 3u);
  const uint high = (rd8(w, b + e % 32u) >> (4u * (e / 128u) + (e % 128u) / 32u)) & 1u;
  return dl * float(high != 0u ? low2 : low2 - 4);
#elif defined(WTYPE_IQ4_XS)
  const uint b = row + (i / 256u) * 136u;  // f16 d, u16 scales_h, scales_l[4], qs[128]
  const uint e = i % 256u, j = e / 32u;
  const uint code = ((rd8(w, b + 4u + j / 2u) >> (4u * (j % 2u))) & 15u) |
                    (((rd16(w, b + 2u) >> (2u * j)) & 3u) << 4);
  const float dl = rdf16(w, b) * float(int(code) - 32);
  return dl * float(kIq4nl[nibble32(w, b + 8u + 16u * j, e % 32u)]);
#elif defined(WTYPE_Q4_K)
  const uint b = row + (i / 256u) * 144u;  // f16 d, f16 dmin, scales[12], qs[128]
  const uint e = i % 256u;
  float sc, m;
  scale_min_k4(w, b + 4u, e / 32u, sc, m);
  const float dl = rdf16(w, b) * sc, ml = rdf16(w, b + 2u) * m;
  const uint q = (rd8(w, b + 16u + 32u * (e / 64u) + e % 32u) >> ((e % 64u) < 32u ? 0u : 4u)) & 15u;
  return dl * float(q) - ml;
#elif defined(WTYPE_Q5_K)
  const uint b = row + (i / 256u) * 176u;  // f16 d, f16 dmin, scales[12], qh[32], qs[128]
  const uint e = i % 256u;
  float sc, m;
  scale_min_k4(w, b + 4u, e / 32u, sc, m);
  const float dl = rdf16(w, b) * sc, ml = rdf16(w, b + 2u) * m;
  const uint lo = (rd8(w, b + 48u + 32u * (e / 64u) + e % 32u) >> ((e % 64u) < 32u ? 0u : 4u)) & 15u;
  const uint hi = (rd8(w, b + 16u + e % 32u) >> (e / 32u)) & 1u;
  return dl * float(lo | (hi << 4)) - ml;
#elif defined(WTYPE_Q6_K)
  const uint b = row + (i / 256u) * 210u;  // ql[128], qh[64], int8 scales[16], f16 d
  const uint e = i % 256u;
  const uint ql = rd8(w, b + 64u * (e / 128u) + e % 32u + 32u * (((e % 128u) / 32u) & 1u));
  const uint lo = (ql >> ((e % 128u) < 64u ? 0u : 4u)) & 15u;
  const uint hi = (rd8(w, b + 128u + 32u * (e / 128u) + e % 32u) >> (2u * ((e % 128u) / 32u))) & 3u;
  const int q = int(lo | (hi << 4)) - 32;
  return rdf16(w, b + 208u) * float(rd8s(w, b + 192u + e / 16u)) * float(q);
#elif defined(IQ_GRID_TYPE)
  return dq_iq(w, g, row, i);
#else
#error "define one WTYPE_*"
#endif
}
