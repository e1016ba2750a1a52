"""The server's knobs in one frozen dataclass: the one source of their defaults (``kevlike serve``'s options
take theirs from it), with no heavy import so that ``kevlike --help`` can show them."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from kevlike.request.limits import DEFAULT_LIMITS, Limits


@dataclass(frozen=True)
class ServerConfig:
    """Server knobs.

    Attributes:
        host: address to listen on (``0.0.0.0``: all IPv4 interfaces; an address with ``:`` is IPv6).
        port: TCP port (0: one the system picks).
        max_batch: requests per packed forward pass.
        max_wait_ms: how long a batch waits for more requests, in milliseconds.
        queue_size: waiting requests before answering 429.
        timeout_s: per-request timeout in seconds (then 503).
        max_batch_tokens: padded tokens per forward pass.
        state_cache_mb: MiB of state keys/values kept per model between requests (0: off;
            :mod:`kevlike.model.state_cache`).
        api_keys: bearer keys; empty: authentication off.
        record_queue: answered requests that may wait to be written to the outcome store (``--record``;
            :class:`~kevlike.service.feedback.Recorder`); when full, decisions get 503 before they are computed.
        limits: request :class:`~kevlike.request.limits.Limits`.
        header_timeout_s: seconds a connection has to deliver a request's headers, from its start or from the
            first byte of its next request (then 408 and closed; ``--header-timeout``).
        body_timeout_s: seconds a request's body may take after its headers (then 408; ``--body-timeout``).
        max_connections: open connections; the next one is answered 503 and closed (``--max-connections``).
            The three: :class:`kevlike.service.server.ClientHygiene`; ``kevlike serve`` takes their defaults from
            :func:`client_limits_from_env`.

    Raises:
        ValueError: a count < 1, a port outside 0–65535, a timeout that is not a finite number > 0, a wait
            or cache size that is not a finite number >= 0 (one line naming the field).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    max_batch: int = 8
    max_wait_ms: float = 5.0
    queue_size: int = 64
    timeout_s: float = 60.0
    max_batch_tokens: int = 32768
    state_cache_mb: float = 256.0
    api_keys: frozenset = field(default_factory=frozenset)
    record_queue: int = 1024
    limits: Limits = DEFAULT_LIMITS
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 512

    def __post_init__(self):
        if self.max_batch < 1 or self.queue_size < 1 or self.max_batch_tokens < 1 or self.record_queue < 1:
            raise ValueError("max_batch, queue_size, max_batch_tokens and record_queue must be >= 1")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be from 0 to 65535, got {self.port}")
        if not (0 < self.timeout_s < math.inf) or not (0 <= self.max_wait_ms < math.inf):
            raise ValueError(f"timeout_s must be a finite number > 0 and max_wait_ms a finite number >= 0, got "
                             f"{self.timeout_s} and {self.max_wait_ms}")
        if not 0 <= self.state_cache_mb < math.inf:
            raise ValueError(f"state_cache_mb must be a finite number >= 0, got {self.state_cache_mb}")
        for name in ("header_timeout_s", "body_timeout_s", "max_connections"):
            if (err := client_limit_error(name, getattr(self, name))) is not None:
                raise ValueError(f"{name} {err}")


CLIENT_LIMITS = {"header_timeout_s": ("--header-timeout", "KEVLIKE_HEADER_TIMEOUT_S", float),
                 "body_timeout_s": ("--body-timeout", "KEVLIKE_BODY_TIMEOUT_S", float),
                 "max_connections": ("--max-connections", "KEVLIKE_MAX_CONNECTIONS", int)}
"""The client limits of :class:`ServerConfig`: field -> (``kevlike serve`` flag, environment variable, type)."""


def client_limit_error(name: str, value) -> str | None:
    """Why ``value`` is no valid client limit ``name`` (a :data:`CLIENT_LIMITS` field): ``"must be ..., got ..."``;
    None when it is valid (a timeout: a finite number of seconds > 0; ``max_connections``: an integer >= 1)."""
    if CLIENT_LIMITS[name][2] is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"must be an integer >= 1, got {value!r}"
    elif isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        return f"must be a finite number of seconds > 0, got {value!r}"
    return None


def parse_client_limit(name: str, text: str, where: str) -> int | float:
    """The client limit ``name`` written as ``text`` (a flag's or an environment variable's value).

    Raises:
        ValueError: not a number of the field's type, or out of range: one line starting with ``where`` (the
            flag or the variable), e.g. ``--max-connections must be an integer >= 1, got '0'``.
    """
    kind = CLIENT_LIMITS[name][2]
    try:
        value = kind(text.strip())
    except ValueError:
        value = None
    if value is None or client_limit_error(name, value) is not None:
        what = "an integer >= 1" if kind is int else "a finite number of seconds > 0"
        raise ValueError(f"{where} must be {what}, got {text!r}")
    return value


def client_limits_from_env(environ=None) -> dict:
    """The client limits set in the environment (``KEVLIKE_HEADER_TIMEOUT_S``, ``KEVLIKE_BODY_TIMEOUT_S``,
    ``KEVLIKE_MAX_CONNECTIONS``; unset or blank: left out), as :class:`ServerConfig` fields: the defaults of
    ``kevlike serve``'s ``--header-timeout``, ``--body-timeout`` and ``--max-connections``.

    Raises:
        ValueError: a variable that is not a number in range (one line naming it).
    """
    environ = os.environ if environ is None else environ
    out = {}
    for name, (_flag, var, _kind) in CLIENT_LIMITS.items():
        if environ.get(var, "").strip():
            out[name] = parse_client_limit(name, environ[var], var)
    return out


def api_keys_from_env(path: str | None = None) -> frozenset:
    """Keys from ``KEVLIKE_API_KEYS`` (comma-separated) and/or a file (one key per line; blank lines and lines
    whose first non-blank character is ``#`` are skipped). Empty: neither is given, authentication is off.

    Fails closed: a source that is given but holds no key (an unpopulated secret mount, a variable set to
    ``""`` or ``" , "``) would silently turn authentication off, so it is refused.

    Raises:
        ValueError: ``KEVLIKE_API_KEYS`` is set but holds no key, or the file holds no key (one line, naming
            the variable or the file).
        OSError: the file cannot be read.
    """
    keys: set[str] = set()
    env = os.environ.get("KEVLIKE_API_KEYS")
    if env is not None:
        keys = {k.strip() for k in env.split(",") if k.strip()}
        if not keys:
            raise ValueError("KEVLIKE_API_KEYS is set but holds no key (comma-separated keys expected); refusing to "
                             "start with authentication off (unset it to serve without keys)")
    if path:
        with open(path, encoding="utf-8") as f:
            from_file = {line.strip() for line in f if line.strip() and not line.strip().startswith("#")}
        if not from_file:
            raise ValueError(f"--api-keys-file {path}: no key in it (only blank lines and comments); refusing to "
                             f"start with authentication off")
        keys |= from_file
    return frozenset(keys)
