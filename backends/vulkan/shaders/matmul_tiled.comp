#version 450
// matmul_tiled.comp — y[n, m] = x[n, k] · w[m, k]ᵀ for prefill shapes (Backend::matmul with
// many activation rows): each workgroup of 16 × 8 threads computes a 32 (weight rows) × 32
// (activation rows) tile of y, walking k in steps of 32; every step decodes a 32 × 32 tile of w
// (dequant.glsl) and loads one of x into shared memory (8.4 KiB), then each thread accumulates
// its 2 × 4 outputs in f32.
#include "dequant.glsl"

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

shared float ws[32][33];
shared float xs[32][33];

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
    for (uint l = tid; l < 1024u; l += 128u) {
      const uint rr = l / 32u, kk = l % 32u, e = k0 + kk;
      const uint wr = m0 + rr, xr = n0 + rr;
      ws[rr][kk] = (wr < p.m && e < p.k) ? dq(w, g, wr * p.row_bytes, e) : 0.0;
      xs[rr][kk] = (xr < p.n && e < p.k) ? x.v[xr * p.k + e] : 0.0;
    }
    barrier();
    for (uint kk = 0u; kk < 32u; ++kk)
      for (uint a = 0u; a < 2u; ++a)
        for (uint b = 0u; b < 4u; ++b) acc[a][b] += ws[tx * 2u + a][kk] * xs[ty * 4u + b][kk];
    barrier();
  }
  F32Buf y = F32Buf(p.y);
  for (uint a = 0u; a < 2u; ++a)
    for (uint b = 0u; b < 4u; ++b) {
      const uint r = m0 + tx * 2u + a, j = n0 + ty * 4u + b;
      if (r < p.m && j < p.n) y.v[j * p.m + r] = acc[a][b];
    }
}
