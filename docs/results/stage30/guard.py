"""Stage 30: contrast_apart right on both states, candidate against baseline, paired over (pair, question) items.

    python docs/results/stage30/guard.py CANDIDATE_RECORDS BASELINE_RECORDS --half validation

Prints each run's share of pair questions right on both states (the noul form, as the report's
``contrast_apart_both_right``), their difference and its paired standard error (the standard deviation of the
per-item differences over √n), for the rule's guard: worse by more than 0.03 and by more than two paired SEs.
"""
import argparse

from kevlike.eval.generalization import contrast_pairs
from kevlike.eval.unseen import load


def both_right(records, pairs, split="contrast_apart"):
    by = {(r["source"], r["question"]): r for r in records if r["source"].startswith(f"{split}/")}
    out = {}
    for pair in pairs:
        for i in range(len(pair["questions"])):
            oks = [(by[(f"{split}/{pair['id']}/{s}", f"q{i}")]["probs"][0] > 0.5)
                   == (by[(f"{split}/{pair['id']}/{s}", f"q{i}")]["gold"] == 0) for s in (0, 1)]
            out[(pair["id"], i)] = int(all(oks))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("candidate")
    ap.add_argument("baseline")
    ap.add_argument("--half", required=True)
    args = ap.parse_args()
    a, b = ([r for r in load(p) if r.get("half") == args.half] for p in (args.candidate, args.baseline))
    pairs = [p for p in contrast_pairs()["contrast_apart"]
             if any(r["source"].startswith(f"contrast_apart/{p['id']}/") for r in a)]
    x, y = both_right(a, pairs), both_right(b, pairs)
    d = [x[k] - y[k] for k in x]
    n = len(d)
    mean = sum(d) / n
    se = (sum((v - mean) ** 2 for v in d) / (n - 1) / n) ** 0.5
    print(f"contrast_apart right on both ({args.half}, n {n}): candidate {sum(x.values()) / n:.3f}, baseline "
          f"{sum(y.values()) / n:.3f}, difference {mean:+.3f}, paired SE {se:.3f} ({abs(mean) / se if se else 0:.1f} SE)")


if __name__ == "__main__":
    main()
