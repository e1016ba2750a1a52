"""``kevlike serve`` processes for tests: wait until they answer ``GET /health``.

Use: ``from serving import wait_healthy`` in a test module (tests/ is on ``sys.path``, as for tests/stores.py)."""

from __future__ import annotations

import http.client
import subprocess
import time


def _health_status(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/health")
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def wait_healthy(servers: list[tuple[subprocess.Popen, int]], timeout: float = 120.0) -> None:
    """Block until every ``(process, port)`` in ``servers`` answers ``GET /health`` with 200.

    ``timeout``: seconds for all of them together. Raises ``RuntimeError`` with the process's output when one
    exits first, or when ``timeout`` passes; every process of ``servers`` is killed before it raises. The
    processes must have been started with ``stdout=subprocess.PIPE`` (and ``stderr`` to it or its own pipe)."""
    deadline = time.monotonic() + timeout
    for proc, port in servers:
        while True:
            if proc.poll() is not None:
                out = proc.stdout.read().decode() if proc.stdout else ""
                _kill(servers)
                raise RuntimeError(f"server exited {proc.returncode}: {out}")
            try:
                if _health_status(port) == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                _kill(servers)
                raise RuntimeError(f"server did not start within {timeout:g} s")
            time.sleep(0.2)


def _kill(servers):
    for proc, _ in servers:
        proc.kill()
