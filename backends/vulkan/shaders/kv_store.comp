#version 450
// kv_store.comp — encodes the step's K and V rows into their cache rows (Backend::kv_store):
// one thread per 32-bit word of a cache row (one f32, or two f16 / bf16 values), per q8_0
// block, per fp8 head or per nvfp4 block, K rows then V rows, grid-stride. Built twice: with
// -DKV_NVFP4 ("kv_store_nvfp4", float64 in the nvfp4 encoder: needs shaderFloat64) and without
// ("kv_store", every other type). The host resolved each row's destination (block id → slot →
// tier address, position in the block) into `dst`: per row, the K row's and the V row's
// address.
// The bytes equal the CPU's kv_encode_row.
#include "kv_common.glsl"
#ifdef KV_NVFP4
#include "nvfp4_encode.glsl"
#endif

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
  uint n_head_kv;
} p;

// Units of work per row: a 32-bit word (f32, f16, bf16), a q8_0 / q4_0 block, an fp8 head or
// an nvfp4 block (of 16 values; the groups zero-padded to whole groups).
uint units(uint type, uint n, uint hkv) {
  if (type == 0u) return n;
  if (type == 7u) {
    const uint grp = nvfp4_group(n / hkv);
    return (n + grp - 1u) / grp * (grp / 16u);
  }
  if (type == 3u || type == 6u) return (n + 31u) / 32u;
  if (type >= 4u) return hkv;
  return n / 2u;
}

// Writes `len` bytes held in bytes_[] (little-endian words, byte i at word i/4) at byte `o` of
// `dst`: whole words are stored, the partial first and last words (shared with the neighbour
// block or row, which another thread writes) are merged with atomicAnd / atomicOr on their
// own bytes only.
void write_bytes(U32Buf dst, uint o, uint bytes_[9], uint len) {
  const uint w0 = o >> 2, w1 = (o + len + 3u) >> 2;
  for (uint w = w0; w < w1; ++w) {
    uint val = 0u, mask = 0u;
    for (uint b = 0u; b < 4u; ++b) {
      const int i = int(4u * w + b) - int(o);  // index into the block's bytes
      if (i < 0 || i >= int(len)) continue;
      val |= ((bytes_[uint(i) >> 2] >> ((uint(i) & 3u) * 8u)) & 0xffu) << (b * 8u);
      mask |= 0xffu << (b * 8u);
    }
    if (mask == 0xffffffffu) {
      dst.v[w] = val;
    } else {
      atomicAnd(dst.v[w], ~mask);
      atomicOr(dst.v[w], val);
    }
  }
}

// One fp8 head: the E8M0 scale from its largest finite magnitude, head_dim codes of the
// scaled values (quantize_row_fp8_scaled), written 32 bytes at a time, then the scale byte.
void store_fp8_head(uint type, F32Buf src, uint base, uint n, uint hkv, uvec2 row, uint h) {
  const uint hd = n / hkv, x0 = base + h * hd;
  float amax = 0.0;
  for (uint i = 0u; i < hd; ++i) {
    const float a = abs(src.v[x0 + i]);
    if (!isinf(a) && !isnan(a) && a > amax) amax = a;
  }
  const int e = fp8_scale_exp(type, amax);
  U32Buf dst = U32Buf(uvec2(row.x & ~3u, row.y));
  const uint o = row.x & 3u;
  uint bytes_[9];
  for (uint c0 = 0u; c0 < hd; c0 += 32u) {
    const uint len = min(32u, hd - c0);
    for (uint i = 0u; i < 9u; ++i) bytes_[i] = 0u;
    for (uint i = 0u; i < len; ++i)
      bytes_[i >> 2] |= fp8_encode(type, ldexp(src.v[x0 + c0 + i], -e)) << ((i & 3u) * 8u);
    write_bytes(dst, o + h * hd + c0, bytes_, len);
  }
  for (uint i = 0u; i < 9u; ++i) bytes_[i] = 0u;
  bytes_[0] = uint(e + 127);
  write_bytes(dst, o + n + h, bytes_, 1u);
}

#ifdef KV_NVFP4
// nvfp4 block w of a row of n values (hkv heads, from the bits at src[base …]): the group scale
// from the block's whole group (each of the group's blocks finds the same; the first writes
// it after the group's blocks), then the block's 9 bytes (encode_nvfp4).
void store_nvfp4_block(U32Buf src, uint base, uint n, uint hkv, uvec2 row, uint w) {
  const uint grp = nvfp4_group(n / hkv), g = w / (grp / 16u);
  uint amax = 0u;
  for (uint e = g * grp; e < min(n, g * grp + grp); ++e) amax = absmax_step(amax, src.v[base + e]);
  const uint s2 = nvfp4_group_scale(amax);
  uint x[16], codes[16];
  for (uint i = 0u; i < 16u; ++i) {
    const uint e = 16u * w + i;
    x[i] = e < n ? src.v[base + e] : 0u;  // the last group is zero-padded
  }
  uint bytes_[9];
  for (uint i = 0u; i < 9u; ++i) bytes_[i] = 0u;
  bytes_[0] = encode_nvfp4_block(x, s2, codes);
  for (uint j = 0u; j < 8u; ++j)
    bytes_[(1u + j) >> 2] |= (codes[2u * j] | (codes[2u * j + 1u] << 4)) << (((1u + j) & 3u) * 8u);
  U32Buf dst = U32Buf(uvec2(row.x & ~3u, row.y));
  const uint o = row.x & 3u, n_grp = (n + grp - 1u) / grp;
  write_bytes(dst, o + 9u * w, bytes_, 9u);
  if (w % (grp / 16u) == 0u) {
    for (uint i = 0u; i < 9u; ++i) bytes_[i] = 0u;
    bytes_[0] = s2;
    write_bytes(dst, o + 9u * n_grp * (grp / 16u) + 4u * g, bytes_, 4u);
  }
}
#endif

// Writes unit w of a row of n values (hkv heads) from src[base …] into the cache row at `row`
// (an address that is 4-byte aligned for f32 / f16 / bf16 rows, 2-byte for q8_0 / q4_0, any
// for fp8 and nvfp4).
void store_unit(uint type, F32Buf src, uint base, uint n, uint hkv, uvec2 row, uint w) {
#ifdef KV_NVFP4
  if (type == 7u) {
    store_nvfp4_block(U32Buf(src), base, n, hkv, row, w);
    return;
  }
#endif
  if (type == 4u || type == 5u) {
    store_fp8_head(type, src, base, n, hkv, row, w);
    return;
  }
  if (type < 3u) {
    U32Buf dst = U32Buf(row);
    if (type == 0u) {
      dst.v[w] = floatBitsToUint(src.v[base + w]);
    } else {
      const float a = src.v[base + 2u * w], b = src.v[base + 2u * w + 1u];
      dst.v[w] = type == 1u ? f32_to_f16_bits(a) | (f32_to_f16_bits(b) << 16)
                            : f32_to_bf16_bits(a) | (f32_to_bf16_bits(b) << 16);
    }
    return;
  }
  float v[32];
  for (uint i = 0u; i < 32u; ++i) {
    const uint e = 32u * w + i;
    v[i] = e < n ? src.v[base + e] : 0.0;  // the row is zero-padded to whole blocks
  }
  uint bytes_[9];
  for (uint i = 1u; i < 9u; ++i) bytes_[i] = 0u;
  uint len;
  if (type == 3u) {  // f16 d, then the 32 int8 codes
    int qs[32];
    bytes_[0] = encode_q8_0(v, qs);
    for (uint i = 0u; i < 32u; ++i)
      bytes_[(2u + i) >> 2] |= (uint(qs[i]) & 0xffu) << (((2u + i) & 3u) * 8u);
    len = 34u;
  } else {  // q4_0: f16 d, then 16 bytes of nibbles
    uint qs[16];
    bytes_[0] = encode_q4_0(v, qs);
    for (uint i = 0u; i < 16u; ++i) bytes_[(2u + i) >> 2] |= qs[i] << (((2u + i) & 3u) * 8u);
    len = 18u;
  }
  // The row address rounded down to 4 bytes, the rest carried into the byte offset.
  write_bytes(U32Buf(uvec2(row.x & ~3u, row.y)), (row.x & 3u) + len * w, bytes_, len);
}

void main() {
  const uint ku = units(p.k_type, p.k_n, p.n_head_kv), vu = units(p.v_type, p.v_n, p.n_head_kv);
  const uint per_row = ku + vu;
  const uint total = p.n_rows * per_row, stride = gl_NumWorkGroups.x * 64u;
  AddrBuf dst = AddrBuf(p.dst);
  for (uint g = gl_GlobalInvocationID.x; g < total; g += stride) {
    const uint r = g / per_row, u0 = g % per_row;
    const bool is_k = u0 < ku;
    const uint n = is_k ? p.k_n : p.v_n;
    store_unit(is_k ? p.k_type : p.v_type, F32Buf(is_k ? p.k : p.v), r * n, n, p.n_head_kv,
               dst.v[2u * r + (is_k ? 0u : 1u)], is_k ? u0 : u0 - ku);
  }
}
