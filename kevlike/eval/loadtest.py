"""Load test for ``kevlike serve``: throughput and latency at several client concurrencies.

    kevlike loadtest --spawn [--model NAME_OR_DIR] [--concurrency 1,8,32] [--json out.json]
    kevlike loadtest --url http://127.0.0.1:8000

``--spawn`` starts the server itself twice on free loopback ports — once with batching off
(``--max-batch 1``) and once with the default batching — and runs the same grid against both, so
the speed-up batching gives over serial processing is measured in one run. Each client sends the
request files (default: ``examples/*.json``) round-robin over a kept-alive connection. Bounded:
``--requests`` per cell (at least 2 × concurrency) and ``--max-seconds`` per cell; loopback only.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse


def _check_loopback(host: str) -> None:
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise SystemExit(f"refusing to load-test {host!r}: only loopback addresses (127.0.0.0/8, ::1, localhost)")


def run_cell(host: str, port: int, bodies: list[bytes], concurrency: int, n_requests: int, max_seconds: float) -> dict:
    """``n_requests`` POSTs from ``concurrency`` threads; returns throughput, latency percentiles (ms), status counts."""
    lock = threading.Lock()
    counter = iter(range(n_requests))
    latencies, statuses = [], {}
    stop_at = time.perf_counter() + max_seconds

    def client():
        conn = http.client.HTTPConnection(host, port, timeout=max_seconds + 60)
        while time.perf_counter() < stop_at:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            t0 = time.perf_counter()
            conn.request("POST", "/v1/systemone", body=bodies[i % len(bodies)],
                         headers={"content-type": "application/json"})
            r = conn.getresponse()
            r.read()
            dt = time.perf_counter() - t0
            with lock:
                latencies.append(dt)
                statuses[r.status] = statuses.get(r.status, 0) + 1
        conn.close()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ms = sorted(1000 * x for x in latencies)
    return {"concurrency": concurrency, "requests": len(ms), "wall_s": wall, "throughput_rps": len(ms) / wall,
            "p50_ms": statistics.median(ms), "p95_ms": ms[min(len(ms) - 1, int(0.95 * len(ms)))],
            "statuses": {str(k): v for k, v in sorted(statuses.items())}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(model: str | None, extra: list[str]) -> tuple[subprocess.Popen, int]:
    port = free_port()
    cmd = [sys.executable, "-m", "kevlike", "serve", "--port", str(port), "--log-level", "warning", *extra]
    if model:
        cmd += ["--model", model]
    proc = subprocess.Popen(cmd)
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("server did not start within 300 s")


def run(args) -> int:
    """``kevlike loadtest``: the grid of ``args.concurrency`` × (serial, batched) with ``--spawn``, or the
    server at ``args.url``; prints one line per cell and writes ``args.json``.

    Raises:
        ValueError: neither or both of ``--url`` and ``--spawn``; no request files.
    """
    if bool(args.url) == bool(args.spawn):
        raise ValueError("give exactly one of --url or --spawn")
    files = args.files or sorted(str(f) for f in Path("examples").glob("*.json") if not f.name.endswith(".meta.json"))
    if not files:
        raise ValueError("no request files (run from the repository root or pass --files)")
    bodies = []
    for f in files:
        req = json.loads(Path(f).read_text())
        req.pop("model", None)  # answered by the server's default model
        bodies.append(json.dumps(req).encode())
    levels = [int(c) for c in args.concurrency.split(",")]
    configs = [("serial (--max-batch 1)", ["--max-batch", "1"]), ("batched (default)", [])] if args.spawn else [("server", [])]
    results = []
    for label, extra in configs:
        if args.spawn:
            proc, port = _spawn(args.model, extra)
            host = "127.0.0.1"
        else:
            u = urlparse(args.url)
            host, port, proc = u.hostname, u.port or 80, None
            _check_loopback(host)
        try:
            run_cell(host, port, bodies, 1, 2, args.max_seconds)  # warm-up
            for c in levels:
                row = run_cell(host, port, bodies, c, max(args.requests, 2 * c), args.max_seconds)
                row["config"] = label
                results.append(row)
                print(f"{label:24} c={c:3d} n={row['requests']:4d} {row['throughput_rps']:7.2f} req/s  "
                      f"p50 {row['p50_ms']:8.0f} ms  p95 {row['p95_ms']:8.0f} ms  {row['statuses']}", flush=True)
        finally:
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(120)
    if args.spawn:
        for c in levels:
            s = next(r for r in results if r["concurrency"] == c and r["config"].startswith("serial"))
            b = next(r for r in results if r["concurrency"] == c and r["config"].startswith("batched"))
            print(f"batching speed-up at c={c}: {b['throughput_rps'] / s['throughput_rps']:.2f}x throughput")
    if args.json:
        Path(args.json).write_text(json.dumps({"files": files, "machine": f"{os.cpu_count()} CPUs",
                                               "results": results}, indent=2))
    return 0

