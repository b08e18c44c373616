#version 450
// kv_store.comp — encodes the step's K and V rows into their cache rows (Backend::kv_store):
// one thread per 32-bit word of a cache row (one f32, or two f16 / bf16 values) or per pair
// of q8_0 blocks, K rows then V rows, grid-stride. The host resolved each row's destination (block id → slot → tier
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

// Units of work per row: a 32-bit word (f32, f16, bf16), or a pair of q8_0 blocks (17 words:
// the host requires an even number of blocks per row, so a pair starts 4-byte aligned).
uint units(uint type, uint n) {
  if (type == 0u) return n;
  if (type == 3u) return (n + 63u) / 64u;
  return n / 2u;
}

// Writes unit w of a row of n values from src[base …] into the cache row at `dst`.
void store_unit(uint type, F32Buf src, uint base, uint n, U32Buf dst, uint w) {
  if (type == 0u) {
    dst.v[w] = floatBitsToUint(src.v[base + w]);
  } else if (type != 3u) {
    const float a = src.v[base + 2u * w], b = src.v[base + 2u * w + 1u];
    dst.v[w] = type == 1u ? f32_to_f16_bits(a) | (f32_to_f16_bits(b) << 16)
                          : f32_to_bf16_bits(a) | (f32_to_bf16_bits(b) << 16);
  } else {
    uint words[17];
    for (uint i = 0u; i < 17u; ++i) words[i] = 0u;
    for (uint h = 0u; h < 2u; ++h) {
      const uint blk = 2u * w + h, byte0 = 34u * h;
      float v[32];
      for (uint i = 0u; i < 32u; ++i) {
        const uint e = 32u * blk + i;
        v[i] = e < n ? src.v[base + e] : 0.0;  // the row is zero-padded to whole blocks
      }
      int qs[32];
      const uint d = encode_q8_0(v, qs);
      words[byte0 >> 2] |= d << ((byte0 & 3u) * 8u);
      for (uint i = 0u; i < 32u; ++i) {
        const uint o = byte0 + 2u + i;
        words[o >> 2] |= (uint(qs[i]) & 0xffu) << ((o & 3u) * 8u);
      }
    }
    for (uint i = 0u; i < 17u; ++i) dst.v[17u * w + i] = words[i];
  }
}

void main() {
  const uint ku = units(p.k_type, p.k_n), vu = units(p.v_type, p.v_n), per_row = ku + vu;
  const uint total = p.n_rows * per_row, stride = gl_NumWorkGroups.x * 64u;
  AddrBuf dst = AddrBuf(p.dst);
  for (uint g = gl_GlobalInvocationID.x; g < total; g += stride) {
    const uint r = g / per_row, u0 = g % per_row;
    const bool is_k = u0 < ku;
    const uint n = is_k ? p.k_n : p.v_n;
    store_unit(is_k ? p.k_type : p.v_type, F32Buf(is_k ? p.k : p.v), r * n, n,
               U32Buf(dst.v[2u * r + (is_k ? 0u : 1u)]), is_k ? u0 : u0 - ku);
  }
}
