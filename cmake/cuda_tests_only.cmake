# KVRUN_CUDA_TESTS_ONLY=ON (scripts/gpu-check.sh): after ggml-like, the CPU backend and the CUDA
# backend, build only the CUDA test executables (tests/test_cuda_*.cpp and *.cu), with GoogleTest
# compiled from the source tree in KVRUN_GTEST_SOURCE (cmake/gtest_source.cmake; the script
# copies Debian's /usr/src/googletest there), so the GPU machine needs nothing but CUDA, cmake
# and a C++ compiler. No PCRE2, ICU, libedit, xxhash, httplib, CLI11 or nlohmann_json; the kvrun
# binary and the other tests are not built.
if(NOT TARGET kvrun_cuda)
  message(FATAL_ERROR "KVRUN_CUDA_TESTS_ONLY needs the CUDA backend (nvcc not found?)")
endif()
set(KVRUN_GTEST_SOURCE "${CMAKE_SOURCE_DIR}/.gpu-deps/googletest" CACHE PATH
    "GoogleTest source tree (KVRUN_CUDA_TESTS_ONLY)")
include(${CMAKE_SOURCE_DIR}/cmake/gtest_source.cmake)
file(GLOB KVRUN_CUDA_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_cuda_*.cpp)
foreach(src ${KVRUN_CUDA_TESTS})
  get_filename_component(name ${src} NAME_WE)
  kvrun_source_gtest(${name} ${src} kvrun_cuda kvrun_cpu kvrun_ggml)
endforeach()
include(${CMAKE_SOURCE_DIR}/cmake/cuda_host_tests.cmake)
