#!/usr/bin/env python3
"""The KV cache quality table of docs/kv-cache.md: for each model and text, perplexity of an
f16/f16 run (the base, saved with --kl-divergence-base) and, for every K type (V f16), every V
type (K f16) and K = V, with and without --kv-rotate (for configurations with a quantized K),
PPL, ΔPPL, mean KLD and top-1 agreement against the base, plus KV bytes per token.

  scripts/kv_quality_table.py [--models A.gguf B.gguf] [--texts X.txt Y.txt] > table.md

Runs `kvrun perplexity -c 128 -b 128 -t 2` (build/kvrun); about 150 runs, ~20 min on 2 cores.
The base and configurations with a float V (f32, f16, bf16) run with `-fa off` (the exact
softmax, llama.cpp's default scheme for them) so the rows compare with llama.cpp's; a quantized V
runs the flash kernel (as llama.cpp requires -fa for it).
"""
import argparse, json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
KVRUN = os.path.join(HERE, "..", "build", "kvrun")
FIX = os.environ.get("KVRUN_FIXTURES", os.path.join(HERE, "..", "..", "shared", "fixtures"))
FLOAT_TYPES = ["f32", "f16", "bf16"]
TYPES = ["f32", "bf16", "q8_0", "fp8_e4m3", "fp8_e5m2", "q4_0", "nvfp4"]


def run(model, text, args):
    cmd = [KVRUN, "perplexity", "-m", model, "-f", text, "-c", "128", "-b", "128", "-t", "2",
           "--json"] + args
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def bytes_per_token(model, k, v):
    info = json.loads(subprocess.run([KVRUN, "info", "-m", model, "--json"], capture_output=True,
                                     text=True, check=True).stdout)
    n_layer = info["n_layer"]
    row = lambda t: info["kv"][t]["bytes_per_token"] // (2 * n_layer)  # K and V rows equal here
    return n_layer * (row(k) + row(v))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=[os.path.join(FIX, "models", m) for m in
                    ("stories260K-pad-F32.gguf", "stories260K-F32.gguf")])
    ap.add_argument("--texts", nargs="+", default=[os.path.join(FIX, "text", t) for t in
                    ("tinystories_style_kvrun.txt", "aesop_townsend_first20k.txt")])
    a = ap.parse_args()
    configs = []
    for t in TYPES:
        configs.append((t, "f16", False))
        if t != "f32" and t != "bf16":
            configs.append((t, "f16", True))
    for t in TYPES:
        configs.append(("f16", t, False))
    for t in TYPES:
        configs.append((t, t, False))
        if t != "f32" and t != "bf16":
            configs.append((t, t, True))
    with tempfile.TemporaryDirectory() as d:
        for model in a.models:
            for text in a.texts:
                base_file = os.path.join(d, "base.kld")
                base = run(model, text, ["--kl-divergence-base", base_file, "-fa", "off"])
                print(f"\n### {os.path.basename(model)} on {os.path.basename(text)}\n")
                print(f"f16/f16 PPL {base['ppl']:.4f} ± {base['ppl_err']:.4f} "
                      f"({base['n_tokens_scored']} tokens scored)\n")
                print("| K | V | rotate | bytes/token | PPL | ΔPPL | mean KLD | top-1 % |")
                print("|---|---|---|---|---|---|---|---|")
                for k, v, rot in configs:
                    args = ["--kl-divergence", base_file, "-ctk", k, "-ctv", v]
                    if v in FLOAT_TYPES:  # llama.cpp's scheme for a float V: exact softmax
                        args += ["-fa", "off"]
                    if rot:
                        args.append("--kv-rotate")
                    r = run(model, text, args)["kl_divergence"]
                    print(f"| {k} | {v} | {'yes' if rot else 'no'} | {bytes_per_token(model, k, v)} "
                          f"| {r['ppl']:.4f} | {r['delta_ppl']:+.4f} | {r['kld_mean']:.5f} "
                          f"| {100 * r['top1']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
