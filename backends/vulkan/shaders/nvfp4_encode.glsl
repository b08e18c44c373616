// nvfp4_encode.glsl — the nvfp4 KV row encoder (ggml-like/kv_layout.cpp encode_nvfp4,
// quants_kv.cpp quantize_row_nvfp4_scaled / quantize_block_nvfp4), operation for operation, so
// the cache bytes equal the CPU's. Included by kv_store.comp's "kv_store_nvfp4" variant only:
// the block's error sums are float64 (the CPU's), so that module needs shaderFloat64.
//
// The float32 divisions and the block factor's product are done on the bits in integer
// arithmetic (a shader's division may be off by 2.5 ulp, and subnormal floats may be flushed):
// positive floats are carried as their bit patterns, which order as the values do.
#extension GL_EXT_control_flow_attributes : require

// RN(q · 2^E), q > 0 and < 2^31, plus a nonzero remainder below q's last bit when `sticky`, as
// binary32 bits: round to nearest even, subnormal results rounded at 2^-149, too large → +inf.
uint round_to_f32_bits(uint q, int E, bool sticky) {
  const int msb = findMSB(q);
  if (msb + E > 127) return 0x7f800000u;
  const int shift = max(msb - 23, -149 - E);  // bits dropped (≤ 0: exact)
  uint kept = 0u;
  if (shift <= 0) {
    kept = q << uint(-shift);
  } else if (shift <= 31) {
    kept = q >> uint(shift);
    const uint rem = q & ((1u << uint(shift)) - 1u), half_ = 1u << uint(shift - 1);
    if (rem > half_ || (rem == half_ && (sticky || (kept & 1u) != 0u))) kept++;
  }  // shift > 31 (≥ msb + 2): below half the smallest subnormal, 0
  // Normal: the biased exponent above the implicit bit (a carry out of the significand
  // steps the exponent up); subnormal: the significand is the encoding.
  return msb + E >= -126 ? (uint(msb + E + 126) << 23) + kept : kept;
}

// A finite positive float's bits as m · 2^e with m's top bit at bit 23 (subnormals normalized).
void split_norm(uint bits, out uint m, out int e) {
  const uint be = bits >> 23;
  if (be == 0u) {
    const int s = 23 - findMSB(bits);
    m = bits << uint(s);
    e = -149 - s;
  } else {
    m = (bits & 0x7fffffu) | 0x800000u;
    e = int(be) - 150;
  }
}

// RN(a / b) for finite a ≥ 0 and b > 0 (bits): 28 quotient bits past the first by long
// division, the remainder as the sticky bit.
uint fdiv_bits(uint a, uint b) {
  if (a == 0u) return 0u;
  uint ma, mb;
  int ea, eb;
  split_norm(a, ma, ea);
  split_norm(b, mb, eb);
  uint q = ma / mb, r = ma % mb;
  for (uint i = 0u; i < 4u; ++i) {  // r < mb < 2^24: r << 7 < 2^31
    r <<= 7;
    q = (q << 7) | (r / mb);
    r %= mb;
  }
  return round_to_f32_bits(q, ea - eb - 28, r != 0u);
}

// RN(a · b) for finite a, b ≥ 0 (bits), b's significand of at most 7 bits (an E4M3 value).
uint fmul_bits(uint a, uint b) {
  if (a == 0u || b == 0u) return 0u;
  uint ma, mb;
  int ea, eb;
  split_norm(a, ma, ea);
  split_norm(b, mb, eb);
  const int tz = findLSB(mb);
  return round_to_f32_bits(ma * (mb >> uint(tz)), ea + eb + tz, false);
}

// Float bits → float64, exactly (no flush of subnormals).
double f32_bits_to_f64(uint x) {
  const uint s = x & 0x80000000u, a = x & 0x7fffffffu;
  if (a == 0u) return packDouble2x32(uvec2(0u, s));
  if (a >= 0x7f800000u)
    return packDouble2x32(uvec2(0u, s | 0x7ff00000u | (a > 0x7f800000u ? 0x80000u : 0u)));
  uint m;
  int e;
  split_norm(a, m, e);
  const uint frac = m & 0x7fffffu;
  return packDouble2x32(uvec2(frac << 29, s | (uint(e + 23 + 1023) << 20) | (frac >> 3)));
}

// The E2M1 code of x / f (x as bits, f > 0 as bits): nearest level, ties to the even code,
// saturating at ±6, NaN → 0; the sign from x (e2m1_from_f32 of the rounded quotient).
uint e2m1_code(uint x, uint f) {
  const uint a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return 0u;
  const uint sign = (x >> 28) & 8u;
  const float q = uintBitsToFloat(a == 0x7f800000u ? a : fdiv_bits(a, f));
  uint c = 7u;
  if (q <= 0.25)
    c = 0u;
  else if (q < 0.75)
    c = 1u;
  else if (q <= 1.25)
    c = 2u;
  else if (q < 1.75)
    c = 3u;
  else if (q <= 2.5)
    c = 4u;
  else if (q < 3.5)
    c = 5u;
  else if (q <= 5.0)
    c = 6u;
  return sign | c;
}

// Largest finite |x| of the values seen so far (bits), as finite_absmax.
uint absmax_step(uint amax, uint x) {
  const uint a = x & 0x7fffffffu;
  return a < 0x7f800000u && a > amax ? a : amax;
}

// Squared error (float64, unfused as the CPU's) of the 16 values (bits) coded with the block
// factor f (bits; 0: every code 0); the codes in `codes` (nvfp4_block_error).
double nvfp4_block_error(uint x[16], uint f, out uint codes[16]) {
  precise double err = 0.0;
  const double fd = f32_bits_to_f64(f);
  [[dont_unroll]] for (uint i = 0u; i < 16u; ++i) {
    codes[i] = f != 0u ? e2m1_code(x[i], f) : 0u;
    precise double prod = fd * double(e2m1_value(codes[i]));
    precise double e = f32_bits_to_f64(x[i]) - prod;
    precise double sq = e * e;
    err = err + sq;
  }
  return err;
}

// One nvfp4 block of 16 values (bits) for the group scale s2 (bits): the E4M3 scale byte lo ≤
// absmax / 6 / s2 < lo + 1 (one code up) with the smaller squared error, lo on a tie
// (quantize_block_nvfp4). Returns the scale byte; the 16 E2M1 codes in `codes`. (One loop over
// the two candidates, not unrolled: lavapipe's JIT time grows with every inlined copy.)
uint encode_nvfp4_block(uint x[16], uint s2, out uint codes[16]) {
  uint amax = 0u;
  for (uint i = 0u; i < 16u; ++i) amax = absmax_step(amax, x[i]);
  const uint target = fdiv_bits(fdiv_bits(amax, floatBitsToUint(6.0)), s2);
  uint sc[2] = uint[2](0u, 0u), c[2][16];
  double err[2] = double[2](0.0, 0.0);
  for (uint i = 0u; i < 16u; ++i) c[0][i] = c[1][i] = 0u;
  if (target > 0u) {
    sc[0] = fp8_encode(4u, uintBitsToFloat(target));
    if (floatBitsToUint(fp8_decode(4u, sc[0])) > target) --sc[0];  // rounded up: step down
    sc[1] = sc[0] < 0x7Eu ? sc[0] + 1u : sc[0];
    [[dont_unroll]] for (uint k = 0u; k < (sc[1] == sc[0] ? 1u : 2u); ++k) {
      err[k] = nvfp4_block_error(x, fmul_bits(s2, floatBitsToUint(fp8_decode(4u, sc[k]))), c[k]);
    }
    if (sc[1] == sc[0]) err[1] = err[0];
  }
  const uint use = err[0] <= err[1] ? 0u : 1u;  // hi for NaN errors, as on the CPU
  for (uint i = 0u; i < 16u; ++i) codes[i] = c[use][i];
  return sc[use];
}

// The FP32 scale of a group with largest finite magnitude amax (bits): amax / (6 · 448), at
// least FLT_MIN, stepped up one ulp at a time while amax / 6 / s2 > 448
// (quantize_row_nvfp4_scaled). Returns its bits.
uint nvfp4_group_scale(uint amax) {
  if (amax == 0u) return floatBitsToUint(1.0);
  uint s2 = max(fdiv_bits(amax, floatBitsToUint(2688.0)), 0x00800000u);
  const uint t = fdiv_bits(amax, floatBitsToUint(6.0));
  while (fdiv_bits(t, s2) > floatBitsToUint(448.0)) ++s2;
  return s2;
}
