#!/usr/bin/env bash
# gpu-check.sh — build and run the CUDA backend's tests on a machine with an NVIDIA GPU, CUDA
# (nvcc) and cmake, but none of Debian's dev packages and no network.
#
#   scripts/gpu-check.sh prepare   # here, with network/Debian packages: fill .gpu-deps/
#   scripts/gpu-check.sh run       # there: configure, build, run the CUDA tests
#   scripts/gpu-check.sh pack      # here, after building build-cuda/ (below): the end-to-end kit
#   scripts/gpu-check.sh e2e       # there: the seam end to end on the GPU, and `kvrun bench`
#   scripts/gpu-check.sh lease     # there: run + e2e in one call, three files back (below)
#
# The end-to-end half needs the whole kvrun (PCRE2, ICU, libcurl, ...), which the GPU machine
# cannot build: `pack` takes kvrun and test_gpu_e2e from a build here with CUDA for sm_90
#   cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVRUN_CUDA=ON \
#     -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-cuda --target kvrun test_gpu_e2e
# with the shared libraries they load (not glibc, libstdc++ or CUDA's: the GPU machine has
# newer ones), the CPU kernel tests of build/ where they are built (test_cpu_simd, test_cpu_ops,
# test_quants_iq: `e2e` runs them at the GPU host's best CPU level, AVX-512 on the H100/H200
# hosts seen so far) and the stories260K fixture into .gpu-deps/e2e.tar.xz. `e2e` unpacks it, runs
# test_gpu_e2e (every GPU device against the CPU: tokens and logits), writes a synthetic
# llama3.1-8b Q4_0 and runs `kvrun bench -ngl 99` at depths 0, 32K and 128K (reached with
# --depth-fill synthetic) for f16, fp8 and nvfp4 KV, and measures the device-to-device copy
# bandwidth (PyTorch, on the GPU machine's image) for the roofline in docs/cuda.md. Set
# E2E_BENCH=0 to skip the benchmark. Side by side: `BASELINE=path/to/an/older/kvrun pack` adds
# that binary (built the same way) to the kit, and `e2e` then runs every benchmark row with it
# right after the kit's own ("baseline" lines), so before/after come from one lease;
# E2E_DEPTHS=32768 (default 32768,131072; empty: none) picks the depth rows, for a short lease.
# The attention paths still off by default (KVRUN_CUDA_ATTN_SPLIT_HEADS=1, KVRUN_CUDA_ATTN_TYPED=1,
# KVRUN_CUDA_ATTN_V=pair) each get f16 rows at depths 0 and 32K right after the default's
# (E2E_ATTN_MODES picks them; empty: none), pp512 runs with f16 and nvfp4 KV without and with
# KVRUN_CUDA_ATTN_PREFILL=tiled (E2E_PREFILL=0 skips it), a synthetic Q4_K file runs pp512 /
# tg32 without and with KVRUN_CUDA_SPLIT_K=1 (E2E_SPLIT_K=0 skips it), and the host tier runs
# tg32 at depth 32K with --kv-host-attn gpu and cpu (E2E_HOST_TIER=0 skips it). `NCU=1 e2e` adds
# Nsight Compute's per-kernel GPU times of a few depth-0 decode steps (f16 KV).
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
  # Attention's alternative paths forced — KVRUN_CUDA_ATTN_PREFILL=tiled (prefill rows by tiles
  # of query rows sharing decoded K/V: variants 1 and 4–8), KVRUN_CUDA_ATTN_TYPED=1 (K/V formats compiled in),
  # KVRUN_CUDA_ATTN_SPLIT_HEADS=1 (short contexts: query heads over the warps),
  # KVRUN_CUDA_ATTN_V=pair / pair-elem (V rows by half-warps), =vec / =elem (a row a warp; elem,
  # value by value, is the default) — every attention case against the CPU, and the
  # decode-step benchmark with each, the side by side for the choice (also in tests.log, which
  # comes back where stdout may not). ATTN_MODES picks them (default: all, newest first).
  local mode
  local modes="KVRUN_CUDA_ATTN_PREFILL=tiled KVRUN_CUDA_ATTN_TYPED=1 KVRUN_CUDA_ATTN_SPLIT_HEADS=1"
  modes+=" KVRUN_CUDA_ATTN_V=pair"
  modes+=" KVRUN_CUDA_ATTN_V=pair-elem KVRUN_CUDA_ATTN_V=vec KVRUN_CUDA_ATTN_V=elem"
  for mode in ${ATTN_MODES:-$modes}; do
    if [[ -x $BUILD/test_cuda_ops ]]; then
      local tmp
      tmp=$(mktemp)  # appended to tests.log: $OUT keeps the 8 files the device tool brings back
      env "$mode" "$BUILD/test_cuda_ops" --gtest_filter='*cuda_attention*' --gtest_brief=1 \
        >"$tmp" 2>&1 || status=1
      { echo "######## test_cuda_ops attention, $mode"; cat "$tmp"; } >>"$log"
      echo "== test_cuda_ops attention, $mode: $(grep -E '^\[  (PASSED|FAILED) +\]' "$tmp" | tr '\n' ' ')"
      rm -f "$tmp"
    fi
    if [[ -x $BUILD/test_cuda_bench ]]; then
      env "$mode" "$BUILD/test_cuda_bench" --gtest_filter='*Decode*' 2>&1 |
        grep -E '^decode step' | sed "s/^/$mode: /" | tee -a "$log" || true
    fi
  done
  exit $status
}

pack() {
  local b=${BUILD_HOST:-build-cuda} fixtures=${KVRUN_FIXTURES:-../shared/fixtures} stage
  local t=$b/tests/test_gpu_e2e
  [[ -x $b/kvrun && -x $t ]] || { echo "gpu-check: build $b first (see the header)" >&2; exit 1; }
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib" "$stage/fixtures/models"
  cp "$b/kvrun" "$t" "$stage/bin/"
  [[ -z ${BASELINE:-} ]] || cp "$BASELINE" "$stage/bin/kvrun-baseline"
  # The CPU kernel tests too, where built: the GPU machine's host CPU may have a level (AVX-512)
  # the dev machine lacks.
  local cpu_tests=()
  for c in test_cpu_simd test_cpu_ops test_quants_iq; do
    [[ -x ${CPU_BUILD:-build}/tests/$c ]] && cpu_tests+=("${CPU_BUILD:-build}/tests/$c")
  done
  if [[ ${#cpu_tests[@]} -gt 0 ]]; then
    mkdir -p "$stage/cpu"
    cp "${cpu_tests[@]}" "$stage/cpu/"
  fi
  ldd "$b/kvrun" "$t" "${cpu_tests[@]}" ${BASELINE:+"$BASELINE"} | awk '/=> \//{print $3}' | sort -u | while read -r so; do
    case $(basename "$so") in
      libc.so* | libm.so* | libgcc_s* | libstdc++* | libpthread* | libdl.so* | librt.so* | \
        libresolv* | libcuda.so* | libcublas* | libcudart*) ;;
      *) cp -L "$so" "$stage/lib/" ;;
    esac
  done
  cp "$fixtures/models/stories260K-F32.gguf" "$stage/fixtures/models/"
  mkdir -p "$DEPS"
  tar -C "$stage" -cJf "$DEPS/e2e.tar.xz" .
  rm -rf "$stage"
  du -sh "$DEPS/e2e.tar.xz"
}

e2e() {
  [[ -f $DEPS/e2e.tar.xz ]] || { echo "gpu-check: run '$0 pack' here first" >&2; exit 1; }
  local kit=/tmp/kvrun-e2e status=0
  rm -rf "$kit" && mkdir -p "$kit" && tar -C "$kit" -xJf "$DEPS/e2e.tar.xz"
  export LD_LIBRARY_PATH="$kit/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  export KVRUN_FIXTURES="$kit/fixtures" KVRUN_BINARY="$kit/bin/kvrun"  # test_gpu_e2e's serve runs
  mkdir -p "$LOG_DIR"
  "$kit/bin/kvrun" --list-devices || status=1
  "$kit/bin/test_gpu_e2e" --gtest_output="xml:$LOG_DIR/test_gpu_e2e.xml" >"$LOG_DIR/e2e.log" 2>&1 || status=1
  grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|parted|skipped|Failure|NMSE|Expected|Which is|error' \
    "$LOG_DIR/e2e.log" | head -60
  # The synthetic files again with q4_K / q5_K in the split layout (KVRUN_CUDA_SPLIT_K=1).
  KVRUN_CUDA_SPLIT_K=1 "$kit/bin/test_gpu_e2e" --gtest_filter='*SyntheticArchitectures*' \
    >"$LOG_DIR/e2e-split-k.log" 2>&1 || status=1
  echo "== test_gpu_e2e synthetic files, KVRUN_CUDA_SPLIT_K=1: $(grep -E '^\[  (PASSED|FAILED) +\]' "$LOG_DIR/e2e-split-k.log" | tr '\n' ' ')"
  if [[ -d $kit/cpu ]]; then  # the CPU kernel tests at the host's best level
    for t in "$kit"/cpu/*; do
      "$t" --gtest_brief=1 >"$LOG_DIR/$(basename "$t").log" 2>&1 || status=1
      echo "== $(basename "$t") (KVRUN_CPU unset: the best level here): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]' "$LOG_DIR/$(basename "$t").log" | tr '\n' ' ')"
    done
  fi
  [[ ${E2E_BENCH:-1} == 1 ]] || exit $status
  python3 - <<'PY' || true
import torch
x = torch.empty(1 << 30, dtype=torch.float32, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record(); [y.copy_(x) for _ in range(20)]; e.record(); torch.cuda.synchronize()
t = s.elapsed_time(e) / 1e3 / 20
print(f"device copy: {2 * x.numel() * 4 / t / 1e9:.0f} GB/s (bytes read + written, 4 GiB copies)")
PY
  local model=/tmp/llama3.1-8b-Q4_0.gguf t0=$SECONDS
  "$kit/bin/kvrun" synth --shape llama3.1-8b --type Q4_0 -o "$model" -t "$(nproc)" >/dev/null || exit 1
  echo "gpu-check: synth llama3.1-8b Q4_0 in $((SECONDS - t0)) s"
  local fill=()
  # Not `kvrun bench --help | grep -q`: grep -q exits at the first match, kvrun then dies of
  # SIGPIPE and pipefail failed the test, so the depth rows never ran.
  [[ $("$kit/bin/kvrun" bench --help) == *--depth-fill* ]] && fill=(--depth-fill synthetic)
  local bins=("$kit/bin/kvrun")
  [[ -x $kit/bin/kvrun-baseline ]] && bins+=("$kit/bin/kvrun-baseline")
  for kv in f16 fp8 nvfp4; do
    # pp512 and tg32 from an empty context; tg32 at depths 32K and 128K (rows written, not
    # prefilled, where this kvrun has --depth-fill).
    local runs=("-p 512 -n 32 -d 0")
    [[ ${#fill[@]} -gt 0 && -n ${E2E_DEPTHS-32768,131072} ]] &&
      runs+=("-p 0 -n 32 -d ${E2E_DEPTHS-32768,131072}")
    local i=0
    for r in "${runs[@]}"; do
      for bin in "${bins[@]}"; do
        local tag="" out="$LOG_DIR/bench-$kv-$i"
        [[ $bin == *baseline ]] && tag="baseline " out="$LOG_DIR/baseline-$kv-$i"
        # shellcheck disable=SC2086
        "$bin" bench -m "$model" -ngl 99 $r -r 3 "${fill[@]}" -ctk "$kv" -ctv "$kv" \
          --json >"$out.json" 2>"$out.err" || { status=1; tail -5 "$out.err"; }
        python3 -c "import json,sys; [print('$tag$kv', r['test'], round(r['avg_ts'],1), 't/s', r.get('bytes_read_per_token'), r['backends']) for r in json.load(open(sys.argv[1]))]" "$out.json" || true
      done
      i=$((i + 1))
    done
  done
  # The attention paths that are off by default until timed, each right after the default
  # (f16 KV, depths 0 and 32K, one binary). E2E_ATTN_MODES picks them (empty: none).
  local mode m
  for mode in ${E2E_ATTN_MODES-KVRUN_CUDA_ATTN_SPLIT_HEADS=1 KVRUN_CUDA_ATTN_TYPED=1 KVRUN_CUDA_ATTN_V=pair}; do
    for m in KVRUN_GPU_CHECK_DEFAULT=1 "$mode"; do
      env "$m" "$kit/bin/kvrun" bench -m "$model" -ngl 99 -p 0 -n 32 -d 0,32768 -r 3 "${fill[@]}" \
        --json 2>/dev/null | python3 -c "import json,sys; [print('attention $m', r['test'], round(r['avg_ts'],1), 't/s') for r in json.load(sys.stdin)]" || true
    done
  done
  # Prefill attention tiled over query rows (KVRUN_CUDA_ATTN_PREFILL=tiled, off by default until
  # timed): pp512 with f16 and nvfp4 KV without and with it (E2E_PREFILL=0 skips it).
  if [[ ${E2E_PREFILL:-1} == 1 ]]; then
    for kv in f16 nvfp4; do
      for m in KVRUN_GPU_CHECK_DEFAULT=1 KVRUN_CUDA_ATTN_PREFILL=tiled; do
        env "$m" "$kit/bin/kvrun" bench -m "$model" -ngl 99 -p 512 -n 0 -r 3 -ctk "$kv" -ctv "$kv" \
          --json 2>/dev/null | python3 -c "import json,sys; [print('prefill $kv $m', r['test'], round(r['avg_ts'],1), 't/s') for r in json.load(sys.stdin)]" || true
      done
    done
  fi
  # q4_K / q5_K in the split layout (KVRUN_CUDA_SPLIT_K=1, off by default until timed): a
  # synthetic llama3.1-8b Q4_K (llama.cpp's Q4_K_S mix, some q5_K) without and with it.
  if [[ ${E2E_SPLIT_K:-1} == 1 ]]; then
    local mk=/tmp/llama3.1-8b-Q4_K.gguf
    "$kit/bin/kvrun" synth --shape llama3.1-8b --type Q4_K -o "$mk" -t "$(nproc)" >/dev/null &&
      for m in KVRUN_GPU_CHECK_DEFAULT=1 KVRUN_CUDA_SPLIT_K=1; do
        env "$m" "$kit/bin/kvrun" bench -m "$mk" -ngl 99 -p 512 -n 32 -r 3 --json 2>/dev/null |
          python3 -c "import json,sys; [print('Q4_K $m', r['test'], round(r['avg_ts'],1), 't/s') for r in json.load(sys.stdin)]" || true
      done
  fi
  # The host tier at depth 32K with 8K positions' f16 KV in VRAM (--kv-mem 1G: 128 KiB a
  # position) and the rest in pinned host memory: the GPU reads those blocks over PCIe
  # (--kv-host-attn gpu, the default) or the CPU attends to them while the GPU attends to its
  # own, merged by log-sum-exp (cpu). docs/cuda.md picks the default by these two rows.
  if [[ ${E2E_HOST_TIER:-1} == 1 && ${#fill[@]} -gt 0 ]]; then
    for m in gpu cpu; do
      "$kit/bin/kvrun" bench -m "$model" -ngl 99 -p 0 -n 32 -d 32768 -r 3 "${fill[@]}" \
        --kv-mem 1G --kv-host-tier --kv-host-attn "$m" --json 2>"$LOG_DIR/host-tier-$m.err" |
        python3 -c "import json,sys; [print('host tier --kv-host-attn $m', r['test'], round(r['avg_ts'],1), 't/s') for r in json.load(sys.stdin)]" ||
        { status=1; tail -3 "$LOG_DIR/host-tier-$m.err"; }
    done
  fi
  # Where a depth-0 token's time goes: the host's recording of the step, the GPU's replay and
  # launch to launch (KVRUN_CUDA_STEP_TIMES, medians), with f16 KV.
  KVRUN_CUDA_STEP_TIMES=1 "$kit/bin/kvrun" bench -m "$model" -ngl 99 -p 0 -n 64 -r 1 2>&1 \
    >/dev/null | grep "step times" || true
  # The same decode launched op by op (no graph recording on the host between tokens).
  KVRUN_CUDA_GRAPHS=0 "$kit/bin/kvrun" bench -m "$model" -ngl 99 -p 0 -n 64 -r 3 --json \
    2>/dev/null | python3 -c "import json,sys; [print('f16 without CUDA graphs', r['test'], round(r['avg_ts'],1), 't/s') for r in json.load(sys.stdin)]" || true
  # -ngl's memory plan (kvrun info, what -ngl auto fits by) against what a run holds on the
  # device: nvidia-smi's peak memory.used over a pp512 + tg32 run at -c 32768 (f16 KV), less the
  # idle reading; the difference includes the CUDA context itself. Twice: KV blocks backed as
  # they arrive (vmm_range.h, the default) and the whole -c allocated (KVRUN_CUDA_VMM=0).
  local plan idle peak smi vmm
  plan=$("$kit/bin/kvrun" info -m "$model" -c 32768 -ngl 99 --json 2>/dev/null | python3 -c \
    "import json,sys; print(json.load(sys.stdin)['gpu_plan']['by_kv_type']['f16']['total_bytes'] >> 20)") || plan="?"
  for vmm in 1 0; do
    idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$LOG_DIR/mem.csv" &
    smi=$!
    KVRUN_CUDA_VMM=$vmm "$kit/bin/kvrun" bench -m "$model" -ngl 99 -c 32768 -p 512 -n 32 -r 1 \
      >/dev/null 2>&1 || true
    kill "$smi" 2>/dev/null || true
    peak=$(sort -n "$LOG_DIR/mem.csv" | tail -1)
    echo "gpu plan (kvrun info -ngl 99 -c 32768, f16 KV): $plan MiB; the run's peak with KVRUN_CUDA_VMM=$vmm: $((peak - idle)) MiB (nvidia-smi, less $idle MiB idle)"
  done
  if [[ ${NCU:-0} == 1 ]]; then  # per-kernel GPU times (µs: min, max, mean) of ~4 decode steps
    PATH=/usr/local/cuda/bin:$PATH ncu --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum --print-summary per-kernel -c 2500 \
      "$kit/bin/kvrun" bench -m "$model" -ngl 99 -p 0 -n 4 -r 1 >"$LOG_DIR/ncu.txt" 2>&1 || true
    grep -E '^  [a-z_].*Invocations|gpu__time_duration' "$LOG_DIR/ncu.txt" | paste - - |
      sed -E 's/\([^()]*\) \(/ (/; s/, Device 0, CC [0-9.]+, Invocations/ calls/; s/\t +gpu__time_duration.sum +us/ us/' || true
  fi
  exit $status
}

# One lease's worth in one call of the device tool (its command limit is 10 minutes): `run` and
# `e2e` as subprocesses, their logs outside $OUT, and three files back under $OUT —
# summary.txt (everything both print), tests.log and e2e.log — so nothing printed is lost when
# the call ends early. Defaults for a short lease (each overridable): the attention modes not yet
# timed, the 32K depth rows only, no ncu.
lease() {
  local out=${OUT:-$BUILD/logs} self=$PWD/scripts/gpu-check.sh  # (main cd'ed to the root)
  mkdir -p "$out"
  (
    status=0
    OUT=/tmp/gpu-check-run ATTN_MODES=${ATTN_MODES:-"KVRUN_CUDA_ATTN_PREFILL=tiled \
KVRUN_CUDA_ATTN_TYPED=1 KVRUN_CUDA_ATTN_SPLIT_HEADS=1 KVRUN_CUDA_ATTN_V=pair KVRUN_CUDA_ATTN_V=pair-elem"} "$self" run ||
      status=1
    cp /tmp/gpu-check-run/tests.log "$out/" 2>/dev/null || true
    OUT=/tmp/gpu-check-e2e E2E_DEPTHS=${E2E_DEPTHS-32768} NCU=${NCU:-0} "$self" e2e || status=1
    cp /tmp/gpu-check-e2e/e2e.log "$out/" 2>/dev/null || true
    echo "gpu-check lease: exit $status"
    exit "$status"
  ) 2>&1 | tee "$out/summary.txt"
  exit "${PIPESTATUS[0]}"
}

case "${1:-}" in
  prepare) prepare ;;
  lease) lease ;;
  run) run ;;
  pack) pack ;;
  e2e) e2e ;;
  *) echo "usage: $0 prepare|run|pack|e2e|lease" >&2; exit 2 ;;
esac
