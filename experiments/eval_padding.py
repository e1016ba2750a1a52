"""Padded tokens of the generalization suite's validation half at ``--batch 4``: requests in file order against
requests sorted by length (what ``kevlike.metrics.records_from_logits`` does). A packed batch is padded to its
longest request, and on a CPU a padded token costs what a real one does.

    python experiments/eval_padding.py [--model kevlike-reader] [--half validation]

Prints per split: requests, real tokens, tokens padded in file order, tokens padded when sorted. Loads the model
(its tokenizer and delimiters encode the requests; no forward pass).
"""

import argparse

from kevlike.eval.generalization import generalization_sets, half_key, half_of
from kevlike.model.engine import Engine
from kevlike.request.schema import validate_request


def padded(lengths: list[int], batch: int) -> int:
    return sum(max(lengths[i:i + batch]) * len(lengths[i:i + batch]) for i in range(0, len(lengths), batch))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="kevlike-reader")
    ap.add_argument("--half", default="validation", choices=("validation", "test"))
    ap.add_argument("--batch", type=int, default=4)
    args = ap.parse_args()
    engine = Engine.from_pretrained(args.model, threads=1)
    total = [0, 0, 0]
    print(f"| split | requests | tokens | padded, file order | padded, sorted |\n|---|---|---|---|---|")
    for split, examples in generalization_sets(quick=False, n=None, bigbench=None).items():
        examples = [e for e in examples if half_of(half_key(split, e)) == args.half]
        lengths = [engine.encode(validate_request(e.request)).n_tokens for e in examples]
        row = [sum(lengths), padded(lengths, args.batch), padded(sorted(lengths), args.batch)]
        total = [a + b for a, b in zip(total, row)]
        print(f"| {split} | {len(lengths)} | " + " | ".join(f"{x:,}" for x in row) + " |")
    print("| all | | " + " | ".join(f"{x:,}" for x in total) + " |")


if __name__ == "__main__":
    main()
