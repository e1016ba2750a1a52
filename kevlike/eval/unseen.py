"""Accuracy and NLL of a generalization-suite run over its unseen questions, and the paired difference
between two runs. Unseen: every split but those of :data:`kevlike.eval.generalization.NOT_UNSEEN`
(``seen_wording``, the generated ``documents``, ``snli_test``, ``absurd``), each contrast question counted once
(its plain form ``qN``, not the negated ``nN`` or choice ``cN`` twins).

    kevlike compare RUN [RUN ...] [--half validation|test|all]
    kevlike compare RUN --baseline BASELINE_RUN --half test    # difference, paired bootstrap interval

Every generalization report (``kevlike eval --suite generalization``) also has the aggregate of each half.

A RUN is a ``kevlike eval --suite generalization`` run directory or its records.jsonl. ``--half`` keeps the
records of one half (``half`` field; runs written before the halves existed have none, so only ``all`` works
on them). Accuracy and NLL are :func:`kevlike.metrics.summary`'s, on the probabilities the suite wrote
(calibrated). With ``--baseline`` the difference is paired over the questions both runs hold
(:func:`shared_questions`: matched by split, source, question id and occurrence; a suite that grew — items
added to a split — pairs over the questions the two versions share, and the command says how many it left
out) and the interval is a paired bootstrap over questions: 2,000 resamples, percentile 95 % (Efron &
Tibshirani 1993, ch. 13).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from kevlike.eval.generalization import counted, unseen_records
from kevlike.metrics import read_records, summary, write_records
from kevlike.runs import write_text_atomic


RECORD_KEYS = ("split", "source", "question", "type", "probs", "gold")
"""What :func:`load` needs in every record of a generalization-suite run (``source`` and ``question`` pair it with
another run's, :func:`shared_questions`)."""


def load(arg: str) -> list[dict]:
    """The records of a generalization-suite eval run (its directory, its ``records.jsonl``, or that file
    gzip-compressed, ``*.jsonl.gz``, as the results folders keep them).

    Raises:
        ValueError: one line naming the file and the line: not found, empty, not JSON, not an object, or a record
            without a suite split (an ``eval --data`` run, say)."""
    path = Path(arg) if Path(arg).is_file() else Path(arg) / "records.jsonl"
    if not path.is_file():
        raise ValueError(f"{arg}: no records.jsonl (give an eval run directory or its records file)")
    records = read_records(path, _not_a_suite_record)
    if not records:
        raise ValueError(f"{path}: holds no records")
    return records


def _not_a_suite_record(r: dict) -> str | None:
    """Why ``r`` is no generalization-suite record (a key of :data:`RECORD_KEYS` missing), or None."""
    missing = [k for k in RECORD_KEYS if k not in r]
    return (f"no {', '.join(missing)} in the record: not a generalization-suite run (kevlike eval --suite "
            f"generalization)") if missing else None


def unseen(records: list[dict], half: str = "all", required: bool = True) -> list[dict]:
    """The unseen questions of ``records`` (module docstring), of one ``half`` unless ``"all"``; an empty list
    where there is none and not ``required`` (a run of the seen or validation-only splits alone, compared split by
    split).

    Raises:
        ValueError: no unseen question among the records (when ``required``), or records without halves asked for
            one."""
    if half != "all":
        if any("half" not in r for r in records):
            raise ValueError("these records carry no half (a run from before the suite had halves): use --half all")
        records = [r for r in records if r["half"] == half]
    u = unseen_records(records)
    if not u and required:
        raise ValueError("no unseen question in these records (compare them split by split: --baseline RUN "
                         "--by-split)")
    return u


def correct(r: dict) -> bool:
    return max(range(len(r["probs"])), key=lambda k: r["probs"][k]) == r["gold"]


def shared_questions(a: list[dict], b: list[dict]) -> tuple[list[dict], list[dict], int, int]:
    """The records of the questions both ``a`` and ``b`` hold, in ``a``'s order, paired element by element, and how
    many records only ``a`` and only ``b`` hold. A question is matched by (split, source, question id, its
    occurrence among records with that triple), so runs of a suite that grew by whole items (a new source or
    question id) pair over the shared ones.

    Raises:
        ValueError: a matched question has another gold in the two runs (the data changed, not just grew)."""
    def keyed(records: list[dict]) -> dict[tuple, dict]:
        seen: dict[tuple, int] = {}
        out = {}
        for r in records:
            k = (r["split"], r["source"], r["question"])
            seen[k] = seen.get(k, -1) + 1
            out[(*k, seen[k])] = r
        return out
    ka, kb = keyed(a), keyed(b)
    shared = [k for k in ka if k in kb]
    for k in shared:
        if ka[k]["gold"] != kb[k]["gold"]:
            raise ValueError(f"question {k[2]!r} of {k[1]!r} ({k[0]}) has gold {ka[k]['gold']!r} in one run and "
                             f"{kb[k]['gold']!r} in the other: the runs are of other data, not a grown suite")
    return [ka[k] for k in shared], [kb[k] for k in shared], len(ka) - len(shared), len(kb) - len(shared)


def paired_difference(a: list[dict], b: list[dict], resamples: int = 2000, seed: int = 0) -> dict:
    """Accuracy of ``a`` minus ``b`` over the same questions, with a paired bootstrap 95 % interval and the
    paired standard error (``se``: the standard deviation of the per-question differences over √n).

    Raises:
        ValueError: the two lists do not hold the same questions in the same order."""
    if len(a) != len(b) or any((x["split"], x["source"], x["question"], x["gold"]) !=
                               (y["split"], y["source"], y["question"], y["gold"]) for x, y in zip(a, b)):
        raise ValueError("the runs do not hold the same questions (another suite version or data?)")
    d = [int(correct(x)) - int(correct(y)) for x, y in zip(a, b)]
    n = len(d)
    rng = random.Random(seed)
    boots = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    mean = sum(d) / n
    se = (sum((x - mean) ** 2 for x in d) / (n - 1) / n) ** 0.5 if n > 1 else float("nan")
    return {"n": n, "difference": mean, "low": boots[int(0.025 * resamples)],
            "high": boots[int(0.975 * resamples) - 1], "se": se}


def by_split(records: list[dict], half: str = "all") -> dict[str, list[dict]]:
    """The answerable questions (gold given) of ``records`` grouped by suite split, in suite order, of one ``half``
    unless ``"all"``; each contrast question once (:func:`~kevlike.eval.generalization.counted`: its plain form, as
    the eval report counts it, not its negated and choice twins)."""
    out: dict[str, list[dict]] = {}
    for r in records:
        if (half == "all" or r.get("half") == half) and r.get("gold") is not None and counted(r):
            out.setdefault(r["split"], []).append(r)
    return out


def paired_half(a: str, b: str, half: str) -> tuple[list[dict], list[dict]]:
    """The records of two runs (:func:`load`: directories or records files) of one half of the suite, paired question
    by question (:func:`shared_questions`); prints how many each run holds alone (the pooling scripts of
    docs/results/ choose weights on them).

    Raises:
        ValueError: as :func:`load`.
    """
    ra, rb = ([r for r in load(x) if r.get("half") == half] for x in (a, b))
    ra, rb, only_a, only_b = shared_questions(ra, rb)
    print(f"{half} half: {len(ra)} questions in both runs ({only_a} only in {a}, {only_b} only in {b})")
    return ra, rb


def write_run(out: str | Path, records: list[dict], half: str, model: str, option_mode: str = "list") -> Path:
    """Write ``records`` (e.g. :func:`kevlike.model.ensemble.pool_records` of members' runs) as a minimal
    generalization-suite run directory ``out``: ``records.jsonl`` and a ``metrics.json`` whose ``meta`` names the
    suite, ``half``, ``option_mode`` and ``model`` — what ``kevlike eval --reuse``, ``kevlike calibrate --records``
    and ``kevlike compare`` read. Returns the records file's path.

    Raises:
        OSError: ``out`` cannot be made or written.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_records(out / "records.jsonl", records)
    write_text_atomic(out / "metrics.json", json.dumps({"meta": {
        "suite": "generalization", "half": half, "option_mode": option_mode, "model": model}}, indent=2))
    return out / "records.jsonl"
