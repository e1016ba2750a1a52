"""Stage 31, decision C: the bare Qwen2.5-Coder-0.5B LM readout as a third member of kevlike-ensemble.

    python docs/results/stage31/third_member.py ENSEMBLE_RECORDS LM_RECORDS --half validation --out runs/c_val
    python docs/results/stage31/third_member.py ENSEMBLE_RECORDS LM_RECORDS --half test --v V --out runs/c_test

ENSEMBLE_RECORDS: kevlike-ensemble's records of one half (docs/results/stage30/ensemble_{half}_records.jsonl.gz);
LM_RECORDS: the LM readout's records of the same half (`kevlike eval --model qwen2.5-coder-0.5b-instruct --suite
generalization --half HALF --no-lm-baseline --dtype float32`). The ensemble's records hold the log of its members'
uncalibrated mixture (``logits``) and of their mixed x_abstain (``abstain_logit``), so its two members enter the
pool as one record at weight 1 − v: 0.6 (1 − v) × default + 0.4 (1 − v) × kevlike-qwen + v × LM readout, the
rule's candidate (selection_rule.md, C), pooled by kevlike.model.ensemble.pool_records (the LM readout has no
x_abstain: the pool's is the two members', as the served ensemble mixes it). Prints unseen, realistic and
all-answerable accuracy at each v of {0.1, 0.2, 0.3} (``--grid``; or the given ``--v``); the rule: the highest unseen accuracy,
ties to the smaller v. The chosen pool's records are written as an eval run directory (kevlike.eval.unseen.write_run)
for `kevlike calibrate ENSEMBLE_DIR --records OUT/records.jsonl` and `kevlike eval --model ENSEMBLE_DIR --reuse OUT`.
"""

import argparse
import math

import torch

from kevlike.eval.unseen import by_split, correct, paired_half, unseen, write_run
from kevlike.model.ensemble import pool_records

GRID = (0.1, 0.2, 0.3)


def accuracy(records):
    return sum(correct(r) for r in records) / len(records) if records else float("nan")


def uncalibrated(record):
    """The ensemble's record as its members' raw mixture: probs = softmax(logits), x_abstain = σ(abstain_logit)."""
    out = {**record, "probs": torch.softmax(torch.tensor(record["logits"], dtype=torch.float64), -1).tolist()}
    if record.get("abstain_logit") is not None:
        out["x_abstain"] = 1 / (1 + math.exp(-record["abstain_logit"]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ensemble")
    ap.add_argument("lm")
    ap.add_argument("--half", choices=("validation", "test"), required=True)
    ap.add_argument("--v", type=float, default=None, help="pool at this LM weight only (the test half)")
    ap.add_argument("--grid", type=float, nargs="+", default=GRID, help="the LM weights tried (default: %(default)s)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    a, b = paired_half(args.ensemble, args.lm, args.half)
    a = [uncalibrated(r) for r in a]
    choose_and_write(a, b, [args.v] if args.v is not None else args.grid, args.half, args.out,
                     f"pool of {args.ensemble} (1 - v) and {args.lm}")


def choose_and_write(a, b, grid, half: str, out: str, what: str, label: str = "") -> dict:
    """Pool ``a`` at 1 − v with ``b`` at v for each v of ``grid``, print unseen, realistic and all-answerable
    accuracy, choose the highest unseen accuracy (ties: the smaller v) and write its records as an eval run in
    ``out``; returns the chosen row (``v``, the accuracies, ``records``)."""
    rows = []
    for v in grid:
        pooled = pool_records([a, b], [1 - v, v])
        rows.append({"v": v, "unseen": accuracy(unseen(pooled, half)),
                     "realistic": accuracy(by_split(pooled, half)["realistic"]),
                     "all": accuracy([r for r in pooled if r.get("gold") is not None]), "records": pooled})
        print(f"{label}v = {v:g}: unseen {rows[-1]['unseen']:.4f}, realistic {rows[-1]['realistic']:.4f}, "
              f"all answerable {rows[-1]['all']:.4f}")
    best = max(rows, key=lambda r: (round(r["unseen"], 12), -r["v"]))
    print(f"chosen: v = {best['v']:g}")
    path = write_run(out, best["records"], half, f"{what} (v = {best['v']})")
    print(f"records: {path}")
    return best


if __name__ == "__main__":
    main()
