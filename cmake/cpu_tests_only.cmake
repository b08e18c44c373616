# KVRUN_CPU_TESTS_ONLY=ON (scripts/arm-check.sh): after ggml-like and the CPU backend, build only
# the tests of those two layers, with GoogleTest compiled from KVRUN_GTEST_SOURCE (Debian's
# googletest package puts it in /usr/src/googletest). Made for the AArch64 cross build, where
# none of the other libraries (PCRE2, ICU, libedit, xxhash, httplib, CLI11, nlohmann_json) are
# installed for the target: the NEON kernels are tested against the scalar ones under
# qemu-aarch64 (cmake/aarch64-linux-gnu.cmake sets it as CTest's emulator).
set(KVRUN_GTEST_SOURCE "/usr/src/googletest" CACHE PATH
    "GoogleTest source tree (KVRUN_CPU_TESTS_ONLY)")
include(${CMAKE_SOURCE_DIR}/cmake/gtest_source.cmake)
foreach(name test_cpu_simd test_kernels_fast test_cpu_exp test_cpu_ops test_kv_row_codec test_paged_attention
    test_paged_attention_decode test_paged_attention_tiers)
  kvrun_source_gtest(${name} ${CMAKE_SOURCE_DIR}/tests/${name}.cpp kvrun_cpu kvrun_ggml)
endforeach()
