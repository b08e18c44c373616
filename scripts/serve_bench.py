#!/usr/bin/env python3
"""serve_bench.py — throughput and TTFT of `kvrun serve` (Python standard library only).

Two measurements, each against a fresh server started on a free loopback port:

1. Aggregate generation t/s for 1, 4 and 8 parallel clients: every client sends one greedy
   /completion of --n-predict tokens (ignore_eos), all started together, streamed or not;
   t/s = all generated tokens / wall time from the first request to the last end. The server
   runs with -np equal to the client count, so the sessions decode in one batched forward per
   step. Also the server's own figure (kvrun_generation_tokens_per_second: tokens / time in
   forward steps), which leaves out HTTP, JSON and the clients.
2. TTFT of a second chat turn: turn 1 is a long user message (the start of the fixture text) and
   a short reply; turn 2 sends the whole conversation plus a new user message, streamed; TTFT =
   time from sending turn 2 to its first content chunk. Once with the prefix cache (turn 2 reuses
   turn 1's KV blocks) and once with --no-prefix-cache (turn 2 prefills everything).

Usage: /usr/bin/python3 scripts/serve_bench.py [--kvrun build/kvrun] [--model M] [--reps 3]
Prints a Markdown table; numbers are medians over --reps runs.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.environ.get("KVRUN_FIXTURES", os.path.join(os.path.dirname(ROOT), "shared", "fixtures"))


class Server:
    """`kvrun serve` on a free port; stopped with SIGTERM on exit."""

    def __init__(self, kvrun, model, args):
        self.proc = subprocess.Popen([kvrun, "serve", "-m", model, "--port", "0"] + args,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.port = None
        for line in self.proc.stderr:
            m = re.search(r"listening on http://[0-9.]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            raise RuntimeError("kvrun serve did not start")
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def stream(self, path, body):
        """POSTs a streamed request; returns (seconds to the first content, seconds to the end,
        number of token events)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        t0 = time.perf_counter()
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"{path}: HTTP {resp.status}: {resp.read()[:200]}")
        first = None
        n = 0
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            content = ev.get("content")
            if content is None and ev.get("choices"):
                content = ev["choices"][0].get("delta", {}).get("content")
            if "tokens" in ev and not ev.get("stop"):
                n += len(ev["tokens"])
            if content and first is None:
                first = time.perf_counter() - t0
        conn.close()
        return first, time.perf_counter() - t0, n

    def post(self, path, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = json.loads(resp.read())
        conn.close()
        return data


def throughput(kvrun, model, clients, n_predict, threads, stream):
    """Returns (client-side aggregate t/s, the server's own generation t/s from /metrics)."""
    with Server(kvrun, model, ["-np", str(clients), "-c", str(n_predict + 64), "-t", str(threads)]) as s:
        s.post("/completion", {"prompt": "Once upon a time", "n_predict": 8})  # warm up
        counts = [0] * clients

        def client(i):
            body = {"prompt": f"Once upon a time {i}", "n_predict": n_predict, "temperature": 0,
                    "ignore_eos": True, "cache_prompt": False, "stream": stream}
            if stream:
                counts[i] = s.stream("/completion", body)[2]
            else:
                counts[i] = s.post("/completion", body)["tokens_predicted"]

        ts = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.perf_counter() - t0
        assert all(c == n_predict for c in counts), counts
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        conn.request("GET", "/metrics")
        metrics = conn.getresponse().read().decode()
        engine = float(re.search(r"^kvrun_generation_tokens_per_second (\S+)$", metrics, re.M).group(1))
        return sum(counts) / wall, engine


def second_turn_ttft(kvrun, model, prefix_cache, threads, n_chars):
    text = open(os.path.join(FIXTURES, "text", "tinystories_style_kvrun.txt")).read()[:n_chars]
    args = ["-c", "2048", "-t", str(threads)] + ([] if prefix_cache else ["--no-prefix-cache"])
    with Server(kvrun, model, args) as s:
        msgs = [{"role": "user", "content": text}]
        t1 = s.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 16, "temperature": 0})
        msgs.append({"role": "assistant", "content": t1["choices"][0]["message"]["content"]})
        msgs.append({"role": "user", "content": "What happened next?"})
        ttft, _, _ = s.stream("/v1/chat/completions",
                              {"messages": msgs, "max_tokens": 4, "temperature": 0, "stream": True})
        usage = s.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 1, "temperature": 0})["usage"]
        return ttft, usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kvrun", default=os.path.join(ROOT, "build", "kvrun"))
    ap.add_argument("--model", default=os.path.join(FIXTURES, "models", "stories260K-F32.gguf"))
    ap.add_argument("--n-predict", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--chat-chars", type=int, default=4000, help="length of the first chat message")
    a = ap.parse_args()

    print(f"model {os.path.basename(a.model)}, -t {a.threads}, {a.n_predict} tokens per client, "
          f"median of {a.reps}\n")
    print("| parallel clients | aggregate t/s, streamed | aggregate t/s, not streamed | "
          "server generation t/s (/metrics) |")
    print("|---|---|---|---|")
    for clients in (1, 4, 8):
        streamed = [throughput(a.kvrun, a.model, clients, a.n_predict, a.threads, True)
                    for _ in range(a.reps)]
        whole = [throughput(a.kvrun, a.model, clients, a.n_predict, a.threads, False)
                 for _ in range(a.reps)]
        print(f"| {clients} | {statistics.median(r[0] for r in streamed):.0f} | "
              f"{statistics.median(r[0] for r in whole):.0f} | "
              f"{statistics.median(r[1] for r in whole):.0f} |", flush=True)
    print("\n| second chat turn | prompt tokens | cached tokens | TTFT (ms) |")
    print("|---|---|---|---|")
    for on in (True, False):
        runs = [second_turn_ttft(a.kvrun, a.model, on, a.threads, a.chat_chars) for _ in range(a.reps)]
        ttft = statistics.median(r[0] for r in runs) * 1e3
        print(f"| prefix cache {'on' if on else 'off (--no-prefix-cache)'} | {runs[0][1]} | "
              f"{runs[0][2]} | {ttft:.1f} |", flush=True)


if __name__ == "__main__":
    main()
