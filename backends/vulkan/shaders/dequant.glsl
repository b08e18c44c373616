// dequant.glsl — element i of a weight row in the stored type (one of WTYPE_F32, WTYPE_F16,
// WTYPE_BF16, WTYPE_Q8_0, WTYPE_Q4_0, WTYPE_Q4_K, WTYPE_Q5_K, WTYPE_Q6_K defined by the build),
// the row starting at byte `row` of `w`. Block layouts: ggml-like/blocks.h (ggml's formats);
// each decode is the operation order of ggml-like's reference dequantize_row_* (quants_*.cpp).
#include "common.glsl"

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

float dq(U32Buf w, uint row, uint i) {
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
#else
#error "define one WTYPE_*"
#endif
}
