#!/bin/sh
# batch_bench.sh — documents/s of `kvrun batch` at -np 1 and -np 4 (docs/benchmarks.md).
# Usage: scripts/batch_bench.sh [KVRUN] [MODEL] [N_DOCS]
# The documents are the first N_DOCS sentences (20–160 bytes) of the fixture's TinyStories text.
set -eu
KVRUN=${1:-build/kvrun}
FIXTURES=${KVRUN_FIXTURES:-../shared/fixtures}
MODEL=${2:-$FIXTURES/models/stories260K-F32.gguf}
N=${3:-32}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 - "$FIXTURES/text/tinystories_style_kvrun.txt" "$N" >"$TMP/in.jsonl" <<'PY'
import json, re, sys
text = open(sys.argv[1], encoding="utf-8").read().replace("\n", " ")
sents = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if 20 <= len(s.strip()) <= 160]
for i, s in enumerate(sents[: int(sys.argv[2])]):
    print(json.dumps({"id": i, "text": s}))
PY
echo "documents: $(wc -l <"$TMP/in.jsonl")"
for np in 1 4; do
  for rep in 1 2 3; do
    rm -f "$TMP/out.jsonl"
    "$KVRUN" batch -m "$MODEL" -i "$TMP/in.jsonl" -o "$TMP/out.jsonl" -np "$np" -n 64 --temp 0 \
      -t 2 2>&1 | grep -o "[0-9.]* s, [0-9.]* docs/s, [0-9.]* generated tok/s" |
      sed "s/^/-np $np run $rep: /"
  done
done
