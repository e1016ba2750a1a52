"""Accuracy and NLL of a generalization-suite run over its unseen questions: every split but
``seen_wording``, each contrast question counted once (its plain form ``qN``, not the negated ``nN`` or
choice ``cN`` twins). The model card's "unseen splits (1,920)" figures.

    python scripts/unseen.py runs/eval-generalization-STAMP [more run directories or records.jsonl ...]

Accuracy is the argmax of ``probs`` against ``gold``; NLL is ``−log probs[gold]`` (probabilities floored at
1e-12), both as written by ``kevlike eval --suite generalization`` (calibrated probabilities).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def unseen(records: list[dict]) -> tuple[int, float, float]:
    """``(n, accuracy, NLL)`` over the unseen questions of ``records`` (see the module docstring).

    Raises:
        ValueError: no unseen question among the records."""
    u = [r for r in records if r["split"] != "seen_wording"
         and not (r["split"].startswith("contrast") and r["question"][:1] in ("n", "c"))]
    if not u:
        raise ValueError("no unseen question in these records")
    acc = sum(max(range(len(r["probs"])), key=lambda i: r["probs"][i]) == r["gold"] for r in u) / len(u)
    nll = -sum(math.log(max(r["probs"][r["gold"]], 1e-12)) for r in u) / len(u)
    return len(u), acc, nll


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    for arg in argv:
        p = Path(arg)
        path = p if p.is_file() else p / "records.jsonl"
        try:
            n, acc, nll = unseen([json.loads(line) for line in path.read_text().splitlines() if line.strip()])
        except (OSError, ValueError, KeyError) as e:
            print(f"unseen: {arg}: {e}", file=sys.stderr)
            return 2
        print(f"{arg}: unseen questions {n}, accuracy {acc:.3f}, NLL {nll:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
