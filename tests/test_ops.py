"""Operating `kevlike serve`: a busy port fails at once with exit code 3, a SIGTERM, SIGHUP or Ctrl-C after
a graceful shutdown exits 0; the option-orders bound of the engine."""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from serving import wait_healthy
from tiny import REQUEST, make_engine, save_tiny_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny-ops") / "llama")


def serve_cmd(port: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "kevlike", "serve", "--port", str(port), "--log-level", "warning", *args]


ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def busy_socket(listen: bool) -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    if listen:
        s.listen()
    return s


@pytest.mark.parametrize("listen", [True, False], ids=["listening", "bound"])
def test_busy_port_fails_at_once_with_exit_3(model_dir, listen):
    with busy_socket(listen) as s:
        port = s.getsockname()[1]
        t0 = time.perf_counter()
        p = subprocess.run(serve_cmd(port, "--model", model_dir), capture_output=True, timeout=120, env=ENV)
        elapsed = time.perf_counter() - t0
    err = p.stderr.decode()
    assert p.returncode == 3, err
    assert err == f"kevlike: error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert p.stdout == b""
    # before any model is loaded (the default model takes ~18 s; this start imports no torch)
    assert elapsed < 10, elapsed


def test_port_is_checked_before_the_model(tmp_path):
    """An unknown model would be exit 2; the port comes first, so it is exit 3."""
    with busy_socket(True) as s:
        p = subprocess.run(serve_cmd(s.getsockname()[1], "--model", str(tmp_path / "no-such-model")),
                           capture_output=True, timeout=120, env=ENV)
    assert p.returncode == 3 and p.stderr.decode().startswith("kevlike: error: cannot listen on 127.0.0.1:")


def _post(port, body, timeout=120.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/systemone", body=json.dumps(body), headers={"content-type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def start_server(model_dir, preexec_fn=None) -> tuple[subprocess.Popen, int]:
    from kevlike.eval.loadtest import free_port

    port = free_port()
    # SIGHUP as a terminal leaves it (default), also where pytest itself runs under nohup (SIGHUP ignored, inherited)
    default_hup = lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL)     # noqa: E731
    proc = subprocess.Popen(serve_cmd(port, "--model", model_dir), env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, preexec_fn=preexec_fn or default_hup)
    wait_healthy([(proc, port)])
    return proc, port


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_graceful_shutdown_exits_0(model_dir, sig):
    proc, port = start_server(model_dir)
    try:
        slow = {"state": "the lazy dog and the quick fox " * 100,
                "questions": {f"q{i}": REQUEST["questions"]["team"] for i in range(60)}}
        box = {}
        t = threading.Thread(target=lambda: box.setdefault("r", _post(port, slow)))
        t.start()
        time.sleep(0.2)
        proc.send_signal(sig)
        t.join(60)
        assert box["r"][0] == 200 and len(box["r"][1]["answers"]) == 60  # the request in flight is answered
        assert proc.wait(30) == 0
        out = proc.stdout.read().decode()
        assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
        assert ("SIGHUP: stopping as for SIGTERM" in out) == (sig == signal.SIGHUP), out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_under_nohup_sighup_leaves_the_server_running(model_dir):
    """nohup ignores SIGHUP so that a closed terminal leaves the process running: serve keeps it so."""
    proc, port = start_server(model_dir, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert proc.poll() is None
        assert _post(port, {k: v for k, v in REQUEST.items() if k != "model"})[0] == 200     # the served model
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_engine_bounds_option_orders(tmp_path):
    from kevlike.model.engine import MAX_OPTION_ORDERS, Engine

    assert MAX_OPTION_ORDERS == 24
    for bad in (25, 720):
        with pytest.raises(ValueError, match=r"^option_orders must be at most 24 \(.*\), got " + str(bad)):
            make_engine(option_orders=bad)
    with pytest.raises(ValueError, match="option_orders must be >= 0, got -1"):
        make_engine(option_orders=-1)
    with pytest.raises(ValueError, match="option_orders must be at most 24"):
        # raised before the model is even looked up (this one does not exist)
        Engine.from_pretrained(str(tmp_path / "no-such-model"), option_orders=1000)
    engine = make_engine(option_orders=24)  # the limit itself is allowed
    out = engine.decide(REQUEST)
    assert abs(sum(out["answers"]["team"]["probabilities"].values()) - 1) < 1e-5
    # a model's kevlike.json: a bad value is one line naming the field (was: int(None) a TypeError traceback,
    # 1.7 and true silently 1)
    from kevlike.model.engine import _manifest_count

    for bad in (None, "abc", 1.7, True, 25, -1):
        with pytest.raises(ValueError, match=r"^model 'm': kevlike.json field 'option_orders' must be an integer "
                                             r"from 0 to 24, got .* \(fix the file, or override it with "
                                             r"--option-orders\)$"):
            _manifest_count({"option_orders": bad}, "option_orders", 1, MAX_OPTION_ORDERS, "m")
    assert _manifest_count({}, "option_orders", 1, 24, "m") == 1
    assert _manifest_count({"option_orders": 3}, "option_orders", 1, 24, "m") == 3


@pytest.mark.parametrize("soft, hard, want", [(48, 48, "16 soft 48"), (100, 4096, "512 soft 544"),
                                              (20, 20, "ValueError"), (4096, 4096, "512 soft 4096")])
def test_the_connection_limit_fits_the_open_file_limit(soft, hard, want):
    """With `ulimit -n 48` and 512 allowed connections, the 34th open connection made requests 500 ("Too many open
    files") and flooded the log with accept errors (break-test 2026-12-05): the soft limit is raised towards the hard
    one, and where it cannot be, the connection limit is lowered to fit (warning) or the start refused."""
    code = (f"import resource, logging; logging.basicConfig(level=logging.WARNING)\n"
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))\n"
            f"from kevlike.service.server import fit_connections\n"
            f"try:\n    n = fit_connections(512)\nexcept ValueError as e:\n    print('ValueError', e)\n"
            f"else:\n    print(n, 'soft', resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(want), p.stdout
    if want.startswith("16"):
        assert "allows 16 client connections, not --max-connections 512: serving with 16 (raise it with ulimit -n " \
               "544)" in p.stderr
    if want == "ValueError":
        assert "leaves no room for a client connection" in p.stdout
