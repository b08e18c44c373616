// kernels_avx512.cpp — the x86 SIMD kernels built for AVX-512 (F, BW, VL, VNNI) on top of
// AVX2 + FMA + F16C (CMake gives this file those -m flags and -ffp-contract=off).
#define KVRUN_SIMD_NS avx512
#include "cpu/x86/kernels_x86.inl"
