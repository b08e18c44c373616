// kv_common.glsl — K/V cache element codecs of the types the Vulkan KV store and attention
// support (ggml-like/kv_layout.h): 0 f32, 1 f16, 2 bf16 (the numbering of vk_paged.h's
// KvCode). A block's rows start at a 4-byte aligned address; element e of row j of a block is
// read at byte j·row_bytes + e·size.
#include "common.glsl"

// Element e of row j of the block at `b`.
float kv_read(U32Buf b, uint type, uint row_bytes, uint j, uint e) {
  const uint o = j * row_bytes;
  if (type == 0u) return uintBitsToFloat(b.v[(o >> 2) + e]);
  if (type == 1u) return rdf16(b, o + 2u * e);
  return rdbf16(b, o + 2u * e);
}

// float → binary16 bits, round to nearest even, as ggml-like/fp16.h's f32_to_fp16 (integer
// arithmetic: the cache bytes must equal the CPU encoder's).
uint f32_to_f16_bits(float f) {
  const uint x = floatBitsToUint(f);
  const uint sign = (x >> 16) & 0x8000u;
  const uint ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u);
  if (ax >= 0x477ff000u) return sign | 0x7c00u;
  if (ax < 0x38800000u) {
    if (ax < 0x33000000u) return sign;
    const uint e = ax >> 23;
    const uint m = (ax & 0x7fffffu) | 0x800000u;
    const uint shift = 126u - e;
    uint q = m >> shift;
    const uint rem = m & ((1u << shift) - 1u);
    const uint half_ = 1u << (shift - 1u);
    if (rem > half_ || (rem == half_ && (q & 1u) != 0u)) q++;
    return sign | q;
  }
  uint r = ax - 0x38000000u;
  const uint rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u) != 0u)) r++;
  return sign | r;
}

// float → bfloat16 bits, round to nearest even, NaN kept quiet (fp16.h's f32_to_bf16).
uint f32_to_bf16_bits(float f) {
  const uint x = floatBitsToUint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return ((x >> 16) | 0x40u) & 0xffffu;
  return ((x + (0x7fffu + ((x >> 16) & 1u))) >> 16) & 0xffffu;
}
