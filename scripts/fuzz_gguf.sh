#!/usr/bin/env bash
# fuzz_gguf.sh — runs the GGUF libFuzzer target for a fixed time; fails on any finding.
#
# Usage: scripts/fuzz_gguf.sh <fuzzer binary> [seconds]
#   seconds: default $KVRUN_FUZZ_SECONDS, else 60.
# The scratch corpus lives next to the fuzzer binary (in the build dir, never in the repo):
#   <fuzzer>_corpus/     the working corpus (kept between runs, grows)
#   <fuzzer>_seeds/      seeds: the first 64 KiB of each fixture models/*.gguf and vocab/*.gguf
#                        ($KVRUN_FIXTURES, else ../shared/fixtures from the repo root), plus
#                        tests/fuzz/seeds/* and tests/fuzz/regressions/*
#   <fuzzer>_artifacts/  crash-*, leak-*, timeout-*, oom-* files libFuzzer writes
# Exit status: 0 when the run ends with no artifact, 1 otherwise (the artifact paths are printed;
# minimise one and add it to tests/fuzz/regressions/).
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 <fuzzer binary> [seconds]" >&2
  exit 2
fi
fuzzer=$(realpath "$1")
seconds=${2:-${KVRUN_FUZZ_SECONDS:-60}}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fixtures=${KVRUN_FIXTURES:-$repo/../shared/fixtures}

corpus=${fuzzer}_corpus
seeds=${fuzzer}_seeds
artifacts=${fuzzer}_artifacts
mkdir -p "$corpus" "$seeds"
rm -rf "$artifacts"
mkdir -p "$artifacts"

n_seeds=0
for f in "$fixtures"/models/*.gguf "$fixtures"/vocab/*.gguf; do
  [[ -f $f ]] || continue
  head -c 65536 "$f" > "$seeds/fixture-$(basename "$f")"
  n_seeds=$((n_seeds + 1))
done
for f in "$repo"/tests/fuzz/seeds/* "$repo"/tests/fuzz/regressions/*; do
  [[ -f $f && $(basename "$f") != README* ]] || continue
  cp "$f" "$seeds/repo-$(basename "$f")"
  n_seeds=$((n_seeds + 1))
done
echo "fuzz_gguf: $n_seeds seed files (fixtures: $fixtures), running ${seconds}s"

log=${fuzzer}_last_run.log
status=0
"$fuzzer" "$corpus" "$seeds" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 \
  -timeout=25 -print_final_stats=1 -artifact_prefix="$artifacts/" > "$log" 2>&1 || status=$?

runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || true)
echo "fuzz_gguf: ${runs:-unknown} executions (exit status $status, log $log)"

found=$(find "$artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
  -o -name 'oom-*' -o -name 'slow-unit-*' \) | sort)
if [[ -n $found || $status -ne 0 ]]; then
  echo "fuzz_gguf: FAILED; findings:" >&2
  [[ -n $found ]] && echo "$found" >&2
  tail -n 60 "$log" >&2
  exit 1
fi
echo "fuzz_gguf: no findings"
