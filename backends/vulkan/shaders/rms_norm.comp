#version 450
// rms_norm.comp — y = x / sqrt(mean(x²) + eps) · w per row (Zhang & Sennrich 2019;
// Backend::rms_norm). One workgroup per row: a shared-memory tree sum (no subgroup size
// assumed), then every thread scales its elements (y may equal x: each element is read before
// it is written, and the sum is complete before any write).
#include "common.glsl"

layout(local_size_x = 128) in;
layout(push_constant) uniform Push {
  uvec2 x;
  uvec2 w;  // f32 [cols] or null
  uvec2 y;
  uint rows;
  uint cols;
  float eps;
} p;

shared float part[128];

void main() {
  const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (row >= p.rows) return;  // uniform per workgroup
  const uint t = gl_LocalInvocationID.x;
  F32Buf x = F32Buf(p.x);
  F32Buf y = F32Buf(p.y);
  const uint base = row * p.cols;
  float s = 0.0;
  for (uint i = t; i < p.cols; i += 128u) s += x.v[base + i] * x.v[base + i];
  part[t] = s;
  barrier();
  for (uint h = 64u; h > 0u; h >>= 1) {
    if (t < h) part[t] += part[t + h];
    barrier();
  }
  const float scale = 1.0 / sqrt(part[0] / float(p.cols) + p.eps);
  const bool has_w = !is_null(p.w);
  F32Buf w = F32Buf(p.w);
  for (uint i = t; i < p.cols; i += 128u) {
    const float v = x.v[base + i] * scale;
    y.v[base + i] = has_w ? v * w.v[i] : v;
  }
}
