# GoogleTest compiled from the source tree KVRUN_GTEST_SOURCE (set by the includer), for the
# builds that cannot link Debian's packaged library: the GPU machine (cmake/cuda_tests_only.cmake)
# and the AArch64 cross build (cmake/cpu_tests_only.cmake). Defines gtest, gtest_main and their
# GTest:: aliases, and enables CTest with the GoogleTest module.
set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
add_subdirectory(${KVRUN_GTEST_SOURCE} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
if(NOT TARGET GTest::gtest)
  add_library(GTest::gtest ALIAS gtest)
  add_library(GTest::gtest_main ALIAS gtest_main)
endif()
enable_testing()
include(GoogleTest)
# GCC 12 warns about a memcpy in gtest.cc's own code (-Wrestrict, a known false positive).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(gtest PRIVATE -Wno-restrict)
endif()
