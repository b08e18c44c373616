// kernels_avx2.cpp — the x86 SIMD kernels built for AVX2 + FMA + F16C (CMake gives this file
// -mavx2 -mfma -mf16c -ffp-contract=off; the rest of kvrun stays baseline x86-64).
#define KVRUN_SIMD_NS avx2
#include "cpu/x86/kernels_x86.inl"
