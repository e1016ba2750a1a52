"""Stage 30, decision 3: the weight of kevlike-default in kevlike-ensemble, chosen on pooled validation records.

    python docs/results/stage30/ensemble_weight.py DEFAULT_RECORDS QWEN_RECORDS --half validation --out runs/ens_val
    python docs/results/stage30/ensemble_weight.py DEFAULT_RECORDS QWEN_RECORDS --half test --weight W --out runs/ens_test

Pairs the two members' records of one half question by question (kevlike.eval.unseen.shared_questions), pools
them at each weight of the grid (kevlike.model.ensemble.pool_records, which tests/test_ensemble.py holds equal to
the ensemble's own records) and prints unseen, realistic and all-answerable accuracy per weight; the rule
(selection_rule.md, decision 3): the highest unseen accuracy, ties to realistic, then the larger weight. The
records of the chosen (or the given ``--weight``) pool are written as an eval run directory (records.jsonl and a
metrics.json naming the suite), so that `kevlike calibrate DIR --records OUT/records.jsonl` and
`kevlike eval --model DIR --reuse OUT` take them.
"""

import argparse

from kevlike.eval.unseen import by_split, correct, paired_half, unseen, write_run
from kevlike.model.ensemble import pool_records

GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


def accuracy(records):
    return sum(correct(r) for r in records) / len(records)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("default")
    ap.add_argument("qwen")
    ap.add_argument("--half", choices=("validation", "test"), required=True)
    ap.add_argument("--weight", type=float, default=None, help="pool at this weight only (the test half)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    a, b = paired_half(args.default, args.qwen, args.half)
    rows = []
    for w in ([args.weight] if args.weight is not None else GRID):
        pooled = pool_records([a, b], [w, 1 - w])
        answerable = [r for r in pooled if r.get("gold") is not None]
        row = {"w": w, "unseen": accuracy(unseen(pooled, args.half)),
               "realistic": accuracy(by_split(pooled, args.half)["realistic"]),
               "all answerable": accuracy(answerable), "records": pooled}
        rows.append(row)
        print(f"w = {w:.1f}: unseen {row['unseen']:.4f}, realistic {row['realistic']:.4f}, "
              f"all answerable {row['all answerable']:.4f}")
    best = max(rows, key=lambda r: (round(r["unseen"], 12), round(r["realistic"], 12), r["w"]))
    print(f"chosen: w = {best['w']:.1f}")
    path = write_run(args.out, best["records"], args.half,
                     f"pool of {args.default} (w = {best['w']}) and {args.qwen} (1 - w)")
    print(f"records: {path}")


if __name__ == "__main__":
    main()
