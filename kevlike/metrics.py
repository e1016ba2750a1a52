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

Abstention (records of a model with the ``x_abstain`` capability carry ``x_abstain``; a question the state does
not determine carries ``"cannot_tell": true`` and is left out of every metric above, which describe the answers
to answerable questions), :func:`abstention`:

* risk–coverage curve — answer when ``x_abstain < t``; for every threshold between distinct ``x_abstain``
  values, *coverage* = share of all questions answered, *accuracy* = share of the answered ones answered right
  (a "cannot tell" question that is answered counts as wrong), *risk* = 1 − accuracy (Geifman & El-Yaniv
  2017, "Selective classification for deep neural networks");
* AURC — area under the risk–coverage curve, ``Σ_g (c_g − c_{g−1}) · risk_g`` over the thresholds in
  ascending order (with distinct values, the mean of the risk at coverage 1/N … N/N); lower is better;
* coverage at ≤ 5 % error — the largest coverage whose risk is ≤ 0.05 (0 when none is);
* AUROC of ``x_abstain`` for "cannot tell" vs answerable (Mann–Whitney, ties count ½) and the ECE of
  ``x_abstain`` as a yes/no probability (as noul's, 10 bins), when both kinds are present;
* the same curve, AURC and coverage ranked by **P(right)** ``= (1 − x_abstain) · max_k p_k`` instead (answer when
  P(right) > t): the probability that the question is answerable *and* the top option right, when both parts
  are calibrated. ``x_abstain`` alone ranks "cannot tell"; P(right) also ranks the errors on answerable
  questions, which is what selective answering on pages needs.
"""

from __future__ import annotations

import gzip
import json
import math
import random
from collections import defaultdict
from pathlib import Path

import torch
from tqdm.auto import tqdm

from kevlike.request import answers
from kevlike.request.schema import validate_request
from kevlike.runs import atomic_path

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


def correct(r: dict) -> bool:
    """Whether a record's answer is right: its top option is the gold one and the question is answerable (an
    answered "cannot tell" question counts as wrong; risk–coverage curves and thresholds count it so)."""
    return not r.get("cannot_tell") and _top(r)[0] == r["gold"]


def p_right(r: dict) -> float:
    """P(right) of a record with ``x_abstain``: :func:`kevlike.request.answers.p_right` of its ``x_abstain`` and
    ``probs`` (module docstring)."""
    return answers.p_right(r["x_abstain"], r["probs"])


def risk_coverage(records: list[dict], by: str = "x_abstain") -> list[dict]:
    """The risk–coverage curve (module docstring) of records with ``x_abstain``: ``{"threshold", "coverage",
    "accuracy", "risk"}`` per distinct value of the ranking score. ``by="x_abstain"``: ascending ``x_abstain``,
    ``threshold`` the largest one answered (answer iff ``x_abstain ≤ threshold``); ``by="p_right"``: descending
    :func:`p_right`, ``threshold`` the smallest one answered (answer iff ``P(right) ≥ threshold``).

    Raises:
        ValueError: another ``by``."""
    if by not in ("x_abstain", "p_right"):
        raise ValueError(f"by must be 'x_abstain' or 'p_right', got {by!r}")
    score = (lambda r: r["x_abstain"]) if by == "x_abstain" else (lambda r: -p_right(r))
    order = sorted(records, key=score)
    n, out, right = len(order), [], 0
    for i, r in enumerate(order, 1):
        right += int(correct(r))
        if i == n or score(order[i]) != score(r):
            out.append({"threshold": abs(score(r)) if by == "p_right" else score(r), "coverage": i / n,
                        "accuracy": right / i, "risk": 1 - right / i})
    return out


def _area_and_coverage(curve: list[dict], budget: float) -> tuple[float, float]:
    """``(AURC, coverage at ≤ budget risk)`` of a :func:`risk_coverage` curve."""
    area, prev = 0.0, 0.0
    for pt in curve:
        area += (pt["coverage"] - prev) * pt["risk"]
        prev = pt["coverage"]
    return area, max((pt["coverage"] for pt in curve if pt["risk"] <= budget + 1e-12), default=0.0)


def auroc(scores: list[float], positive: list[bool]) -> float | None:
    """Area under the ROC curve of ``scores`` for the ``positive`` ones (Mann–Whitney U / (n⁺ n⁻), ties ½);
    None without both classes.

    Raises:
        ValueError: a score is not a finite number (a NaN has no rank)."""
    if not all(math.isfinite(s) for s in scores):
        raise ValueError("auroc: every score must be a finite number")
    pos = [s for s, y in zip(scores, positive) if y]
    neg = [s for s, y in zip(scores, positive) if not y]
    if not pos or not neg:
        return None
    ranks, order = {}, sorted(scores)
    i = 0
    while i < len(order):                      # mid-ranks of tied values
        j = i + 1
        while j < len(order) and order[j] == order[i]:
            j += 1
        ranks[order[i]] = (i + j + 1) / 2
        i = j
    u = sum(ranks[s] for s in pos) - len(pos) * (len(pos) + 1) / 2
    return u / (len(pos) * len(neg))


CURVE_POINTS = 21    # points of a risk-coverage curve kept in metrics.json (a curve has one per distinct x_abstain;
                     # metrics.json holds one per split, source and type): every 5 % of the questions


def thin_curve(curve: list[dict], k: int = CURVE_POINTS) -> list[dict]:
    """At most ``k`` (≥ 2) points of ``curve``, at evenly spaced positions, the first and the last included."""
    n = len(curve)
    if n <= k:
        return curve
    return [curve[round(i * (n - 1) / (k - 1))] for i in range(k)]


def abstention(records: list[dict], budget: float = 0.05) -> dict:
    """The abstention metrics of the module docstring over records with ``x_abstain``: ``n``,
    ``n_cannot_tell``, ``curve`` (:func:`risk_coverage`, thinned to at most :data:`CURVE_POINTS` of its points, evenly
    spaced in order, first and last kept: every figure here is computed on the whole curve), ``aurc``, ``coverage_at_5pct`` (at ``budget``),
    ``accuracy_all`` (answering everything), ``nll`` (mean binary log loss of ``x_abstain`` against "cannot tell",
    nats), ``auroc`` and ``ece`` (None without both kinds) with ``ece_bins``; ``aurc_p_right`` and
    ``coverage_at_5pct_p_right``: the same two figures ranked by :func:`p_right`."""
    rs = [r for r in records if r.get("x_abstain") is not None]
    if not rs:
        return {"n": 0}
    curve = risk_coverage(rs)
    area, cov = _area_and_coverage(curve, budget)
    area_right, cov_right = _area_and_coverage(risk_coverage(rs, by="p_right"), budget)
    flags = [bool(r.get("cannot_tell")) for r in rs]
    bce = -sum(math.log(max(r["x_abstain"] if f else 1 - r["x_abstain"], 1e-12)) for r, f in zip(rs, flags)) / len(rs)
    out = {"n": len(rs), "n_cannot_tell": sum(flags), "aurc": area, "coverage_at_5pct": cov, "nll": bce,
           "accuracy_all": curve[-1]["accuracy"], "auroc": auroc([r["x_abstain"] for r in rs], flags),
           "ece": None, "ece_bins": None, "curve": thin_curve(curve), "aurc_p_right": area_right,
           "coverage_at_5pct_p_right": cov_right}
    if 0 < sum(flags) < len(rs):
        binary = [{"probs": [r["x_abstain"], 1 - r["x_abstain"]], "gold": 0 if f else 1} for r, f in zip(rs, flags)]
        e, bins = ece(binary)
        out.update(ece=e, ece_bins=[b["count"] for b in bins])
    return out


def summary(records: list[dict]) -> dict:
    """All metrics of the module docstring over ``records`` (``n`` included; ``mae`` only with scores): the
    answer metrics over the answerable records, and ``abstention`` (:func:`abstention`) when records carry
    ``x_abstain``."""
    abst = abstention(records) if any(r.get("x_abstain") is not None for r in records) else None
    records = [r for r in records if not r.get("cannot_tell")]
    if not records:
        return {"n": 0, **({"abstention": abst} if abst else {})}
    n = len(records)
    hits = [int(correct(r)) for r in records]
    e, bins = ece(records)
    out = {
        "n": n,
        "accuracy": sum(hits) / n,
        "nll": sum(nll(r) for r in records) / n,
        "brier": sum(brier(r) for r in records) / n,
        "ece": e,
        "ece_ci95": ece_interval(records),
        "ece_bins": [b["count"] for b in bins],
        "confident_error": sum(1 for r, c in zip(records, hits) if not c and _top(r)[1] >= 0.9) / n,
        "coverage_at_5pct": coverage_at(records),
    }
    scores = [r for r in records if r["type"] == "score"]
    if scores:
        out["mae"] = sum(abs(sum(i * p for i, p in enumerate(r["probs"])) - r["gold"]) for r in scores) / len(scores)
    if abst:
        out["abstention"] = abst
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
    of similar token length per forward, so little of a batch is padding) and return one record per question,
    in the examples' order (probabilities with the engine's temperatures
    when ``calibrated``, else ``softmax(z)``); each record also keeps its raw ``logits``. A question of the
    example's ``cannot_tell`` gets ``"cannot_tell": true``; an engine with the ``x_abstain`` capability adds
    ``x_abstain`` (calibrated, or ``sigmoid`` of the raw logit) and ``abstain_logit``."""

    reqs = [validate_request(e.request) for e in examples]
    encoded = [engine.encode(r) for r in reqs]
    # Batches of similar length: a packed batch is padded to its longest request, so file order wastes
    # compute (on the generalization suite's validation half 292k padded tokens for 231k real, sorted 237k).
    # (a served model, --url, encodes to the request itself: no token count, so file order)
    order = sorted(range(len(examples)), key=lambda i: getattr(encoded[i], "n_tokens", 0))
    by_example: list[list[dict]] = [[] for _ in examples]
    it = range(0, len(order), batch_size)
    if progress:
        it = tqdm(it, desc="evaluate", unit="batch", dynamic_ncols=True)
    with_abstain = bool(getattr(engine, "abstain", False))
    for i in it:
        chunk = order[i:i + batch_size]
        batch = [encoded[k] for k in chunk]
        if with_abstain:
            logits, abstain = engine.question_outputs(batch)
        else:
            logits, abstain = engine.question_logits(batch), [None] * len(chunk)
        for k, zs, az in zip(chunk, logits, abstain):
            ex, req = examples[k], reqs[k]
            probs = engine.probabilities(req, zs) if calibrated else [torch.softmax(z, -1) for z in zs]
            for j, (q, z, p) in enumerate(zip(req.questions, zs, probs)):
                t = ex.targets[q.id]
                rec = {"source": ex.source, "type": q.type, "probs": p.tolist(), "logits": z.tolist(),
                       "gold": max(range(len(t)), key=lambda k: t[k]), "target": list(t), "question": q.id}
                if q.id in getattr(ex, "cannot_tell", ()):
                    rec["cannot_tell"] = True
                if az is not None:
                    a = float(az[j])
                    rec["abstain_logit"] = a
                    rec["x_abstain"] = (engine.abstain_probability(a) if calibrated
                                        else float(torch.sigmoid(torch.tensor(a))))
                by_example[k].append(rec)
    out = [rec for recs in by_example for rec in recs]
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


def write_records(path: str | Path, records: list[dict]) -> Path:
    """Write ``records`` as a run's ``records.jsonl`` (one JSON object per line, what :func:`read_records` reads),
    through :func:`kevlike.runs.atomic_path`: a failure mid-write leaves no half file. Returns ``path``.

    Raises:
        OSError: the file cannot be written (nothing is left behind)."""
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return Path(path)


def read_records(path: str | Path, check=None) -> list[dict]:
    """The records of a run (one JSON object per line, as ``eval`` and ``calibrate`` write them) from ``path``, a
    ``records.jsonl`` or that file gzip-compressed (``*.gz``, as the results folders keep them); blank lines are
    skipped. ``check(record)`` returns None for a good record or why it is not one.

    Raises:
        ValueError: one line naming the file (and ``FILE:LINE``): unreadable, not gzip, not UTF-8, a line that is not
            JSON or not an object, or a record ``check`` refuses.
    """
    path = Path(path)
    try:
        text = gzip.decompress(path.read_bytes()).decode("utf-8") if path.suffix == ".gz" else path.read_text("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot read: {e}") from None
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{i}: not JSON ({e.msg} at column {e.colno}); a cut-off file?") from None
        if not isinstance(r, dict):
            raise ValueError(f"{path}:{i}: a record is a JSON object, got {type(r).__name__}")
        if check is not None and (why := check(r)) is not None:
            raise ValueError(f"{path}:{i}: {why}")
        out.append(r)
    return out
