"""The P(right) threshold for `--p-right-below` chosen on a records file's validation half, and what it does on its
test half (docs/guide/abstention.md, "Not done yet").

    python docs/results/stage40/p_right_below.py [VALIDATION_RECORDS TEST_RECORDS] [--split realistic] [--budget 0.05]

Default records: the shipped kevlike-reader's, stage 40 (docs/results/stage40/R6_*_records.jsonl.gz). The threshold is
the P(right) = (1 − x_abstain) · p_top at which the validation half's risk–coverage curve by P(right) reaches its
largest coverage with error ≤ the budget (kevlike.metrics.risk_coverage); the test half is only read with it.
"""

import argparse
import gzip
import json
import math
from pathlib import Path

from kevlike.metrics import correct, p_right, risk_coverage

HERE = Path(__file__).resolve().parent.parent


def load(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="*", default=[str(HERE / "stage40/R6_validation_records.jsonl.gz"),
                                                   str(HERE / "stage40/R6_test_records.jsonl.gz")])
    ap.add_argument("--split", default="realistic")
    ap.add_argument("--budget", type=float, default=0.05, help="largest error share on the answered questions")
    a = ap.parse_args()
    if len(a.records) != 2:
        ap.error("give two records files: the validation half's, then the test half's")
    val, test = ([r for r in load(p) if r["split"] == a.split and "x_abstain" in r] for p in a.records)
    ok = [c for c in risk_coverage(val, by="p_right") if c["risk"] <= a.budget]
    if not ok:
        raise SystemExit(f"no threshold keeps the error at or below {a.budget} on the validation half")
    t = max(ok, key=lambda c: c["coverage"])["threshold"]
    shown = math.floor(t * 1000) / 1000          # rounded down: --p-right-below SHOWN answers the same questions
    print(f"split {a.split}; threshold P(right) >= {t:.6f}, --p-right-below {shown:.3f} "
          f"(chosen on validation, error <= {a.budget})")
    for name, recs in (("validation", val), ("test", test)):
        kept = [r for r in recs if p_right(r) >= t]
        wrong = sum(not correct(r) for r in kept)      # an answered "cannot tell" counts as wrong
        print(f"{name}: {len(recs)} questions; answered {len(kept) / len(recs):.3f}; "
              f"error on the answered {wrong / max(len(kept), 1):.3f}")


if __name__ == "__main__":
    main()
