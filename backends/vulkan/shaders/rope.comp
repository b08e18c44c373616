#version 450
// rope.comp — rotary position embedding in place (RoFormer, Su et al. 2021; Backend::rope with
// the seam's RopeConfig). One thread per (row, head, pair i < n_rot/2). The angle follows
// cpu::rope's float arithmetic: θ_i = pos · theta_scale^i by repeated multiplication, then
// freq_scale · (θ_i / freq_factors[i]); pairs are (x[2i], x[2i+1]), or (x[i], x[i + n_rot/2])
// for NeoX. The angle is reduced to [−π, π] (three-part 2π, Cody & Waite) before cos/sin, so
// large positions do not depend on the driver's range reduction.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(push_constant) uniform Push {
  uvec2 x;        // f32 [n, n_heads · head_dim]
  uvec2 pos;      // int32 [n]
  uvec2 factors;  // f32 [n_rot / 2] or null
  uint n;
  uint n_heads;
  uint head_dim;
  uint half_rot;  // n_rot / 2
  uint neox;
  float theta_scale;  // freq_base^(−2 / n_rot), computed by the host as cpu::rope does
  float freq_scale;
  float mscale;
} p;

// th − 2πk for the nearest k: C1 and C2 have few enough bits that k·C1 and k·C2 are exact for
// |k| < 2^15 (|th| up to ~2·10^5).
float reduce_angle(float th) {
  const float k = round(th * 0.15915494309189535);
  precise float r = th - k * 6.28125;
  r = r - k * 0.00193023681640625;
  r = r - k * 5.07036318e-6;
  return r;
}

void main() {
  const uint total = p.n * p.n_heads * p.half_rot, stride = gl_NumWorkGroups.x * 64u;
  F32Buf x = F32Buf(p.x);
  I32Buf pos = I32Buf(p.pos);
  F32Buf ff = F32Buf(p.factors);
  const bool has_ff = !is_null(p.factors);
  for (uint g = gl_GlobalInvocationID.x; g < total; g += stride) {
    const uint i = g % p.half_rot, th_idx = g / p.half_rot;
    const uint t = th_idx / p.n_heads, h = th_idx % p.n_heads;
    precise float theta = float(pos.v[t]);
    for (uint j = 0u; j < i; ++j) theta = theta * p.theta_scale;
    const float f = has_ff ? ff.v[i] : 1.0;
    precise float th = p.freq_scale * (theta / f);
    const float r = reduce_angle(th);
    const float cs = cos(r) * p.mscale, sn = sin(r) * p.mscale;
    const uint base = (t * p.n_heads + h) * p.head_dim;
    const uint i0 = base + (p.neox != 0u ? i : 2u * i);
    const uint i1 = base + (p.neox != 0u ? i + p.half_rot : 2u * i + 1u);
    const float x0 = x.v[i0], x1 = x.v[i1];
    x.v[i0] = fma(x0, cs, -(x1 * sn));
    x.v[i1] = fma(x0, sn, x1 * cs);
  }
}
