# Toolchain file for an AArch64 (arm64) Linux build on an x86-64 Debian machine, for the NEON
# kernels' tests (scripts/arm-check.sh): Debian's g++-aarch64-linux-gnu cross compiler, and
# qemu-aarch64 (package qemu-user) as the emulator CTest runs the test executables under.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
find_program(KVRUN_QEMU_AARCH64 qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR ${KVRUN_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)
