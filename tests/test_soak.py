"""`kevlike loadtest --soak` (issue 32 item 8): 20 s of mixed traffic against a real `kevlike serve` with a store,
serving a tiny random Llama: every kind of traffic ran, no 5xx, no answered decision without its record, no
outcome posted without its row, slow clients cut off with 408, and the server's RSS sampled throughout."""

import http.server
import os
import subprocess
import sys
import threading

import pytest

from kevlike.eval.loadtest import free_port, soak, wait_healthy

from tiny import save_tiny_model


def test_a_short_soak_on_a_tiny_model(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    model = save_tiny_model(tmp_path / "tiny")
    capsys.readouterr()
    out_json = tmp_path / "soak.json"
    r = soak(0.34, model, threads="1", json_path=str(out_json), header_timeout_s=2.0)
    text = capsys.readouterr().out
    assert r["server_exit"] == 0 and r["five_xx"] == 0
    assert r["records_lost"] == 0 and r["lost_ids"] == [] and r["answered"] >= 60
    assert r["recorded"] >= r["answered"]                     # abandoned requests answered before their client left
    assert r["outcomes_lost"] == 0 and r["outcomes_posted"] >= 20
    st = r["statuses"]
    for kind in ("small", "repeated", "long", "feedback", "report"):
        assert set(st[kind]) == {"200"} and st[kind]["200"] > 0, (kind, st)
    assert set(st["slow"]) == {"408"} and st["slow"]["408"] >= 3  # cut at the 2 s header deadline
    assert r["abandoned_sent"] >= 5
    lat = r["latency"]
    assert lat["small_idle"]["n"] >= 10 and lat["small_polling"]["n"] >= 10 and lat["report"]["n"] >= 10
    assert 0 < lat["small_idle"]["p50_ms"] <= lat["small_idle"]["p99_ms"] <= lat["small_idle"]["max_ms"]
    assert len(r["rss_mib"]) >= 10 and all(100 < mib < 4000 for _, mib in r["rss_mib"])
    assert r["rss_growth_after_settle"] is not None and abs(r["rss_growth_after_settle"]) < 0.5
    assert out_json.is_file()
    for line in ("RSS of the server (MiB) over time: 0s ", "latency small decisions, under report polling",
                 "p99 of small decisions under report polling / idle: ",
                 f"5xx: 0; records lost: 0 of {r['answered']} answered decisions"):
        assert line in text, text


def test_soak_options_are_checked():
    with pytest.raises(ValueError, match=r"--soak must be a number of minutes in \(0, 1440\], got nan"):
        soak(float("nan"))
    with pytest.raises(ValueError, match="got 0"):
        soak(0)
    p = subprocess.run([sys.executable, "-m", "kevlike", "loadtest", "--soak", "1", "--url", "http://127.0.0.1:1"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 2 and p.stderr == ("kevlike: error: --soak starts its own server (it reads the server's "
                                              "memory): drop --url\n")


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(self.status if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def _health_server(status: int) -> http.server.ThreadingHTTPServer:
    """A loopback HTTP server in a daemon thread whose ``GET /health`` answers ``status``."""
    handler = type("H", (_Health,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_wait_healthy_returns_on_200_and_raises_on_exit_or_timeout():
    ok, starting = _health_server(200), _health_server(503)
    try:
        wait_healthy(ok.server_address[1], lambda: True, 5)          # answers 200: returns
        with pytest.raises(RuntimeError, match="exited while starting"):
            wait_healthy(ok.server_address[1], lambda: False, 5)     # the process is gone: no wait at all
        with pytest.raises(RuntimeError, match=r"did not answer /health within 1 s"):
            wait_healthy(starting.server_address[1], lambda: True, 1)   # 503 (still loading) until the deadline
        with pytest.raises(RuntimeError, match=r"within 0 s"):
            wait_healthy(free_port(), lambda: True, 0)                # nothing listening
    finally:
        ok.shutdown()
        starting.shutdown()


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_a_server_being_started_is_stopped_when_the_command_is(monkeypatch, tmp_path, stop):
    """Break-test 2026-12-07: SIGTERM (which now unwinds a command like Ctrl-C) while `loadtest --spawn` or `fuzz`
    waited for its server left the server running, re-parented to PID 1: only a failed start killed it."""
    from kevlike.eval import fuzz, loadtest

    calls = []

    class Proc:
        pid = 1

        def poll(self):
            return None

        def kill(self):
            calls.append("kill")

        def send_signal(self, sig):
            calls.append("signal")

        def wait(self, timeout=None):
            calls.append("wait")
            return -9

    def interrupted(port, alive):
        raise stop()

    for module in (loadtest, fuzz):
        monkeypatch.setattr(module.subprocess, "Popen", lambda *a, **k: Proc())
        monkeypatch.setattr(module, "wait_healthy", interrupted)
    with pytest.raises(stop):
        loadtest._spawn(None, [])
    assert calls == ["kill", "wait"]
    calls.clear()
    with pytest.raises(stop):
        fuzz.serve_subprocess("m", tmp_path / "server.log")
    assert calls == ["signal", "wait"]
