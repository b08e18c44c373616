// matmul.h — y[n, m] = x[n, k] · w[m, k]ᵀ with w in its stored GGUF type (CPU backend).
//
// The activations x are first converted, row by row, to the activation type the weight type
// pairs with (cpu_traits.h: f16 for f16 weights, q8_0 for q4_0, q8_K for K-quants, ...); then
// every output is one vec_dot of a weight row with a converted activation row. Work is split
// over the m weight rows; each output element is computed by exactly one thread with the same
// code, so results do not depend on the thread count.
#pragma once

#include <cstdint>

#include "backend.h"
#include "cpu/cpu_level.h"
#include "cpu/thread_pool.h"
#include "tensor.h"

namespace kvrun::cpu {

/// y[n, m] = x[n, k] · w[m, k]ᵀ.
///   w: weight [m rows, k = ne[0]] of any type with cpu_traits (rows contiguous: nb[1] apart;
///      ne[2] = ne[3] = 1); k must be a multiple of the activation type's block size.
///   x: n rows of k floats, row-major (row j at x + j·k).
///   y: n rows of m floats, row-major (written, not accumulated).
/// Throws std::invalid_argument for an unsupported weight type or a k that does not divide.
/// Uses the kernels of the process's level (cpu_level()); every level gives the same floats.
void matmul(ThreadPool& pool, const Tensor& w, const float* x, int64_t n, float* y);

/// matmul with the kernels of `level` (which must be cpu_level_supported), for tests and
/// benchmarks.
void matmul(ThreadPool& pool, const Tensor& w, const float* x, int64_t n, float* y, CpuLevel level);

/// One weight of matmul_many and its output: the seam's (backend.h).
using MatmulOut = kvrun::MatmulOut;

/// y_i = x · w_iᵀ for up to 8 weights sharing the input (Q/K/V, gate/up): the activations are
/// converted once and one pool job covers every weight's rows, so the threads meet once instead
/// of once per weight. Every output float equals matmul's. The weights must have the same row
/// length k and pair with the same activation type; throws std::invalid_argument otherwise (or
/// as matmul does).
void matmul_many(ThreadPool& pool, const MatmulOut* outs, int n_outs, const float* x, int64_t n);

/// matmul_many with the kernels of `level`.
void matmul_many(ThreadPool& pool, const MatmulOut* outs, int n_outs, const float* x, int64_t n,
                 CpuLevel level);

/// The experts' matmul (ggml's mul_mat_id): for row r < n and slot j < n_used, with
/// e = ids[r·n_used + j], y[r, j, :] = w[e] · xr, where w is 3-D [k, m, n_expert = ne[2]] (its
/// matrices nb[2] apart; a packed copy, pack.h, holds them one after the other) and xr is x[r, :]
/// (x [n, k]) or, with x_per_slot, x[r, j, :] (x [n, n_used, k]). y: [n, n_used, m], written.
/// The pairs are grouped per expert so each expert's weights are read once per call; expert e's
/// outputs equal matmul's of its matrix on the input rows routed to it (in row order). Throws
/// std::out_of_range for an id outside [0, n_expert), std::invalid_argument as matmul does.
void matmul_id(ThreadPool& pool, const Tensor& w, const float* x, bool x_per_slot,
               const int32_t* ids, int64_t n, int64_t n_used, float* y);

/// matmul_id with the kernels of `level`.
void matmul_id(ThreadPool& pool, const Tensor& w, const float* x, bool x_per_slot,
               const int32_t* ids, int64_t n, int64_t n_used, float* y, CpuLevel level);

/// True when matmul supports weights of type `t` with rows of `k` elements.
bool matmul_supports(DType t, int64_t k);

}  // namespace kvrun::cpu
