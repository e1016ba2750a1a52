"""Jev response assembly from per-question probabilities (DESIGN.md §4).

* noul: ``{"type": "noul", "noul": P(true)}`` (no confidence: P(true) already says it).
* choice: ``choice`` = argmax key (ties: the first option), ``probabilities`` keyed by the
  request's own keys in request order, ``confidence = (p_max − 1/K) / (1 − 1/K)``.
* score: ``score = Σ_i i·p_i`` (expected level), ``legend`` {"i": level description},
  ``probabilities`` {"i": p_i}, ``confidence = max(0, 1 − Σ_i p_i·|i − k| / D)`` with k the most
  likely level (ties: lowest index) and ``D = (1/n)·Σ_i |i − (n − 1)/2|``.

Confidence is arithmetic on the distribution, never a learned second estimate.

kevlike extension (models with the ``x_abstain`` capability, docs/guide/abstention.md): every answer also
carries ``x_abstain`` ∈ [0, 1], the probability that the state does not determine the answer; with a
threshold, an answer whose ``x_abstain`` is above it — or, with the other threshold, whose P(right)
``= (1 − x_abstain) · max_k p_k`` is below it — also carries ``"x_abstained": true``. The Jev fields
are never removed or changed: they stay the distribution given that the question is answerable.
"""

from __future__ import annotations

from typing import Sequence

from kevlike.request.schema import Question, Request


def choice_confidence(probs: Sequence[float]) -> float:
    """``(p_max − 1/K) / (1 − 1/K)``: 0 for a uniform distribution, 1 for a certain one. K ≥ 2."""
    K = len(probs)
    return (max(probs) - 1.0 / K) / (1.0 - 1.0 / K)


def score_confidence(probs: Sequence[float]) -> float:
    """``max(0, 1 − Σ_i p_i·|i − k| / D)`` with k = argmax (lowest on ties) and D the mean distance of
    the levels from the middle level, ``(1/n)·Σ_i |i − (n − 1)/2|``. n ≥ 2."""
    n = len(probs)
    k = max(range(n), key=lambda i: (probs[i], -i))
    spread = sum(p * abs(i - k) for i, p in enumerate(probs))
    D = sum(abs(i - (n - 1) / 2) for i in range(n)) / n
    return max(0.0, 1.0 - spread / D)


def p_right(x_abstain: float, probs: Sequence[float]) -> float:
    """P(right) ``= (1 − x_abstain) · max_k p_k``: the probability that the state determines the answer *and* the
    top option is it, for probabilities ``probs`` over the question's options (conditional on answerable) and
    ``x_abstain`` ∈ [0, 1] (docs/guide/abstention.md). The one definition the server's ``p_right_below`` threshold
    and :func:`kevlike.metrics.p_right` share."""
    return (1.0 - x_abstain) * max(probs)


def thresholds(request: Request, abstain_above: float | None, p_right_below: float | None) -> dict:
    """The abstention thresholds one request is answered with: its own ``x_abstain_above`` / ``x_p_right_below``
    where set, else the engine's ``abstain_above`` / ``p_right_below`` (``--abstain-above`` / ``--p-right-below``).
    Returns ``{"abstain_above": …, "p_right_below": …}``, the keyword arguments of :func:`answer` (None: no
    threshold)."""
    return {"abstain_above": request.x_abstain_above if request.x_abstain_above is not None else abstain_above,
            "p_right_below": request.x_p_right_below if request.x_p_right_below is not None else p_right_below}


def answer(question: Question, probs: Sequence[float], x_abstain: float | None = None,
           abstain_above: float | None = None, p_right_below: float | None = None) -> dict:
    """One question's answer object.

    Args:
        question: the validated question.
        probs: probabilities over ``question.options`` in option order (sum 1).
        x_abstain: the probability that the state does not determine the answer (models with the
            capability); None: no ``x_abstain`` field (the Jev answer alone).
        abstain_above: with ``x_abstain``, add ``"x_abstained": true`` when ``x_abstain > abstain_above``.
        p_right_below: with ``x_abstain``, add ``"x_abstained": true`` when P(right) ``= (1 − x_abstain) ·
            max(probs) < p_right_below`` (the probability that the text answers the question *and* the top option
            is right; :func:`p_right`).
    """
    out = _jev_answer(question, probs)
    if x_abstain is not None:
        out["x_abstain"] = float(x_abstain)
        if (abstain_above is not None and x_abstain > abstain_above) or \
                (p_right_below is not None and p_right(x_abstain, probs) < p_right_below):
            out["x_abstained"] = True
    return out


def _jev_answer(question: Question, probs: Sequence[float]) -> dict:
    probs = [float(p) for p in probs]
    if len(probs) != len(question.options):
        raise ValueError(f"question {question.id!r} has {len(question.options)} options, got {len(probs)} probabilities")
    if question.type == "noul":
        return {"type": "noul", "noul": probs[0]}
    keys = [o.key for o in question.options]
    if question.type == "choice":
        best = max(range(len(probs)), key=lambda i: (probs[i], -i))
        return {"type": "choice", "choice": keys[best], "probabilities": dict(zip(keys, probs)),
                "confidence": choice_confidence(probs)}
    return {"type": "score", "score": sum(i * p for i, p in enumerate(probs)),
            "legend": {o.key: o.description for o in question.options},
            "probabilities": dict(zip(keys, probs)), "confidence": score_confidence(probs)}


class Decision(dict):
    """A response: the Jev wire-format dict (every serializer sees a plain dict) that also carries, off the
    wire, ``pre_readout``: ``{question id: [K] probabilities}``, the tempered softmax of each question served
    through the normal score readout (:meth:`~kevlike.model.temperatures.TemperatureTable.reads_normal`) before
    that readout. The served probabilities of such a question are no softmax of logits, so the outcome store
    keeps these to refit its temperature (:mod:`kevlike.service.feedback`). Empty for every other question."""

    def __init__(self, response: dict | None = None, pre_readout: dict[str, list[float]] | None = None):
        super().__init__(response or {})
        self.pre_readout = pre_readout or {}
