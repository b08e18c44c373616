#version 450
// quantize_q8.comp — f32 activations x [n, k] → q8_0 blocks for the int8 dot-product matvec
// (matvec_dot.comp): per block of 32 values d = f16(amax / 127) and q = nearbyint(x · 127 / amax)
// with both divisions correctly rounded (kv_common.glsl encode_q8_0), so the codes and scales
// equal the CPU's act_from_float_q8_0 (backends/cpu/vec_dot_legacy.cpp) for finite x below
// 65504 · 127. One thread per block, grid-stride. Output: the codes as 8 words of 4 packed int8
// per block at qs, the scale d (as f32, its f16 value) per block at ds.
#include "kv_common.glsl"

layout(local_size_x = 64) in;
layout(push_constant) uniform Push {
  uvec2 x;   // f32 [n, k]
  uvec2 qs;  // uint [n · k / 32][8]
  uvec2 ds;  // f32 [n · k / 32]
  uint n_blocks;  // n · k / 32
} p;

void main() {
  F32Buf x = F32Buf(p.x), ds = F32Buf(p.ds);
  U32Buf qs = U32Buf(p.qs);
  const uint stride = gl_NumWorkGroups.x * 64u;
  for (uint b = gl_GlobalInvocationID.x; b < p.n_blocks; b += stride) {
    float v[32];
    for (uint i = 0u; i < 32u; ++i) v[i] = x.v[32u * b + i];
    int q[32];
    const uint h = encode_q8_0(v, q);
    for (uint w = 0u; w < 8u; ++w)
      qs.v[8u * b + w] = (uint(q[4u * w]) & 0xffu) | ((uint(q[4u * w + 1u]) & 0xffu) << 8) |
                         ((uint(q[4u * w + 2u]) & 0xffu) << 16) | (uint(q[4u * w + 3u]) << 24);
    ds.v[b] = unpackHalf2x16(h).x;
  }
}
