// op_kernels.h — the element-wise kernels of ops.cpp that have SIMD forms, per kernel level.
//
// Like cpu_traits.h for the dots: each level's table holds the scalar reference or the x86
// kernel of backends/cpu/x86/, and every level gives bit-identical results.
#pragma once

#include <cmath>
#include <cstdint>

#include "cpu/cpu_level.h"

namespace kvrun::cpu {

/// out[i] = silu_lane(gate[i]) · up[i] for i < n, with fast_exp.h's polynomial e^x in every
/// element (the vector body of llama.cpp's SiLU; swiglu adds the libm tail). out may equal gate
/// or up.
using SiluMulFn = void (*)(const float* gate, const float* up, float* out, int64_t n);

/// The vector body of softmax_exp (ops.h): for each full block of 16 (n & ~15 elements),
/// y = expf_lane(x − max) and the block's sum in f32 folded as _mm512_reduce_add_ps does
/// (halves, quarters, pairs); returns the block sums added in double from 0 in order. y may
/// equal x.
using ExpBlocksFn = double (*)(const float* x, float* y, int64_t n, float max);

/// RoPE's rotation of one head v in place (ops.h rope): for pair i < half, with
/// (i0, i1) = (i, i + half) if neox else (2i, 2i + 1): v[i0] = fma(x0, cs[i], −(x1·sn[i])),
/// v[i1] = fma(x0, sn[i], x1·cs[i]).
using RopeRotateFn = void (*)(float* v, const float* cs, const float* sn, int64_t half, bool neox);

/// RoPE's rotation of pair i of v as RopeRotateFn says (the scalar kernel, and the SIMD
/// kernels' tails). llama.cpp's ggml_compute_forward_rope_f32 writes x0·cos − x1·sin and
/// x0·sin + x1·cos; GCC contracts the first product of each into the add/sub (fmaddsub in the
/// vector loop, FMA in scalar code), checked bit for bit against ggml built with GCC 12.
inline void rope_rotate_pair(float* v, const float* cs, const float* sn, int64_t half, bool neox,
                             int64_t i) {
  const int64_t i0 = neox ? i : 2 * i;
  const int64_t i1 = neox ? i + half : 2 * i + 1;
  const float x0 = v[i0], x1 = v[i1];
  v[i0] = std::fma(x0, cs[i], -(x1 * sn[i]));
  v[i1] = std::fma(x0, sn[i], x1 * cs[i]);
}

/// dst[i] = the binary16 src[i] as a float, i < n (exact: every binary16 value is a float; F16C
/// at the x86 levels, fp16_lut's table in the scalar one).
using F16ToF32Fn = void (*)(const uint16_t* src, float* dst, int64_t n);

/// One level's element-wise kernels.
struct OpKernels {
  SiluMulFn silu_mul;
  ExpBlocksFn exp_blocks;
  RopeRotateFn rope_rotate;
  F16ToF32Fn f16_to_f32;
};

/// The kernels of `level` (must be cpu_level_supported).
const OpKernels& op_kernels(CpuLevel level);

/// The kernels of the process's level (cpu_level()).
const OpKernels& op_kernels();

}  // namespace kvrun::cpu
