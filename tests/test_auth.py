"""Authentication fails closed (issue 32): a keys file or KEVLIKE_API_KEYS that yields no key refuses to start
(exit 2, one line) instead of serving without authentication; the server logs whether auth is on and with how
many keys."""

import pytest

from kevlike.config.server import api_keys_from_env


def test_keys_from_the_variable_and_the_file(tmp_path, monkeypatch):
    monkeypatch.delenv("KEVLIKE_API_KEYS", raising=False)
    assert api_keys_from_env(None) == frozenset()                       # neither given: auth off, on purpose
    keys = tmp_path / "keys"
    keys.write_text("# team keys\n\nsecret-2\n   # an indented comment is no key\n  secret-3  \n")
    assert api_keys_from_env(str(keys)) == {"secret-2", "secret-3"}
    monkeypatch.setenv("KEVLIKE_API_KEYS", " secret-1 ,, secret-2 ")
    assert api_keys_from_env(str(keys)) == {"secret-1", "secret-2", "secret-3"}


@pytest.mark.parametrize("content", ["", "\n\n", "# only a comment\n", "  # indented\n   \n"])
def test_a_keys_file_without_a_key_is_refused(tmp_path, monkeypatch, content):
    monkeypatch.delenv("KEVLIKE_API_KEYS", raising=False)
    keys = tmp_path / "keys"
    keys.write_text(content)
    with pytest.raises(ValueError, match=rf"^--api-keys-file {keys}: no key in it \(only blank lines and comments\); "
                                         r"refusing to start with authentication off$"):
        api_keys_from_env(str(keys))


@pytest.mark.parametrize("value", ["", " ", ",", " , ,"])
def test_a_variable_without_a_key_is_refused(monkeypatch, value):
    monkeypatch.setenv("KEVLIKE_API_KEYS", value)
    with pytest.raises(ValueError, match=r"^KEVLIKE_API_KEYS is set but holds no key .*unset it to serve without keys\)$"):
        api_keys_from_env(None)


def _serve(*args, env=None):
    """``kevlike serve ARGS`` in a subprocess that must end within 120 s (before the fix it served on)."""
    import os
    import subprocess
    import sys

    environ = {k: v for k, v in os.environ.items() if k != "KEVLIKE_API_KEYS"}
    return subprocess.run([sys.executable, "-m", "kevlike", "serve", "--port", "0", *args], env={**environ, **(env or {})},
                          capture_output=True, text=True, timeout=120)


def test_serve_refuses_to_start_with_exit_2_and_one_line(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# TODO: mount the secret here\n")
    # before: the server started with authentication off, and said nothing about it
    r = _serve("--api-keys-file", str(keys))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"kevlike: error: --api-keys-file {keys}: no key in it (only blank lines and comments); "
                        f"refusing to start with authentication off\n")
    r = _serve(env={"KEVLIKE_API_KEYS": " , "})
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("kevlike: error: KEVLIKE_API_KEYS is set but holds no key")
    r = _serve("--api-keys-file", str(tmp_path / "missing"))
    assert (r.returncode, r.stderr) == (2, f"kevlike: error: --api-keys-file {tmp_path / 'missing'}: cannot be read "
                                           f"(No such file or directory)\n")


@pytest.mark.parametrize("make", ["dir", "latin1"])
def test_an_unreadable_keys_file_is_named_with_its_flag(tmp_path, monkeypatch, make):
    monkeypatch.delenv("KEVLIKE_API_KEYS", raising=False)
    keys = tmp_path / "keys"
    keys.mkdir() if make == "dir" else keys.write_bytes(b"caf\xe9-secret\n")
    with pytest.raises(ValueError, match=rf"^--api-keys-file {keys}: cannot be read \(.+\)$"):
        api_keys_from_env(str(keys))


def test_the_start_log_says_whether_auth_is_on_and_with_how_many_keys(tmp_path):
    from tiny import save_tiny_model
    from test_server import Server

    model_dir = save_tiny_model(tmp_path / "llama")
    keys = tmp_path / "keys"
    keys.write_text("secret-2\nsecret-3\n")
    s = Server(model_dir, "--api-keys-file", str(keys), "--log-level", "info", env={"KEVLIKE_API_KEYS": "secret-1"})
    try:
        assert s.request("GET", "/v1/models")[0] == 401
        assert s.request("GET", "/v1/models", headers={"Authorization": "Bearer secret-3"})[0] == 200
    finally:
        s.stop()
    log = s.proc.stdout.read().decode()
    assert "authentication: on, 3 bearer keys (/health stays open)" in log
    assert "secret-" not in log                                          # the keys themselves are never logged
