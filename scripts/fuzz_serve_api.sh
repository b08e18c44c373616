#!/usr/bin/env bash
# fuzz_serve_api.sh — runs the serve API libFuzzer target (tests/fuzz/fuzz_serve_api.cpp) for a
# fixed time; fails on any finding.
#
# Usage: scripts/fuzz_serve_api.sh <fuzzer binary> [seconds] [fixtures dir]
#   seconds: default $KVRUN_FUZZ_SECONDS, else 60.
#   fixtures: $KVRUN_FIXTURES, else the argument, else ../shared/fixtures from the repo root
#   (the tokenizer is models/stories260K-F32.gguf's).
# Seeds: tests/data/serve_api_seeds/ (first byte: the endpoint, rest: the request body).
# Working corpus and artifacts live next to the binary: <fuzzer>_corpus/, <fuzzer>_artifacts/.
set -euo pipefail

[[ $# -ge 1 ]] || { echo "usage: $0 <fuzzer binary> [seconds] [fixtures dir]" >&2; exit 2; }
bin=$(realpath "$1")
secs=${2:-${KVRUN_FUZZ_SECONDS:-60}}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export KVRUN_FIXTURES=${KVRUN_FIXTURES:-${3:-$root/../shared/fixtures}}
if [[ ! -f $KVRUN_FIXTURES/models/stories260K-F32.gguf ]]; then
  echo "fuzz_serve_api: SKIPPED: no $KVRUN_FIXTURES/models/stories260K-F32.gguf" >&2
  exit 0
fi

mkdir -p "${bin}_corpus"
rm -rf "${bin}_artifacts" && mkdir -p "${bin}_artifacts"
out=${bin}_last_run.log
rc=0
"$bin" "${bin}_corpus" "$root/tests/data/serve_api_seeds" -max_total_time="$secs" \
  -rss_limit_mb=2048 -max_len=16384 -timeout=25 -print_final_stats=1 \
  -artifact_prefix="${bin}_artifacts/" > "$out" 2>&1 || rc=$?
n=$(grep -Eo 'number_of_executed_units: *[0-9]+' "$out" | grep -Eo '[0-9]+$' || true)
echo "fuzz_serve_api: ${n:-unknown} executions in ${secs}s (exit status $rc, log $out)"
if [[ $rc -ne 0 || -n $(ls -A "${bin}_artifacts") ]]; then
  echo "fuzz_serve_api: FAILED; artifacts:" >&2
  ls "${bin}_artifacts" >&2
  tail -n 60 "$out" >&2
  exit 1
fi
echo "fuzz_serve_api: no findings"
