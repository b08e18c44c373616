#version 450
// attn_merge_parts.comp — Backend::attn_merge: out = Σ_k e^(m_k − M) acc_k / Σ_k e^(m_k − M) l_k
// over up to 4 state arrays of paged_attention_part (each [n_rows · n_head][2 + head_dim_v]: m,
// l, acc), M = max m_k, skipping parts that saw no position (m = −inf): the log-sum-exp merge of
// cpu::attn_merge_partials (Milakov & Gimelshein 2018). One workgroup per (query row, head);
// threads over head_dim_v.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(push_constant) uniform Push {
  uvec2 parts[4];  // f32 state arrays (the first n_parts are read)
  uvec2 out_;      // f32 [n_rows, n_head · head_dim_v]
  uint n_parts;
  uint n_head;
  uint head_dim_v;
} p;

void main() {
  const uint r = gl_WorkGroupID.x, h = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
  const uint stride = 2u + p.head_dim_v, base = (r * p.n_head + h) * stride;
  float mx = -1.0 / 0.0;
  for (uint k = 0u; k < p.n_parts; ++k) mx = max(mx, F32Buf(p.parts[k]).v[base]);
  float w[4] = float[4](0.0, 0.0, 0.0, 0.0);
  float l = 0.0;
  for (uint k = 0u; k < p.n_parts; ++k) {
    F32Buf pt = F32Buf(p.parts[k]);
    const float mk = pt.v[base];
    w[k] = mk == -1.0 / 0.0 ? 0.0 : exp(mk - mx);
    l += w[k] * pt.v[base + 1u];
  }
  F32Buf o = F32Buf(p.out_);
  for (uint d = t; d < p.head_dim_v; d += 64u) {
    float a = 0.0;
    for (uint k = 0u; k < p.n_parts; ++k)
      if (w[k] != 0.0) a += w[k] * F32Buf(p.parts[k]).v[base + 2u + d];
    o.v[(r * p.n_head + h) * p.head_dim_v + d] = a / l;
  }
}
