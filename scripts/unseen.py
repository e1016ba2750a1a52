"""Accuracy and NLL of a generalization-suite run over its unseen questions, and the paired difference
between two runs. Unseen: every split but those of :data:`kevlike.eval.generalization.NOT_UNSEEN`
(``seen_wording``, the generated ``documents``, ``snli_test``, ``absurd``), each contrast question counted once
(its plain form ``qN``, not the negated ``nN`` or choice ``cN`` twins).

    python scripts/unseen.py RUN [RUN ...] [--half validation|test|all]
    python scripts/unseen.py RUN --baseline BASELINE_RUN --half test    # difference, paired bootstrap interval

A RUN is a ``kevlike eval --suite generalization`` run directory or its records.jsonl. ``--half`` keeps the
records of one half (``half`` field; runs written before the halves existed have none, so only ``all`` works
on them). Accuracy and NLL are :func:`kevlike.metrics.summary`'s, on the probabilities the suite wrote
(calibrated). With ``--baseline`` the two runs must hold the same questions (same suite, same data; checked
by split, source, question id and gold, in order) and the interval is a paired bootstrap over questions:
2,000 resamples, percentile 95 % (Efron & Tibshirani 1993, ch. 13).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from kevlike.eval.generalization import unseen_records
from kevlike.metrics import summary


def load(arg: str) -> list[dict]:
    path = Path(arg) if Path(arg).is_file() else Path(arg) / "records.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def unseen(records: list[dict], half: str = "all") -> list[dict]:
    """The unseen questions of ``records`` (module docstring), of one ``half`` unless ``"all"``.

    Raises:
        ValueError: no unseen question among the records, or records without halves asked for one."""
    if half != "all":
        if any("half" not in r for r in records):
            raise ValueError("these records carry no half (a run from before the suite had halves): use --half all")
        records = [r for r in records if r["half"] == half]
    u = unseen_records(records)
    if not u:
        raise ValueError("no unseen question in these records")
    return u


def correct(r: dict) -> bool:
    return max(range(len(r["probs"])), key=lambda k: r["probs"][k]) == r["gold"]


def paired_difference(a: list[dict], b: list[dict], resamples: int = 2000, seed: int = 0) -> dict:
    """Accuracy of ``a`` minus ``b`` over the same questions, with a paired bootstrap 95 % interval.

    Raises:
        ValueError: the two lists do not hold the same questions in the same order."""
    if len(a) != len(b) or any((x["split"], x["source"], x["question"], x["gold"]) !=
                               (y["split"], y["source"], y["question"], y["gold"]) for x, y in zip(a, b)):
        raise ValueError("the runs do not hold the same questions (another suite version or data?)")
    d = [int(correct(x)) - int(correct(y)) for x, y in zip(a, b)]
    n = len(d)
    rng = random.Random(seed)
    boots = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return {"n": n, "difference": sum(d) / n, "low": boots[int(0.025 * resamples)],
            "high": boots[int(0.975 * resamples) - 1]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="a `kevlike eval --suite generalization` run directory, or its records.jsonl")
    p.add_argument("--half", choices=("validation", "test", "all"), default="all",
                   help="which half of the suite to count (default: all)")
    p.add_argument("--baseline", metavar="RUN", default=None,
                   help="also print each run's accuracy minus this run's on the same questions, with a paired "
                        "bootstrap 95%% interval")
    args = p.parse_args(argv)
    try:
        base = unseen(load(args.baseline), args.half) if args.baseline else None
        for arg in args.runs:
            u = unseen(load(arg), args.half)
            s = summary(u)
            line = f"{arg}: unseen questions {s['n']} ({args.half}), accuracy {s['accuracy']:.3f}, NLL {s['nll']:.3f}"
            if base is not None:
                d = paired_difference(u, base)
                line += (f"; minus baseline {d['difference']:+.3f} "
                         f"(95% paired bootstrap [{d['low']:+.3f}, {d['high']:+.3f}], n {d['n']})")
            print(line)
    except (OSError, ValueError, KeyError) as e:
        print(f"unseen: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
