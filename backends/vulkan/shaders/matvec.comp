#version 450
// matvec.comp — y[j, r] = Σ_e w[r, e] · x[j, e] for the decode shapes (Backend::matmul with few
// activation rows): one workgroup per (weight row r, activation row j); its threads stride over
// the row decoding w in place (dequant.glsl) against f32 x, then a shared-memory tree sum.
#include "dequant.glsl"

layout(local_size_x = 64) in;
layout(push_constant) uniform Push {
  uvec2 w;  // [m][row_bytes] in WTYPE
  uvec2 x;  // f32 [n, k]
  uvec2 y;  // f32 [n, m]
  uvec2 grid;  // the type's value grid (grid i-quants; vk_grids.h), else 0
  uint k;
  uint m;
  uint row_bytes;
} p;

shared float part[64];

void main() {
  const uint r = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (r >= p.m) return;  // uniform per workgroup
  const uint j = gl_WorkGroupID.z, t = gl_LocalInvocationID.x;
  U32Buf w = U32Buf(p.w), g = U32Buf(p.grid);
  F32Buf x = F32Buf(p.x);
  const uint row = r * p.row_bytes, xb = j * p.k;
  float s = 0.0;
  for (uint e = t; e < p.k; e += 64u) s += dq(w, g, row, e) * x.v[xb + e];
  part[t] = s;
  barrier();
  for (uint h = 32u; h > 0u; h >>= 1) {
    if (t < h) part[t] += part[t + h];
    barrier();
  }
  if (t == 0u) F32Buf(p.y).v[j * p.m + r] = part[0];
}
