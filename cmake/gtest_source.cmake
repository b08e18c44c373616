# GoogleTest compiled from the source tree KVRUN_GTEST_SOURCE (set by the includer), for the
# builds that cannot link Debian's packaged library: the GPU machine (cmake/cuda_tests_only.cmake)
# and the AArch64 cross build (cmake/cpu_tests_only.cmake). Defines gtest, gtest_main and their
# GTest:: aliases, enables CTest with the GoogleTest module, and defines kvrun_source_gtest().
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

# kvrun_source_gtest(NAME SOURCE LIB...): the test executable NAME from SOURCE, linked with the
# LIBs and GoogleTest, with the tests' compile definitions (no kvrun binary in these builds); CTest
# discovers its cases (through CMAKE_CROSSCOMPILING_EMULATOR in a cross build).
function(kvrun_source_gtest name src)
  add_executable(${name} ${src})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests ${CMAKE_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE ${ARGN} GTest::gtest GTest::gtest_main)
  target_compile_options(${name} PRIVATE ${KVRUN_WARNINGS})
  kvrun_test_definitions(${name} kvrun-not-built)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 300)
endfunction()
