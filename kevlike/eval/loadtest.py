"""Load test for ``kevlike serve``: throughput and latency at several client concurrencies; a soak.

    kevlike loadtest --spawn [--model NAME_OR_DIR] [--concurrency 1,8,32] [--json out.json]
    kevlike loadtest --url http://127.0.0.1:8000
    kevlike loadtest --soak MINUTES [--model NAME_OR_DIR] [--record DB_URL] [--threads N]   (see :func:`soak`)

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
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable
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
    """A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0 and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health_status(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/health")
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def wait_healthy(port: int, alive: Callable[[], bool], seconds: float = 300.0) -> None:
    """Block until the server on 127.0.0.1:``port`` answers ``GET /health`` with 200 (polled every 0.3 s).

    ``alive``: returns False once the server (process or thread) has stopped; ``seconds``: the wait, in seconds
    (≥ 0; at least one probe is made, and a probe may take up to 5 s past it).

    Raises:
        ValueError: ``seconds`` is negative or not finite.
        RuntimeError: ``alive()`` turned False first ("the server exited while starting"), or ``seconds`` passed
            without a 200. The caller stops the server.
    """
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
    deadline = time.monotonic() + seconds
    while True:
        if not alive():
            raise RuntimeError("the server exited while starting")
        try:
            if _health_status(port) == 200:
                return
        except (OSError, http.client.HTTPException):    # not listening yet, or not an HTTP server on the port
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server did not answer /health within {seconds:.3g} s")
        time.sleep(0.3)


def _spawn(model: str | None, extra: list[str], stdout=None) -> tuple[subprocess.Popen, int]:
    port = free_port()
    cmd = [sys.executable, "-m", "kevlike", "serve", "--port", str(port), "--log-level", "warning", *extra]
    if model:
        cmd += ["--model", model]
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=None if stdout is None else subprocess.STDOUT)
    try:
        wait_healthy(port, lambda: proc.poll() is None)
    except BaseException as e:     # also Ctrl-C or SIGTERM while it loads: the server is not left running
        proc.kill()
        code = proc.wait()
        if isinstance(e, RuntimeError):
            raise SystemExit(f"{e} (exit code {code})") from None
        raise
    return proc, port


def run(*, concurrency: str, requests: int, max_seconds: float, url: str | None = None, spawn: bool = False,
        model: str | None = None, files: list[str] | None = None, json_path: str | None = None,
        soak_minutes: float | None = None, record: str | None = None, threads: int | str | None = None,
        dtype: str = "auto") -> int:
    """``kevlike loadtest``: the grid of ``concurrency`` (client counts, comma-separated) × (serial, batched) with
    ``spawn`` (servers of ``model`` started here), or the server at ``url``; ``requests`` per cell (at least
    2 × the clients), each cell bounded by ``max_seconds``; the request ``files`` (default ``examples/*.json``).
    Prints one line per cell and writes ``json_path``. ``threads``, ``dtype``: of the servers started here
    (handed down as ``KEVLIKE_THREADS``, ``KEVLIKE_DTYPE`` by the command line; ``threads`` also to the soak's).

    With ``soak_minutes``: :func:`soak` instead (``record``: its store).

    Raises:
        ValueError: neither or both of ``--url`` and ``--spawn``; no request files; a bad ``--soak``.
    """
    if soak_minutes is not None:
        if url:
            raise ValueError("--soak starts its own server (it reads the server's memory): drop --url")
        soak(soak_minutes, model, record, threads, json_path)
        return 0
    if bool(url) == bool(spawn):
        raise ValueError("give exactly one of --url or --spawn")
    if url and (threads is not None or dtype != "auto"):
        raise ValueError("--threads and --dtype set the server loadtest starts (--spawn, --soak); a server at --url "
                         "has its own: drop them")
    files = files or sorted(str(f) for f in Path("examples").glob("*.json") if not f.name.endswith(".meta.json"))
    if not files:
        raise ValueError("no request files (run from the repository root or pass --files)")
    bodies = []
    for f in files:
        req = json.loads(Path(f).read_text())
        req.pop("model", None)  # answered by the server's default model
        bodies.append(json.dumps(req).encode())
    levels = [int(c) for c in concurrency.split(",")]
    configs = [("serial (--max-batch 1)", ["--max-batch", "1"]), ("batched (default)", [])] if spawn else [("server", [])]
    results = []
    for label, extra in configs:
        if spawn:
            proc, port = _spawn(model, extra)
            host = "127.0.0.1"
        else:
            u = urlparse(url)
            host, port, proc = u.hostname, u.port or 80, None
            _check_loopback(host)
        try:
            run_cell(host, port, bodies, 1, 2, max_seconds)  # warm-up
            for c in levels:
                row = run_cell(host, port, bodies, c, max(requests, 2 * c), max_seconds)
                row["config"] = label
                results.append(row)
                print(f"{label:24} c={c:3d} n={row['requests']:4d} {row['throughput_rps']:7.2f} req/s  "
                      f"p50 {row['p50_ms']:8.0f} ms  p95 {row['p95_ms']:8.0f} ms  {row['statuses']}", flush=True)
        finally:
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(120)
    if spawn:
        for c in levels:
            s = next(r for r in results if r["concurrency"] == c and r["config"].startswith("serial"))
            b = next(r for r in results if r["concurrency"] == c and r["config"].startswith("batched"))
            print(f"batching speed-up at c={c}: {b['throughput_rps'] / s['throughput_rps']:.2f}x throughput")
    if json_path:
        Path(json_path).write_text(json.dumps({"files": files, "machine": f"{os.cpu_count()} CPUs",
                                               "results": results}, indent=2))
    return 0



# --- soak: mixed traffic against one spawned server with a store ---------------------------------------------

SOAK_TEXTS = [
    "Customer: I was charged twice for my March invoice and nobody answers the phone. I need the money back.",
    "The nightly build failed again after the dependency upgrade; the linker cannot find the crypto library.",
    "Our team loved the workshop. The room was cold, but the speaker explained everything clearly.",
    "The package arrived two weeks late and the box was crushed, though the lamp inside still works.",
    "Please reset my password; the reset link in the email expires before I can open it on my phone.",
    "The quarterly report shows revenue up 4 percent while support tickets fell for the third month.",
]
_NOUL = {"type": "noul", "instructions": "Does this need a reply within the hour?"}
_TEAM = {"type": "choice", "instructions": "Which team should handle this?",
         "criteria": {"billing": "invoices, charges, refunds", "sales": None, "tech": None, "none": None}}
_TONE = {"type": "score", "instructions": "How upset is the writer?", "criteria": ["Calm", "Annoyed", "Angry"]}


def _soak_requests(rng, n_long: int = 40) -> dict:
    """The request bodies of each traffic kind (``small``: one yes/no question on a short text; ``repeated``:
    three questions on one of six page-long states, so the state cache is hit; ``long``: ``n_long`` questions)."""
    import random as _random

    rng = rng or _random.Random(0)
    pages = [" ".join(SOAK_TEXTS[(i + j) % len(SOAK_TEXTS)] for j in range(6)) for i in range(len(SOAK_TEXTS))]
    return {
        "small": lambda: {"state": rng.choice(SOAK_TEXTS), "questions": {"q": _NOUL}},
        "repeated": lambda: {"state": rng.choice(pages), "questions": {"urgent": _NOUL, "team": _TEAM, "tone": _TONE}},
        "long": lambda: {"state": rng.choice(pages),
                         "questions": {f"q{i}": (_TEAM if i % 2 else _NOUL) for i in range(n_long)}},
    }


def _percentiles(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0}
    ms = sorted(1000 * x for x in xs)

    def at(p):
        return ms[min(len(ms) - 1, int(p * len(ms)))]
    return {"n": len(ms), "p50_ms": at(0.5), "p95_ms": at(0.95), "p99_ms": at(0.99), "max_ms": ms[-1]}


def _rss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def soak(minutes: float, model: str | None = None, record: str | None = None, threads: str | None = None,
         json_path: str | None = None, header_timeout_s: float = 3.0, seed: int = 0) -> dict:
    """``kevlike loadtest --soak MINUTES``: start ``kevlike serve --record`` on a free loopback port and send it
    mixed traffic for ``minutes``, then stop it (SIGTERM: the recorder drains) and check the store.

    Traffic (each kind its own client thread; bounded: at most 9 connections of ours at once):
    ``small`` decisions (one yes/no question, paced at 5 per second: the latency probe), ``repeated`` decisions
    (three questions on one of six page-long states: state-cache hits), ``long`` question lists (40 questions),
    an outcome posted for every second answered decision, report polls by two clients in every other phase
    (phases of ``min(30 s, run / 6)``), an abandoned client every 2 s (a long request, gone after 0.3 s),
    a slow client every 3 s (half a header block, then silence: the server cuts it at ``header_timeout_s``).

    Prints (and returns, and writes to ``json_path``): the server's RSS over time, latency percentiles per kind
    (small decisions split by phase: idle vs under report polling), statuses per kind, 5xx, and records lost
    (answered decisions with no record in the store) and outcomes lost (posts answered 200 with no row).

    Raises:
        ValueError: ``minutes`` not a finite number in (0, 1440].
        SystemExit: the server did not start.
    """
    import math
    import random
    import tempfile

    from sqlalchemy import select

    from kevlike.service import feedback as fb

    if not (isinstance(minutes, (int, float)) and 0 < minutes <= 1440 and math.isfinite(minutes)):
        raise ValueError(f"--soak must be a number of minutes in (0, 1440], got {minutes!r}")
    tmp = tempfile.TemporaryDirectory(prefix="kevlike-soak-")
    record = record or f"sqlite:///{Path(tmp.name) / 'soak.db'}"
    extra = ["--record", record, "--header-timeout", f"{header_timeout_s:g}", "--body-timeout", "3"]
    if threads:
        extra += ["--threads", str(threads)]
    log_path = Path(tmp.name) / "server.log"
    with open(log_path, "wb") as log_file:
        proc, port = _spawn(model, extra, stdout=log_file)
    total = 60.0 * minutes
    phase_s = min(30.0, max(total / 6, 1.0))
    rng = random.Random(seed)
    bodies = _soak_requests(rng)
    lock = threading.Lock()
    lat: dict[str, list[float]] = {k: [] for k in ("small_idle", "small_polling", "repeated", "long", "feedback",
                                                    "report")}
    statuses: dict[str, dict[str, int]] = {}
    answered: set[str] = set()
    outcomes_stored: set[str] = set()
    rss: list[tuple[float, float]] = []
    counts = {"abandoned": 0}
    t0 = time.monotonic()
    deadline = t0 + total

    def polling(t: float) -> bool:
        return int((t - t0) / phase_s) % 2 == 1

    def tally(kind: str, status) -> None:
        with lock:
            d = statuses.setdefault(kind, {})
            d[str(status)] = d.get(str(status), 0) + 1

    class Client:
        def __init__(self):
            self.conn = None

        def call(self, method, path, body=None, headers=None):
            for attempt in (0, 1):   # a kept-alive connection the server closed meanwhile: once more on a new one
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                try:
                    self.conn.request(method, path, body=None if body is None else json.dumps(body).encode(),
                                      headers={"content-type": "application/json", **(headers or {})})
                    r = self.conn.getresponse()
                    raw = r.read()
                    if r.getheader("connection", "").lower() == "close":
                        self.conn.close()
                        self.conn = None
                    return r.status, raw
                except (OSError, http.client.HTTPException):
                    self.conn.close()
                    self.conn = None
                    if attempt:
                        return "connection error", b""
            return "connection error", b""

    def decisions(kind: str, pace_s: float, feedback_every: int):
        c, n = Client(), 0
        while time.monotonic() < deadline:
            start = time.monotonic()
            rid = f"soak-{kind}-{n}"
            n += 1
            body = bodies[kind]()
            phase = polling(start)
            st, raw = c.call("POST", "/v1/systemone", body, {"x-request-id": rid})
            dt = time.monotonic() - start
            tally(kind, st)
            if st == 200:
                with lock:
                    answered.add(rid)
                    lat[f"small_{'polling' if phase else 'idle'}" if kind == "small" else kind].append(dt)
                if feedback_every and n % feedback_every == 0:
                    outcome = {q: {"noul": True, "choice": "billing", "score": 1}[spec["type"]]
                               for q, spec in list(body["questions"].items())[:3]}
                    t1 = time.monotonic()
                    fst, _ = c.call("POST", "/v1/feedback", {"request_id": rid, "outcomes": outcome})
                    tally("feedback", fst)
                    if fst == 200:
                        with lock:
                            lat["feedback"].append(time.monotonic() - t1)
                            outcomes_stored.add(rid)
            time.sleep(max(0.0, pace_s - (time.monotonic() - start)))

    def reports():
        c = Client()
        while time.monotonic() < deadline:
            if not polling(time.monotonic()):
                time.sleep(0.05)
                continue
            t1 = time.monotonic()
            st, _ = c.call("GET", "/v1/feedback/report")
            tally("report", st)
            if st == 200:
                with lock:
                    lat["report"].append(time.monotonic() - t1)
            time.sleep(0.05)

    def abandoned():
        n = 0
        while time.monotonic() < deadline:
            data = json.dumps(bodies["long"]()).encode()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                    s.sendall(f"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              f"x-request-id: soak-abandoned-{n}\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
                    time.sleep(0.3)
                with lock:
                    counts["abandoned"] += 1
            except OSError:
                tally("abandoned", "connection error")
            n += 1
            time.sleep(max(0.0, min(2.0, deadline - time.monotonic())))

    def slow():
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=header_timeout_s + 10) as s:
                    s.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\n")   # and nothing more
                    raw = b""
                    while chunk := s.recv(65536):
                        raw += chunk
                st = raw.split(b" ", 2)[1].decode() if raw.startswith(b"HTTP/1.1 ") else "closed without a response"
            except OSError as e:
                st = f"connection error ({type(e).__name__})"
            tally("slow", st)
            time.sleep(max(0.0, min(3.0, deadline - time.monotonic())))

    def sampler():
        every = max(1.0, min(15.0, total / 20))
        while True:
            r = _rss_mib(proc.pid)
            if r is not None:
                rss.append((time.monotonic() - t0, r))
            if time.monotonic() >= deadline:
                return
            time.sleep(min(every, max(0.0, deadline - time.monotonic())) or 0.01)

    workers = [threading.Thread(target=decisions, args=("small", 0.2, 2), daemon=True),
               threading.Thread(target=decisions, args=("repeated", 0.0, 2), daemon=True),
               threading.Thread(target=decisions, args=("long", 1.0, 2), daemon=True),
               threading.Thread(target=reports, daemon=True), threading.Thread(target=reports, daemon=True),
               threading.Thread(target=abandoned, daemon=True), threading.Thread(target=slow, daemon=True),
               threading.Thread(target=sampler, daemon=True)]
    print(f"soak: {minutes:g} min of mixed traffic against {model or 'kevlike-default'} (server pid {proc.pid}, "
          f"127.0.0.1:{port}{', --threads ' + str(threads) if threads else ''}), store {record}", flush=True)
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join(max(0.0, deadline - time.monotonic()) + 330)
        health = json.loads(Client().call("GET", "/health")[1] or b"{}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    store = fb.FeedbackStore(record)
    with store.engine.connect() as conn:
        recorded = {r for (r,) in conn.execute(select(fb.requests_table.c.request_id))}
        with_outcomes = {r for (r,) in conn.execute(select(fb.outcomes_table.c.request_id).distinct())}
    store.close()
    lost = sorted(answered - recorded)
    outcomes_lost = sorted(outcomes_stored - with_outcomes)
    five = sum(v for d in statuses.values() for k, v in d.items() if k.isdigit() and k.startswith("5"))
    settle = min(300.0, total / 4)
    after = [r for t, r in rss if t >= settle]
    growth = (after[-1] - after[0]) / after[0] if len(after) >= 2 else None
    pct = {k: _percentiles(v) for k, v in lat.items()}
    idle, busy = pct["small_idle"].get("p99_ms"), pct["small_polling"].get("p99_ms")
    result = {"minutes": minutes, "model": model or "kevlike-default", "threads": threads, "store": record,
              "rss_mib": [[round(t, 1), round(r, 1)] for t, r in rss], "rss_growth_after_settle": growth,
              "settle_s": settle, "latency": pct, "p99_small_polling_over_idle": busy / idle if idle and busy else None,
              "statuses": statuses, "abandoned_sent": counts["abandoned"], "five_xx": five,
              "answered": len(answered), "recorded": len(recorded), "records_lost": len(lost), "lost_ids": lost[:20],
              "outcomes_posted": len(outcomes_stored), "outcomes_lost": len(outcomes_lost),
              "health": health, "server_exit": code}
    print("RSS of the server (MiB) over time: " + ", ".join(f"{t:.0f}s {r:.0f}" for t, r in rss))
    print(f"RSS growth after the first {settle:.0f} s: "
          + ("n/a (too few samples)" if growth is None else f"{growth:+.1%} ({after[0]:.0f} -> {after[-1]:.0f} MiB)"))
    for k, p in pct.items():
        label = {"small_idle": "small decisions, idle", "small_polling": "small decisions, under report polling"}.get(k, k)
        print(f"latency {label:38}" + (f" n={p['n']:5d}  p50 {p['p50_ms']:8.0f}  p95 {p['p95_ms']:8.0f}  p99 "
                                       f"{p['p99_ms']:8.0f}  max {p['max_ms']:8.0f} ms" if p["n"] else " n=0"))
    if result["p99_small_polling_over_idle"] is not None:
        print(f"p99 of small decisions under report polling / idle: {result['p99_small_polling_over_idle']:.2f}x")
    print("statuses: " + "; ".join(f"{k} {dict(sorted(v.items()))}" for k, v in sorted(statuses.items()))
          + f"; abandoned clients {counts['abandoned']}")
    dropped = sum(m.get("dropped", 0) for m in health.get("models", {}).values())
    print(f"5xx: {five}; records lost: {len(lost)} of {len(answered)} answered decisions ({len(recorded)} records, "
          f"abandoned ones answered before their client left included; {dropped} dropped as gone); outcomes lost: "
          f"{len(outcomes_lost)} of {len(outcomes_stored)}; server exit {code}")
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2))
    tmp.cleanup()
    return result
