"""Structural probes of a decision model (DESIGN.md §12), defined as the open peer kev defines them.

Each probe packs its variants of one question as sibling branches of *one* request (branches are
isolated by the mask, so this equals asking them separately, to float rounding) and reads the
engine's uncalibrated logits.

* :func:`permutation_probe` — choice questions with ≥ 3 options, ``orderings`` random orders each.
  *Flip rate*: share of questions whose argmax option is not the same in every order. *Spread*:
  max − min over the orders of the gold option's probability (reported as mean and p90).
* :func:`option_addition_probe` — choice questions with 3–10 options; one irrelevant option is
  appended. *Shift*: change of ``log(p_a / p_b) = z_a − z_b`` for the originally top-two options a, b
  (uncalibrated, so a K-bucket edge cannot move it); reported as mean |shift|, mean shift, p90 |shift|.
"""

from __future__ import annotations

import random

from kevlike.schema import validate_request


def _p90(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.9 * len(xs)))] if xs else float("nan")


def _logits(engine, request: dict):
    req = validate_request(request)
    return req, engine.question_logits([engine.encode(req)])[0]


def permutation_probe(engine, questions: list[tuple[str, str, list[str], str]], orderings: int = 4,
                      seed: int = 0) -> dict:
    """``questions``: ``(state, instructions, option keys, gold key)``; returns ``{"n", "flip_rate",
    "spread_mean", "spread_p90"}`` (probabilities: ``softmax(z)``, uncalibrated).

    Raises:
        ValueError: a question with fewer than 3 options.
    """
    import torch

    rng = random.Random(seed)
    flips, spreads = 0, []
    for state, instr, keys, gold in questions:
        if len(keys) < 3:
            raise ValueError(f"the permutation probe needs ≥ 3 options, got {len(keys)}")
        orders = []
        for _ in range(orderings):
            o = keys[:]
            rng.shuffle(o)
            orders.append(o)
        request = {"state": state, "questions": {
            f"p{i}": {"type": "choice", "instructions": instr, "criteria": {k: None for k in o}}
            for i, o in enumerate(orders)}}
        _, zs = _logits(engine, request)
        tops, golds = set(), []
        for o, z in zip(orders, zs):
            p = torch.softmax(z, -1)
            tops.add(o[int(torch.argmax(z))])
            golds.append(float(p[o.index(gold)]))
        flips += len(tops) > 1
        spreads.append(max(golds) - min(golds))
    n = len(questions)
    return {"n": n, "orderings": orderings, "flip_rate": flips / n if n else float("nan"),
            "spread_mean": sum(spreads) / n if n else float("nan"), "spread_p90": _p90(spreads)}


def option_addition_probe(engine, questions: list[tuple[str, str, list[str], str]]) -> dict:
    """``questions``: ``(state, instructions, option keys (3–10), irrelevant key to append)``; returns
    ``{"n", "mean_abs_shift", "mean_shift", "p90_abs_shift"}`` in nats of log-odds.

    Raises:
        ValueError: an option count outside 3–10, or an appended key already present.
    """
    shifts = []
    for state, instr, keys, extra in questions:
        if not 3 <= len(keys) <= 10:
            raise ValueError(f"the option-addition probe needs 3–10 options, got {len(keys)}")
        if extra in keys:
            raise ValueError(f"appended option {extra!r} is already an option")
        request = {"state": state, "questions": {
            "base": {"type": "choice", "instructions": instr, "criteria": {k: None for k in keys}},
            "added": {"type": "choice", "instructions": instr, "criteria": {k: None for k in [*keys, extra]}}}}
        _, (z, z2) = _logits(engine, request)
        a, b = (int(i) for i in z.topk(2).indices)
        shifts.append(float((z2[a] - z2[b]) - (z[a] - z[b])))
    n = len(shifts)
    return {"n": n, "mean_abs_shift": sum(abs(s) for s in shifts) / n if n else float("nan"),
            "mean_shift": sum(shifts) / n if n else float("nan"), "p90_abs_shift": _p90([abs(s) for s in shifts])}


def banking_questions(n: int, seed: int = 0, k: int | None = None) -> list[tuple[str, str, list[str], str]]:
    """``n`` seeded Banking77 *test* messages as probe questions: all 77 intents (``k=None``) or the
    gold one + ``k − 1`` sampled others; the last element is the gold key."""
    from kevlike.training.data import INTENT_PROMPTS, humanize, intent_labels, read_intents

    rng = random.Random(seed)
    rows = rng.sample(list(read_intents("banking77", "test")), n)
    labels = [humanize(x) for x in intent_labels("banking77")]
    out = []
    for text, label in rows:
        gold = humanize(label)
        keys = labels[:] if k is None else [gold, *rng.sample([x for x in labels if x != gold], k - 1)]
        rng.shuffle(keys)
        out.append((text, INTENT_PROMPTS["banking77"][0], keys, gold))
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m kevlike.eval.probes [--model M] [--n 50]``: permutation probe on Banking77 test
    messages over all 77 intents, option-addition probe on 5-option subsets with a CLINC150 intent
    appended; prints JSON."""
    import argparse
    import json

    from kevlike.engine import Engine
    from kevlike.training.data import humanize, intent_labels

    ap = argparse.ArgumentParser(prog="python -m kevlike.eval.probes")
    ap.add_argument("--model", default=None)
    ap.add_argument("--n", type=int, default=50)
    args = ap.parse_args(argv)
    engine = Engine.from_pretrained(args.model)
    perm = permutation_probe(engine, banking_questions(args.n))
    rng = random.Random(1)
    foreign = [humanize(x) for x in intent_labels("clinc150")]
    added = [(s, i, keys, rng.choice([f for f in foreign if f not in keys]))
             for s, i, keys, _ in banking_questions(args.n, seed=1, k=5)]
    print(json.dumps({"model": engine.name, "permutation": perm, "option_addition": option_addition_probe(engine, added)},
                     indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
