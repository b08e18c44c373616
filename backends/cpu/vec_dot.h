// vec_dot.h — row dot products of a weight row against an activation row, per weight format,
// and the activation converters/quantizers they pair with.
//
// A weight row of type W is dotted with an activation row already converted to W's activation
// type (cpu_traits.h says which): f32→f32, f16→f16, bf16→bf16,
// q4_0/q5_0/q8_0/iq4_nl/mxfp4→q8_0, q4_1/q5_1→q8_1, K-quants/iq4_xs→q8_K. This is the pairing
// llama.cpp's CPU backend uses (ggml-cpu's `vec_dot_type`), so results track its numerics: integer
// products inside a block, one float multiply-add per block with the two block scales.
//
// Activation quantizers follow the rules of llama.cpp's CPU backend (facts, not its code):
//   q8_0 / q8_1: per block of 32, d = max|x| / 127 stored as f16, q =
//   round-half-even(x·127/max|x|);
//                q8_1 also stores s = d · Σq as f16.
//   q8_K:        per block of 256, m = the x with the largest |x| (first one on ties),
//                s = -127 / m, q = min(127, round-half-even(s·x)), d = 1/s as f32, bsums = Σ of
//                each 16 quants.
//
// All functions take `n` = elements (a multiple of the format's block size) and never throw.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvrun::cpu {

/// Σ w[i]·x[i] over `n` elements; `w` is a weight row, `x` an activation row of the paired type.
using VecDotFn = float (*)(int64_t n, const void* w, const void* x);
/// A tile of dots: y[j·y_stride + r] = the VecDotFn of the same kernel for weight row r (at
/// w + r·w_stride bytes, r < nrows) and activation row j (at x + j·x_stride bytes, j < nx);
/// bit-identical to those single dots, computed several weight and activation rows at a time
/// (y_stride in floats).
using DotTileFn = void (*)(int64_t n, const void* w, size_t w_stride, int64_t nrows, const void* x,
                           size_t x_stride, int64_t nx, float* y, size_t y_stride);
/// The kernel of a packed weight (pack.h layout): y[j·y_stride + r] = the dot of row r
/// (r < 16·ngroups, rows of the groups starting at `wp`) with activation row j (j < nx, rows of
/// the type's activation type x_stride bytes apart), bit-identical to the type's unpacked dot
/// (q4_0: repack_dot, q8_0, q4_K, q5_K and q6_K: vec_dot). xoff (pack_act_offsets) takes the
/// unsigned storage's offset off the sums:
///   q4_0: xoff[(j·(n/32) + b)·2] = −8 · Σ of the 32 quants of block b of activation row j,
///         xoff[(j·(n/32) + b)·2 + 1] = that block's scale d as float bits;
///   q8_0: xoff[(j·(n/32) + b)·9 + i] = −128 · Σ of quants 4i..4i+3 of that block (i < 8),
///         xoff[(j·(n/32) + b)·9 + 8] = its scale d as float bits;
///   q6_K: xoff[(j·(n/256) + b)·64 + i] = −32 · Σ of quants 4i..4i+3 of q8_K block b
///         (activation rows are q8_K there; the dot is vec_dot_q6_K_q8_K's; the avx2
///         decode form does not read it: it forms per-pair offsets from the row itself).
///   q4_K: none (xoff is not read; the min term uses the q8_K rows' bsums; vec_dot_q4_K_q8_K).
///   q5_K: none, as q4_K (vec_dot_q5_K_q8_K).
using PackedTileFn = void (*)(int64_t n, const void* wp, int64_t ngroups, const void* x,
                              size_t x_stride, const int32_t* xoff, int64_t nx, float* y,
                              size_t y_stride);
/// Converts `n` floats to an activation row of a paired type.
using ActFromFloatFn = void (*)(const float* src, void* dst, int64_t n);

// Activation converters.
void act_from_float_f32(const float* src, void* dst, int64_t n);
void act_from_float_f16(const float* src, void* dst, int64_t n);
void act_from_float_bf16(const float* src, void* dst, int64_t n);
void act_from_float_q8_0(const float* src, void* dst, int64_t n);
void act_from_float_q8_1(const float* src, void* dst, int64_t n);
void act_from_float_q8_K(const float* src, void* dst, int64_t n);

/// binary16 → float through a 64K-entry table (exact; the table is built on first use).
float fp16_lut(uint16_t h);

// Float weights (vec_dot_float.cpp). The f32/f16 dots reproduce the accumulation order of
// llama.cpp's CPU backend on a 512-bit SIMD machine (the fixtures' reference), because values
// are rounded to f16 right after (KV cache, attention weights, f16 activations) and a one-ulp
// difference there can flip a rounding:
//   vec order  (ggml_vec_dot_f16/f32, used for one token or rows not a multiple of 16):
//              4 accumulators × 16 lanes over the first n & ~63 elements (fused multiply-add),
//              folded acc0+acc2, acc1+acc3, then acc0+acc1, then the 16 lanes pairwise
//              (i+8, i+4, i+2, i+1); the tail is added one by one: for f16 in double, for
//              f32 in f32, unfused for the first (tail & ~15) + (8 if tail % 16 ≥ 8) elements
//              and fused after that (how GCC compiles ggml's tail loop; vec_dot_float.cpp).
//   gemm order (llamafile tinyBLAS, used for batches of ≥ 2 rows when k % 16 == 0 and
//              m % 4 == 0): one 16-lane accumulator over k, then the same 16-lane fold.
// bf16 accumulates in f32 lanes.
float vec_dot_f32(int64_t n, const void* w, const void* x);
float vec_dot_f16(int64_t n, const void* w, const void* x);
float vec_dot_bf16(int64_t n, const void* w, const void* x);
/// The gemm-order forms of vec_dot_f32 / vec_dot_f16 (n a multiple of 16).
float gemm_dot_f32(int64_t n, const void* w, const void* x);
float gemm_dot_f16(int64_t n, const void* w, const void* x);

// Legacy block quants (vec_dot_legacy.cpp).
float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* x);
float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* x);
float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* x);
float vec_dot_iq4_nl_q8_0(int64_t n, const void* w, const void* x);
/// mxfp4 (OCP MX FP4) against q8_0: as iq4_nl's dot with the doubled E2M1 levels
/// (kvalues_mxfp4) and half the E8M0 scale as the weight's block scale (blocks.h).
float vec_dot_mxfp4_q8_0(int64_t n, const void* w, const void* x);
float vec_dot_q4_1_q8_1(int64_t n, const void* w, const void* x);
/// vec_dot_q4_0_q8_0 in the order of llama.cpp's repacked q4_0 kernels (CPU_AARCH64 buffer,
/// q4_0_8x8 layout, which x86 with AVX2 uses for every q4_0 weight with a multiple of 8 rows,
/// in its gemm and gemv alike): per block the whole 32-element integer dot, then
/// acc = fma(float(isum), d_w · d_x, acc) with one scalar accumulator from 0.
float repack_dot_q4_0_q8_0(int64_t n, const void* w, const void* x);
float vec_dot_q5_1_q8_1(int64_t n, const void* w, const void* x);

// K-quants (vec_dot_k.cpp).
float vec_dot_q2_K_q8_K(int64_t n, const void* w, const void* x);
float vec_dot_q3_K_q8_K(int64_t n, const void* w, const void* x);
float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* x);
float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* x);
float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* x);
/// iq4_xs against q8_K, in q4_K's main-term order: per super-block 8 integer lanes (lane i =
/// Σ_j (ls_j − 32) · Σ_{e=4i..4i+3} of sub-block j's level·q_x), each fused-multiply-added with
/// d_w·d_x into a float lane; the 8 lanes folded at the end.
float vec_dot_iq4_xs_q8_K(int64_t n, const void* w, const void* x);

// Grid-based i-quants against q8_K (vec_dot_iq.cpp). Each is exact integer arithmetic per
// super-block (grid value · sign · q_x summed per scale group, times the group's integer scale
// factor) followed by one float step, acc = fma(d_w·d_x, float(isum), acc) with one scalar
// accumulator, then the format's constant factor applied once at the end.
/// iq3_s: isum = Σ_j (1 + 2·s_j) · Σ_{e in sub-block j} grid·sign·q_x; factor 1.
float vec_dot_iq3_s_q8_K(int64_t n, const void* w, const void* x);
/// iq2_s: isum = Σ_h (1 + 2·s_h) · Σ_{e in half-sub-block h} grid·sign·q_x; factor 1/8.
float vec_dot_iq2_s_q8_K(int64_t n, const void* w, const void* x);
/// iq3_xxs: isum = Σ_j (1 + 2·s_j) · Σ_{e in sub-block j} grid·sign·q_x; factor 1/4.
float vec_dot_iq3_xxs_q8_K(int64_t n, const void* w, const void* x);
/// iq2_xxs: isum = Σ_j (1 + 2·s_j) · Σ_{e in sub-block j} grid·sign·q_x; factor 1/8.
float vec_dot_iq2_xxs_q8_K(int64_t n, const void* w, const void* x);
/// iq2_xs: isum = Σ_h (1 + 2·s_h) · Σ_{e in half-sub-block h} grid·sign·q_x; factor 1/8.
float vec_dot_iq2_xs_q8_K(int64_t n, const void* w, const void* x);
/// iq1_s: isum = Σ_j (1 + 2·s_j) · Σ_{e in sub-block j} (8·grid + σ_j)·q_x (σ = ±1, the sign of
/// the ±1/8 shift); factor 1/8.
float vec_dot_iq1_s_q8_K(int64_t n, const void* w, const void* x);
/// iq1_m: isum = Σ_h (1 + 2·s_h) · Σ_{e in half-sub-block h} (8·grid + σ_g)·q_x, σ_g per 8 values;
/// factor 1/8.
float vec_dot_iq1_m_q8_K(int64_t n, const void* w, const void* x);

// The fast summation order (`kvrun --kernels fast`, cpu_level.h KernelOrder): the scalar
// references of the fast prefill kernels (packed_fast_* in backends/cpu/x86/), which must
// give these floats bit for bit. Per weight row and (super-)block the whole integer dot, exact
// in int32 (sub-block scales applied in integers), then one fused multiply-add into ONE float
// accumulator that starts at 0 and takes the blocks in order; no lanes, no fold. The integers are
// the same as in the exact dots, only the float steps differ (so results differ from vec_dot in
// the last bits; tests/test_kernels_fast.cpp bounds both against a float64 dot).
/// q8_0: acc = fma(float(Σ_32 q_w·q_x), d_w·d_x, acc) per block.
float fast_dot_q8_0_q8_0(int64_t n, const void* w, const void* x);
/// q4_K: per super-block acc = fma(d_x·d_w, float(Σ_j sc_j·Σ_32 q_w·q_x), acc), then
/// acc = fma(−d_x·dmin_w, float(Σ_j m_j·bsum_j), acc) (bsum_j = Σ q_x over sub-block j of 32,
/// from q8_K's bsums).
float fast_dot_q4_K_q8_K(int64_t n, const void* w, const void* x);
/// q5_K: as q4_K, with the 5-bit values (the nibble and its high bit from qh).
float fast_dot_q5_K_q8_K(int64_t n, const void* w, const void* x);
/// q6_K: per super-block acc = fma(d_x·d_w, float(Σ_j sc_j·Σ_16 q_w·q_x), acc), q_w = q − 32.
float fast_dot_q6_K_q8_K(int64_t n, const void* w, const void* x);
/// mxfp4: acc = fma(float(Σ_32 level·q_x), half_scale(e)·d_x, acc) per block (levels doubled as
/// in vec_dot_mxfp4_q8_0).
float fast_dot_mxfp4_q8_0(int64_t n, const void* w, const void* x);

}  // namespace kvrun::cpu
