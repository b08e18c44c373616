#!/usr/bin/env bash
# arm-check.sh — cross-builds ggml-like and the CPU backend for AArch64 and runs their tests
# under qemu-aarch64: the NEON kernels (CpuLevel::neon) against the scalar ones bit for bit,
# the paged attention and the KV row codecs on an Arm build; the packed-weight tests run twice,
# with and without the dot-product extension (the two paths of backends/cpu/arm/packed_neon.cpp).
# CTest runs it as the test `neon_kernels_qemu` (tests/CMakeLists.txt); it can also be run by hand.
#
#   scripts/arm-check.sh [BUILD_DIR]      # default build-arm
#
# Needs Debian's g++-aarch64-linux-gnu and qemu-user (scripts/setup.sh installs both on x86-64)
# and GoogleTest's sources (/usr/src/googletest, package googletest). Exit status: 0 when every
# test passed, 77 (CTest's "skipped") when a tool is missing, otherwise non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-arm}
for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "arm-check: $tool not found (apt-get install g++-aarch64-linux-gnu qemu-user): skipped"
    exit 77
  fi
done
if [[ ! -f /usr/src/googletest/CMakeLists.txt ]]; then
  echo "arm-check: /usr/src/googletest missing (apt-get install googletest): skipped"
  exit 77
fi
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
mkdir -p "$BUILD"
cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DCMAKE_BUILD_TYPE=Release -DKVRUN_CPU_TESTS_ONLY=ON -DKVRUN_CUDA=OFF -DKVRUN_FUZZ=OFF \
  >"$BUILD/configure.log" 2>&1 || { tail -30 "$BUILD/configure.log"; exit 1; }
cmake --build "$BUILD" -j "${ARM_JOBS:-$(nproc)}"
cd "$BUILD"
# The whole suite on qemu's "max" CPU (FEAT_DotProd: the NEON packed-weight kernels take their
# SDOT path), then the packed-weight tests again on a Cortex-A72 (Armv8.0-A, no dot product: their
# plain path). KVRUN_EXPECT_NEON_DOTPROD lets CpuFeatures.NeonDotprodAsExpected check that each
# run had the CPU it was meant to have.
QEMU_CPU=max KVRUN_EXPECT_NEON_DOTPROD=1 ctest --output-on-failure -j "${ARM_JOBS:-$(nproc)}"
QEMU_CPU=cortex-a72 KVRUN_EXPECT_NEON_DOTPROD=0 ctest --output-on-failure \
  -j "${ARM_JOBS:-$(nproc)}" -R 'NeonDotprod|SimdKernelsAreWired|Pack|ManyWeights'

