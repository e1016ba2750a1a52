"""Temperatures per (question type, option-count bucket) (DESIGN.md §9), applied at serve time as
``z / T``. Fitting them on held-out logits is the calibration issue's work; until an artifact
carries fitted values every temperature is 1 (the table says so in ``source``)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import torch

BUCKETS = ((2, 2), (3, 5), (6, 20), (21, 255))


def bucket_of(k: int) -> str:
    """Bucket label for an option (or level) count, e.g. ``"3-5"``; ``"256+"`` for the choices beyond
    Jev's 255 options that ``--max-options`` allows.

    Raises:
        ValueError: k below 2.
    """
    for lo, hi in BUCKETS:
        if lo <= k <= hi:
            return f"{lo}" if lo == hi else f"{lo}-{hi}"
    if k > BUCKETS[-1][1]:
        return f"{BUCKETS[-1][1] + 1}+"
    raise ValueError(f"option count {k} is below 2")


def calibration_type(qtype: str, option_mode: str = "list") -> str:
    """The key a question's temperature is stored under: its type, or ``"choice:set"`` for a choice
    question read in set mode (its logits come from another template, so they get their own fit)."""
    return f"{qtype}:set" if option_mode == "set" and qtype == "choice" else qtype


@dataclass(frozen=True)
class TemperatureTable:
    """``by_bucket[(type, bucket)]``, else ``by_type[type]``, else 1. Set-mode choice questions look up
    ``choice:set`` first and fall back to ``choice``'s entries."""

    by_bucket: dict = field(default_factory=dict)
    by_type: dict = field(default_factory=dict)
    source: str = "default: T = 1 (not fitted)"

    def lookup(self, qtype: str, k: int, option_mode: str = "list") -> float:
        """The temperature of a ``qtype`` question with ``k`` options read in ``option_mode``."""
        key = calibration_type(qtype, option_mode)
        for t in (self.by_bucket.get((key, bucket_of(k))), self.by_type.get(key)):
            if t is not None:
                return float(t)
        if key != qtype:
            return self.lookup(qtype, k)
        return 1.0

# --- fitting (DESIGN.md §9) -------------------------------------------------------------------


T_MIN, T_MAX = 0.05, 20.0
MIN_BUCKET = 200


def nll_at(logits: list, golds: list[int], t: float) -> float:
    """Mean NLL (nats) of ``softmax(z / t)`` at the gold index, over questions with any K."""

    total = 0.0
    for z, g in zip(logits, golds):
        total -= float(torch.log_softmax(torch.as_tensor(z, dtype=torch.float64) / t, -1)[g])
    return total / max(len(logits), 1)


def fit_temperature(logits: list, golds: list[int], lo: float = T_MIN, hi: float = T_MAX, iters: int = 60) -> float:
    """The T in [lo, hi] minimising mean NLL of ``softmax(z / T)``: golden-section search over log T
    (NLL is convex in 1/T, so unimodal in log T). ``logits``: one ``[K]`` sequence per question
    (any K); ``golds``: gold indices. Guo et al. 2017, "On Calibration of Modern Neural Networks"."""

    a, b = math.log(lo), math.log(hi)
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = nll_at(logits, golds, math.exp(c)), nll_at(logits, golds, math.exp(d))
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = nll_at(logits, golds, math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = nll_at(logits, golds, math.exp(d))
    return math.exp((a + b) / 2)


def fit_table(records: list[dict], min_count: int = MIN_BUCKET, source: str = "fitted") -> tuple[TemperatureTable, dict]:
    """Temperatures per (type, K-bucket) from held-out records (``{"type", "logits", "gold"}``).

    Fallbacks, recorded in the returned report: a bucket with fewer than ``min_count`` questions or
    no errors gets no entry (its type's temperature applies); a type with fewer than ``min_count``
    questions or no errors gets none either (T = 1 applies).
    """

    groups, types = defaultdict(list), defaultdict(list)
    for r in records:
        groups[(r["type"], bucket_of(len(r["logits"])))].append(r)
        types[r["type"]].append(r)

    def errors(rs):
        return sum(1 for r in rs if max(range(len(r["logits"])), key=lambda k: r["logits"][k]) != r["gold"])

    by_type, by_bucket, report = {}, {}, {"min_count": min_count, "types": {}, "buckets": {}}
    for t, rs in sorted(types.items()):
        z, g = [r["logits"] for r in rs], [r["gold"] for r in rs]
        entry = {"n": len(rs), "errors": errors(rs), "nll_t1": nll_at(z, g, 1.0)}
        if len(rs) >= min_count and entry["errors"]:
            by_type[t] = fit_temperature(z, g)
            entry.update(temperature=by_type[t], nll_fitted=nll_at(z, g, by_type[t]))
        else:
            entry["fallback"] = "T = 1 (too few questions or no errors)"
        report["types"][t] = entry
    for (t, b), rs in sorted(groups.items()):
        z, g = [r["logits"] for r in rs], [r["gold"] for r in rs]
        entry = {"n": len(rs), "errors": errors(rs)}
        if len(rs) >= min_count and entry["errors"]:
            by_bucket[(t, b)] = fit_temperature(z, g)
            entry["temperature"] = by_bucket[(t, b)]
        else:
            entry["fallback"] = f"type {t}'s temperature" if t in by_type else "T = 1"
        report["buckets"][f"{t}/{b}"] = entry
    return TemperatureTable(by_bucket=by_bucket, by_type=by_type, source=source), report
