"""Accuracy and NLL of a generalization-suite run over its unseen questions: every split but
``seen_wording``, each contrast question counted once (its plain form ``qN``, not the negated ``nN`` or
choice ``cN`` twins). The model card's "unseen splits (1,920)" figures.

    python scripts/unseen.py runs/eval-generalization-STAMP [more run directories or records.jsonl ...]

Accuracy and NLL are :func:`kevlike.metrics.summary`'s, on the probabilities ``kevlike eval --suite
generalization`` wrote (calibrated); the records counted are those of
:func:`kevlike.eval.generalization.counted`, as in the suite's own per-split figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kevlike.eval.generalization import counted
from kevlike.metrics import summary


def unseen(records: list[dict]) -> tuple[int, float, float]:
    """``(n, accuracy, NLL)`` over the unseen questions of ``records`` (see the module docstring).

    Raises:
        ValueError: no unseen question among the records."""
    u = [r for r in records if r["split"] != "seen_wording" and counted(r)]
    if not u:
        raise ValueError("no unseen question in these records")
    s = summary(u)
    return s["n"], s["accuracy"], s["nll"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="a `kevlike eval --suite generalization` run directory, or its records.jsonl")
    for arg in p.parse_args(argv).runs:
        path = Path(arg) if Path(arg).is_file() else Path(arg) / "records.jsonl"
        try:
            n, acc, nll = unseen([json.loads(line) for line in path.read_text().splitlines() if line.strip()])
        except (OSError, ValueError, KeyError) as e:
            print(f"unseen: {arg}: {e}", file=sys.stderr)
            return 2
        print(f"{arg}: unseen questions {n}, accuracy {acc:.3f}, NLL {nll:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
