// kv_common.glsl — K/V cache element codecs of the types the Vulkan KV store and attention
// support (ggml-like/kv_layout.h): 0 f32, 1 f16, 2 bf16, 3 q8_0, 4 fp8_e4m3, 5 fp8_e5m2,
// 6 q4_0, 7 nvfp4 (the numbering of vk_paged.h's kv_code). A block's rows start at a 4-byte
// aligned address; element e of row j of a block is read at byte j·row_bytes + e·size.
#include "common.glsl"

// FP8 formats (ggml-like/quants_kv.cpp): e4m3 (type 4) has 3 mantissa bits, bias 7, largest
// finite code 0x7E = 448, NaN 0x7F; e5m2 (type 5) 2 bits, bias 15, 0x7B = 57344, inf/NaN.
uint fp8_mbits(uint type) { return type == 4u ? 3u : 2u; }
int fp8_bias(uint type) { return type == 4u ? 7 : 15; }
uint fp8_max_code(uint type) { return type == 4u ? 0x7Eu : 0x7Bu; }
float fp8_max(uint type) { return type == 4u ? 448.0 : 57344.0; }

// FP8 code → float, as fp8_e4m3_to_f32 / fp8_e5m2_to_f32.
float fp8_decode(uint type, uint c) {
  const uint mb = fp8_mbits(type), a = c & 0x7fu;
  if (type == 4u && a == 0x7fu) return uintBitsToFloat(0x7fc00000u);
  if (type == 5u && (a & 0x7cu) == 0x7cu)
    return uintBitsToFloat((a & 3u) != 0u ? 0x7fc00000u : ((c & 0x80u) << 24) | 0x7f800000u);
  const uint e = a >> mb, m = a & ((1u << mb) - 1u);
  float v;
  if (e == 0u) {
    v = float(m) * uintBitsToFloat(uint(127 + 1 - fp8_bias(type) - int(mb)) << 23);
  } else {
    v = uintBitsToFloat((uint(int(e) - fp8_bias(type) + 127) << 23) | (m << (23u - mb)));
  }
  return (c & 0x80u) != 0u ? -v : v;
}

// E2M1 code → its value ±{0, 0.5, 1, 1.5, 2, 3, 4, 6} (quants_kv.cpp e2m1_to_f32).
float e2m1_value(uint c) {
  const float kLevels[8] = float[8](0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0);
  const float v = kLevels[c & 7u];
  return (c & 8u) != 0u ? -v : v;
}

// Values per nvfp4 scale group of rows of heads of hd values: lcm(hd, 16) (kv_layout.cpp).
uint nvfp4_group(uint hd) { return hd / (1u << min(findLSB(hd), 4)) * 16u; }

// Value e of an nvfp4 row at byte o of `b` (row_bytes long, hkv heads of hd values): the
// 9-byte blocks (E4M3 scale, 8 bytes of E2M1 codes: value 2i in the low nibble of byte i) group
// after group, then one little-endian FP32 scale per group; value = (s2 · e4m3) · e2m1
// (dequantize_row_nvfp4_scaled).
float nvfp4_read(U32Buf b, uint o, uint row_bytes, uint e, uint hd, uint hkv) {
  const uint grp = nvfp4_group(hd), n_grp = (hkv * hd + grp - 1u) / grp;
  const uint so = o + row_bytes - 4u * (n_grp - e / grp);
  const float s2 = uintBitsToFloat(rd8(b, so) | (rd8(b, so + 1u) << 8) | (rd8(b, so + 2u) << 16) |
                                   (rd8(b, so + 3u) << 24));
  const uint blk = o + 9u * (e / 16u), k = e % 16u;
  precise float fac = s2 * fp8_decode(4u, rd8(b, blk));
  precise float v = fac * e2m1_value(rd8(b, blk + 1u + k / 2u) >> (4u * (k & 1u)));
  return v;
}

// Element e (of head `head`, one of hkv heads of hd values) of row j of the block at `b`. An
// fp8 row is the n = hkv · hd codes, then one E8M0 scale byte per head (255: NaN).
float kv_read(U32Buf b, uint type, uint row_bytes, uint j, uint e, uint head, uint hkv, uint hd) {
  const uint o = j * row_bytes;
  if (type == 7u) return nvfp4_read(b, o, row_bytes, e, hd, hkv);
  if (type == 0u) return uintBitsToFloat(b.v[(o >> 2) + e]);
  if (type == 1u) return rdf16(b, o + 2u * e);
  if (type == 2u) return rdbf16(b, o + 2u * e);
  if (type == 3u) {
    const uint blk = o + 34u * (e / 32u);
    return rdf16(b, blk) * float(rd8s(b, blk + 2u + e % 32u));
  }
  if (type == 6u) {  // q4_0: f16 d, 16 bytes: low nibbles values 0..15, high 16..31
    const uint blk = o + 18u * (e / 32u), i = e % 32u;
    const uint q = (rd8(b, blk + 2u + i % 16u) >> (i < 16u ? 0u : 4u)) & 15u;
    return rdf16(b, blk) * float(int(q) - 8);
  }
  const uint sb = rd8(b, o + row_bytes - hkv + head);
  if (sb == 255u) return uintBitsToFloat(0x7fc00000u);
  return ldexp(fp8_decode(type, rd8(b, o + e)), int(sb) - 127);
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

// RN(x / y) · 2^e, round to nearest even, for integers 0 < x, y < 2^24: the correctly rounded
// f32 quotient by long division in 32-bit integers (a shader's float division may be off by
// 2.5 ulp, and the q8_0 cache bytes must equal the CPU's). Exact unless the result is not a
// normal float.
float div_rn(uint x, uint y, int e) {
  uint q = x / y, r = x % y;
  int k = 0;
  while (findMSB(q) < 25) {  // 26 quotient bits at least: 24 + guard + more
    r <<= 7;
    q = (q << 7) | (r / y);
    r %= y;
    k += 7;
  }
  int s = findMSB(q) - 23;
  uint mant = q >> uint(s);
  const uint dropped = q & ((1u << uint(s)) - 1u), half_ = 1u << uint(s - 1);
  if (dropped > half_ || (dropped == half_ && (r != 0u || (mant & 1u) != 0u))) mant++;
  if (mant == (1u << 24)) {
    mant >>= 1;
    s++;
  }
  return ldexp(float(mant), s - k + e);
}

// The integer significand and exponent of a finite f > 0: f = m · 2^e.
void split_float(float f, out uint m, out int e) {
  const uint bits = floatBitsToUint(f);
  const uint be = (bits >> 23) & 0xffu;
  m = bits & 0x7fffffu;
  if (be == 0u) {
    e = -149;
  } else {
    m |= 0x800000u;
    e = int(be) - 150;
  }
}

// One q8_0 block of the 32 values v as ggml-like's encode_block_q8_0: d = f16(amax / 127),
// q = nearbyint(x · (127 / amax)). Returns d's bits; q in qs.
uint encode_q8_0(float v[32], out int qs[32]) {
  float amax = 0.0;
  for (uint i = 0u; i < 32u; ++i) amax = max(amax, abs(v[i]));
  float d = 0.0, id = 0.0;
  if (isinf(amax)) {
    d = amax;
  } else if (amax != 0.0) {
    uint m;
    int e;
    split_float(amax, m, e);
    d = div_rn(m, 127u, e);
    id = div_rn(127u, m, -e);
  }
  for (uint i = 0u; i < 32u; ++i) {
    precise float x = v[i] * id;
    qs[i] = int(roundEven(x));
  }
  uint h = f32_to_f16_bits(d);
  if ((h & 0x7fffu) >= 0x7c00u) h = (h & 0x8000u) | 0x7bffu;  // f32_to_fp16_sat
  return h;
}

// m >> shift rounded to nearest, ties to even (shift ≥ 1), as quants_kv.cpp's shift_round_even.
uint shift_round_even(uint m, uint shift) {
  if (shift >= 32u) return 0u;
  const uint q = m >> shift, rem = m & ((1u << shift) - 1u), half_ = 1u << (shift - 1u);
  return (rem > half_ || (rem == half_ && (q & 1u) != 0u)) ? q + 1u : q;
}

// float → FP8 code: round to nearest even on the binary32 bits, saturate (fp8_encode).
uint fp8_encode(uint type, float x) {
  const uint bits = floatBitsToUint(x), sign = (bits >> 24) & 0x80u, mb = fp8_mbits(type);
  if (isnan(x)) return sign | 0x7fu;
  if (!(abs(x) < fp8_max(type))) return sign | fp8_max_code(type);
  const int biased = int((bits >> 23) & 0xffu);
  if (biased == 0) return sign;
  const int e = biased - 127, emin = 1 - fp8_bias(type);
  const uint m24 = (bits & 0x7fffffu) | 0x800000u;
  uint code;
  if (e < emin) {
    code = shift_round_even(m24, uint(23 - int(mb) + (emin - e)));
  } else {
    const uint q = shift_round_even(m24, 23u - mb);
    code = (uint(e + fp8_bias(type)) << mb) + (q - (1u << mb));
  }
  return sign | min(code, fp8_max_code(type));
}

// The E8M0 exponent of a head with largest finite magnitude amax (quantize_row_fp8_scaled):
// the smallest e ≥ −127 with amax · 2^−e ≤ the format's max.
int fp8_scale_exp(uint type, float amax) {
  if (!(amax > 0.0)) return 0;
  int ea;
  frexp(amax, ea);  // amax = f · 2^ea, f in [0.5, 1): ilogb(amax) = ea − 1
  int e = (ea - 1) - (type == 4u ? 8 : 15) - 1;
  while (ldexp(amax, -e) > fp8_max(type)) ++e;
  return max(e, -127);
}

// RN(a · b + c) as one rounding, as std::fma: a shader's fma() may be a multiply and an add
// (Vulkan gives it their precision), so the product is split exactly (Dekker's TwoProduct with
// Veltkamp's split) and summed with TwoSum; exact but for sums within ~2^-24 ulp of a tie.
float fma_exact(float a, float b, float c) {
  precise float p = a * b;
  precise float ca = 4097.0 * a, cb = 4097.0 * b;
  precise float ah = ca - (ca - a), bh = cb - (cb - b);
  precise float al = a - ah, bl = b - bh;
  precise float e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;  // a·b = p + e exactly
  precise float s = p + c;
  precise float bb = s - p;
  precise float err = (p - (s - bb)) + (c - bb);  // p + c = s + err exactly
  precise float r = s + (err + e);
  return r;
}

// One q4_0 block of the 32 values v as ggml-like's encode_block_q4_0 (llama.cpp's
// quantize_row_q4_0_ref): m = the value of largest magnitude (the first), d = m / −8,
// code = clamp(trunc(fma(x, 1/d, 8.5)), 0, 15). Returns d's f16 bits; the 16 code bytes in qs
// (low nibble value j, high nibble value j + 16).
uint encode_q4_0(float v[32], out uint qs[16]) {
  float amax = 0.0, m = 0.0;
  for (uint i = 0u; i < 32u; ++i)
    if (amax < abs(v[i])) {
      amax = abs(v[i]);
      m = v[i];
    }
  const float d = m / -8.0;  // a power of two: exact
  float id = 0.0;
  if (d != 0.0 && !isinf(d)) {
    uint dm;
    int de;
    split_float(abs(d), dm, de);
    id = div_rn(1u, dm, -de);
    if (d < 0.0) id = -id;
  }
  uint codes[32];
  for (uint i = 0u; i < 32u; ++i) {
    const float t = fma_exact(v[i], id, 8.5);
    codes[i] = uint(clamp(t >= 0.0 ? int(t) : 0, 0, 15));
  }
  for (uint j = 0u; j < 16u; ++j) qs[j] = codes[j] | (codes[j + 16u] << 4);
  uint h = f32_to_f16_bits(d);
  if ((h & 0x7fffu) >= 0x7c00u) h = (h & 0x8000u) | 0x7bffu;  // f32_to_fp16_sat
  return h;
}
