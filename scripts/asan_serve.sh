#!/usr/bin/env bash
# asan_serve.sh — builds kvrun and the serve tests with AddressSanitizer + UBSan (CMake option
# KVRUN_ASAN) in their own build directory and runs test_serve against that kvrun: every server
# the tests start must exit 0 with no sanitizer report (leaks included).
#   scripts/asan_serve.sh                 build into build-asan/ and run
#   BUILD=dir JOBS=n scripts/asan_serve.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build-asan}"
JOBS="${JOBS:-2}"
FIXTURES="${KVRUN_FIXTURES:-$(cd .. && pwd)/shared/fixtures}"

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVRUN_ASAN=ON \
  -DKVRUN_FUZZ=OFF -DKVRUN_CUDA=OFF -DKVRUN_FIXTURES="$FIXTURES" >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target kvrun test_serve
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
cd "$BUILD"
KVRUN_FIXTURES="$FIXTURES" ctest --output-on-failure -R 'serve_npm_install_openai|^Serve\.'
