#!/usr/bin/env python3
"""Prompt and generation speed of `kvrun` on fixture models, in llama-bench's terms.

Until `kvrun bench` exists this measures through the CLI's --json timings: pp = prompt tokens/s
for a prompt of ~128 and ~512 tokens (the first bytes of the fixture text), tg = tokens/s for 128
generated tokens after BOS. Median of --reps runs at -t 2.

  scripts/bench_fixtures.py [--reps 7] [--threads 2] MODEL.gguf...
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
KVRUN = os.path.join(HERE, "..", "build", "kvrun")
TEXT = os.path.join(os.environ.get("KVRUN_FIXTURES", os.path.join(HERE, "..", "..", "shared", "fixtures")),
                    "text", "tinystories_style_kvrun.txt")


def timings(args):
    out = subprocess.run([KVRUN] + args, capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    text = open(TEXT, "rb").read()
    with tempfile.TemporaryDirectory() as d:
        for m in a.models:
            row = [os.path.basename(m)]
            for nbytes, ctx in ((300, 256), (1048, 640)):  # ~131 and ~513 tokens with stories260K
                p = os.path.join(d, f"p{nbytes}.txt")
                open(p, "wb").write(text[:nbytes])
                runs = [timings(["-m", m, "-f", p, "-n", "0", "--json", "-c", str(ctx),
                                 "-t", str(a.threads)]) for _ in range(a.reps)]
                n = runs[0]["timings"]["prompt_n"]
                row.append(f"pp{n} {statistics.median(r['timings']['prompt_tps'] for r in runs):.0f}")
            runs = [timings(["-m", m, "-p", "", "-n", "128", "--ignore-eos", "--temp", "0", "--json",
                             "-c", "256", "-t", str(a.threads)]) for _ in range(a.reps)]
            row.append(f"tg128 {statistics.median(r['timings']['gen_tps'] for r in runs):.0f}")
            print(" | ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
