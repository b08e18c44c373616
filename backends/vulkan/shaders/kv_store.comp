#version 450
// kv_store.comp — encodes the step's K and V rows into their cache rows (Backend::kv_store):
// one thread per 32-bit word of a cache row (one f32, or two f16 / bf16 values), K rows then
// V rows, grid-stride. The host resolved each row's destination (block id → slot → tier
// address, position in the block) into `dst`: per row, the K row's and the V row's address.
// The bytes equal the CPU's kv_encode_row.
#include "kv_common.glsl"

layout(local_size_x = 64) in;
layout(buffer_reference, std430, buffer_reference_align = 8) buffer AddrBuf { uvec2 v[]; };

layout(push_constant) uniform Push {
  uvec2 k;    // f32 [n_rows, k_n]
  uvec2 v;    // f32 [n_rows, v_n]
  uvec2 dst;  // uvec2 [n_rows][2]: K row address, V row address
  uint n_rows;
  uint k_n;   // n_head_kv · head_dim
  uint v_n;   // n_head_kv · head_dim_v
  uint k_type;
  uint v_type;
} p;

uint words(uint type, uint n) { return type == 0u ? n : n / 2u; }

void main() {
  const uint kw = words(p.k_type, p.k_n), vw = words(p.v_type, p.v_n), per_row = kw + vw;
  const uint total = p.n_rows * per_row, stride = gl_NumWorkGroups.x * 64u;
  AddrBuf dst = AddrBuf(p.dst);
  for (uint g = gl_GlobalInvocationID.x; g < total; g += stride) {
    const uint r = g / per_row, w0 = g % per_row;
    const bool is_k = w0 < kw;
    const uint w = is_k ? w0 : w0 - kw, type = is_k ? p.k_type : p.v_type;
    F32Buf src = F32Buf(is_k ? p.k : p.v);
    const uint base = r * (is_k ? p.k_n : p.v_n);
    U32Buf out_ = U32Buf(dst.v[2u * r + (is_k ? 0u : 1u)]);
    uint bits;
    if (type == 0u) {
      bits = floatBitsToUint(src.v[base + w]);
    } else {
      const float a = src.v[base + 2u * w], b = src.v[base + 2u * w + 1u];
      bits = type == 1u ? f32_to_f16_bits(a) | (f32_to_f16_bits(b) << 16)
                        : f32_to_bf16_bits(a) | (f32_to_bf16_bits(b) << 16);
    }
    out_.v[w] = bits;
  }
}
