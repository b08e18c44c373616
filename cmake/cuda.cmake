# CUDA backend: KVRUN_CUDA=ON requires nvcc, AUTO builds it when nvcc is found (on PATH or in
# /usr/local/cuda/bin), OFF never builds it. Architectures default to sm_80, sm_89, sm_90 and
# sm_120, limited to those the found nvcc supports; set CMAKE_CUDA_ARCHITECTURES to override.
set(_kvrun_want_cuda OFF)
if(KVRUN_CUDA STREQUAL "ON" OR KVRUN_CUDA STREQUAL "AUTO")
  if(NOT CMAKE_CUDA_COMPILER)
    find_program(KVRUN_NVCC nvcc HINTS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
    if(KVRUN_NVCC)
      set(CMAKE_CUDA_COMPILER ${KVRUN_NVCC})
    endif()
  endif()
  if(CMAKE_CUDA_COMPILER)
    set(_kvrun_want_cuda ON)
  elseif(KVRUN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KVRUN_CUDA=ON but nvcc was not found (PATH, /usr/local/cuda/bin)")
  else()
    message(STATUS "kvrun: nvcc not found, building without CUDA")
  endif()
endif()

if(_kvrun_want_cuda)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-arch OUTPUT_VARIABLE _archs
                    ERROR_QUIET)
    set(_kvrun_archs "")
    foreach(_a 80 89 90 120)
      if(_archs MATCHES "compute_${_a}")
        list(APPEND _kvrun_archs ${_a})
      endif()
    endforeach()
    if(NOT _kvrun_archs)
      set(_kvrun_archs 90)
    endif()
    set(CMAKE_CUDA_ARCHITECTURES ${_kvrun_archs})
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 does not know nvcc's C++20 flag
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  file(GLOB KVRUN_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/backends/cuda/*.cu)
  add_library(kvrun_cuda STATIC ${KVRUN_CUDA_SOURCES})
  target_include_directories(kvrun_cuda PUBLIC ${CMAKE_SOURCE_DIR}/backends)
  # cuBLAS (shared: the toolkit ships no static cuBLAS here) does the prefill GEMMs.
  target_link_libraries(kvrun_cuda PUBLIC kvrun_ggml CUDA::cudart_static CUDA::cublas)
  target_compile_options(kvrun_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
  # The backend's plain C++ headers (cuda_context.h, matmul.h, ...) are included by g++ code;
  # its .cuh headers only by CUDA sources (backends/cuda/*.cu, tests/test_cuda_*.cu).
  target_compile_definitions(kvrun_cuda PUBLIC KVRUN_HAVE_CUDA=1)
  message(STATUS "kvrun: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
                 "archs ${CMAKE_CUDA_ARCHITECTURES})")
endif()
