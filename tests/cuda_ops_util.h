// cuda_ops_util.h — the cases and helpers of tests/test_cuda_ops.cpp's parameterized suite:
// what a case is and how it is named, the NMSE measure, random quantized rows, poisoned outputs
// and the CUDA context and buffers the CUDA rows run on. Included by that test only (one
// translation unit: the definitions are in an unnamed namespace).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "dtype.h"
#include "test_util.h"
#ifdef KVRUN_HAVE_CUDA
#include "cuda/cuda_context.h"
#endif

namespace kvrun {
namespace {

enum class Backend { cpu, cuda };
enum class Op { get_rows, rms_norm, rope, swiglu, add, matmul, kv_store, attention, eltwise };

/// One case: an op on a backend with its types (t1: weight / K type, t2: V type) and a shape
/// variant (see each op's runner).
struct Case {
  Backend backend;
  Op op;
  DType t1 = DType::F32;
  DType t2 = DType::F32;
  int variant = 0;
};

const char* op_name(Op op) {
  static const char* kNames[] = {"get_rows", "rms_norm", "rope",      "swiglu", "add",
                                 "matmul",   "kv_store", "attention", "eltwise"};
  return kNames[int(op)];
}

std::string case_name(const Case& c) {
  std::string s = std::string(c.backend == Backend::cpu ? "cpu_" : "cuda_") + op_name(c.op);
  if (c.op == Op::get_rows || c.op == Op::matmul || c.op == Op::kv_store || c.op == Op::attention)
    s += std::string("_") + traits(c.t1).name;
  if (c.op == Op::attention) s += std::string("_") + traits(c.t2).name;
  return s + "_v" + std::to_string(c.variant);
}

/// GoogleTest prints a case by its name (ctest lists it so).
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

using test::nmse;

/// x in scientific notation ("3.10e-05"), for the recorded NMSE properties.
std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", x);
  return buf;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

/// `n` NaNs: the poisoned output of a CPU op.
std::vector<float> poisoned(size_t n) { return std::vector<float>(n, std::nanf("")); }

/// Row-quantized bytes of `rows` × `cols` random values in `t` (the traits' reference encoder).
std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> x = test::random_floats(size_t(rows * cols), seed);
  std::vector<uint8_t> q(size_t(*row_bytes(t, cols) * rows));
  traits(t).from_float(x.data(), q.data(), rows * cols);
  return q;
}

/// What a runner hands back: the backend's output, the CPU scalar reference and optionally a
/// float64 evaluation (empty when the op has none).
struct Result {
  std::vector<float> out;
  std::vector<double> ref;
  std::vector<double> exact;
};

#ifdef KVRUN_HAVE_CUDA
cuda::Context& gpu() {
  static cuda::Context ctx(0);
  return ctx;
}

template <typename T>
cuda::DeviceBuffer to_gpu(const std::vector<T>& v) {
  cuda::DeviceBuffer b(gpu(), v.size() * sizeof(T));
  b.upload(gpu(), v.data(), v.size() * sizeof(T));
  return b;
}

/// A device output of n floats, every byte 0xFF (a NaN pattern) until the op writes it.
cuda::DeviceBuffer gpu_poisoned(size_t n) {
  cuda::DeviceBuffer b(gpu(), n * 4);
  b.fill_bytes(gpu(), 0xFF);
  return b;
}

std::vector<float> from_gpu(const cuda::DeviceBuffer& b, size_t n) {
  std::vector<float> v(n);
  b.download(gpu(), v.data(), n * 4);
  return v;
}
/// The CUDA part of a runner (compiled only in builds with CUDA).
#define KVRUN_GPU(...) __VA_ARGS__
#else
#define KVRUN_GPU(...) ADD_FAILURE() << "unreachable: CUDA case in a build without CUDA"
#endif

}  // namespace
}  // namespace kvrun
