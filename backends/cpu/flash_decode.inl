// flash_decode.inl — the body of the decode block kernel (flash_decode.h), included by
// flash_decode.cpp once per kernel level inside a namespace that defines:
//   vf, vi      W float / int32 lanes as GCC vector types
//   W           lanes per vector (16, 8 or 4), also as the macro KVRUN_FD_W
//   kAccRegs    vector accumulators the V loop may keep (a share of the register file)
//   madd(a, b, c)                   a · b + c rounded once (FMA; std::fma on the baseline)
//   splat(x)                        x in every lane
//   ld_f32 / st_f32                 W floats from / to memory
//   ld_f16(const uint16_t*)         W binary16 values widened to f32
//   ld_bf16(const uint16_t*)        W bfloat16 values widened to f32
//   ld_i8(const int8_t*)            W int8 values as f32
//   ld_q4(const uint8_t* qs, bool high)  W q4_0 nibbles (low or high halves of W bytes) − 8
//   h2f(uint16_t)                   one binary16 scale as f32
//   kb_t, kblock_q8 / kblock_q4     one K block of 32 values prepared for block_dot
//   block_dot(kb_t, const int8_t* q, const int32_t* corr)  the 8 lane sums of k·q over the
//                                   block (4 products each) as f32 (f8_t); corr: −o · (sum of
//                                   the lane's q values), for levels that offset K by o
//   madd8(a, b, c), splat8(x)       fused a · b + c and broadcast on 8 lanes (f8_t)
// Float dots keep 16 lanes of partial sums on every level (G16 = 16 / W vectors), so the
// operations, and the results, do not depend on W.
// Nothing here is specific to a level; the compiler maps vf to that level's registers.

/// W FP8 codes (type T) as f32, unscaled: through binary16 (ld_f16), exact (OCP OFP8 1.0): E5M2
/// is binary16's top byte; E4M3's exponent (bias 7) and mantissa shifted into binary16's fields
/// (bias 15) give the value · 2^−8, subnormals included, and S.1111.111 (its NaN) becomes a
/// binary16 NaN. The bits are formed on all W codes at once in 16-bit lanes (zero-extended
/// bytes: shifts, masks and one compare for E4M3's NaN).
template <DType T>
[[gnu::always_inline]] inline vf ld_fp8(const uint8_t* p) {
  typedef uint8_t vb __attribute__((vector_size(W)));
  typedef uint16_t vh __attribute__((vector_size(2 * W)));
  vb b;
  std::memcpy(&b, p, sizeof b);
  const vh c = __builtin_convertvector(b, vh);
  vh bits;
  if constexpr (T == DType::FP8_E5M2) {
    bits = c << 8;
  } else {
    const vh m = c & 0x7F;
    bits = ((c & 0x80) << 8) | (m << 7) | (reinterpret_cast<vh>(m == 0x7F) & 0x7E00);
  }
  alignas(64) uint16_t h[W];
  std::memcpy(h, &bits, sizeof h);
  const vf v = ld_f16(h);
  if constexpr (T == DType::FP8_E4M3) return v * 256.0f;  // a power of two: exact
  return v;
}

/// The row's FP8 scale 2^(b − 127) (b: the E8M0 byte at row + scale_off, 1..254); 1 for other
/// types (unused).
template <DType T>
[[gnu::always_inline]] inline float row_scale(const uint8_t* row, int64_t scale_off) {
  if constexpr (is_fp8(T)) return f32_from_bits(uint32_t(row[scale_off]) << 23);
  return 1.0f;
}

/// Lanes [e, e + W) of a head's row stored in type T (the head starts at `row`); e % W == 0.
/// `rs`: row_scale of an FP8 row (the values are code · rs, one rounding as the codec's).
template <DType T>
[[gnu::always_inline]] inline vf load_chunk(const uint8_t* row, int64_t e, float rs = 1.0f) {
  if constexpr (is_fp8(T)) {
    return ld_fp8<T>(row + e) * rs;
  } else if constexpr (T == DType::F32) {
    return ld_f32(reinterpret_cast<const float*>(row) + e);
  } else if constexpr (T == DType::F16) {
    return ld_f16(reinterpret_cast<const uint16_t*>(row) + e);
  } else if constexpr (T == DType::BF16) {
    return ld_bf16(reinterpret_cast<const uint16_t*>(row) + e);
  } else if constexpr (T == DType::Q8_0) {
    const block_q8_0* b = reinterpret_cast<const block_q8_0*>(row) + e / QK8_0;
    return ld_i8(b->qs + e % QK8_0) * h2f(b->d);
  } else {
    static_assert(T == DType::Q4_0);
    const block_q4_0* b = reinterpret_cast<const block_q4_0*>(row) + e / QK4_0;
    const int64_t w = e % QK4_0;  // element w < 16: low nibble of qs[w]; else high of qs[w − 16]
    return ld_q4(b->qs + w % (QK4_0 / 2), w >= QK4_0 / 2) * h2f(b->d);
  }
}

#if KVRUN_FD_W == 16
/// The sums of 16 positions from 8 vectors a[0..8), vector k holding 8 lane sums of position 2k
/// (lanes 0–7) and of position 2k + 1 (lanes 8–15), each position's 8 lanes added as a 256-bit
/// horizontal add (halves, then pairs): the last three levels of reduce_w's tree.
[[gnu::always_inline]] inline vf fold_pairs(const vf* a) {
  vf b[4], c[2];
#pragma GCC unroll 16
  for (int k = 0; k < 4; ++k)
    b[k] = __builtin_shufflevector(a[2 * k], a[2 * k + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19,
                                   24, 25, 26, 27) +
           __builtin_shufflevector(a[2 * k], a[2 * k + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22,
                                   23, 28, 29, 30, 31);
#pragma GCC unroll 16
  for (int k = 0; k < 2; ++k)
    c[k] = __builtin_shufflevector(b[2 * k], b[2 * k + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21,
                                   24, 25, 28, 29) +
           __builtin_shufflevector(b[2 * k], b[2 * k + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22,
                                   23, 26, 27, 30, 31);
  return __builtin_shufflevector(c[0], c[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                 30) +
         __builtin_shufflevector(c[0], c[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29,
                                 31);
}
#endif

/// out[k] = Σ lanes of t[k] for the W vectors t[0..W) (a transposing add tree: W − 1 adds).
[[gnu::always_inline]] inline vf reduce_w(const float* t) {
  vf v[W];
#pragma GCC unroll 16
  for (int k = 0; k < W; ++k) v[k] = ld_f32(t + k * W);
#if KVRUN_FD_W == 16
  vf a[8];
#pragma GCC unroll 16
  for (int k = 0; k < 8; ++k)
    a[k] = __builtin_shufflevector(v[2 * k], v[2 * k + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19,
                                   20, 21, 22, 23) +
           __builtin_shufflevector(v[2 * k], v[2 * k + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26,
                                   27, 28, 29, 30, 31);
  return fold_pairs(a);
#elif KVRUN_FD_W == 8
  vf a[4], b[2];
#pragma GCC unroll 16
  for (int k = 0; k < 4; ++k)
    a[k] = __builtin_shufflevector(v[2 * k], v[2 * k + 1], 0, 1, 2, 3, 8, 9, 10, 11) +
           __builtin_shufflevector(v[2 * k], v[2 * k + 1], 4, 5, 6, 7, 12, 13, 14, 15);
#pragma GCC unroll 16
  for (int k = 0; k < 2; ++k)
    b[k] = __builtin_shufflevector(a[2 * k], a[2 * k + 1], 0, 1, 4, 5, 8, 9, 12, 13) +
           __builtin_shufflevector(a[2 * k], a[2 * k + 1], 2, 3, 6, 7, 10, 11, 14, 15);
  return __builtin_shufflevector(b[0], b[1], 0, 2, 4, 6, 8, 10, 12, 14) +
         __builtin_shufflevector(b[0], b[1], 1, 3, 5, 7, 9, 11, 13, 15);
#else
  static_assert(W == 4);
  const vf a0 = __builtin_shufflevector(v[0], v[1], 0, 1, 4, 5) +
                __builtin_shufflevector(v[0], v[1], 2, 3, 6, 7);
  const vf a1 = __builtin_shufflevector(v[2], v[3], 0, 1, 4, 5) +
                __builtin_shufflevector(v[2], v[3], 2, 3, 6, 7);
  return __builtin_shufflevector(a0, a1, 0, 2, 4, 6) + __builtin_shufflevector(a0, a1, 1, 3, 5, 7);
#endif
}

using f8_t = float __attribute__((vector_size(32)));
using f4_t = float __attribute__((vector_size(16)));

/// The W lanes folded to 4 with `op` (halving tree).
template <typename Op>
[[gnu::always_inline]] inline f4_t fold4(vf v, Op op) {
#if KVRUN_FD_W == 16
  const f8_t h = op(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7),
                    __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15));
  return op(__builtin_shufflevector(h, h, 0, 1, 2, 3), __builtin_shufflevector(h, h, 4, 5, 6, 7));
#elif KVRUN_FD_W == 8
  return op(__builtin_shufflevector(v, v, 0, 1, 2, 3), __builtin_shufflevector(v, v, 4, 5, 6, 7));
#else
  (void)op;
  return v;
#endif
}

constexpr int G16 = 16 / W;  ///< vectors per 16 lanes

/// The 16 lane sums a[0..G16) folded to W lanes: W = 16 as is; 8: lanes i + (i + 8); 4:
/// (i + (i + 8)) + ((i + 4) + (i + 12)), the first levels of reduce_w's tree at 16 lanes.
[[gnu::always_inline]] inline vf fold16(const vf* a) {
#if KVRUN_FD_W == 16
  return a[0];
#elif KVRUN_FD_W == 8
  return a[0] + a[1];
#else
  return (a[0] + a[2]) + (a[1] + a[3]);
#endif
}

/// The sum of 16 lanes held in G16 vectors: fold16, then halves and pairs.
[[gnu::always_inline]] inline float hsum16(const vf* a) {
  const f4_t q = fold4(fold16(a), [](auto x, auto y) { return x + y; });
  return (q[0] + q[2]) + (q[1] + q[3]);
}

/// The max of the W lanes (no NaN expected).
[[gnu::always_inline]] inline float hmax_w(vf v) {
  const f4_t q = fold4(v, [](auto a, auto b) { return a > b ? a : b; });
  const float x = q[0] > q[2] ? q[0] : q[2], y = q[1] > q[3] ? q[1] : q[3];
  return x > y ? x : y;
}

/// e^x for x ≤ 0 on W lanes: paged_attention_flash.cpp's exp_nonpos (Cody–Waite reduction,
/// degree-5 polynomial of fast_exp.h's expf_lane, 2^n on the exponent bits) with every
/// a · b + c fused, as GCC contracts that function on FMA targets; x < −87.3 gives 0.
[[gnu::always_inline]] inline vf exp_nonpos_w(vf x) {
  const vf lo = splat(-87.3f);
  const vi under = x < lo;
  const vf xc = under ? lo : x;
  const vf z = madd(xc, splat(0x1.715476p+0f), splat(0x1.8p23f));
  const vf n = z - 0x1.8p23f;
  const vf b = madd(n, splat(-0x1.7f7d1cp-20f), madd(n, splat(-0x1.62e4p-1f), xc));
  const vf u = b * b;
  const vf p4 = madd(splat(0x1.0e4020p-7f), b, splat(0x1.573e2ep-5f));
  const vf p2 = madd(splat(0x1.555e66p-3f), b, splat(0x1.fffdb6p-2f));
  const vf p0 = madd(splat(0x1.ffffecp-1f), b, splat(1.0f));
  const vf j = madd(madd(p4, u, p2), u, p0);
  const vi e = (__builtin_convertvector(n, vi) + 127) << 23;
  vf s2;
  std::memcpy(&s2, &e, sizeof s2);
  return under ? vf{} : j * s2;
}

/// Unscaled scores of rows [r0, r0 + R) against the block's K rows [0, n) into s[r][j] (lanes
/// past n up to the next multiple of W get 0). Each K chunk is converted once for the R rows;
/// per (row, position) 16 lanes of partial sums (lane i: elements i, i + 16, …, the first a
/// product, the rest fused), folded by one transposing tree per W positions.
template <DType KT, int R>
void scores(const FlashDecodeBlock& a, int64_t r0) {
  const int64_t hd = a.hd;
  const float* q = a.q + r0 * hd;
  alignas(64) float t[R][W * W];
  for (int64_t j0 = 0; j0 < a.n; j0 += W) {
    for (int jj = 0; jj < W; ++jj) {
      const int64_t j = j0 + jj;
      if (j >= a.n) {
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) st_f32(t[r] + jj * W, vf{});
        continue;
      }
      const uint8_t* row = a.k + j * a.k_stride;
      const float rs = row_scale<KT>(row, a.k_scale_off);
      vf acc[R][G16];
#pragma GCC unroll 4
      for (int g = 0; g < G16; ++g) {
        const vf kc = load_chunk<KT>(row, g * W, rs);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) acc[r][g] = kc * ld_f32(q + r * hd + g * W);
      }
      for (int64_t e = 16; e < hd; e += 16) {
#pragma GCC unroll 4
        for (int g = 0; g < G16; ++g) {
          const vf kc = load_chunk<KT>(row, e + g * W, rs);
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r)
            acc[r][g] = madd(kc, ld_f32(q + r * hd + e + g * W), acc[r][g]);
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) st_f32(t[r] + jj * W, fold16(acc[r]));
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) st_f32(a.s + (r0 + r) * a.bsp + j0, reduce_w(t[r]));
  }
}

/// vc[c] = load_chunk<T>(row, e + c·W) for c < C, with one scale conversion per Q8_0 / Q4_0
/// block when the chunks cover whole blocks (C·W a multiple of 32: e % 32 == 0 then, e being a
/// multiple of C·W) or lie in one block (C·W dividing 32); the same products either way.
template <DType T, int C>
[[gnu::always_inline]] inline void load_chunks(const uint8_t* row, int64_t e, vf* vc, float rs) {
  if constexpr ((T == DType::Q8_0 || T == DType::Q4_0) &&
                ((C * W) % 32 == 0 || 32 % (C * W) == 0)) {
    constexpr int kPerBlock = C < 32 / W ? C : 32 / W;  // chunks per scale conversion
#pragma GCC unroll 4
    for (int c0 = 0; c0 < C; c0 += kPerBlock) {
      const int64_t blk = (e + c0 * W) / 32, w0 = (e + c0 * W) % 32;
      if constexpr (T == DType::Q8_0) {
        const block_q8_0* b = reinterpret_cast<const block_q8_0*>(row) + blk;
        const float d = h2f(b->d);
#pragma GCC unroll 8
        for (int c = 0; c < kPerBlock; ++c) vc[c0 + c] = ld_i8(b->qs + w0 + c * W) * d;
      } else {
        const block_q4_0* b = reinterpret_cast<const block_q4_0*>(row) + blk;
        const float d = h2f(b->d);
#pragma GCC unroll 8
        for (int c = 0; c < kPerBlock; ++c) {
          const int64_t w = w0 + c * W;  // as load_chunk: low nibbles for w < 16, else high
          vc[c0 + c] = ld_q4(b->qs + w % (QK4_0 / 2), w >= QK4_0 / 2) * d;
        }
      }
    }
  } else {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) vc[c] = load_chunk<T>(row, e + c * W, rs);
  }
}

/// acc[r][e, e + C·W) = acc · a.corr[r] + Σ_j p[r][j] · v_j over positions [jlo, jhi) in order,
/// one fused multiply-add each (the operations of the large-tile kernel's row loop as GCC
/// compiles it for FMA targets, so a decode gives what it gave before): C chunks of W lanes × R
/// rows are independent chains, and each V chunk is converted once for the R rows.
template <DType VT, int R, int C>
[[gnu::always_inline]] inline void accumulate_chunks(const FlashDecodeBlock& a, int64_t r0,
                                                     int64_t e, int64_t jlo, int64_t jhi) {
  const int64_t hdv = a.hdv;
  const float* p = a.s + r0 * a.bsp;
  vf acc[C][R];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      acc[c][r] = ld_f32(a.acc + (r0 + r) * hdv + e + c * W) * a.corr[r0 + r];
  for (int64_t j = jlo; j < jhi; ++j) {
    const uint8_t* row = a.v + j * a.v_stride;
    vf pj[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) pj[r] = splat(p[r * a.bsp + j]);
    vf vc[C];
    load_chunks<VT, C>(row, e, vc, row_scale<VT>(row, a.v_scale_off));
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c)
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[c][r] = madd(pj[r], vc[c], acc[c][r]);
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) st_f32(a.acc + (r0 + r) * hdv + e + c * W, acc[c][r]);
}

/// accumulate_chunks over all of head_dim_v for rows [r0, r0 + R).
template <DType VT, int R>
void accumulate(const FlashDecodeBlock& a, int64_t r0, int64_t jlo, int64_t jhi) {
  constexpr int C = kAccRegs / R >= 4 ? 4 : kAccRegs / R >= 2 ? 2 : 1;
  int64_t e = 0;
  for (; e + C * W <= a.hdv; e += C * W) accumulate_chunks<VT, R, C>(a, r0, e, jlo, jhi);
  for (; e < a.hdv; e += W) accumulate_chunks<VT, R, 1>(a, r0, e, jlo, jhi);
}

/// The 8 lanes of `v` in a W-lane vector (W = 16: upper lanes zero; W = 4: halves added).
[[gnu::always_inline]] inline vf widen8(f8_t v) {
#if KVRUN_FD_W == 16
  return __builtin_shufflevector(v, f8_t{}, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#elif KVRUN_FD_W == 8
  return v;
#else
  return __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
#endif
}

/// scores() for a Q8_0 / Q4_0 K against Q quantized to q8_0: per K block the integer dot of
/// its 32 values with each row's (block_dot), lane[i] = fma(d_k · d_q, sum_i, lane[i]) on 8
/// lanes per row, the lanes folded as a 256-bit horizontal add (halves, then pairs; reduce_w
/// does exactly that to a widen8'ed vector): the float operations of vec_dot_q8_0_q8_0 /
/// vec_dot_q4_0_q8_0 (vec_dot_legacy.cpp, llama.cpp's order), so each score is bit-identical.
template <DType KT, int R>
void scores_q8(const FlashDecodeBlock& a, int64_t r0) {
  constexpr int64_t kBlockBytes = KT == DType::Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
  const int64_t nb = a.hd / 32;
  const int8_t* qx = a.qx + r0 * a.hd;
  const float* qd = a.qd + r0 * nb;
  const int32_t* qcorr = a.qcorr + r0 * (a.hd / 4);
  alignas(64) float t[R][W * W];
  for (int64_t j0 = 0; j0 < a.n; j0 += W) {
    for (int jj = 0; jj < W; ++jj) {
      const int64_t j = j0 + jj;
      if (j >= a.n) {
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) st_f32(t[r] + jj * W, vf{});
        continue;
      }
      const uint8_t* row = a.k + j * a.k_stride;
      f8_t acc[R] = {};
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + b * kBlockBytes;
        kb_t k;
        if constexpr (KT == DType::Q8_0)
          k = kblock_q8(reinterpret_cast<const block_q8_0*>(blk));
        else
          k = kblock_q4(reinterpret_cast<const block_q4_0*>(blk));
        const f8_t dk = splat8(h2f(reinterpret_cast<const block_q8_0*>(blk)->d));  // d first
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const f8_t d = block_dot(k, qx + r * a.hd + b * 32, qcorr + r * (a.hd / 4) + b * 8);
          acc[r] = madd8(d, dk * qd[r * nb + b], acc[r]);  // d_k · d_q rounded, then fused
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) st_f32(t[r] + jj * W, widen8(acc[r]));
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) st_f32(a.s + (r0 + r) * a.bsp + j0, reduce_w(t[r]));
  }
}

#if KVRUN_FD_W == 16
/// scores_q8 with two positions per 512-bit register: K blocks of positions j and j + 1 in the
/// two halves (block_dot2 against the row's Q block in both), the same per-lane float
/// operations, then fold_pairs. Each score is bit-identical to scores_q8's (up to the sign of
/// a zero sum), with half the integer dots, conversions and fused multiply-adds.
template <DType KT, int R>
void scores_q8_pairs(const FlashDecodeBlock& a, int64_t r0) {
  constexpr int64_t kBlockBytes = KT == DType::Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
  const int64_t nb = a.hd / 32;
  const int8_t* qx = a.qx + r0 * a.hd;
  const float* qd = a.qd + r0 * nb;
  const int32_t* qcorr = a.qcorr + r0 * (a.hd / 4);
  alignas(64) float t[R][16 * 8];
  for (int64_t j0 = 0; j0 < a.n; j0 += 16) {
    for (int jp = 0; jp < 8; ++jp) {
      const int64_t j = j0 + 2 * jp;
      if (j >= a.n) {
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) st_f32(t[r] + jp * 16, vf{});
        continue;
      }
      // Past the end the pair repeats position j (its lanes are dropped by the softmax).
      const uint8_t* row0 = a.k + j * a.k_stride;
      const uint8_t* row1 = j + 1 < a.n ? row0 + a.k_stride : row0;
      vf acc[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r] = vf{};
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk0 = row0 + b * kBlockBytes;
        const uint8_t* blk1 = row1 + b * kBlockBytes;
        kb2_t k;
        if constexpr (KT == DType::Q8_0)
          k = kblock2_q8(reinterpret_cast<const block_q8_0*>(blk0),
                         reinterpret_cast<const block_q8_0*>(blk1));
        else
          k = kblock2_q4(reinterpret_cast<const block_q4_0*>(blk0),
                         reinterpret_cast<const block_q4_0*>(blk1));
        // d first in both block types
        const vf dk = splat_pair(h2f(reinterpret_cast<const block_q8_0*>(blk0)->d),
                                 h2f(reinterpret_cast<const block_q8_0*>(blk1)->d));
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const vf d = block_dot2(k, qx + r * a.hd + b * 32, qcorr + r * (a.hd / 4) + b * 8);
          acc[r] = madd(d, dk * qd[r * nb + b], acc[r]);  // d_k · d_q rounded, then fused
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) st_f32(t[r] + jp * 16, acc[r]);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      vf v[8];
#pragma GCC unroll 16
      for (int k = 0; k < 8; ++k) v[k] = ld_f32(t[r] + k * 16);
      // fold_pairs is reduce_w's tree from its second level on: its first level only adds the
      // zero upper lanes of scores_q8's widen8, which changes no value.
      st_f32(a.s + (r0 + r) * a.bsp + j0, fold_pairs(v));
    }
  }
}
#endif

template <DType KT>
void scores_q8_rows(const FlashDecodeBlock& a) {
#if KVRUN_FD_W == 16
#define KVRUN_FD_SCORES_Q8 scores_q8_pairs
#else
#define KVRUN_FD_SCORES_Q8 scores_q8
#endif
  for (int64_t r0 = 0; r0 < a.rows; r0 += 4) {
    switch (std::min<int64_t>(4, a.rows - r0)) {
      case 1:
        KVRUN_FD_SCORES_Q8<KT, 1>(a, r0);
        break;
      case 2:
        KVRUN_FD_SCORES_Q8<KT, 2>(a, r0);
        break;
      case 3:
        KVRUN_FD_SCORES_Q8<KT, 3>(a, r0);
        break;
      default:
        KVRUN_FD_SCORES_Q8<KT, 4>(a, r0);
        break;
    }
  }
#undef KVRUN_FD_SCORES_Q8
}

template <DType KT>
void scores_rows(const FlashDecodeBlock& a) {
  for (int64_t r0 = 0; r0 < a.rows; r0 += 4) {
    switch (std::min<int64_t>(4, a.rows - r0)) {
      case 1:
        scores<KT, 1>(a, r0);
        break;
      case 2:
        scores<KT, 2>(a, r0);
        break;
      case 3:
        scores<KT, 3>(a, r0);
        break;
      default:
        scores<KT, 4>(a, r0);
        break;
    }
  }
}

template <DType VT>
void accumulate_rows(const FlashDecodeBlock& a, int64_t jlo, int64_t jhi) {
  for (int64_t r0 = 0; r0 < a.rows; r0 += 4) {
    switch (std::min<int64_t>(4, a.rows - r0)) {
      case 1:
        accumulate<VT, 1>(a, r0, jlo, jhi);
        break;
      case 2:
        accumulate<VT, 2>(a, r0, jlo, jhi);
        break;
      case 3:
        accumulate<VT, 3>(a, r0, jlo, jhi);
        break;
      default:
        accumulate<VT, 4>(a, r0, jlo, jhi);
        break;
    }
  }
}

/// The kernel (flash_decode.h).
void flash_decode_block(const FlashDecodeBlock& a) {
  switch (a.k_type) {
    case DType::F16:
      scores_rows<DType::F16>(a);
      break;
    case DType::BF16:
      scores_rows<DType::BF16>(a);
      break;
    case DType::FP8_E4M3:
      scores_rows<DType::FP8_E4M3>(a);
      break;
    case DType::FP8_E5M2:
      scores_rows<DType::FP8_E5M2>(a);
      break;
    case DType::Q8_0:
      if (a.qx)
        scores_q8_rows<DType::Q8_0>(a);
      else
        scores_rows<DType::Q8_0>(a);
      break;
    case DType::Q4_0:
      if (a.qx)
        scores_q8_rows<DType::Q4_0>(a);
      else
        scores_rows<DType::Q4_0>(a);
      break;
    default:
      scores_rows<DType::F32>(a);
      break;
  }
  // Online softmax per row; s[r] becomes the weights (0 outside [lo, nv)).
  const int64_t n_pad = (a.n + W - 1) / W * W;
  int64_t jlo = a.n, jhi = 0;
  for (int64_t r = 0; r < a.rows; ++r) {
    float* s = a.s + r * a.bsp;
    const int64_t nv = std::min(a.nv[r], a.n), lo = std::max<int64_t>(a.lo[r], 0);
    a.corr[r] = 1.0f;
    if (nv <= lo) {
      for (int64_t j = 0; j < n_pad; j += W) st_f32(s + j, vf{});
      continue;
    }
    jlo = std::min(jlo, lo);
    jhi = std::max(jhi, nv);
    for (int64_t j = 0; j < n_pad; j += W) st_f32(s + j, ld_f32(s + j) * a.scale);
    if (a.softcap > 0)
      for (int64_t j = lo; j < nv; ++j) s[j] = std::tanh(s[j] * (1.0f / a.softcap)) * a.softcap;
    for (int64_t j = 0; j < lo; ++j) s[j] = -INFINITY;
    for (int64_t j = nv; j < n_pad; ++j) s[j] = -INFINITY;
    vf mx = splat(-INFINITY);
    for (int64_t j = 0; j < n_pad; j += W) {
      const vf x = ld_f32(s + j);
      mx = mx > x ? mx : x;
    }
    const float bmax = hmax_w(mx);
    const float mb = bmax > a.m[r] ? bmax : a.m[r];
    if (mb > a.m[r]) {  // a new maximum: rescale what was accumulated (e^−inf = 0 the first time)
      const float c = exp_nonpos_w(splat(a.m[r] - mb))[0];
      a.corr[r] = c;
      a.l[r] *= c;
      a.m[r] = mb;
    }
    // e^(s − max), and the block's sum: 16 lane sums over the 16-wide chunks, then one fixed
    // tree (the same operations at every W).
    vf sum16[G16] = {};
    for (int64_t j = 0; j < n_pad; j += W) {
      const vf e = exp_nonpos_w(ld_f32(s + j) - mb);
      st_f32(s + j, e);
      sum16[(j / W) % G16] += e;
    }
    a.l[r] += hsum16(sum16);
  }
  if (jhi <= jlo) return;  // no row sees any position of the block
  switch (a.v_type) {
    case DType::F16:
      accumulate_rows<DType::F16>(a, jlo, jhi);
      break;
    case DType::BF16:
      accumulate_rows<DType::BF16>(a, jlo, jhi);
      break;
    case DType::FP8_E4M3:
      accumulate_rows<DType::FP8_E4M3>(a, jlo, jhi);
      break;
    case DType::FP8_E5M2:
      accumulate_rows<DType::FP8_E5M2>(a, jlo, jhi);
      break;
    case DType::Q8_0:
      accumulate_rows<DType::Q8_0>(a, jlo, jhi);
      break;
    case DType::Q4_0:
      accumulate_rows<DType::Q4_0>(a, jlo, jhi);
      break;
    default:
      accumulate_rows<DType::F32>(a, jlo, jhi);
      break;
  }
}
