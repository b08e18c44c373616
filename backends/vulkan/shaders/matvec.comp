#version 450
// matvec.comp — y[j, r] = Σ_e w[r, e] · x[j, e] for the decode shapes (Backend::matmul with few
// activation rows): one workgroup per (weight row r, activation row j); its threads stride over
// the row decoding w in place (dequant.glsl) against f32 x, then a shared-memory tree sum.
//
// FP16 variant (-DFP16, f16 weights only, on a device with shaderFloat16; docs/vulkan.md "fp16
// arithmetic"): each thread takes 4 words of the row at a time, each word an f16 pair
// (unpackFloat2x16: no conversion) against x rounded to f16 (as the CPU rounds x for f16
// weights), 4 packed f16vec2 fma()s into an f16 pair that is then added to the thread's f32 sum.
// Needs an even k (the backend checks; the row is then whole words).
#include "dequant.glsl"
#if defined(FP16)
#if !defined(WTYPE_F16)
#error "matvec FP16: WTYPE_F16 only"
#endif
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif

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
#if defined(FP16)
  const uint kw = p.k / 2u, rw = row / 4u;  // the row's words
  for (uint i0 = 4u * t; i0 < kw; i0 += 256u) {
    f16vec2 h = f16vec2(0.0hf);
    for (uint i = i0; i < min(i0 + 4u, kw); ++i)
      h = fma(unpackFloat2x16(w.v[rw + i]), f16vec2(x.v[xb + 2u * i], x.v[xb + 2u * i + 1u]), h);
    s += float(h.x) + float(h.y);
  }
#else
  for (uint e = t; e < p.k; e += 64u) s += dq(w, g, row, e) * x.v[xb + e];
#endif
  part[t] = s;
  barrier();
  for (uint h = 32u; h > 0u; h >>= 1) {
    if (t < h) part[t] += part[t + h];
    barrier();
  }
  if (t == 0u) F32Buf(p.y).v[j * p.m + r] = part[0];
}
