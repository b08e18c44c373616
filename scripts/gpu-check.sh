#!/usr/bin/env bash
# gpu-check.sh — build and run the CUDA backend's tests on a machine with an NVIDIA GPU, CUDA
# (nvcc) and cmake, but none of Debian's dev packages and no network.
#
#   scripts/gpu-check.sh prepare   # here, with network/Debian packages: fill .gpu-deps/
#   scripts/gpu-check.sh run       # there: configure, build, run the CUDA tests
#
# `prepare` copies the source-only dependencies the CUDA tests need into the ignored folder
# .gpu-deps/ (GoogleTest from Debian's googletest package, /usr/src/googletest), which travels
# with the working tree (the device tool: carry [".gpu-deps"]). `run` configures build-gpu/ with
# -DKVRUN_CUDA=ON -DKVRUN_CUDA_TESTS_ONLY=ON (ggml-like, the CPU and CUDA backends and the CUDA
# tests only: no PCRE2, ICU, libedit, xxhash, httplib, CLI11, nlohmann_json) for
# CMAKE_CUDA_ARCHITECTURES (default 90, the H100/H200), builds, runs every test_cuda_* binary and
# prints a summary (with the benchmark's lines). Logs go to $OUT when that is set (the device
# tool brings back at most 8 files: build.log, tests.log and one GoogleTest XML per test binary,
# whose properties hold each case's NMSE and timings).
# Exit status: 0 when every test passed, non-zero otherwise (a skipped CUDA test on a machine
# that should have a GPU counts as a failure: see the "no CUDA device" check below).
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=.gpu-deps
BUILD=${BUILD:-build-gpu}
ARCHS=${CMAKE_CUDA_ARCHITECTURES:-90}
LOG_DIR=${OUT:-$BUILD/logs}

prepare() {
  local src=/usr/src/googletest
  [[ -d $src ]] || { echo "gpu-check: $src missing (apt-get install googletest)" >&2; exit 1; }
  rm -rf "$DEPS"
  mkdir -p "$DEPS"
  cp -r "$src" "$DEPS/googletest"
  grep -qx '/.gpu-deps/' .gitignore || echo "gpu-check: add /.gpu-deps/ to .gitignore" >&2
  du -sh "$DEPS"
}

run() {
  [[ -d $DEPS/googletest ]] || { echo "gpu-check: run '$0 prepare' first" >&2; exit 1; }
  export PATH=/usr/local/cuda/bin:$PATH
  mkdir -p "$LOG_DIR"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  nvcc --version | tail -2
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  local t0=$SECONDS
  cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DKVRUN_CUDA=ON \
    -DKVRUN_CUDA_TESTS_ONLY=ON -DKVRUN_FUZZ=OFF -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
    -DKVRUN_GTEST_SOURCE="$PWD/$DEPS/googletest" >"$LOG_DIR/build.log" 2>&1 ||
    { tail -30 "$LOG_DIR/build.log"; exit 1; }
  cmake --build "$BUILD" -j "$(nproc)" >>"$LOG_DIR/build.log" 2>&1 ||
    { grep -E "error|Error" "$LOG_DIR/build.log" | head -40; exit 1; }
  echo "gpu-check: configured and built in $((SECONDS - t0)) s (archs $ARCHS)"
  local status=0 log="$LOG_DIR/tests.log"
  : >"$log"
  for t in "$BUILD"/test_cuda_*; do
    [[ -x $t ]] || continue
    local name tmp
    name=$(basename "$t")
    tmp=$(mktemp)
    "$t" --gtest_output="xml:$LOG_DIR/$name.xml" >"$tmp" 2>&1 || status=1
    { echo "######## $name"; cat "$tmp"; } >>"$log"
    if grep -q "no CUDA device" "$tmp"; then
      echo "gpu-check: $name skipped for want of a CUDA device" >&2
      status=1
    fi
    echo "== $name: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$tmp" | tr '\n' ' ')"
    grep -E '^matvec|^decode step' "$tmp" || true
    grep -E '^\[  FAILED  \]|Failure|NMSE|Which is|Expected' "$tmp" | head -40 || true
    rm -f "$tmp"
  done
  exit $status
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
