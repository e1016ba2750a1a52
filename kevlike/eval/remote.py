"""Evaluate any Jev-compatible server (``kevlike eval --url BASE_URL``): ours, Jev itself, or a peer.

:class:`RemoteEngine` offers the part of :class:`kevlike.Engine` that the eval suite and the probes
use — ``encode``, ``question_logits``, ``probabilities`` — by sending each request to
``POST {BASE_URL}/v1/systemone`` and reading the answers back. A server returns calibrated
probabilities, not logits, so the "logits" here are ``log p`` (the probabilities are then
``softmax(log p) = p``, whatever temperatures the server applied); calibrating or re-scoring such a
run is meaningless and :func:`kevlike.eval.heldout.run_suite` records it as ``served``. Where a server sends
``x_abstain`` (a kevlike model with the capability), its logit ``log x − log(1 − x)`` is kept in the same way, so
the run's abstention figures (AUROC, ECE, risk–coverage) are those of the served, already scaled, ``x_abstain``.

Only the standard library is used (``urllib``); requests go out ``concurrency`` at a time.
"""

from __future__ import annotations

import json
import math
import os
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import torch

from kevlike.request.schema import Request


class RemoteError(RuntimeError):
    """The server could not be reached, or answered with an error status (message says which)."""


class _Served:
    def __init__(self, url: str):
        self.source = f"served by {url} (the server's own calibration)"


def wire_request(req: Request, model: str | None = None) -> dict:
    """A validated :class:`Request` back in Jev's wire form (criteria in option order)."""
    questions = {}
    for q in req.questions:
        if q.type == "score":
            criteria = [o.description for o in q.options]
        else:
            criteria = {o.key: o.description for o in q.options}
        questions[q.id] = {"type": q.type, "instructions": q.instructions, "criteria": criteria}
    body = {"state": req.state, "questions": questions}
    if model:
        body["model"] = model
    return body


def answer_log_probs(req: Request, response: dict) -> list[torch.Tensor]:
    """Per question, ``log p`` ``[K]`` float32 in option order, from a Jev response.

    Raises:
        RemoteError: an answer is missing or lacks the expected fields.
    """
    out = []
    for q in req.questions:
        a = response.get("answers", {}).get(q.id)
        try:
            if q.type == "noul":
                p_true = float(a["noul"])
                probs = [p_true if o.key == "true" else 1.0 - p_true for o in q.options]
            else:
                probs = [float(a["probabilities"][o.key]) for o in q.options]
        except (TypeError, KeyError, ValueError) as e:
            raise RemoteError(f"answer for question {q.id!r} is missing or malformed ({e!r})") from None
        out.append(torch.tensor([math.log(max(p, 1e-12)) for p in probs], dtype=torch.float32))
    return out


def answer_abstain_logits(req: Request, response: dict) -> list[float] | None:
    """Per question, ``log x − log(1 − x)`` of the served ``x_abstain`` (clipped to ``[1e-12, 1 − 1e-12]``), or None
    when any answer of the response lacks it (a server or model without the capability).

    Raises:
        RemoteError: an ``x_abstain`` that is not a number in ``[0, 1]``.
    """
    out = []
    for q in req.questions:
        a = response.get("answers", {}).get(q.id)
        if not isinstance(a, dict) or "x_abstain" not in a:
            return None
        try:
            x = float(a["x_abstain"])
        except (TypeError, ValueError):
            x = math.nan
        if not 0.0 <= x <= 1.0:
            raise RemoteError(f"answer for question {q.id!r}: x_abstain {a['x_abstain']!r} is not a probability")
        x = min(max(x, 1e-12), 1.0 - 1e-12)
        out.append(math.log(x) - math.log1p(-x))
    return out


class RemoteEngine:
    """A Jev-compatible server as an engine for the eval suite.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000`` (``/v1/systemone`` is appended).
        model: the ``model`` field sent with each request (None: the server's default).
        api_key: bearer key (default: the ``KEVLIKE_API_KEY`` environment variable, if set).
        timeout: seconds per request.
        concurrency: requests in flight at once.
    """

    readout = SimpleNamespace(name="served")
    device = "remote"
    abstain = True   # asked of every response: x_abstain is read where the server sends it (question_outputs)

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None,
                 timeout: float = 300.0, concurrency: int = 4):
        self.url = base_url.rstrip("/") + "/v1/systemone"
        self.model = model
        self.name = model or base_url
        self.api_key = api_key if api_key is not None else os.environ.get("KEVLIKE_API_KEY")
        self.timeout = timeout
        self.concurrency = max(1, concurrency)
        self.temperatures = _Served(base_url)

    def encode(self, req: Request) -> Request:
        return req

    def _post(self, req: Request) -> tuple[list[torch.Tensor], list[float] | None]:
        data = json.dumps(wire_request(req, self.model)).encode()
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        try:
            with urllib.request.urlopen(urllib.request.Request(self.url, data, headers), timeout=self.timeout) as r:
                response = json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise RemoteError(f"{self.url} answered HTTP {e.code}: {e.read()[:300].decode(errors='replace')}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            raise RemoteError(f"cannot reach {self.url}: {getattr(e, 'reason', e)}") from None
        if self.name == self.model or self.name.startswith("http"):
            self.name = response.get("model", self.name)
        return answer_log_probs(req, response), answer_abstain_logits(req, response)

    def question_outputs(self, encoded: list[Request]) -> tuple[list[list[torch.Tensor]], list[list[float] | None]]:
        """``(log p, x_abstain logits)`` per request: per question ``log p`` ``[K]``, and the served ``x_abstain``'s
        logits (None for a request whose answers carry no ``x_abstain``); the shape of
        :meth:`kevlike.Engine.question_outputs`.

        Raises:
            RemoteError: unreachable server, an error status, or a malformed answer.
        """
        with ThreadPoolExecutor(self.concurrency) as pool:
            answers = list(pool.map(self._post, encoded))
        return [z for z, _ in answers], [a for _, a in answers]

    def question_logits(self, encoded: list[Request]) -> list[list[torch.Tensor]]:
        """``log p`` per request, per question (see the module docstring).

        Raises:
            RemoteError: unreachable server, an error status, or a malformed answer.
        """
        return self.question_outputs(encoded)[0]

    def abstain_probability(self, logit: float) -> float:
        """``sigmoid(logit)`` in float64, as :meth:`kevlike.model.temperatures.TemperatureTable.abstain_probability`
        computes it: the served ``x_abstain`` back (the server has already scaled it)."""
        return float(torch.sigmoid(torch.tensor(logit, dtype=torch.float64)))

    def probabilities(self, request: Request, logits: list[torch.Tensor]) -> list[torch.Tensor]:
        return [torch.softmax(z, -1) for z in logits]
