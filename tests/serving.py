"""``kevlike serve`` processes for tests: wait until they answer ``GET /health``.

Use: ``from serving import wait_healthy`` in a test module (tests/ is on ``sys.path``, as for tests/stores.py)."""

from __future__ import annotations

import subprocess
import time

from kevlike.eval import loadtest


def wait_healthy(servers: list[tuple[subprocess.Popen, int]], timeout: float = 120.0) -> None:
    """Block until every ``(process, port)`` in ``servers`` answers ``GET /health`` with 200
    (:func:`kevlike.eval.loadtest.wait_healthy` for each).

    ``timeout``: seconds for all of them together. Raises ``RuntimeError`` with the process's output when one
    exits first, or when ``timeout`` passes; every process of ``servers`` is killed before it raises. The
    processes must have been started with ``stdout=subprocess.PIPE`` (and ``stderr`` to it or its own pipe)."""
    deadline = time.monotonic() + timeout
    for proc, port in servers:
        try:
            loadtest.wait_healthy(port, lambda: proc.poll() is None, max(deadline - time.monotonic(), 0.0))
        except RuntimeError as e:
            for p, _ in servers:
                p.kill()
                p.wait(10)
            out = proc.stdout.read().decode() if proc.stdout else ""
            raise RuntimeError(f"{e} (exit code {proc.returncode}; {timeout:g} s for all): {out}") from None
