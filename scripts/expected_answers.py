"""How many of the answers listed in ``examples/expected.meta.json`` a decision model gives, the
"expected answers matched" figure of docs/results/examples.md.

A match is P(yes) > 0.5 for a noul question whose expected answer is true (≤ 0.5 for false), the most
probable option for a choice question, and the most probable level for a score question (expected answers of
score questions are 0-based indices into the criteria array). Prints one line per question and the total.

    python scripts/expected_answers.py                                  # the shipped default, float32
    python scripts/expected_answers.py --model runs/facts-STAMP/artifact
    python scripts/expected_answers.py --option-mode list

Exits 2 with one line when the model cannot be loaded.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kevlike.config.engine import parse_threads

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def matches(answer: dict, expected) -> tuple[bool, str]:
    """``(match, what the model answered)`` for one answer of ``Engine.decide``'s response."""
    if answer["type"] == "noul":
        return (answer["noul"] > 0.5) == bool(expected), f"P(yes) {answer['noul']:.2f}"
    probs = answer["probabilities"]
    top = max(probs, key=probs.get)
    if answer["type"] == "score":
        return int(top) == int(expected), f"level {top} ({probs[top]:.2f})"
    return top == expected, f"{top} ({probs[top]:.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="decision model (default: kevlike-default)")
    ap.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or auto")
    ap.add_argument("--option-mode", choices=("list", "set"), default=None,
                    help="how choice options are read (default: the model's own, set for kevlike-default)")
    ap.add_argument("--threads", type=parse_threads, default=None,
                    help="torch threads: auto or N (default: $KEVLIKE_THREADS, else auto)")
    args = ap.parse_args()
    from kevlike.model.backbones import ModelNotFoundError
    from kevlike.model.engine import Engine

    try:
        engine = Engine.from_pretrained(args.model, dtype=args.dtype, threads=args.threads, option_mode=args.option_mode)
    except (ModelNotFoundError, ValueError) as e:
        ap.exit(2, f"expected_answers: {e}\n")
    meta = json.loads((EXAMPLES / "expected.meta.json").read_text())
    n = right = 0
    for name, entry in meta.items():
        answers = engine.decide(json.loads((EXAMPLES / name).read_text()))["answers"]
        for qid, expected in entry["_expected"].items():
            ok, got = matches(answers[qid], expected)
            n, right = n + 1, right + ok
            print(f"{'ok  ' if ok else 'MISS'} {name} {qid}: expected {expected!r}, answered {got}")
    print(f"{engine.name}, {args.dtype}, {engine.option_mode} mode: {right} of {n} expected answers matched")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
