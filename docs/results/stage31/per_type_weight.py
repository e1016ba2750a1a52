"""Stage 31, decision B: one member weight per question type for kevlike-ensemble, chosen on pooled validation records.

    python docs/results/stage31/per_type_weight.py DEFAULT_RECORDS QWEN_RECORDS --half validation --out runs/ptw_val
    python docs/results/stage31/per_type_weight.py DEFAULT_RECORDS QWEN_RECORDS --half test \
        --weights noul=W choice=W score=W --out runs/ptw_test

Pairs the two members' records of one half question by question (kevlike.eval.unseen.shared_questions) and, for
each question type, pools that type's records at each weight of stage 30's grid (kevlike.model.ensemble.pool_records;
a question's pool depends on its own records only, so pooling a type's subset is pooling the whole at that weight)
and prints unseen and realistic accuracy of that type per weight. The rule (selection_rule.md, decision B): per
type the highest unseen accuracy of that type, ties to the weight nearer 0.6 (the shipped one). The pooled records
at the chosen (or given) weights are written as an eval run directory, as stage 30's ensemble_weight.py does.
"""

import argparse

from kevlike.eval.unseen import by_split, correct, paired_half, unseen, write_run
from kevlike.model.ensemble import pool_records

GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
SHIPPED = 0.6
TYPES = ("noul", "choice", "score")


def accuracy(records):
    return sum(correct(r) for r in records) / len(records) if records else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("default")
    ap.add_argument("qwen")
    ap.add_argument("--half", choices=("validation", "test"), required=True)
    ap.add_argument("--weights", nargs=3, default=None, metavar="TYPE=W", help="pool at these weights only (test)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    a, b = paired_half(args.default, args.qwen, args.half)
    given = dict(kv.split("=") for kv in args.weights) if args.weights else None
    chosen = {}
    for t in TYPES:
        idx = [i for i, r in enumerate(a) if r["type"] == t]
        ta, tb = [a[i] for i in idx], [b[i] for i in idx]
        rows = []
        for w in ([float(given[t])] if given else GRID):
            pooled = pool_records([ta, tb], [w, 1 - w])
            rows.append((w, accuracy(unseen(pooled, args.half)), accuracy(by_split(pooled, args.half).get("realistic", []))))
            print(f"{t:6s} w = {w:.1f}: unseen {rows[-1][1]:.4f} (n {len(unseen(pooled, args.half))}), "
                  f"realistic {rows[-1][2]:.4f} (n {len(by_split(pooled, args.half).get('realistic', []))})")
        chosen[t] = max(rows, key=lambda r: (round(r[1], 12), -abs(r[0] - SHIPPED)))[0]
    print("chosen: " + ", ".join(f"{t} {w:.1f}" for t, w in chosen.items()))
    pooled = [None] * len(a)
    for t in TYPES:
        idx = [i for i, r in enumerate(a) if r["type"] == t]
        for i, r in zip(idx, pool_records([[a[i] for i in idx], [b[i] for i in idx]], [chosen[t], 1 - chosen[t]])):
            pooled[i] = r
    print(f"all types: unseen {accuracy(unseen(pooled, args.half)):.4f}, "
          f"realistic {accuracy(by_split(pooled, args.half)['realistic']):.4f}, "
          f"all answerable {accuracy([r for r in pooled if r.get('gold') is not None]):.4f}")
    path = write_run(args.out, pooled, args.half,
                     f"pool of {args.default} and {args.qwen}, the default's weight per type {chosen}")
    print(f"records: {path}")


if __name__ == "__main__":
    main()
