"""Client hygiene of the HTTP server (issue 32), on a real `kevlike serve` serving a tiny random Llama: a
request whose client has gone is dropped before its forward pass and never recorded; headers and bodies
have receipt deadlines (408, then the connection is closed); open connections are bounded (503)."""

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from test_server import NOUL, Server
from tiny import REQUEST, save_tiny_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")


def raw_request(body: dict, rid: str) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-request-id: {rid}\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def read_all(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything the server sends until it closes the connection (fails past ``timeout``)."""
    sock.settimeout(timeout)
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def health(server) -> dict:
    return next(iter(json.loads(server.request("GET", "/health")[2])["models"].values()))


def test_abandoned_requests_are_dropped_before_their_forward_pass_and_never_recorded(model_dir, tmp_path):
    """Issue 32: five clients that disconnect while another request computes were all computed, and recorded as
    answered. Now: none of the five reaches a forward pass, none is recorded, the server answers on."""
    db = tmp_path / "fb.db"
    s = Server(model_dir, "--max-batch", "1", "--record", f"sqlite:///{db}")
    try:
        before = health(s)
        big = {"state": "the lazy dog and the quick fox " * 100,
               "questions": {f"q{i}": REQUEST["questions"]["team"] for i in range(600)}}
        box = {}
        slow = threading.Thread(target=lambda: box.setdefault("r", s.post(big, {"x-request-id": "slow"})))
        slow.start()
        time.sleep(0.3)
        gone = []
        for i in range(5):   # queued behind the slow request, then their clients go
            c = socket.create_connection(("127.0.0.1", s.port))
            c.sendall(raw_request({"state": "the lazy dog", "questions": {"q": NOUL}}, f"gone-{i}"))
            gone.append(c)
        deadline = time.time() + 30
        while health(s)["waiting"] < 5 and time.time() < deadline:   # read, tokenized and queued (a loaded
            time.sleep(0.1)                                            # machine takes longer than an idle one)
        assert health(s)["waiting"] == 5, "the five requests were not queued behind the slow one"
        for c in gone:
            c.close()
        time.sleep(0.2)
        assert "r" not in box, "the slow request finished before the clients left: make it slower"
        slow.join(120)
        assert box["r"][0] == 200
        assert s.post({"state": "the lazy dog", "questions": {"q": NOUL}}, {"x-request-id": "after"})[0] == 200
        after = health(s)
        assert after["dropped"] - before["dropped"] == 5
        assert after["answered"] - before["answered"] == 2              # the slow one and the one after
        assert after["batches"] - before["batches"] == 2
        deadline = time.time() + 10
        while time.time() < deadline:   # records are written off the response path
            ids = {r for (r,) in sqlite3.connect(db).execute("select request_id from kevlike_requests")}
            if "after" in ids:
                break
            time.sleep(0.1)
        assert ids == {"slow", "after"}
        assert s.request("POST", "/v1/feedback", {"request_id": "gone-0", "outcomes": {"q": True}})[0] == 404
    finally:
        s.stop()


def test_slow_clients_are_cut_off_and_open_connections_are_bounded(model_dir):
    # the limits as flags, and as the environment's defaults (a flag wins over its variable: 30 -> 1)
    s = Server(model_dir, "--header-timeout", "1", "--max-connections", "12",
               env={"KEVLIKE_HEADER_TIMEOUT_S": "30", "KEVLIKE_BODY_TIMEOUT_S": "1.5"})
    try:
        # headers trickled a byte at a time: the deadline runs from the connection's start, bytes do not extend it
        head = socket.create_connection(("127.0.0.1", s.port))
        t0 = time.monotonic()
        for b in b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\n":
            try:
                head.send(bytes([b]))
            except OSError:
                break
            time.sleep(0.1)
            if time.monotonic() - t0 > 3:
                break
        raw = read_all(head)
        took = time.monotonic() - t0
        assert raw.startswith(b"HTTP/1.1 408 ") and b"connection: close" in raw.lower(), raw
        detail = json.loads(raw.split(b"\r\n\r\n", 1)[1])["detail"]
        assert detail == {"error_type": "timeout", "message": "request headers not received within 1 s; the "
                                                              "connection is closed"}
        assert 0.9 <= took < 2.5, took
        # a connection that never sends a byte: closed, nothing said
        idle = socket.create_connection(("127.0.0.1", s.port))
        t0 = time.monotonic()
        assert read_all(idle) == b"" and 0.9 <= time.monotonic() - t0 < 2.5
        # a body that stops halfway
        body = socket.create_connection(("127.0.0.1", s.port))
        body.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"state\": ")
        t0 = time.monotonic()
        raw = read_all(body)
        assert raw.startswith(b"HTTP/1.1 408 ") and b"request body not received within 1.5 s" in raw, raw
        assert 1.4 <= time.monotonic() - t0 < 3
        assert s.post({"state": "dog", "questions": {"q": NOUL}})[0] == 200   # the server answers on
        # the bound: 12 open connections at most; the 13th and later are answered 503 at once and closed
        held = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(12)]
        time.sleep(0.2)
        extra = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(3)]
        t0 = time.monotonic()
        for c in extra:
            raw = read_all(c, 5)
            assert raw.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in raw.lower(), raw
            detail = json.loads(raw.split(b"\r\n\r\n", 1)[1])["detail"]
            assert detail["error_type"] == "unknown" and "(the limit is 12)" in detail["message"]
        assert time.monotonic() - t0 < 0.9   # at once, not at the header deadline
        # the slow ones go at their header deadline; then the server has room again
        for c in held:
            assert read_all(c) == b""
        status, _, out, _ = s.post({"state": "dog", "questions": {"q": NOUL}})
        assert status == 200 and "q" in out["answers"]
        assert s.proc.poll() is None
    finally:
        s.stop()


def test_client_limits_come_from_flags_or_the_environment_and_are_checked(monkeypatch):
    from kevlike.cli import _options, build_parser
    from kevlike.config.server import ServerConfig, client_limits_from_env
    from kevlike.service.server import client_protocol

    def limits(*flags):
        return _options(ServerConfig(), build_parser().parse_args(["serve", *flags]))

    for var in ("KEVLIKE_HEADER_TIMEOUT_S", "KEVLIKE_BODY_TIMEOUT_S", "KEVLIKE_MAX_CONNECTIONS"):
        monkeypatch.delenv(var, raising=False)
    c = limits()
    assert (c.header_timeout_s, c.body_timeout_s, c.max_connections) == (10.0, 30.0, 512)
    c = limits("--header-timeout", "2.5", "--body-timeout", "7", "--max-connections", "64")
    assert (c.header_timeout_s, c.body_timeout_s, c.max_connections) == (2.5, 7.0, 64)
    monkeypatch.setenv("KEVLIKE_HEADER_TIMEOUT_S", " 4 ")
    monkeypatch.setenv("KEVLIKE_MAX_CONNECTIONS", "64")
    monkeypatch.setenv("KEVLIKE_BODY_TIMEOUT_S", "")                       # blank: unset
    c = limits("--max-connections", "8")                                   # a flag wins over its variable
    assert (c.header_timeout_s, c.body_timeout_s, c.max_connections) == (4.0, 30.0, 8)
    monkeypatch.setenv("KEVLIKE_MAX_CONNECTIONS", "lots")
    c = limits("--max-connections", "3")                                   # an overridden variable is not read
    assert c.max_connections == 3
    with pytest.raises(ValueError) as e:
        limits()
    assert str(e.value) == "KEVLIKE_MAX_CONNECTIONS must be an integer >= 1, got 'lots'"
    monkeypatch.delenv("KEVLIKE_MAX_CONNECTIONS")
    for flag, value, message in (("--header-timeout", "nan", "a finite number of seconds > 0"),
                                 ("--header-timeout", "inf", "a finite number of seconds > 0"),
                                 ("--body-timeout", "0", "a finite number of seconds > 0"),
                                 ("--body-timeout", "-1", "a finite number of seconds > 0"),
                                 ("--max-connections", "0", "an integer >= 1"),
                                 ("--max-connections", "2.5", "an integer >= 1"),
                                 ("--max-connections", "lots", "an integer >= 1")):
        with pytest.raises(ValueError) as e:
            limits(flag, value)
        assert str(e.value) == f"{flag} must be {message}, got {value!r}"
    assert client_limits_from_env({"KEVLIKE_BODY_TIMEOUT_S": "0.5"}) == {"body_timeout_s": 0.5}
    for field, value in (("header_timeout_s", float("nan")), ("body_timeout_s", 0), ("max_connections", True),
                         ("max_connections", 0)):                            # the config itself refuses them too
        with pytest.raises(ValueError, match=f"^{field} must be "):
            ServerConfig(**{field: value})
        with pytest.raises(ValueError, match=f"^{field} must be "):
            client_protocol(**{field: value})
    # through `kevlike serve`: one line naming the flag or the variable, exit 2, before any model loads
    for argv, env, line in ((["--max-connections", "0"], {}, "--max-connections must be an integer >= 1, got '0'"),
                            ([], {"KEVLIKE_BODY_TIMEOUT_S": "nan"},
                             "KEVLIKE_BODY_TIMEOUT_S must be a finite number of seconds > 0, got 'nan'")):
        p = subprocess.run([sys.executable, "-m", "kevlike", "serve", "--model", "no-such-model", "--port", "0", *argv],
                           capture_output=True, timeout=120, env={**os.environ, **env})
        err = p.stderr.decode()
        assert p.returncode == 2 and err == f"kevlike: error: {line}\n", err
