# tests/test_cuda_*.cu: tests of the CUDA backend's device/host codecs, compiled by nvcc but
# running on the host only (no GPU needed), against the scalar reference in kvrun_ggml. Included
# by tests/CMakeLists.txt and cmake/cuda_tests_only.cmake when the CUDA backend is built; expects
# the GTest::gtest and GTest::gtest_main targets.
file(GLOB KVRUN_CUDA_HOST_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_cuda_*.cu)
list(GET CMAKE_CUDA_ARCHITECTURES 0 _kvrun_host_test_arch)  # no kernels: one device pass is enough
foreach(src ${KVRUN_CUDA_HOST_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  set_target_properties(${name} PROPERTIES CUDA_ARCHITECTURES ${_kvrun_host_test_arch})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests ${CMAKE_SOURCE_DIR}/backends
                             ${CMAKE_SOURCE_DIR}/ggml-like)
  target_link_libraries(${name} PRIVATE kvrun_ggml GTest::gtest GTest::gtest_main)
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
  kvrun_test_definitions(${name} kvrun-not-needed)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60)
endforeach()
