"""The server's settings in one frozen dataclass (:class:`ServerConfig`): the one source of their defaults,
checks and help texts (``kevlike serve``'s options are generated from it)."""

from __future__ import annotations

import os
from dataclasses import field

from kevlike.config.engine import EngineOptions
from kevlike.config.fields import from_env
from kevlike.config.rules import Section, integer, number, one_of, setting, settings

LOG_LEVELS = ("debug", "info", "warning", "error")
JEV_ALIASES = ("jev-latest", "jev-preview")
"""Jev's model names, which a server answers with its default model (and records under that model's name)."""

SERVER_ENGINE = EngineOptions(state_cache_mb=256.0)
"""The options a server loads each model with by default: a 256 MiB state cache per model."""

_COUNT = integer(1, says=">= 1")
_SECONDS = number(0, lo_open=True, says="a finite number of seconds > 0")


@settings(terse=True)
class ServerConfig(Section):
    """Server settings (help text, rule and flag of each: its field's, :func:`kevlike.config.rules.setting`).

    Attributes:
        host, port: where to listen (port 0: one the system picks).
        max_batch, max_wait_ms, queue_size, timeout_s, max_batch_tokens: the micro-batcher
            (:class:`kevlike.service.batcher.Batcher`).
        api_keys: bearer keys; empty: authentication off (:func:`api_keys_from_env`).
        record_queue: answered requests that may wait to be written to the outcome store (``record``;
            :class:`~kevlike.service.feedback.Recorder`); when full, decisions get 503 before they are computed.
        header_timeout_s, body_timeout_s, max_connections: :class:`kevlike.service.server.ClientHygiene`;
            ``kevlike serve`` takes them from its flags, else from their environment variables
            (:func:`client_limits_from_env`), else these defaults.
        record, record_state: the outcome store (:mod:`kevlike.service.feedback`) and whether it keeps state texts.
        log_level: of the server and of uvicorn.
        engine: the options every served model is loaded with (its ``limits`` are the server's request limits;
            ``state_cache_mb`` is per model, for models that can use it).

    Raises:
        kevlike.config.rules.SettingError: a refused value (one line naming the field).
    """

    host: str = setting("127.0.0.1", None, "address to listen on (0.0.0.0: all IPv4 interfaces; an address with ':' "
                                           "is IPv6)")
    port: int = setting(8000, integer(0, 65535, says="from 0 to 65535"), "TCP port to listen on (exit code 3 when it "
                        "is taken)")
    max_batch: int = setting(8, _COUNT, "requests per packed forward pass")
    max_wait_ms: float = setting(5.0, number(0, says="a finite number >= 0"), "how long a batch waits for more "
                                 "requests, in ms")
    queue_size: int = setting(64, _COUNT, "waiting requests before answering 429")
    timeout_s: float = setting(60.0, number(0, lo_open=True, says="a finite number > 0"), "per-request timeout in "
                               "seconds (then 503)", flag="--timeout", metavar="S")
    max_batch_tokens: int = setting(32768, _COUNT, "padded tokens per forward pass")
    api_keys: frozenset = field(default_factory=frozenset)
    record_queue: int = setting(1024, _COUNT, None)
    header_timeout_s: float = setting(
        10.0, _SECONDS, "seconds a connection has to send a request's headers, from its start or its next request's "
        "first byte (then 408 and closed; default: $KEVLIKE_HEADER_TIMEOUT_S, else {default})", flag="--header-timeout",
        metavar="S", parse=float, env="KEVLIKE_HEADER_TIMEOUT_S")
    body_timeout_s: float = setting(
        30.0, _SECONDS, "seconds a request's body may take after its headers (then 408 and closed; default: "
        "$KEVLIKE_BODY_TIMEOUT_S, else {default})", flag="--body-timeout", metavar="S", parse=float,
        env="KEVLIKE_BODY_TIMEOUT_S")
    max_connections: int = setting(
        512, integer(1, says="an integer >= 1"), "open connections; the next one is answered 503 (Retry-After: 1) and "
        "closed (default: $KEVLIKE_MAX_CONNECTIONS, else {default})", metavar="N", parse=int,
        env="KEVLIKE_MAX_CONNECTIONS")
    record: str | None = setting(
        None, None, "record every answered request (id, model, time, each question's id, type and probabilities) in "
        "this database and accept outcomes on POST /v1/feedback; a SQLAlchemy URL, e.g. sqlite:///feedback.db "
        "(default: off)", metavar="DB_URL")
    record_state: bool = setting(False, None, "with --record: also store each request's state text (default: not "
                                 "stored)")
    log_level: str = setting("info", one_of(LOG_LEVELS), "log level of the server and of uvicorn (info: one line per "
                             "request)")
    engine: EngineOptions = SERVER_ENGINE


def client_limits_from_env(environ=None) -> dict:
    """The client limits set in the environment (``KEVLIKE_HEADER_TIMEOUT_S``, ``KEVLIKE_BODY_TIMEOUT_S``,
    ``KEVLIKE_MAX_CONNECTIONS``; unset or blank: left out), as :class:`ServerConfig` fields.

    Raises:
        ValueError: a variable that is not a number in range (one line naming it).
    """
    return from_env(ServerConfig, environ)


def api_keys_from_env(path: str | None = None) -> frozenset:
    """Keys from ``KEVLIKE_API_KEYS`` (comma-separated) and/or a file (one key per line; blank lines and lines
    whose first non-blank character is ``#`` are skipped). Empty: neither is given, authentication is off.

    Fails closed: a source that is given but holds no key (an unpopulated secret mount, a variable set to
    ``""`` or ``" , "``) would silently turn authentication off, so it is refused.

    Raises:
        ValueError: ``KEVLIKE_API_KEYS`` is set but holds no key, or the file holds no key or cannot be read
            (missing, a directory, no permission, not UTF-8): one line, naming the variable or the flag and file.
    """
    keys: set[str] = set()
    env = os.environ.get("KEVLIKE_API_KEYS")
    if env is not None:
        keys = {k.strip() for k in env.split(",") if k.strip()}
        if not keys:
            raise ValueError("KEVLIKE_API_KEYS is set but holds no key (comma-separated keys expected); refusing to "
                             "start with authentication off (unset it to serve without keys)")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                from_file = {line.strip() for line in f if line.strip() and not line.strip().startswith("#")}
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise ValueError(f"--api-keys-file {path}: cannot be read ({reason})") from None
        if not from_file:
            raise ValueError(f"--api-keys-file {path}: no key in it (only blank lines and comments); refusing to "
                             f"start with authentication off")
        keys |= from_file
    return frozenset(keys)
