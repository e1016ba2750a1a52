"""Jev-compatible HTTP server (DESIGN.md §4) on FastAPI + uvicorn.

    POST /v1/systemone     answer a request (the Jev wire format)
    GET  /v1/models        {"models": [{"name", "description", "release_date", "aliases", "x_capabilities"}]}
    GET  /health           liveness and queue depth (HEAD too, for monitors that probe with HEAD)
    GET  /docs, /openapi.json

Status codes: 200; 401 missing/invalid bearer key (when keys are configured); 404 unknown model;
413 body or token budget exceeded; 422 validation (``{"detail": [{"loc", "msg", "type"}]}``);
429 queue full (``Retry-After``); 503 not answered within the per-request timeout, or (with a store) the
outcome store busy or its write queue full (``Retry-After``).
Everything but 422 uses ``{"detail": {"error_type": ..., "message": ...}}``. Nothing a client sends
yields a 5xx. Every response carries ``x-request-id``; a request with unknown top-level fields
(ignored, as Jev ignores them) gets ``x-kevlike-ignored-fields`` naming them. One log line per request (id, model,
status, tokens, latency); the state text is never logged.

Clients (:class:`ClientHygiene`, uvicorn's h11 protocol with deadlines): a connection must deliver its
request headers within ``header_timeout_s`` of opening (or of the first byte of its next request) and its body
within ``body_timeout_s`` of the headers, else it gets 408 (``error_type`` ``timeout``) and is closed; past
``max_connections`` open connections a new one gets 503 (``Retry-After``) and is closed. A request whose client
disconnects before its answer, or is answered 503 at ``timeout_s``, is dropped: not computed if its forward pass
has not started, its pass abandoned at the next decoder layer if no other request of the batch still waits
(:mod:`kevlike.model.abort`), never recorded (a disconnect is logged with status 499).

Replicas are stateless (the model is read-only, nothing is kept between requests), so scaling
out is running more ``kevlike serve`` processes behind any HTTP load balancer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import signal
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

import h11
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.h11_impl import H11Protocol

from kevlike.config.engine import PROFILE_NAME_RULE
from kevlike.config.server import JEV_ALIASES, ServerConfig
from kevlike.data.labelled import answer_target
from kevlike.model.backbones import MODELS, SetupError
from kevlike.model.engine import Engine
from kevlike.model.modeldir import list_profiles, profile_path, unnamed_profile_files
from kevlike.model.temperatures import ProfileError, calibration_type, read_temperatures
from kevlike.request.render import render_text
from kevlike.request.schema import RequestError, parse_json, parse_request, request_json_schema
from kevlike.service.batcher import Batcher, QueueFullError
from kevlike.service.listen import listen_socket
from kevlike.service.feedback import (CANNOT_TELL_OUTCOME, FeedbackStore, Recorder, RecorderFull, StoreBusy,
                                      UnknownRequest, check_store_url, report, shown_url)

log = logging.getLogger("kevlike.service.server")

FD_RESERVE = 32
"""Open files kept for what is not a client connection: the listening socket, the model's and the store's files
(a SQLite store holds its file, ``-wal`` and ``-shm`` twice), the log, files opened on the way (measured: 15 open at
rest with a store and one model)."""


def fit_connections(wanted: int) -> int:
    """The client-connection limit the process's open-file limit (``ulimit -n``, RLIMIT_NOFILE) allows: a soft limit
    under ``wanted`` + :data:`FD_RESERVE` is first raised towards the hard one; if it stays under, the limit is
    lowered to what fits, with a warning, so that the connection after it gets the documented 503 instead of
    "Too many open files" (500s on requests that open a file, and a flood of accept errors in the log).

    Returns:
        ``wanted``, or the lower limit that fits.

    Raises:
        ValueError: the open-file limit leaves no client connection (``ulimit -n`` ≤ :data:`FD_RESERVE`).
    """
    try:
        import resource
    except ImportError:          # not a POSIX system: no such limit to read
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + FD_RESERVE
    if soft == resource.RLIM_INFINITY or soft >= need:
        return wanted
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft >= need:
        return wanted
    if soft <= FD_RESERVE:
        raise ValueError(f"--max-connections: the open-file limit (ulimit -n {soft}) leaves no room for a client "
                         f"connection (the server keeps {FD_RESERVE} for itself); raise it, e.g. ulimit -n {need}")
    log.warning("the open-file limit (ulimit -n %d, hard limit %s) allows %d client connections, not --max-connections "
                "%d: serving with %d (raise it with ulimit -n %d)", soft,
                "unlimited" if hard == resource.RLIM_INFINITY else hard, soft - FD_RESERVE, wanted,
                soft - FD_RESERVE, need)
    return soft - FD_RESERVE


STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))
"""The signals that stop :func:`serve` gracefully: requests in flight answered, the recorder drained (SIGHUP not
where it is ignored when the server starts, as ``nohup`` does: a closed terminal then leaves it running)."""

MAX_REQUEST_ID = 128
"""The longest ``x-request-id`` a client may send (printable ASCII); a longer, empty or non-ASCII one, or one sent
twice, is a 400."""
REPLICA_GRACE_S = 2.0
"""How long ``POST /v1/feedback`` looks for an unknown request id in the store before its 404: replicas share a
store, and a request answered by another one a moment ago is recorded by that one's write queue (milliseconds when
the store is free)."""


def _clip(text: str, n: int = 80) -> str:
    """``text`` as an error message quotes a client's value: at most ``n`` characters (``…`` marks a cut)."""
    return text if len(text) <= n else text[:n - 1] + "…"


def _error(status: int, error_type: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"detail": {"error_type": error_type, "message": message}}, status_code=status,
                        headers=headers)


def ignored_fields_header(names: tuple[str, ...], limit: int = 1000) -> str:
    """The ``x-kevlike-ignored-fields`` value: each ignored field name as a JSON string (ASCII, escaped, so
    empty, space-edged, non-ASCII and control-character names stay visible and unambiguous), comma
    separated, at most ``limit`` characters, then ``..., (N more)``."""
    parts, used = [], 0
    for i, name in enumerate(names):
        text = json.dumps(name).replace("\x7f", "\\u007f")
        if used + len(text) > limit:
            parts.append(f"... ({len(names) - i} more)")
            break
        parts.append(text)
        used += len(text) + 2
    return ", ".join(parts)


# the defaults (ServerConfig's; `kevlike serve --header-timeout/--body-timeout/--max-connections`)
HEADER_TIMEOUT_S = ServerConfig.header_timeout_s   # a request's headers, from the connection's start (or its next
#                                                    request's first byte)
BODY_TIMEOUT_S = ServerConfig.body_timeout_s       # a request's body, from its headers (8 MiB at >= 280 kB/s)
MAX_CONNECTIONS = ServerConfig.max_connections     # open connections; the next one gets 503 and is closed


class ClientHygiene(H11Protocol):
    """uvicorn's h11 HTTP protocol with receipt deadlines and a bound on open connections (uvicorn bounds
    neither: its keep-alive timeout restarts on every byte, and its ``limit_concurrency`` counts connections only
    once their headers have arrived, so connections that never finish them are not bounded; both measured on
    uvicorn 0.55).

    - Headers: within :attr:`header_timeout_s` of the connection's start, or of the first byte of a later
      request on a kept-alive connection (idle time between requests is uvicorn's keep-alive timeout, 5 s).
      A trickle of bytes does not extend it.
    - Body: within :attr:`body_timeout_s` of the headers.
    - Past either: 408 ``{"detail": {"error_type": "timeout", ...}}`` (unless a response has started; nothing
      on a connection that never sent a byte), then the connection is closed; a request body cut off this way
      reaches the app as a disconnect.
    - More than :attr:`max_connections` open: the new connection is answered 503 (``Retry-After: 1``) at once,
      shut for writing, and closed after at most 1 s (long enough for the client to read the answer).

    Configure with :func:`client_protocol`, which sets the three class attributes.
    """

    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS
    _refused_since_log = 0
    _refusal_logged_at = -math.inf

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._phase: str | None = None
        self._deadline = None
        self._refused = False
        if len(self.connections) > self.max_connections:
            self._refuse()
        else:
            self._arm("headers")

    def data_received(self, data: bytes) -> None:
        if self._refused:   # answered already; the rest is read and dropped until the close
            return
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._follow()

    def connection_lost(self, exc) -> None:
        self._arm(None)
        super().connection_lost(exc)

    def _follow(self) -> None:
        """Arm the deadline of the phase the client is in: its headers (part of a request received, or a fresh
        connection), its body, or none (a whole request received; idle between requests)."""
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            phase = "body"
        elif state is h11.IDLE and (self._phase == "headers" or self.conn.trailing_data[0]):
            phase = "headers"
        else:
            phase = None
        if phase != self._phase:
            self._arm(phase)

    def _arm(self, phase: str | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase
        if phase is not None:
            limit = self.header_timeout_s if phase == "headers" else self.body_timeout_s
            self._deadline = self.loop.call_later(limit, self._expired, phase, limit)

    def _expired(self, phase: str, limit: float) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        silent = phase == "headers" and not self.conn.trailing_data[0]   # nothing sent at all: just closed
        cycle = self.cycle if phase == "body" else None
        if cycle is not None:
            silent = silent or cycle.response_started
            cycle.disconnected = True   # the app reads a disconnect; a late answer of its own goes nowhere
        log.info("closed connection from %s: request %s not received within %g s", _peer(self.client), phase, limit)
        if not silent:
            self._answer(408, "timeout", f"request {phase} not received within {limit:g} s; the connection is closed")
        self.transport.close()
        if cycle is not None:
            cycle.message_event.set()

    def _refuse(self) -> None:
        self._refused = True
        cls = type(self)
        cls._refused_since_log += 1
        now = time.monotonic()
        if now - cls._refusal_logged_at >= 10:   # a flood: one line per 10 s
            log.warning("connection limit: %d open (max_connections %d); refused %d connection(s) with 503 "
                        "since the last such line", len(self.connections) - 1, self.max_connections,
                        cls._refused_since_log)
            cls._refused_since_log, cls._refusal_logged_at = 0, now
        self._answer(503, "unknown", f"the server has {len(self.connections) - 1} open connections (the limit is "
                                     f"{self.max_connections}); retry later", retry_after=1)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._deadline = self.loop.call_later(1.0, self.transport.close)

    def eof_received(self):
        if self._refused:
            self.transport.close()
        return super().eof_received()

    def _answer(self, status: int, kind: str, message: str, retry_after: int | None = None) -> None:
        """Write a complete ``Connection: close`` response directly (no request cycle owns the connection)."""
        body = json.dumps({"detail": {"error_type": kind, "message": message}}).encode()
        head = (f"HTTP/1.1 {status} {'Request Timeout' if status == 408 else 'Service Unavailable'}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n"
                + (f"retry-after: {retry_after}\r\n" if retry_after is not None else "") + "\r\n")
        self.transport.write(head.encode("ascii") + body)


def _peer(client) -> str:
    return f"{client[0]}:{client[1]}" if client else "?"


def client_protocol(header_timeout_s: float = HEADER_TIMEOUT_S, body_timeout_s: float = BODY_TIMEOUT_S,
                    max_connections: int = MAX_CONNECTIONS) -> type:
    """:class:`ClientHygiene` with these limits, for ``uvicorn.Config(http=...)``.

    Raises:
        ValueError: a timeout that is not a finite number of seconds > 0, or ``max_connections`` < 1.
    """
    ServerConfig(header_timeout_s=header_timeout_s, body_timeout_s=body_timeout_s, max_connections=max_connections)
    return type("ClientHygiene", (ClientHygiene,), {"header_timeout_s": float(header_timeout_s),
                                                    "body_timeout_s": float(body_timeout_s),
                                                    "max_connections": max_connections})


class ClientGone(Exception):
    """The client of a request disconnected before its answer (logged as status 499; nothing is sent)."""


async def _until_disconnected(request: Request) -> None:
    """Returns when the client of ``request`` (its body already read) disconnects: the ASGI server's next
    message after the body is ``http.disconnect``. If the server's ``receive`` fails, the client is never
    taken for gone (this waits until cancelled)."""
    try:
        while (await request.receive())["type"] != "http.disconnect":
            await asyncio.sleep(0.05)   # not expected after the body; never a busy loop
    except Exception:
        log.debug("cannot watch the client of request id=%s for a disconnect", request.state.request_id,
                  exc_info=True)
        await asyncio.Event().wait()


def create_app(engines: dict, default: str, config: ServerConfig = ServerConfig(), model_info: dict | None = None,
               store=None, record_state: bool = False):
    """Build the FastAPI app.

    Args:
        engines: served name -> :class:`kevlike.Engine`.
        default: the name answering requests without ``model`` (and the Jev aliases).
        config: :class:`ServerConfig`.
        model_info: name -> {"description", "release_date"} for ``/v1/models``.
        store: a :class:`kevlike.service.feedback.FeedbackStore` to record every answered request in (and to
            serve ``/v1/feedback``); None: recording off, the feedback endpoints answer 404. Records are
            written off the response path by a :class:`~kevlike.service.feedback.Recorder` (``app.state.recorder``,
            ``config.record_queue`` places) that runs between the app's start and stop; a busy store answers
            503 with ``Retry-After``.
        record_state: also record each request's state text (off by default: the store then holds
            question ids, types and probabilities only).

    Raises:
        ValueError: ``default`` is not among ``engines``.
    """
    if default not in engines:
        raise ValueError(f"default model {default!r} is not served ({', '.join(engines)})")
    aliases = {a: default for a in JEV_ALIASES if a not in engines}

    def resolve(name: str) -> str:
        """``name`` with a Jev alias replaced by the model it stands for, also before ``@PROFILE``
        (``jev-latest@support`` → ``kevlike-default@support``)."""
        base, at, profile = name.partition("@")
        return aliases.get(base, base) + at + profile

    batchers: dict[str, Batcher] = {}
    # reports run on their own thread (made at start, shut at stop): a slow report never holds the default
    # executor that tokenizes decisions
    reports: ThreadPoolExecutor | None = None

    @asynccontextmanager
    async def lifespan(app):
        nonlocal reports
        reports = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kevlike-report")
        if store is not None:
            app.state.recorder = Recorder(store, config.record_queue)
        for name, eng in engines.items():
            # engines sharing one model (its calibration profiles, MODEL@PROFILE) share its model thread:
            # one forward pass at a time per model (the state cache relies on it)
            shared = next((b.executor for b in batchers.values() if b.engine.model is eng.model), None)
            batchers[name] = Batcher(eng, config.max_batch, config.max_wait_ms / 1000, config.queue_size,
                                     config.max_batch_tokens, executor=shared)
            batchers[name].start()
        yield
        for b in batchers.values():  # uvicorn has already let in-flight requests finish
            await b.stop()
        reports.shutdown(wait=False, cancel_futures=True)   # a report still queued is dropped; a running one ends
        if app.state.recorder is not None:   # the answered requests still queued: written, for at most 5 s
            await asyncio.get_running_loop().run_in_executor(None, app.state.recorder.close, 5.0)

    app = FastAPI(title="kevlike", version=__import__("kevlike").__version__, lifespan=lifespan,
                  description="Jev-compatible decision engine: typed questions about a text, answered with "
                              "probabilities in one packed forward pass.")
    app.state.recorder = None

    def busy(message: str) -> JSONResponse:
        return _error(503, "unknown", f"{message}; retry later", {"Retry-After": "2"})

    @app.exception_handler(StoreBusy)
    async def store_busy(request: Request, exc: StoreBusy):  # a lock another process holds: transient
        if not exc.transient:   # a removed or damaged store: a retry cannot help until an operator acts
            log.error("request id=%s: %s", getattr(request.state, "request_id", "-"), exc)
            return _error(503, "unknown", str(exc))
        log.warning("request id=%s: %s", getattr(request.state, "request_id", "-"), exc)
        return busy(str(exc))

    @app.middleware("http")
    async def request_id_auth_and_log(request: Request, call_next):
        sent = request.headers.getlist("x-request-id")
        rid = sent[0] if sent else ""
        if len(sent) > 1 or (sent and not (0 < len(rid) <= MAX_REQUEST_ID and rid.isascii() and rid.isprintable())):
            # never replaced silently: a client that keys its feedback on its own id would lose it
            if len(sent) > 1:
                why = f"was sent {len(sent)} times"
            else:   # headers arrive as latin-1: show a client's UTF-8 as it wrote it
                why = f"is {len(rid)} bytes: {_clip(rid.encode('latin-1', 'replace').decode('utf-8', 'replace'), 40)!r}"
            response = _error(400, "invalid_request_id", f"header x-request-id must be sent once, 1-{MAX_REQUEST_ID} "
                                                         f"printable ASCII characters; it {why}")
            response.headers["x-request-id"] = uuid.uuid4().hex   # every response carries one
            log.info("request id=%s %s %s status=400 (invalid x-request-id)", response.headers["x-request-id"],
                     request.method, request.url.path)
            return response
        rid = rid or uuid.uuid4().hex
        request.state.request_id = rid
        request.state.tokens = 0
        request.state.model = "-"
        t0 = time.perf_counter()
        if config.api_keys and request.url.path.startswith("/v1/"):
            auth = request.headers.get("authorization", "")
            key = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            if key not in config.api_keys:
                response = _error(401, "authentication_error", "missing or invalid API key "
                                  "(send 'Authorization: Bearer KEY')", {"WWW-Authenticate": "Bearer"})
            else:
                response = await call_next(request)
        else:
            response = await call_next(request)
        response.headers["x-request-id"] = rid
        log.info("request id=%s %s %s model=%s status=%d tokens=%d latency_ms=%.1f", rid, request.method,
                 request.url.path, request.state.model, response.status_code, request.state.tokens,
                 1000 * (time.perf_counter() - t0))
        return response

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):  # unknown path, wrong method
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "unknown")
        return _error(exc.status_code, kind, f"{exc.detail}: {request.method} {request.url.path}"[:300],
                      dict(exc.headers or {}))

    @app.exception_handler(ClientDisconnect)
    async def client_disconnected(request: Request, exc: ClientDisconnect):  # the body was cut off: nobody to answer
        return gone()

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):  # a server bug, never a client error
        log.exception("internal error id=%s", getattr(request.state, "request_id", "-"))
        return _error(500, "unknown", f"internal error ({type(exc).__name__}); request id "
                                      f"{getattr(request.state, 'request_id', '-')}")

    # the body is parsed by kevlike.request.schema (pre-pass + pydantic models), not by FastAPI; its JSON Schema,
    # generated from those models with this server's limits, goes into the OpenAPI document's components
    body_schema = request_json_schema(config.engine.limits, ref_template="#/components/schemas/{model}")
    components = {**body_schema.pop("$defs"), "RequestBody": body_schema}
    fastapi_openapi = app.openapi

    def openapi() -> dict:
        doc = fastapi_openapi()
        doc.setdefault("components", {}).setdefault("schemas", {}).update(components)
        return doc
    app.openapi = openapi

    async def read_body(request: Request) -> bytes | JSONResponse:
        """The request body, read chunk by chunk up to ``max_body_bytes`` (a declared or streamed larger one is a
        413 as soon as it is known, never read into memory whole)."""
        limit = config.engine.limits.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return _error(413, "tokens_exceeded", f"body is {declared} bytes; the limit is {limit}")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return _error(413, "tokens_exceeded", f"body exceeds the limit of {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    @app.post("/v1/systemone", openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/RequestBody"}}}}})
    async def systemone(request: Request):
        """Answer typed questions about a state (Jev's System One endpoint)."""
        body = await read_body(request)
        if isinstance(body, JSONResponse):
            return body
        try:
            req = parse_request(body, config.engine.limits)
        except RequestError as e:
            return _request_error(e)
        name = resolve(req.model or default)
        if name not in engines:
            return _error(404, "unknown", f"unknown model {req.model!r}; served: "
                                          f"{', '.join([*engines, *aliases])}")
        request.state.model = name
        engine = engines[name]
        loop = asyncio.get_running_loop()
        try:
            prepared = await loop.run_in_executor(None, engine.prepare, req)  # tokenization off the event loop
        except RequestError as e:
            return _request_error(e)
        request.state.tokens = prepared.n_tokens
        recorder = app.state.recorder
        state_text = render_text(req.state) if recorder is not None and record_state else None
        if recorder is not None and (refused := store.refusal([q.id for q in req.questions], state_text)):
            return JSONResponse({"detail": refused}, status_code=422)     # what the store could not record
        if recorder is not None:   # a place in the write queue before the forward pass: an answer is always recorded
            try:
                recorder.reserve()
            except RecorderFull as e:
                return busy(f"not computed: {e}")
        reserved = recorder is not None
        try:
            try:
                fut = batchers[name].submit(prepared)
            except QueueFullError as e:
                return _error(429, "unknown", f"server busy: {e}; retry later", {"Retry-After": "1"})
            try:
                response = await answer_unless_gone(request, fut)
            except asyncio.TimeoutError:
                return _error(503, "timeout", f"not answered within {config.timeout_s:g} s", {"Retry-After": "5"})
            except ClientGone:
                return gone()
            if recorder is not None:
                recorder.submit(request.state.request_id, name, _answers(engine, req, response), state_text)
                reserved = False
        finally:
            if reserved:
                recorder.release()
        headers = {}
        if req.ignored_fields:
            headers["x-kevlike-ignored-fields"] = ignored_fields_header(req.ignored_fields)
            log.info("request id=%s ignored unknown top-level fields: %s", request.state.request_id,
                     headers["x-kevlike-ignored-fields"])
        return JSONResponse(response, headers=headers)

    def _answers(engine, req, response: dict) -> list[dict]:
        """The rows :meth:`FeedbackStore.record` keeps for one answered request."""
        mode = engine.temperature_mode
        pre_readout = getattr(response, "pre_readout", {})   # kevlike.model.engine.Decision
        answers = []
        for q in req.questions:
            a = response["answers"][q.id]
            probs = [a["noul"], 1 - a["noul"]] if q.type == "noul" else [a["probabilities"][o.key] for o in q.options]
            answers.append({"question_id": q.id, "type": calibration_type(q.type, mode), "probabilities": probs,
                            "temperature": engine.temperatures.lookup(q.type, len(q.options), mode),
                            "option_keys": [o.key for o in q.options], "x_abstain": a.get("x_abstain"),
                            **({"score_readout": "normal"}
                               if engine.temperatures.reads_normal(q.type, len(q.options)) else {}),
                            **({"softmax": pre_readout[q.id]} if q.id in pre_readout else {}),
                            **({"abstain_scaling": list(engine.temperatures.abstain_scaling)}
                               if "x_abstain" in a else {})})
        return answers

    @app.post("/v1/feedback")
    async def feedback(request: Request):
        """Observed outcomes of a recorded request: ``{"request_id": ID, "outcomes": {question id: answer}}``
        (answers as in labelled files: true/false, an option key, a level index, or a distribution).
        200 ``{"request_id", "stored"}``; 404 unknown request id (after :data:`REPLICA_GRACE_S`; or recording off); 422 unknown question
        id or wrong answer type (with ``loc``); 503 with ``Retry-After`` while the store is locked (or the
        request's own record is still waiting to be written). Posting the same outcome again replaces it."""

        if store is None:
            return _error(404, "not_found", "feedback recording is off (start the server with --record DB_URL)")
        body = await read_body(request)
        if isinstance(body, JSONResponse):
            return body
        try:   # the request's structural rules: duplicate keys, depth, lone surrogates, huge numbers
            obj = parse_json(body, config.engine.limits)
        except RequestError as e:
            return _request_error(e)
        errors = []
        if not isinstance(obj, dict):
            errors.append({"loc": ["body"], "type": "object_type", "msg": "body must be an object"})
        else:
            for k in sorted(set(obj) - {"request_id", "outcomes"}):
                errors.append({"loc": ["body", k], "type": "extra_forbidden", "msg": "unknown field (known: "
                                                                                  "request_id, outcomes)"})
            rid = obj.get("request_id")
            if not (isinstance(rid, str) and 0 < len(rid) <= MAX_REQUEST_ID and rid.isascii() and rid.isprintable()):
                errors.append({"loc": ["body", "request_id"], "type": "string_type",
                               "msg": f"request_id must be the x-request-id of an answered request "
                                      f"(1-{MAX_REQUEST_ID} printable ASCII characters)"})
            outcomes = obj.get("outcomes")
            if not isinstance(outcomes, dict) or not outcomes:
                errors.append({"loc": ["body", "outcomes"], "type": "dict_type",
                               "msg": "outcomes must be a non-empty object {question id: answer}"})
            elif len(outcomes) > config.engine.limits.max_questions:
                errors.append({"loc": ["body", "outcomes"], "type": "too_long",
                               "msg": f"{len(outcomes)} outcomes; a request has at most {config.engine.limits.max_questions} "
                                      f"questions"})
        if errors:
            return JSONResponse({"detail": errors}, status_code=422)
        loop = asyncio.get_running_loop()
        recorder = app.state.recorder
        await loop.run_in_executor(None, store.check_file)   # a removed file: StoreLost (503), not "busy"
        if recorder is not None and recorder.pending(rid):   # answered a moment ago: its record is on its way
            deadline = time.monotonic() + store.busy_timeout_s
            while recorder.pending(rid) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if recorder.pending(rid):
                return busy(f"request {rid!r} is answered but not yet recorded "      # why: the recorder's last error
                            f"({recorder.last_error or 'the outcome store is busy'})")
        deadline = time.monotonic() + REPLICA_GRACE_S
        while True:   # another replica on this store may have answered it a moment ago, its record on its way
            try:
                questions = await loop.run_in_executor(None, store.questions, rid)
                break
            except UnknownRequest:
                if time.monotonic() >= deadline:
                    return _error(404, "not_found", f"no recorded request with id {rid!r} (waited "
                                                    f"{REPLICA_GRACE_S:g} s for a record on its way)")
                await asyncio.sleep(0.1)
        targets = {}
        for qid, ans in outcomes.items():
            if qid not in questions:
                errors.append({"loc": ["body", "outcomes", _clip(qid)], "type": "unknown_question",
                               "msg": f"request {rid!r} has no question {_clip(qid)!r}"})
                continue
            if ans == CANNOT_TELL_OUTCOME and isinstance(ans.get("cannot_tell"), bool):
                targets[qid] = CANNOT_TELL_OUTCOME           # the state did not determine it (x_abstain's gold)
                continue
            try:
                targets[qid] = answer_target(questions[qid], ans)
            except ValueError as e:
                errors.append({"loc": ["body", "outcomes", _clip(qid)], "type": "invalid_answer", "msg": str(e)[:300]})
        if errors:
            return JSONResponse({"detail": errors[:50]}, status_code=422)
        try:
            n = await loop.run_in_executor(None, store.add_outcomes, rid, targets)
        except UnknownRequest:  # recorded again meanwhile under the same id and gone: the client's race
            return _error(404, "not_found", f"no recorded request with id {rid!r}")
        return {"request_id": rid, "stored": n}

    @app.get("/v1/feedback/report")
    async def feedback_report(request: Request, model: str | None = None):
        """Per type: outcomes counted, accuracy, ECE and confident errors of the recorded answers (of
        exactly ``model`` and its profiles ``model@NAME``, case-exact, after alias resolution; default all
        models). 422 for an empty or repeated ``model``; 404 for a model that is neither served nor has recorded
        outcomes; 503 with ``Retry-After`` while the store is locked, without it once its file is gone."""
        if store is None:
            return _error(404, "not_found", "feedback recording is off (start the server with --record DB_URL)")
        n_sent = len(request.query_params.getlist("model"))
        if n_sent > 1 or (model is not None and not model.strip()):
            why = f"was given {n_sent} times: give it once" if n_sent > 1 else "is empty: name a model (GET /v1/models)"
            return JSONResponse({"detail": [{"loc": ["query", "model"], "type": "value_error",
                                             "msg": f"model {why}, or leave it out for all models"}]}, status_code=422)
        if model is not None:
            model = resolve(model)         # jev-latest is recorded as the model it resolves to
        out = await asyncio.get_running_loop().run_in_executor(reports, report, store, model)
        if model is not None and model not in engines and not out["overall"]["outcomes"]:
            # a model served before a restart still has its report; a mistyped one gets an answer, not zeros
            return _error(404, "not_found", f"model {_clip(model)!r} is not served here and has no recorded "
                                            f"outcomes (served: {', '.join(engines)})"[:300])
        return out

    async def answer_unless_gone(request: Request, fut: asyncio.Future) -> dict:
        """The response ``fut`` resolves to, unless the client disconnects first: then ``fut`` is cancelled (its
        batcher drops it before its forward pass) and nothing is recorded.

        Raises:
            asyncio.TimeoutError: not answered within ``config.timeout_s`` (``fut`` cancelled).
            ClientGone: the client disconnected before the answer (or while its batch ran).
        """
        watch = asyncio.ensure_future(_until_disconnected(request))
        try:
            done, _ = await asyncio.wait({fut, watch}, timeout=config.timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
        if watch in done:
            fut.cancel()
            raise ClientGone
        if fut not in done:
            fut.cancel()
            raise asyncio.TimeoutError
        return fut.result()

    def gone() -> JSONResponse:
        return _error(499, "client_closed_request", "the client disconnected before its answer")

    def _request_error(e: RequestError):
        if e.status == 422:
            return JSONResponse({"detail": e.errors}, status_code=422)
        return _error(e.status, "tokens_exceeded", e.one_line())

    @app.get("/v1/models")
    async def models():
        """Served models and the aliases that resolve to them."""
        info = model_info or {}
        return {"models": [{"name": n, "description": info.get(n, {}).get("description", ""),
                            "release_date": info.get(n, {}).get("release_date", ""),
                            "aliases": [a for a, t in aliases.items() if t == n],
                            # kevlike extension: what the answers carry beyond Jev's fields
                            "x_capabilities": ["x_abstain"] if getattr(e, "abstain", False) else []}
                           for n, e in engines.items()]}

    @app.get("/health")
    async def health():
        """Liveness; per model the requests waiting, forward passes run, requests answered, requests dropped
        because their client had gone or their time was up (before or during their forward pass), and passes
        abandoned midway because none of their requests was still waited for; with ``--record``, the outcome store's state
        (``x_store``: ``ok`` or ``failing`` with its last error, records waiting, written and lost), and
        ``status`` ``degraded`` while it fails (answers still flow; records wait in memory)."""
        out = {"status": "ok", "models": {n: {"waiting": b.waiting, "batches": b.batches, "answered": b.batched,
                                              "dropped": b.dropped, "aborted": b.aborted}
                           for n, b in batchers.items()}}
        recorder = app.state.recorder
        if recorder is not None:
            failing = recorder.last_error is not None
            out["x_store"] = {"status": "failing" if failing else "ok", "waiting": recorder.pending(),
                              "written": recorder.written, "lost": recorder.failed,
                              **({"error": recorder.last_error[:300]} if failing else {})}
            if failing:
                out["status"] = "degraded"
        return out

    # HEAD for monitors that probe with it: the same handlers, left out of the OpenAPI document (one
    # operation id per path and method there)
    app.add_api_route("/health", health, methods=["HEAD"], include_in_schema=False)
    app.add_api_route("/v1/models", models, methods=["HEAD"], include_in_schema=False)
    return app


def serve(models: list[str], config: ServerConfig = ServerConfig(), *, sock: socket.socket | None = None) -> None:
    """Listen on ``config.host:config.port`` (or on ``sock``, already listening), load the models, and answer
    requests until SIGTERM, SIGINT or SIGHUP (unless ignored, as under ``nohup``); then the requests in flight are
    answered (at most ``config.timeout_s + 5`` s) and the call returns normally, so the process can exit 0.

    Each model is loaded with ``config.engine`` (:meth:`kevlike.model.engine.Engine.from_pretrained`; its
    ``state_cache_mb`` is per model, and models that cannot keep a state cache are served without one). Every
    calibration profile of a served model is checked before it is served
    (:func:`kevlike.model.temperatures.read_temperatures`); one bad profile file refuses the start.
    ``config.record``: a SQLAlchemy URL to record answered requests in and to take outcome feedback for
    (:mod:`kevlike.service.feedback`); ``config.record_state`` also keeps the state texts.
    ``config.header_timeout_s``, ``config.body_timeout_s``, ``config.max_connections``: see :class:`ClientHygiene`.

    The socket is bound and listening before any model loads (:func:`listen_socket`): a busy port
    fails at once, not after the load, and no other process can take the port in between.

    Raises:
        kevlike.service.listen.ListenError: cannot listen on ``host:port`` (nothing is loaded then).
        ValueError: an option a model refuses (an option mode it was not trained for, an unknown profile, ...), or
            an outcome store that cannot work (``--record``: :func:`kevlike.service.feedback.check_store_url`).
        kevlike.model.backbones.ModelNotFoundError: a model cannot be found.
        kevlike.model.backbones.SetupError: a model cannot be set up, or the server's startup failed
            (details in the log).
    """

    if config.record_state and config.record is None:
        raise ValueError("--record-state keeps the state texts in the outcome store: give --record DB_URL too")
    if config.record is not None:
        try:                      # before any model loads: a store that cannot work fails in a second
            check_store_url(config.record, must_write=True)
        except ValueError as e:
            raise ValueError(f"--record: {e}") from None
    max_connections = fit_connections(config.max_connections)
    protocol = client_protocol(config.header_timeout_s, config.body_timeout_s, max_connections)
    host = config.host
    sock = sock or listen_socket(host, config.port)
    port = sock.getsockname()[1]  # the port given, or the one the system chose for port 0
    try:
        engines = {}
        info = {}
        for m in models:
            # m None: the default model. Before it loads: a directory named m@v2 would shadow profile v2 of m, and m's
            # reports
            if m is not None and "@" in str(m):
                raise ValueError(f"--model {m}: a served model's name cannot hold '@', which separates a model from "
                                 f"its calibration profile (MODEL@PROFILE) in requests, reports and `kevlike "
                                 f"recalibrate`: rename the directory (its profiles are served as MODEL@PROFILE)")
            eng = Engine.from_pretrained(m, config.engine)
            engines[eng.name] = eng
            entry = MODELS.get(eng.name)
            info[eng.name] = {"description": entry.description if entry else f"{eng.readout.name} readout on {m}",
                              "release_date": entry.release_date if entry else ""}
            if eng.artifact_dir is not None:   # calibration profiles: the same model as MODEL@PROFILE

                for f in unnamed_profile_files(eng.artifact_dir, eng.name):
                    log.warning("model %s: %s is not served: %r is not a profile name (%s); rename it", eng.name,
                                f, f.stem, PROFILE_NAME_RULE)
                for prof in list_profiles(eng.artifact_dir, eng.name):
                    try:          # a bad profile file stops the start, naming the file and the field
                        read_temperatures(profile_path(eng.artifact_dir, eng.name, prof))
                    except ProfileError as e:
                        raise ProfileError(f"calibration profile {prof!r} of model {eng.name} refused (fix or remove "
                                           f"the file): {e}") from None
                    pe = eng.with_profile(prof)
                    engines[pe.name] = pe
                    info[pe.name] = {"description": f"{info[eng.name]['description']}; temperatures of calibration "
                                                    f"profile {prof!r} ({pe.temperatures.source})",
                                     "release_date": info[eng.name]["release_date"]}
        logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        store = None
        if config.record is not None:
            try:
                store = FeedbackStore(config.record)
            except StoreBusy as e:
                raise SetupError(f"--record {shown_url(config.record)}: {e}") from None
            except ValueError as e:   # not a database of this kind, a driver missing
                raise ValueError(f"--record: {e}") from None
        app = create_app(engines, next(iter(engines)), config, info, store=store, record_state=config.record_state)
        server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=config.log_level, access_log=False,
                                               timeout_graceful_shutdown=int(config.timeout_s) + 5, http=protocol))

        # uvicorn handles SIGINT/SIGTERM while it runs, then restores the handlers it found and
        # raises the signal again; with the default handlers that kills the process (exit 143)
        # after a clean shutdown. This handler takes the re-raised signal instead; a signal that
        # comes just before uvicorn installs its own handlers stops the server as soon as it starts.
        # SIGHUP (a closed terminal or ssh session, many service managers' "reload") stops the server the same
        # way: by default it killed the process at once, dropping requests in flight and records not yet written.
        def _stop(signum, frame):
            if signum == getattr(signal, "SIGHUP", None):
                log.warning("SIGHUP: stopping as for SIGTERM (requests in flight are answered, records written)")
            server.should_exit = True

        previous = {}
        if threading.current_thread() is threading.main_thread():
            previous = {sig: signal.signal(sig, _stop) for sig in STOP_SIGNALS   # under nohup SIGHUP stays ignored
                        if sig != getattr(signal, "SIGHUP", None) or signal.getsignal(sig) is not signal.SIG_IGN}
        try:
            log.info("serving %s on http://%s:%d", ", ".join(engines), f"[{host}]" if ":" in host else host, port)
            first = next(iter(engines.values()))
            first.thread_policy.apply(force=True)
            log.info("CPU threads: %s", first.thread_policy.describe())
            for name, eng in engines.items():      # what produces each model's answers (precision, options, profile)
                log.info("model %s: %s", name, eng.describe())
            if config.api_keys:
                log.info("authentication: on, %d bearer key%s (/health stays open)", len(config.api_keys),
                         "" if len(config.api_keys) == 1 else "s")
            else:
                log.warning("authentication: off (no --api-keys-file, no KEVLIKE_API_KEYS): every endpoint answers "
                            "without a key")
            log.info("clients: headers within %g s, bodies within %g s of them, at most %d open connections",
                     config.header_timeout_s, config.body_timeout_s, max_connections)
            for eng in engines.values():
                log.info("model %s: %s (%s); state cache %s", eng.name, eng.dtype, eng.dtype_reason,
                         f"{eng.state_cache.max_bytes / 2 ** 20:g} MiB" if eng.state_cache is not None else "off")
            server.run(sockets=[sock])
        except SystemExit as e:  # uvicorn exits the process when its startup fails
            raise SetupError(f"the HTTP server did not start (uvicorn exit status {e.code}; see the log)") from None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if store is not None:     # its last connections: SQLite checkpoints the -wal into the file
                store.close()
    finally:
        sock.close()

