#version 450
// matmul_tiled.comp — y[n, m] = x[n, k] · w[m, k]ᵀ for prefill shapes (Backend::matmul with
// many activation rows): each workgroup of 16 × 8 threads computes a 32 (weight rows) × 32
// (activation rows) tile of y, walking k in steps of 32; every step decodes a 32 × 32 tile of w
// (dequant.glsl, in f32) and loads one of x into shared memory, then each thread accumulates its
// 2 × 4 outputs.
//
// Portable (f32) variant: f32 tiles (8.4 KiB), f32 multiply-adds and accumulators.
// FP16 variant (-DFP16; only on a device with shaderFloat16, docs/vulkan.md "fp16 arithmetic"):
// the decoded w and x are rounded to f16 into f16vec2 tiles (4.3 KiB: half the shared memory),
// each k step's 32 products per output are 16 packed f16vec2 fma()s into an f16 pair, and the
// pair is added to the output's f32 accumulator after every k step: f16 sums are 16 terms long,
// the sum over k is f32. Needs only shaderFloat16 (16-bit values in Workgroup and Function
// storage); buffers are still read as 32-bit words.
#include "dequant.glsl"
#if defined(FP16)
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif

layout(local_size_x = 16, local_size_y = 8) in;
layout(push_constant) uniform Push {
  uvec2 w;  // [m][row_bytes] in WTYPE
  uvec2 x;  // f32 [n, k]
  uvec2 y;  // f32 [n, m]
  uvec2 grid;  // the type's value grid (grid i-quants; vk_grids.h), else 0
  uint k;
  uint m;
  uint n;
  uint row_bytes;
} p;

#if defined(FP16)
shared f16vec2 ws[32][17];  // [row][k pair], padded a pair against bank conflicts
shared f16vec2 xs[32][17];

// Loads the k step at k0: w and x pairs (e, e + 1), zero outside the matrices, rounded to f16.
void load_tiles(U32Buf w, U32Buf g, F32Buf x, uint m0, uint n0, uint k0, uint tid) {
  for (uint l = tid; l < 512u; l += 128u) {
    const uint rr = l / 16u, kp = l % 16u, e = k0 + 2u * kp;
    const uint wr = m0 + rr, xr = n0 + rr;
    vec2 wv = vec2(0.0), xv = vec2(0.0);
    if (wr < p.m) {
      if (e < p.k) wv.x = dq(w, g, wr * p.row_bytes, e);
      if (e + 1u < p.k) wv.y = dq(w, g, wr * p.row_bytes, e + 1u);
    }
    if (xr < p.n) {
      if (e < p.k) xv.x = x.v[xr * p.k + e];
      if (e + 1u < p.k) xv.y = x.v[xr * p.k + e + 1u];
    }
    ws[rr][kp] = f16vec2(wv);
    xs[rr][kp] = f16vec2(xv);
  }
}
#else
shared float ws[32][33];
shared float xs[32][33];

// Loads the k step at k0 (zero outside the matrices).
void load_tiles(U32Buf w, U32Buf g, F32Buf x, uint m0, uint n0, uint k0, uint tid) {
  for (uint l = tid; l < 1024u; l += 128u) {
    const uint rr = l / 32u, kk = l % 32u, e = k0 + kk;
    const uint wr = m0 + rr, xr = n0 + rr;
    ws[rr][kk] = (wr < p.m && e < p.k) ? dq(w, g, wr * p.row_bytes, e) : 0.0;
    xs[rr][kk] = (xr < p.n && e < p.k) ? x.v[xr * p.k + e] : 0.0;
  }
}
#endif

void main() {
  const uint m0 = gl_WorkGroupID.x * 32u, n0 = gl_WorkGroupID.y * 32u;
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint tid = ty * 16u + tx;
  U32Buf w = U32Buf(p.w), g = U32Buf(p.grid);
  F32Buf x = F32Buf(p.x);
  float acc[2][4];
  for (uint a = 0u; a < 2u; ++a)
    for (uint b = 0u; b < 4u; ++b) acc[a][b] = 0.0;
  for (uint k0 = 0u; k0 < p.k; k0 += 32u) {
    load_tiles(w, g, x, m0, n0, k0, tid);
    barrier();
#if defined(FP16)
    f16vec2 h[2][4];
    for (uint a = 0u; a < 2u; ++a)
      for (uint b = 0u; b < 4u; ++b) h[a][b] = f16vec2(0.0hf);
    for (uint kp = 0u; kp < 16u; ++kp)
      for (uint a = 0u; a < 2u; ++a)
        for (uint b = 0u; b < 4u; ++b)
          h[a][b] = fma(ws[tx * 2u + a][kp], xs[ty * 4u + b][kp], h[a][b]);
    for (uint a = 0u; a < 2u; ++a)
      for (uint b = 0u; b < 4u; ++b) acc[a][b] += float(h[a][b].x) + float(h[a][b].y);
#else
    for (uint kk = 0u; kk < 32u; ++kk)
      for (uint a = 0u; a < 2u; ++a)
        for (uint b = 0u; b < 4u; ++b) acc[a][b] += ws[tx * 2u + a][kk] * xs[ty * 4u + b][kk];
#endif
    barrier();
  }
  F32Buf y = F32Buf(p.y);
  for (uint a = 0u; a < 2u; ++a)
    for (uint b = 0u; b < 4u; ++b) {
      const uint r = m0 + tx * 2u + a, j = n0 + ty * 4u + b;
      if (r < p.m && j < p.n) y.v[j * p.m + r] = acc[a][b];
    }
}
