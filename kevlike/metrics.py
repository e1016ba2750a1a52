"""Metrics of probabilistic answers (DESIGN.md §12). A *record* is one answered question::

    {"source": str, "type": "noul"|"choice"|"score", "probs": [K] probabilities, "gold": int index,
     "target": [K] target probabilities (one-hot for hard labels)}

Definitions (per record, then averaged):

* accuracy — argmax(probs) == gold (score: the most likely level; ties: the lowest index);
* NLL — ``−Σ_k y_k log p_k`` in nats (p clipped at 1e-12);
* Brier — multi-class ``Σ_k (p_k − y_k)²`` (Brier 1950); for noul the binary ``(p_true − y_true)²``;
* ECE — top-label confidence ``max_k p_k`` (noul: ``max(p, 1 − p)``) in 10 equal-width bins on
  [0, 1] (the last bin closed), ``Σ_b n_b/N · |acc_b − conf_b|`` (Guo et al. 2017), with bin counts
  and a 95 % bootstrap interval (``ece_ci95``);
* confident-error rate — share of *all* records whose top probability is ≥ 0.9 and wrong;
* coverage at a 5 % error budget — the largest share of records, taken by descending confidence,
  whose error rate is ≤ 0.05 (0 if even the most confident answer is wrong);
* ordinal MAE (score only) — ``|Σ_i i·p_i − gold|``, in levels.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict

import torch
from tqdm.auto import tqdm

from kevlike.request.schema import validate_request

N_BINS = 10


def _top(r: dict) -> tuple[int, float]:
    p = r["probs"]
    k = max(range(len(p)), key=lambda i: (p[i], -i))
    return k, p[k]


def nll(r: dict) -> float:
    return -sum(y * math.log(max(p, 1e-12)) for p, y in zip(r["probs"], r["target"]) if y > 0)


def brier(r: dict) -> float:
    if r["type"] == "noul":
        return (r["probs"][0] - r["target"][0]) ** 2
    return sum((p - y) ** 2 for p, y in zip(r["probs"], r["target"]))


def ece(records: list[dict], n_bins: int = N_BINS) -> tuple[float, list[dict]]:
    """``(ece, bins)`` with bins ``[{"lo", "hi", "count", "accuracy", "confidence"}]`` (module docstring)."""
    bins = [{"lo": i / n_bins, "hi": (i + 1) / n_bins, "count": 0, "correct": 0, "conf": 0.0} for i in range(n_bins)]
    for r in records:
        k, c = _top(r)
        b = bins[min(int(c * n_bins), n_bins - 1)]
        b["count"] += 1
        b["correct"] += int(k == r["gold"])
        b["conf"] += c
    n = max(len(records), 1)
    total = 0.0
    out = []
    for b in bins:
        acc = b["correct"] / b["count"] if b["count"] else None
        conf = b["conf"] / b["count"] if b["count"] else None
        if b["count"]:
            total += b["count"] / n * abs(acc - conf)
        out.append({"lo": b["lo"], "hi": b["hi"], "count": b["count"], "accuracy": acc, "confidence": conf})
    return total, out


def ece_interval(records: list[dict], resamples: int = 200, seed: int = 0) -> list[float]:
    """95 % bootstrap percentile interval of the ECE (``resamples`` seeded resamples of the records,
    Efron & Tibshirani 1993): ``[low, high]``."""

    if not records:
        return [float("nan"), float("nan")]
    rng = random.Random(seed)
    n = len(records)
    vals = sorted(ece([records[rng.randrange(n)] for _ in range(n)])[0] for _ in range(resamples))
    return [vals[int(0.025 * resamples)], vals[min(resamples - 1, int(0.975 * resamples))]]


def coverage_at(records: list[dict], budget: float = 0.05) -> float:
    """Largest share of records, by descending top probability, with error rate ≤ ``budget``."""
    order = sorted(records, key=lambda r: -_top(r)[1])
    errors, best = 0, 0
    for i, r in enumerate(order, 1):
        errors += int(_top(r)[0] != r["gold"])
        if errors / i <= budget:
            best = i
    return best / len(records) if records else 0.0


def summary(records: list[dict]) -> dict:
    """All metrics of the module docstring over ``records`` (``n`` included; ``mae`` only with scores)."""
    if not records:
        return {"n": 0}
    n = len(records)
    correct = [int(_top(r)[0] == r["gold"]) for r in records]
    e, bins = ece(records)
    out = {
        "n": n,
        "accuracy": sum(correct) / n,
        "nll": sum(nll(r) for r in records) / n,
        "brier": sum(brier(r) for r in records) / n,
        "ece": e,
        "ece_ci95": ece_interval(records),
        "ece_bins": [b["count"] for b in bins],
        "confident_error": sum(1 for r, c in zip(records, correct) if not c and _top(r)[1] >= 0.9) / n,
        "coverage_at_5pct": coverage_at(records),
    }
    scores = [r for r in records if r["type"] == "score"]
    if scores:
        out["mae"] = sum(abs(sum(i * p for i, p in enumerate(r["probs"])) - r["gold"]) for r in scores) / len(scores)
    return out


def summarize(records: list[dict]) -> dict:
    """``{"overall": summary, "per_source": {source: summary}, "per_type": {type: summary}}``."""
    by_source, by_type = defaultdict(list), defaultdict(list)
    for r in records:
        by_source[r["source"]].append(r)
        by_type[r["type"]].append(r)
    return {"overall": summary(records),
            "per_source": {k: summary(v) for k, v in sorted(by_source.items())},
            "per_type": {k: summary(v) for k, v in sorted(by_type.items())}}


def records_from_logits(engine, examples: list, batch_size: int = 4, progress: bool = False,
                        calibrated: bool = True) -> list[dict]:
    """Answer :class:`kevlike.data.sources.Example` s with ``engine`` (packed, ``batch_size`` requests
    per forward) and return one record per question (probabilities with the engine's temperatures
    when ``calibrated``, else ``softmax(z)``); each record also keeps its raw ``logits``."""

    out = []
    it = range(0, len(examples), batch_size)
    if progress:
        it = tqdm(it, desc="evaluate", unit="batch", dynamic_ncols=True)
    for i in it:
        chunk = examples[i:i + batch_size]
        reqs = [validate_request(e.request) for e in chunk]
        logits = engine.question_logits([engine.encode(r) for r in reqs])
        for ex, req, zs in zip(chunk, reqs, logits):
            probs = engine.probabilities(req, zs) if calibrated else [torch.softmax(z, -1) for z in zs]
            for q, z, p in zip(req.questions, zs, probs):
                t = ex.targets[q.id]
                out.append({"source": ex.source, "type": q.type, "probs": p.tolist(), "logits": z.tolist(),
                            "gold": max(range(len(t)), key=lambda k: t[k]), "target": list(t), "question": q.id})
    return out


def choice_records(engine, examples: list, batch_size: int = 4, progress: bool = False,
                   calibrated: bool = True) -> list[dict]:
    """:func:`records_from_logits` of the choice questions only, answering only the examples that have
    one (e.g. an engine in set mode, where noul and score questions read as in list mode)."""
    chosen = [e for e in examples if any(q.get("type") == "choice" for q in e.request["questions"].values())]
    if not chosen:
        return []
    return [r for r in records_from_logits(engine, chosen, batch_size, progress=progress, calibrated=calibrated)
            if r["type"] == "choice"]
