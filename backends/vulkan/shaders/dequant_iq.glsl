// dequant_iq.glsl — element i of a row of a grid i-quant (WTYPE_IQ2_XXS, WTYPE_IQ2_XS,
// WTYPE_IQ2_S, WTYPE_IQ3_XXS, WTYPE_IQ3_S, WTYPE_IQ1_S, WTYPE_IQ1_M), included by dequant.glsl.
// `g` is the type's grid in a storage buffer (vk_grids.h: ggml-like's iq_grids.h tables as
// 32-bit words, a u64 entry e at words 2e, 2e + 1). Block layouts: ggml-like/blocks.h; each
// decode follows ggml-like's dequantize_row_* (quants_iq.cpp) step for step: the sub-block scale
// d·f(s) rounded to float first, then scale · grid value, then the sign (exact), so the values
// equal the CPU's bit for bit.
#if defined(WTYPE_IQ2_XXS) || defined(WTYPE_IQ2_XS) || defined(WTYPE_IQ2_S) || \
    defined(WTYPE_IQ3_XXS) || defined(WTYPE_IQ3_S) || defined(WTYPE_IQ1_S) ||  \
    defined(WTYPE_IQ1_M)
#define IQ_GRID_TYPE 1

// The little-endian 32-bit value at even byte offset `o`.
uint rd32e(U32Buf b, uint o) { return rd16(b, o) | (rd16(b, o + 2u) << 16); }

// Byte i (0..7) of entry e of a grid of u64 entries.
uint grid8(U32Buf g, uint e, uint i) { return (g.v[2u * e + i / 4u] >> (8u * (i % 4u))) & 0xFFu; }
// Byte i (0..3) of entry e of a grid of u32 entries.
uint grid4(U32Buf g, uint e, uint i) { return (g.v[e] >> (8u * i)) & 0xFFu; }

// The sign byte of a 7-bit sign code c: bit 7 makes the count of set bits even (ggml-like's
// kIqSigns, computed instead of looked up).
uint iq_signs(uint c) { return c | ((uint(bitCount(c)) & 1u) << 7); }

// scale · v, negated when `neg` (put_signed in quants_iq.cpp).
float signed_val(float scale, uint v, bool neg) {
  const float x = scale * float(v);
  return neg ? -x : x;
}

float dq_iq(U32Buf w, U32Buf g, uint row, uint i) {
  const uint e = i % 256u;
#if defined(WTYPE_IQ2_XXS)
  const uint b = row + (i / 256u) * 66u;  // f16 d, u16 qs[32]
  const uint j = e / 32u, l = (e % 32u) / 8u;
  const uint aux0 = rd32e(w, b + 2u + 8u * j), aux1 = rd32e(w, b + 6u + 8u * j);
  const float dl = rdf16(w, b) * (0.5 + float(aux1 >> 28)) * 0.25;
  const uint signs = iq_signs((aux1 >> (7u * l)) & 127u);
  const uint mag = grid8(g, (aux0 >> (8u * l)) & 255u, e % 8u);
  return signed_val(dl, mag, ((signs >> (e % 8u)) & 1u) != 0u);
#elif defined(WTYPE_IQ2_XS)
  const uint b = row + (i / 256u) * 74u;  // f16 d, u16 qs[32], scales[8]
  const uint grp = e / 8u;
  const uint q = rd16(w, b + 2u + 2u * grp);
  const uint s = (rd8(w, b + 66u + grp / 4u) >> (4u * ((grp % 4u) / 2u))) & 15u;
  const float dl = rdf16(w, b) * (0.5 + float(s)) * 0.25;
  const uint signs = iq_signs(q >> 9);
  return signed_val(dl, grid8(g, q & 511u, e % 8u), ((signs >> (e % 8u)) & 1u) != 0u);
#elif defined(WTYPE_IQ2_S)
  const uint b = row + (i / 256u) * 82u;  // f16 d, qs[32] + signs[32], qh[8], scales[8]
  const uint j = e / 32u, l = (e % 32u) / 8u, grp = e / 8u;
  const uint s = (rd8(w, b + 74u + j) >> (4u * (l / 2u))) & 15u;
  const float dl = rdf16(w, b) * (0.5 + float(s)) * 0.25;
  const uint idx = rd8(w, b + 2u + grp) | (((rd8(w, b + 66u + j) >> (2u * l)) & 3u) << 8);
  const uint signs = rd8(w, b + 34u + grp);
  return signed_val(dl, grid8(g, idx, e % 8u), ((signs >> (e % 8u)) & 1u) != 0u);
#elif defined(WTYPE_IQ3_XXS)
  const uint b = row + (i / 256u) * 98u;  // f16 d, qs[64] grid indices, u32 aux[8]
  const uint j = e / 32u, l = (e % 32u) / 8u, h = (e % 8u) / 4u;
  const uint aux = rd32e(w, b + 66u + 4u * j);
  const float dl = rdf16(w, b) * (0.5 + float(aux >> 28)) * 0.5;
  const uint signs = iq_signs((aux >> (7u * l)) & 127u);
  const uint idx = rd8(w, b + 2u + 8u * j + 2u * l + h);
  return signed_val(dl, grid4(g, idx, e % 4u), ((signs >> (e % 8u)) & 1u) != 0u);
#elif defined(WTYPE_IQ3_S)
  const uint b = row + (i / 256u) * 110u;  // f16 d, qs[64], qh[8], signs[32], scales[4]
  const uint j = e / 32u, k = (e % 32u) / 4u, q = e / 4u;
  const uint s = (rd8(w, b + 106u + j / 2u) >> (4u * (j % 2u))) & 15u;
  const float dl = rdf16(w, b) * float(1u + 2u * s);
  const uint idx = rd8(w, b + 2u + q) | (((rd8(w, b + 66u + j) >> k) & 1u) << 8);
  const uint sign = (rd8(w, b + 74u + q / 2u) >> (4u * (q % 2u) + e % 4u)) & 1u;
  return signed_val(dl, grid4(g, idx, e % 4u), sign != 0u);
#elif defined(WTYPE_IQ1_S)
  const uint b = row + (i / 256u) * 50u;  // f16 d, qs[32], u16 qh[8]
  const uint j = e / 32u, l = (e % 32u) / 8u;
  const uint qh = rd16(w, b + 34u + 2u * j);
  const float dl = rdf16(w, b) * float(2u * ((qh >> 12) & 7u) + 1u);
  const float delta = (qh & 0x8000u) != 0u ? -0.125 : 0.125;  // ±kIq1Delta
  const uint idx = rd8(w, b + 2u + 4u * j + l) | (((qh >> (3u * l)) & 7u) << 8);
  const int v = bitfieldExtract(int(grid8(g, idx, e % 8u)), 0, 8);  // int8 −1, 0, 1
  return dl * (float(v) + delta);
#elif defined(WTYPE_IQ1_M)
  const uint b = row + (i / 256u) * 56u;  // qs[32], qh[16], u16 scales[4] (+ d in top nibbles)
  const uint grp = e / 8u, hs = grp / 2u;
  const uint s0 = rd16(w, b + 48u), s1 = rd16(w, b + 50u), s2 = rd16(w, b + 52u),
             s3 = rd16(w, b + 54u);
  const uint d16 = (s0 >> 12) | ((s1 >> 8) & 0x00F0u) | ((s2 >> 4) & 0x0F00u) | (s3 & 0xF000u);
  const uint sw = rd16(w, b + 48u + 2u * (hs / 4u));
  const uint sc = (sw >> (3u * (hs % 4u))) & 7u;
  const float dl = unpackHalf2x16(d16).x * float(2u * sc + 1u);
  const uint nib = (rd8(w, b + 32u + grp / 2u) >> (4u * (grp % 2u))) & 15u;
  const float delta = (nib & 8u) != 0u ? -0.125 : 0.125;
  const uint idx = rd8(w, b + grp) | ((nib & 7u) << 8);
  const int v = bitfieldExtract(int(grid8(g, idx, e % 8u)), 0, 8);
  return dl * (float(v) + delta);
#endif
}
#endif
