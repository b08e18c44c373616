#!/usr/bin/env python3
"""Soak a running `kvrun serve` on loopback (issue 26): concurrent streams, clients that hang up
mid-stream, slow clients, and a /health prober on one kept-alive connection, for a bounded time.

Reports RSS before the load, 30 s into it (after warm-up), at its end and at most (from
/proc/PID/status when --pid is given), p50/p99 of /health
latency and of the streams' time to first token, and the errors seen. Loopback only: the
address is always 127.0.0.1. Standard library only.

  kvrun serve -m stories260K-F32.gguf -np 4 -c 512 --port 8090 &
  scripts/serve_soak.py --port 8090 --pid $! --seconds 300
"""
import argparse
import http.client
import json
import socket
import statistics
import threading
import time

HOST = "127.0.0.1"


def rss_kb(pid):
    if not pid:
        return None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.health_ms, self.ttft_ms, self.errors = [], [], []
        self.streams = self.hangups = self.slow = 0

    def add(self, name, value):
        with self.lock:
            getattr(self, name).append(value)

    def count(self, name):
        with self.lock:
            setattr(self, name, getattr(self, name) + 1)


def stream_once(port, stats, hang_up_after, seed):
    """One streamed /completion; hangs up after `hang_up_after` events (0: reads to the end)."""
    body = json.dumps({"prompt": "Once upon a time", "n_predict": 64, "stream": True,
                       "temperature": 0.8, "seed": seed})
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    t0 = time.monotonic()
    try:
        conn.request("POST", "/completion", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            stats.add("errors", f"stream HTTP {resp.status}")
            return
        events = 0
        for line in resp:
            if not line.startswith(b"data: "):
                continue
            if events == 0:
                stats.add("ttft_ms", (time.monotonic() - t0) * 1e3)
            events += 1
            if hang_up_after and events >= hang_up_after:
                stats.count("hangups")
                return
            if json.loads(line[6:]).get("error"):
                stats.add("errors", "stream error event")
        stats.count("streams")
    except (OSError, http.client.HTTPException) as e:
        stats.add("errors", f"stream {type(e).__name__}")
    finally:
        conn.close()


def streamer(port, stats, stop, idx, hang_up):
    n = 0
    while not stop.is_set():
        stream_once(port, stats, 3 if hang_up else 0, idx * 100000 + n)
        n += 1


def slow_client(port, stats, stop):
    """Sends a request head a byte every 0.5 s until the server drops it, then starts over."""
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"x" * 64 + b"\r\n\r\n"
    while not stop.is_set():
        try:
            with socket.create_connection((HOST, port), timeout=30) as s:
                for b in head:
                    if stop.is_set():
                        return
                    s.sendall(bytes([b]))
                    time.sleep(0.5)
                s.recv(4096)
        except OSError:
            pass
        stats.count("slow")


def prober(port, stats, stop):
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            conn.request("GET", "/health")
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                stats.add("errors", f"health HTTP {r.status}")
            stats.add("health_ms", (time.monotonic() - t0) * 1e3)
        except (OSError, http.client.HTTPException) as e:
            stats.add("errors", f"health {type(e).__name__}")
            conn.close()
            conn = http.client.HTTPConnection(HOST, port, timeout=30)
        time.sleep(0.1)
    conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, help="server pid, for RSS")
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--hangups", type=int, default=20, help="clients that hang up mid-stream")
    ap.add_argument("--slow", type=int, default=8)
    a = ap.parse_args()
    seconds = min(a.seconds, 1800)  # bounded
    stats, stop = Stats(), threading.Event()
    rss0 = rss_kb(a.pid)
    threads = [threading.Thread(target=prober, args=(a.port, stats, stop))]
    threads += [threading.Thread(target=streamer, args=(a.port, stats, stop, i, False))
                for i in range(a.streams)]
    threads += [threading.Thread(target=streamer, args=(a.port, stats, stop, 1000 + i, True))
                for i in range(a.hangups)]
    threads += [threading.Thread(target=slow_client, args=(a.port, stats, stop))
                for _ in range(a.slow)]
    for t in threads:
        t.start()
    t0, rss = time.monotonic(), []  # (seconds, kB) every 10 s
    while time.monotonic() - t0 < seconds:
        time.sleep(min(10, max(0, seconds - (time.monotonic() - t0))))
        rss.append((round(time.monotonic() - t0), rss_kb(a.pid)))
    stop.set()
    for t in threads:
        t.join(timeout=90)
    rss1 = rss_kb(a.pid)
    errs = {}
    for e in stats.errors:
        errs[e] = errs.get(e, 0) + 1
    print(json.dumps({
        "seconds": seconds,
        "rss_kb_idle_before": rss0, "rss_kb_end": rss1,
        # after warm-up (thread stacks, malloc arenas, prefix cache filled): the flatness check
        "rss_kb_at_30s": next((k for t, k in rss if t >= 30), None),
        "rss_kb_max": max((k for _, k in rss if k), default=None),
        "health_ms_p50": round(pct(stats.health_ms, 50), 2),
        "health_ms_p99": round(pct(stats.health_ms, 99), 2),
        "ttft_ms_p50": round(pct(stats.ttft_ms, 50), 2),
        "ttft_ms_p99": round(pct(stats.ttft_ms, 99), 2),
        "streams_completed": stats.streams, "hangups": stats.hangups,
        "slow_clients_dropped": stats.slow, "errors": errs,
        "health_samples": len(stats.health_ms),
        "ttft_mean_ms": round(statistics.mean(stats.ttft_ms), 2) if stats.ttft_ms else None,
    }, indent=1))


if __name__ == "__main__":
    main()
