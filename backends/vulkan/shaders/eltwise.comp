#version 450
// eltwise.comp — the element-wise ops of the seam, one pipeline selected by `op`:
//   0 add:       a[i] += b[i]
//   1 add_row:   a[i] += b[i % cols]                 (a bias over rows of `cols`)
//   2 scale:     a[i] *= s
//   3 softcap:   a[i] = tanh(a[i] · (1/s)) · s       (Gemma 2 report, §2; cpu::softcap's order)
//   4 swiglu:    c[i] = silu(a[i]) · b[i]            (silu(x) = x / (1 + e^−x))
//   5 geglu:     c[i] = gelu(a[i]) · b[i]            (ggml's f16-table GELU, see cpu::geglu)
//   6 copy_cols: c[r·n + j] = a[r·cols + c0 + j]     (n = n_out, i = r·n + j)
// Grid-stride over n elements.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(push_constant) uniform Push {
  uvec2 a;
  uvec2 b;
  uvec2 c;
  uint n;     // elements written
  uint op;
  uint cols;  // add_row, copy_cols: row length of a
  uint c0;    // copy_cols: first column
  uint n_out; // copy_cols: columns copied
  float s;    // scale, softcap
} p;

// gelu(x) with x and the result rounded to f16 (the table ggml's GGML_GELU_FP16 builds).
float gelu_f16(float x) {
  if (x <= -10.0) return 0.0;
  if (x >= 10.0) return x;
  const float h = unpackHalf2x16(packHalf2x16(vec2(x, 0.0))).x;
  const float g = 0.5 * h * (1.0 + tanh(0.79788456080286535587989211986876 * h *
                                        (1.0 + 0.044715 * h * h)));
  return unpackHalf2x16(packHalf2x16(vec2(g, 0.0))).x;
}

void main() {
  F32Buf a = F32Buf(p.a);
  F32Buf b = F32Buf(p.b);
  F32Buf c = F32Buf(p.c);
  const uint stride = gl_NumWorkGroups.x * 64u;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    switch (p.op) {
      case 0u: a.v[i] = a.v[i] + b.v[i]; break;
      case 1u: a.v[i] = a.v[i] + b.v[i % p.cols]; break;
      case 2u: a.v[i] = a.v[i] * p.s; break;
      case 3u: a.v[i] = tanh(a.v[i] * (1.0 / p.s)) * p.s; break;
      case 4u: { const float x = a.v[i]; c.v[i] = x / (1.0 + exp(-x)) * b.v[i]; break; }
      case 5u: c.v[i] = gelu_f16(a.v[i]) * b.v[i]; break;
      case 6u: c.v[i] = a.v[(i / p.n_out) * p.cols + p.c0 + i % p.n_out]; break;
    }
  }
}
