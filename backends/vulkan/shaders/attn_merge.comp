#version 450
// attn_merge.comp — combines the segments of attention.comp exactly: out = Σ_s e^(m_s − M)
// acc_s / Σ_s e^(m_s − M) l_s with M = max m_s, skipping empty segments (m = −inf): the
// log-sum-exp merge of cpu::attn_merge_partials (Milakov & Gimelshein 2018); with `states`,
// the merged state (M, the denominator, the undivided sums: cpu::attn_merge_states) goes to
// `out` as [n_rows · n_head][2 + head_dim_v] instead. One workgroup per (query row, head);
// threads over head_dim_v.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(push_constant) uniform Push {
  uvec2 part;  // f32 [n_rows · n_head · n_seg][2 + head_dim_v]
  uvec2 out_;  // f32 [n_rows, n_head · head_dim_v]
  uint n_head;
  uint head_dim_v;
  uint n_seg;
  uint states;
} p;

void main() {
  const uint r = gl_WorkGroupID.x, h = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
  F32Buf pt = F32Buf(p.part);
  const uint stride = 2u + p.head_dim_v, base = (r * p.n_head + h) * p.n_seg * stride;
  float mx = -1.0 / 0.0;
  for (uint s = 0u; s < p.n_seg; ++s) mx = max(mx, pt.v[base + s * stride]);
  float l = 0.0;
  for (uint s = 0u; s < p.n_seg; ++s) {
    const float ms = pt.v[base + s * stride];
    if (ms != -1.0 / 0.0) l += exp(ms - mx) * pt.v[base + s * stride + 1u];
  }
  F32Buf o = F32Buf(p.out_);
  const uint ob = (r * p.n_head + h) * (p.states != 0u ? stride : p.head_dim_v);
  if (p.states != 0u && t == 0u) {
    o.v[ob] = mx;
    o.v[ob + 1u] = l;
  }
  for (uint d = t; d < p.head_dim_v; d += 64u) {
    float a = 0.0;
    for (uint s = 0u; s < p.n_seg; ++s) {
      const float ms = pt.v[base + s * stride];
      if (ms != -1.0 / 0.0) a += exp(ms - mx) * pt.v[base + s * stride + 2u + d];
    }
    if (p.states != 0u)
      o.v[ob + 2u + d] = a;
    else
      o.v[ob + d] = a / l;
  }
}
