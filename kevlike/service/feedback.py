"""Outcome feedback: what the server answered, and what turned out to be true (``kevlike serve
--record DB_URL``, ``POST /v1/feedback``, ``GET /v1/feedback/report``, ``kevlike recalibrate``).

The store is a relational database through SQLAlchemy Core: a SQLite file by default
(``sqlite:///feedback.db``), any SQLAlchemy URL (``postgresql://…``) when a team outgrows one machine.
The tables are created on first use::

    kevlike_requests   request_id TEXT PK · model TEXT · created_at FLOAT (Unix seconds, UTC) ·
                       state TEXT NULL (only with --record-state)
    kevlike_answers    request_id TEXT FK · question_id TEXT · type TEXT (noul | choice | score |
                       choice:set) · probabilities TEXT (JSON list, option order) · temperature FLOAT ·
                       option_keys TEXT (JSON list)                      PK (request_id, question_id)
    kevlike_outcomes   request_id TEXT FK · question_id TEXT · target TEXT (JSON list: the observed
                       answer as a distribution over the options) · created_at FLOAT
                                                                         PK (request_id, question_id)

An outcome is an answer in the labelled-data format of :mod:`kevlike.data.labelled` (``true``/``false``,
an option key, a level index, or a distribution). Posting it again replaces it (the last observation
wins), so repeats are idempotent. Each answer keeps the temperature it was served with, so
``T · log p`` recovers logits equivalent to the model's (softmax is shift-invariant) and
:func:`kevlike.eval.owndata.fit_profile` fits a new profile on them exactly as on a labelled file.
"""

from __future__ import annotations

import json
import math
import threading
import time

from sqlalchemy import Column, Float, ForeignKey, MetaData, String, Table, Text, create_engine, select

from kevlike.metrics import summary
from kevlike.request.schema import Option, Question

metadata = MetaData()
requests_table = Table(
    "kevlike_requests", metadata,
    Column("request_id", String(128), primary_key=True),
    Column("model", String(512), nullable=False, index=True),
    Column("created_at", Float, nullable=False),
    Column("state", Text, nullable=True))
answers_table = Table(
    "kevlike_answers", metadata,
    Column("request_id", String(128), ForeignKey("kevlike_requests.request_id"), primary_key=True),
    Column("question_id", String(1024), primary_key=True),
    Column("type", String(16), nullable=False),
    Column("probabilities", Text, nullable=False),
    Column("temperature", Float, nullable=False),
    Column("option_keys", Text, nullable=False))
outcomes_table = Table(
    "kevlike_outcomes", metadata,
    Column("request_id", String(128), ForeignKey("kevlike_requests.request_id"), primary_key=True),
    Column("question_id", String(1024), primary_key=True),
    Column("target", Text, nullable=False),
    Column("created_at", Float, nullable=False))


class UnknownRequest(LookupError):
    """No recorded request has this id (HTTP 404)."""


class FeedbackStore:
    """The recording database. Thread-safe: writes are serialised in-process, and each is one
    transaction (a crash leaves either all of a request's rows or none).

    Args:
        url: a SQLAlchemy database URL (``sqlite:///path.db``; ``sqlite://`` is in memory).

    Raises:
        sqlalchemy.exc.ArgumentError: a malformed URL.
    """

    def __init__(self, url: str):
        kw = {}
        if url.startswith("sqlite"):
            kw["connect_args"] = {"check_same_thread": False}
        self.url = url
        self.engine = create_engine(url, **kw)
        metadata.create_all(self.engine)
        self._lock = threading.Lock()

    def record(self, request_id: str, model: str, answers: list[dict], state: str | None = None) -> None:
        """Store one answered request; ``answers``: ``{"question_id", "type", "probabilities", "temperature",
        "option_keys"}`` each. A request id seen before is replaced (a client that reuses ids gets the
        latest request, and its earlier outcomes are dropped with it)."""
        with self._lock, self.engine.begin() as conn:
            conn.execute(outcomes_table.delete().where(outcomes_table.c.request_id == request_id))
            conn.execute(answers_table.delete().where(answers_table.c.request_id == request_id))
            conn.execute(requests_table.delete().where(requests_table.c.request_id == request_id))
            conn.execute(requests_table.insert().values(request_id=request_id, model=model, created_at=time.time(),
                                                        state=state))
            if answers:
                conn.execute(answers_table.insert(), [{
                    "request_id": request_id, "question_id": a["question_id"], "type": a["type"],
                    "probabilities": json.dumps(a["probabilities"]), "temperature": float(a["temperature"]),
                    "option_keys": json.dumps(a["option_keys"])} for a in answers])

    def questions(self, request_id: str) -> dict[str, Question]:
        """The recorded questions of a request (id → :class:`~kevlike.request.schema.Question` with its option
        keys and type; descriptions are not kept).

        Raises:
            UnknownRequest: no such request id.
        """
        with self.engine.connect() as conn:
            if conn.execute(select(requests_table.c.request_id).where(requests_table.c.request_id == request_id)).first() is None:
                raise UnknownRequest(request_id)
            rows = conn.execute(select(answers_table.c.question_id, answers_table.c.type, answers_table.c.option_keys)
                                .where(answers_table.c.request_id == request_id)).all()
        return {r.question_id: Question(r.question_id, r.type.split(":")[0], "",
                                        tuple(Option(k, None) for k in json.loads(r.option_keys))) for r in rows}

    def add_outcomes(self, request_id: str, targets: dict[str, list[float]]) -> int:
        """Store (or replace) observed outcomes as target distributions; returns how many.

        Raises:
            UnknownRequest: no such request id.
        """
        now = time.time()
        with self._lock, self.engine.begin() as conn:
            if conn.execute(select(requests_table.c.request_id).where(requests_table.c.request_id == request_id)).first() is None:
                raise UnknownRequest(request_id)
            conn.execute(outcomes_table.delete().where((outcomes_table.c.request_id == request_id)
                                                       & outcomes_table.c.question_id.in_(list(targets))))
            conn.execute(outcomes_table.insert(), [{"request_id": request_id, "question_id": q, "target": json.dumps(t),
                                                   "created_at": now} for q, t in targets.items()])
        return len(targets)

    def records(self, model: str | None = None) -> list[dict]:
        """Every answered question with an outcome, as metric records (:mod:`kevlike.metrics`:
        ``type``, ``probs``, ``gold``, ``target``; plus ``logits = T · log p``, ``question``, ``model``).
        ``model``: only requests answered by this model or one of its profiles (``model@NAME``)."""
        q = (select(requests_table.c.model, answers_table.c.question_id, answers_table.c.type,
                    answers_table.c.probabilities, answers_table.c.temperature, outcomes_table.c.target)
             .join(answers_table, answers_table.c.request_id == requests_table.c.request_id)
             .join(outcomes_table, (outcomes_table.c.request_id == answers_table.c.request_id)
                   & (outcomes_table.c.question_id == answers_table.c.question_id)))
        if model is not None:
            q = q.where((requests_table.c.model == model) | requests_table.c.model.like(f"{model}@%"))
        out = []
        with self.engine.connect() as conn:
            for r in conn.execute(q):
                p = json.loads(r.probabilities)
                t = json.loads(r.target)
                out.append({"source": r.question_id, "question": r.question_id, "model": r.model, "type": r.type,
                            "probs": p, "target": t, "gold": max(range(len(t)), key=t.__getitem__),
                            "logits": [r.temperature * math.log(max(x, 1e-30)) for x in p]})
        return out


def report(store: FeedbackStore, model: str | None = None) -> dict:
    """``GET /v1/feedback/report``: per type (and overall), the outcomes counted, accuracy, ECE and the
    confident-error rate of the recorded answers (:mod:`kevlike.metrics`)."""

    recs = store.records(model)
    by_type: dict[str, list] = {}
    for r in recs:
        by_type.setdefault(r["type"].split(":")[0], []).append(r)

    def short(rs):
        s = summary(rs)
        return {"outcomes": s["n"], **({k: s[k] for k in ("accuracy", "ece", "ece_bins", "confident_error")}
                                       if s["n"] else {})}

    return {"model": model, "overall": short(recs), "per_type": {t: short(rs) for t, rs in sorted(by_type.items())}}
