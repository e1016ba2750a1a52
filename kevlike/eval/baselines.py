"""Baselines beside every suite report: chance, majority class and the backbone's training-free LM readout,
each on the same items as the model (DESIGN.md §7, §12: the zero-shot readout is measured "before building
anything", so every figure has its floor next to it).

Records are :mod:`kevlike.metrics` records (``type``, ``probs``, ``gold``, ``target``, ``source``; the
generalization suite adds ``split``). Definitions:

* **chance** — the uniform distribution over each question's K options (levels for ``score``), in
  expectation: accuracy ``mean 1/K`` (not an argmax of ties); NLL ``mean Σ_k y_k log K = log K`` nats for a
  hard gold; Brier of the uniform probabilities (``1 − 1/K`` for a one-hot gold, ``0.25`` for noul's binary
  Brier); ordinal MAE ``|(n − 1)/2 − gold|`` for scores. ECE and the other confidence figures are left out: a
  uniform answer's confidence 1/K equals its expected accuracy.
* **majority** — within each group of records sharing (split, source, question type, option count), every
  question is answered with the group's mean target (the gold frequencies of those same items). Its accuracy
  is the share of the most frequent gold index (ties: the lowest index), its NLL the entropy of the gold
  frequencies; every metric of :func:`kevlike.metrics.summary` applies. It reads the frequencies of the very
  labels it is scored on (an oracle prior), so it is the best any answer blind to the text can do. A gold
  *index* means the same answer within a source (noul: true/false; score: a level; choice: the source's
  option list, in its order); where a source shuffles its options per item it is about chance.
* **lm_readout** — the backbone alone, no training: the mean log-probability of each option's answer text
  after a plain-text rendering (:class:`kevlike.model.heads.LMReadout`), softmax at T = 1.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

from kevlike.metrics import brier, summary

BASELINES = ("lm_readout", "majority", "chance")
"""The baseline rows, in report order (after the model's)."""

DEFINITIONS = {
    "chance": "uniform over each question's options, in expectation: accuracy mean 1/K, NLL log K",
    "majority": "per (split, source, type, option count) group of these items, the gold frequencies as the answer "
                "(accuracy: the most frequent gold's share; an oracle prior read from the scored labels)",
    "lm_readout": "the bare backbone's mean log-probability of each option's text (training-free), softmax at T = 1",
}


def chance_summary(records: list[dict]) -> dict:
    """Expected figures of the uniform answer over ``records`` (module docstring): ``{"n", "accuracy", "nll",
    "brier"}`` plus ``"mae"`` when there are scores; ``{"n": 0}`` for none."""
    if not records:
        return {"n": 0}
    n = len(records)
    out = {"n": n,
           "accuracy": sum(1 / len(r["target"]) for r in records) / n,
           "nll": sum(math.log(len(r["target"])) * sum(r["target"]) for r in records) / n,
           "brier": sum(brier({**r, "probs": [1 / len(r["target"])] * len(r["target"])}) for r in records) / n}
    scores = [r for r in records if r["type"] == "score"]
    if scores:
        out["mae"] = sum(abs((len(r["target"]) - 1) / 2 - r["gold"]) for r in scores) / len(scores)
    return out


def majority_records(records: list[dict]) -> list[dict]:
    """``records`` with ``probs`` replaced by the mean target of their (split, source, type, option count) group
    (module docstring); logits dropped."""
    groups: dict = defaultdict(list)
    for r in records:
        groups[(r.get("split"), r["source"], r["type"], len(r["target"]))].append(r)
    prior = {}
    for key, rs in groups.items():
        K = key[3]
        prior[key] = [sum(r["target"][k] for r in rs) / len(rs) for k in range(K)]
    return [{k: v for k, v in r.items() if k != "logits"}
            | {"probs": prior[(r.get("split"), r["source"], r["type"], len(r["target"]))]} for r in records]


def compare(records: list[dict], lm_records: list[dict] | None, sets: Callable[[dict], list[str]]) -> dict:
    """The model and each baseline on the same items, per set: ``{set: {"model": summary, "lm_readout": summary
    or None, "majority": summary, "chance": chance_summary}}``. ``sets(record)`` names the sets a record counts
    in (e.g. its source, its type and ``"overall"``; sets are ordered by their position in that list, then by
    name); ``lm_records`` are the LM readout's records of the same
    questions in the same order (None: no LM-readout row).

    Raises:
        ValueError: ``lm_records`` does not answer the same questions in the same order.
    """
    if lm_records is not None:
        if len(lm_records) != len(records) or any(
                (a["source"], a["question"], a["gold"]) != (b["source"], b["question"], b["gold"])
                for a, b in zip(records, lm_records)):
            raise ValueError("the LM readout's records do not answer the model's questions in the same order")
    major = majority_records(records)
    members: dict = defaultdict(list)
    for i, r in enumerate(records):
        for s in sets(r):
            members[s].append(i)
    rank: dict = {}
    for r in records:
        for j, s in enumerate(sets(r)):
            rank.setdefault(s, j)
    out = {}
    for s, idx in sorted(members.items(), key=lambda kv: (rank[kv[0]], kv[0])):
        out[s] = {"model": summary([records[i] for i in idx]),
                  "lm_readout": summary([lm_records[i] for i in idx]) if lm_records is not None else None,
                  "majority": summary([major[i] for i in idx]),
                  "chance": chance_summary([records[i] for i in idx])}
    return out


def baseline_table(rows: dict) -> str:
    """Markdown: one row per set of :func:`compare`'s result, accuracy and NLL of the model and each baseline
    side by side (an empty cell: no LM-readout row)."""
    names = ("model", *BASELINES)
    head = ("| set | n | " + " | ".join(f"acc {x}" for x in names) + " | " + " | ".join(f"NLL {x}" for x in names)
            + " |")
    lines = [head, "|---" * (2 + 2 * len(names)) + "|"]
    for s, row in rows.items():
        acc = ["" if row[x] is None else f"{row[x]['accuracy']:.3f}" for x in names]
        nll = ["" if row[x] is None else f"{row[x]['nll']:.3f}" for x in names]
        lines.append(f"| {s} | {row['model']['n']} | " + " | ".join(acc) + " | " + " | ".join(nll) + " |")
    return "\n".join(lines)


def baseline_section(rows: dict, lm_note: str | None = None) -> str:
    """The report's baseline section: :func:`baseline_table` and the definitions (:data:`DEFINITIONS`);
    ``lm_note`` says why there is no LM-readout row, or which backbone gave it."""
    md = "Baselines on the same items (kevlike/eval/baselines.py):\n\n" + baseline_table(rows) + "\n\n"
    md += "".join(f"- **{k}**: {DEFINITIONS[k]}\n" for k in BASELINES)
    if lm_note:
        md += f"\nLM readout: {lm_note}\n"
    return md
