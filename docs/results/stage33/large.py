"""Stage 33, decision E: the bare Qwen2.5-Coder-1.5B LM readout pooled with kevlike's models (selection_rule.md, E).

    python docs/results/stage33/large.py L ENSEMBLE3_RECORDS Q15_RECORDS --half validation --out runs/l_val
    python docs/results/stage33/large.py M DEFAULT_RECORDS Q15_RECORDS --half validation --out runs/m_val
    python docs/results/stage33/large.py L ENSEMBLE3_RECORDS Q15_RECORDS --half test --v V --out runs/l_test

L: (1 − v) × kevlike-ensemble's uncalibrated mixture (its records' ``logits`` are the log of the members' mixture,
as in docs/results/stage31/third_member.py) + v × the 1.5B readout. M: (1 − v) × the shipped default's calibrated
answers (its records' ``probs``) + v × the 1.5B readout. Pooled by kevlike.model.ensemble.pool_records (x_abstain:
the members' that have it). Prints unseen, realistic and all-answerable accuracy at each v of the grid; the rule:
the highest unseen accuracy, ties to the smaller v. The chosen pool's records are written as an eval run directory
for `kevlike calibrate DIR --records OUT/records.jsonl` and `kevlike eval --model DIR --reuse OUT`.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stage31"))

from third_member import choose_and_write, uncalibrated  # noqa: E402

from kevlike.eval.unseen import paired_half  # noqa: E402

GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("candidate", choices=("L", "M"))
    ap.add_argument("first", help="L: kevlike-ensemble's records; M: the default's")
    ap.add_argument("lm", help="the 1.5B readout's records of the same half")
    ap.add_argument("--half", choices=("validation", "test"), required=True)
    ap.add_argument("--v", type=float, default=None, help="pool at this weight only (the test half)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    a, b = paired_half(args.first, args.lm, args.half)
    if args.candidate == "L":
        a = [uncalibrated(r) for r in a]
    choose_and_write(a, b, [args.v] if args.v is not None else GRID, args.half, args.out,
                     f"stage 33 {args.candidate}: pool of {args.first} (1 - v) and {args.lm}", f"{args.candidate}, ")


if __name__ == "__main__":
    main()
