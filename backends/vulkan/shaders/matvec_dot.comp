#version 450
// matvec_dot.comp — the decode matvec y[j, r] = Σ_e w[r, e] · x[j, e] for q8_0 and q4_0 weights
// (WTYPE_Q8_0, WTYPE_Q4_0) with the int8 dot product (VK_KHR_shader_integer_dot_product,
// SPIR-V's OpSDot on 4 packed int8): x comes as q8_0 blocks (quantize_q8.comp), so each block is
// 8 dot products of 4 int8 pairs and one float multiply, Σ_blocks (d_w · d_x) · Σ q_w · q_x, the
// CPU's own q8_0 × q8_0 arithmetic (vec_dot_q8_0_q8_0 / vec_dot_q4_0_q8_0) up to the order of
// the float sum. Used only on a device that reports shaderIntegerDotProduct (the backend falls
// back to matvec.comp otherwise). One workgroup per (weight row r, activation row j); its threads
// stride over the row's blocks, then a shared-memory tree sum.
#extension GL_EXT_spirv_intrinsics : require
#include "common.glsl"

// OpSDot (opcode 4450; capabilities DotProduct 6019, DotProductInput4x8BitPacked 6018) of two
// words of 4 packed int8 (PackedVectorFormat4x8Bit = 0).
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4450)
int sdot4x8(uint a, uint b, spirv_literal int packed_format);

layout(local_size_x = 64) in;
layout(push_constant) uniform Push {
  uvec2 w;   // [m][row_bytes] in WTYPE
  uvec2 qs;  // x's codes: uint [n · k / 32][8] (quantize_q8.comp)
  uvec2 ds;  // x's scales: f32 [n · k / 32]
  uvec2 y;   // f32 [n, m]
  uint k;
  uint m;
  uint row_bytes;
} p;

shared float part[64];

// The little-endian 32-bit word at even byte offset `o`.
uint word_at(U32Buf b, uint o) { return rd16(b, o) | (rd16(b, o + 2u) << 16); }

void main() {
  const uint r = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (r >= p.m) return;  // uniform per workgroup
  const uint j = gl_WorkGroupID.z, t = gl_LocalInvocationID.x, nb = p.k / 32u;
  U32Buf w = U32Buf(p.w), qs = U32Buf(p.qs);
  F32Buf ds = F32Buf(p.ds);
  float s = 0.0;
  for (uint blk = t; blk < nb; blk += 64u) {
    const uint xb = j * nb + blk;
    int sumi = 0;
#if defined(WTYPE_Q8_0)
    const uint b = r * p.row_bytes + blk * 34u;  // f16 d, int8 qs[32]
    for (uint i = 0u; i < 8u; ++i)
      sumi += sdot4x8(word_at(w, b + 2u + 4u * i), qs.v[8u * xb + i], 0);
#elif defined(WTYPE_Q4_0)
    const uint b = r * p.row_bytes + blk * 18u;  // f16 d, nibbles: low 0..15, high 16..31
    for (uint i = 0u; i < 4u; ++i) {
      const uint q = word_at(w, b + 2u + 4u * i);
      // Nibbles v (0..15) to int8 v − 8 in each byte: (v + 128 − 8) without borrows, then the
      // top bit flipped back.
      const uint lo = (((q & 0x0F0F0F0Fu) | 0x80808080u) - 0x08080808u) ^ 0x80808080u;
      const uint hi = ((((q >> 4) & 0x0F0F0F0Fu) | 0x80808080u) - 0x08080808u) ^ 0x80808080u;
      sumi += sdot4x8(lo, qs.v[8u * xb + i], 0) + sdot4x8(hi, qs.v[8u * xb + 4u + i], 0);
    }
#else
#error "matvec_dot: WTYPE_Q8_0 or WTYPE_Q4_0"
#endif
    s += (rdf16(w, b) * ds.v[xb]) * float(sumi);
  }
  part[t] = s;
  barrier();
  for (uint h = 32u; h > 0u; h >>= 1) {
    if (t < h) part[t] += part[t + h];
    barrier();
  }
  if (t == 0u) F32Buf(p.y).v[j * p.m + r] = part[0];
}
