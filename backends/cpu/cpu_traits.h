// cpu_traits.h — the CPU backend's own traits table, keyed by DType: which activation type a
// weight format is dotted against, how activations are converted to it, and the dot itself.
//
// This is the kernel-side counterpart of ggml-like's traits(DType) (formats live there, kernels
// here; no parallel arrays). The pairing is llama.cpp's CPU `vec_dot_type`:
//   f32→f32, f16→f16, bf16→bf16, q4_0/q5_0/q8_0/iq4_nl/mxfp4→q8_0, q4_1/q5_1→q8_1,
//   q2_K/q3_K/q4_K/q5_K/q6_K/iq4_xs/iq3_s/iq2_s/iq3_xxs/iq2_xxs/iq2_xs/iq1_s/iq1_m→q8_K.
#pragma once

#include "cpu/cpu_level.h"
#include "cpu/vec_dot.h"
#include "dtype.h"

namespace kvrun::cpu {

/// One row of the CPU traits table.
struct CpuTypeTraits {
  DType type;                     ///< the weight type this row describes
  DType act_type;                 ///< activation type its rows are dotted against
  ActFromFloatFn act_from_float;  ///< float → act_type rows (n a multiple of act block size)
  VecDotFn vec_dot;               ///< weight row · activation row
  /// The same dot in the accumulation order llama.cpp uses for batches (≥ 2 rows, k % 16 == 0,
  /// m % 4 == 0; see vec_dot.h); null when the order is the same as vec_dot's.
  VecDotFn gemm_dot;
  /// The dot of llama.cpp's repacked weight layout (its CPU_AARCH64 buffer: q4_0 as q4_0_8x8 on
  /// x86 with AVX2), used for every batch size when the weight has a multiple of 8 rows (m);
  /// null when that type is not repacked. Takes precedence over vec_dot and gemm_dot.
  VecDotFn repack_dot;
  /// Tile forms (several weight × activation rows) of vec_dot, gemm_dot and repack_dot (the
  /// same floats per output); null where the level has none (callers then loop over the dot).
  DotTileFn vec_dot_tile;
  DotTileFn gemm_dot_tile;
  DotTileFn repack_dot_tile;
  /// The kernel of weights packed by pack_weight (pack.h), same floats as repack_dot; null
  /// where this level has none (weights of that type are then not packed).
  PackedTileFn packed_tile;
  /// The kernel of the same packed weights in the fast summation order (`--kernels fast`,
  /// cpu_level.h KernelOrder; the floats of vec_dot.h's fast_dot_* for the type), used by the
  /// matmuls with ≥ 2 activation rows when kernel_order() is fast; it reads no offsets (xoff).
  /// Null where this level has none (the x86 levels have q8_0, q4_K, q5_K, q6_K and mxfp4).
  PackedTileFn packed_fast_tile;
  /// The scalar reference of packed_fast_tile (fast_dot_* of vec_dot.h), on plain rows; null for
  /// types without a fast order. The same at every level (for tests).
  VecDotFn fast_dot;
  /// Whether packed_tile reads the activation offsets of pack_act_offsets (pack.h); matmul only
  /// computes them for kernels that do (false: it passes null).
  bool packed_reads_xoff = true;
};

/// The CPU traits of weight type `t` at the process's kernel level (cpu_level()), or null when
/// the CPU backend cannot multiply by it.
const CpuTypeTraits* cpu_traits(DType t);

/// The CPU traits of weight type `t` with the kernels of `level` (the scalar ones where that
/// level has no SIMD kernel), or null as above. `level` must be cpu_level_supported(); every
/// level gives bit-identical results (tests/test_cpu_simd.cpp checks it).
const CpuTypeTraits* cpu_traits(DType t, CpuLevel level);

}  // namespace kvrun::cpu
