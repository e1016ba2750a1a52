"""Does asking each yes/no question a second time inside a negation frame, in the same request, make the
answers read the text rather than the topic? An inference-time experiment on the generalization suite.

Every noul question ``Q`` of the chosen splits gets twins ``F_i(Q)`` in its own request, ``F_i`` the
entries ``--frame-ids`` of :data:`kevlike.data.families.NEGATION_FRAMES` (default 0 and 9:
``'Is the answer to "{q}" no?'``, ``'Would replying yes to "{q}" be wrong?'``; criteria swapped true ↔ false,
where training's ``wrap_negation`` leaves questions with criteria unframed), which stages 6–9 trained on
with the answer swapped. With ``d(x)`` a question's noul log-odds (``z_true − z_false``, uncalibrated) the
symmetrized answer is ``sigmoid((d(Q) − mean_i d(F_i(Q))) / 2)``: a lean to "yes" that raises
``d(Q)`` and ``d(F(Q))`` alike (topicality) cancels, if the model reads the frame. Branch isolation makes
the twins nearly free (one more branch each), so a gain would be worth serving.

Prints, per split and per readout (``raw``: Q alone; ``frame``: 1 − P(yes | F_0(Q)); ``sym``), accuracy,
ECE and NLL of the noul questions, and on the contrast splits the share right on both states and
negation coherence (:mod:`kevlike.eval.generalization`); ``--out`` also writes the records (JSONL).

    python experiments/frame_twins.py --quick --threads 2
"""

from __future__ import annotations

import argparse
import json
import math

from kevlike.data.families import NEGATION_FRAMES
from kevlike.data.sources import DataUnavailableError, Example
from kevlike.eval.generalization import (CONTRAST_SPLITS, contrast_metrics, contrast_pairs, counted,
                                        generalization_sets)
from kevlike.metrics import records_from_logits, summary
from kevlike.model.backbones import ModelNotFoundError
from kevlike.model.engine import Engine
from kevlike.config.engine import parse_threads

SPLITS = ("seen_wording", "heldout_wording", "heldout_source", "target/spam_balanced", *CONTRAST_SPLITS)


def with_frame_twins(ex: Example, frames: list[str]) -> Example | None:
    """``ex`` reduced to its noul questions, each followed by twin ``{id}__f{i}`` asked in frame ``i`` (target
    and criteria swapped); None if it has no noul question. Other questions are dropped: branches do not
    see each other, so the noul logits are those of the full request."""
    qs, targets = {}, {}
    for qid, q in ex.request["questions"].items():
        if q["type"] != "noul":
            continue
        qs[qid], targets[qid] = q, ex.targets[qid]
        for i, frame in enumerate(frames):
            twin = {**q, "instructions": frame.format(q=q["instructions"])}
            if q.get("criteria"):
                twin["criteria"] = {"true": q["criteria"].get("false"), "false": q["criteria"].get("true")}
            qs[f"{qid}__f{i}"], targets[f"{qid}__f{i}"] = twin, ex.targets[qid][::-1]
    return Example({**ex.request, "questions": qs}, targets, ex.source, {}) if qs else None


def readout(by: dict, r: dict, mode: str, n_frames: int) -> float:
    """P(yes) of record ``r`` under ``mode`` (``raw``, ``frame``, ``sym``); ``by`` maps (split, source,
    question) to records."""
    def d(rec):
        return rec["logits"][0] - rec["logits"][1]

    twins = [by[(r["split"], r["source"], f"{r['question']}__f{i}")] for i in range(n_frames)]
    x = {"raw": d(r), "frame": -d(twins[0]),
         "sym": (d(r) - sum(d(t) for t in twins) / n_frames) / 2}[mode]
    return 1 / (1 + math.exp(-x))


def report(records: list[dict], n_frames: int) -> str:
    by = {(r["split"], r["source"], r["question"]): r for r in records}
    pairs = contrast_pairs()
    lines = ["| split | readout | n | accuracy | ECE | NLL | right on both states | negation coherence |",
             "|---|---|---|---|---|---|---|---|"]
    for split in [s for s in SPLITS if any(r["split"] == s for r in records)]:
        base = [r for r in records if r["split"] == split and "__f" not in r["question"] and counted(r)]
        for mode in ("raw", "frame", "sym"):
            s = summary([{**r, "probs": [p, 1 - p]} for r in base for p in [readout(by, r, mode, n_frames)]])
            both = coh = ""
            if split in CONTRAST_SPLITS:
                m = contrast_metrics([r for r in records if r["split"] == split], pairs[split], split,
                                     p_yes=lambda r, mode=mode: readout(by, r, mode, n_frames))
                both, coh = f"{m['both_right']:.3f}", f"{m['coherence']['negation']:.3f}"
            lines.append(f"| {split} | {mode} | {s['n']} | {s['accuracy']:.3f} | {s['ece']:.3f} | {s['nll']:.3f} | "
                         f"{both} | {coh} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="decision model (default: kevlike-default)")
    ap.add_argument("--quick", action="store_true", help="the generalization-quick sizes (contrast splits in full)")
    ap.add_argument("--frame-ids", default="0,9",
                    help=f"comma-separated indices into NEGATION_FRAMES, 0 to {len(NEGATION_FRAMES) - 1} (default: 0,9)")
    ap.add_argument("--threads", type=parse_threads, default=None,
                    help="torch threads: auto or N (default: $KEVLIKE_THREADS, else auto)")
    ap.add_argument("--out", default=None, help="write the records to this JSONL file")
    args = ap.parse_args()
    try:
        ids = [int(x) for x in args.frame_ids.split(",")]
    except ValueError:
        ids = []
    if not ids or any(not 0 <= i < len(NEGATION_FRAMES) for i in ids):
        ap.error(f"--frame-ids must be indices from 0 to {len(NEGATION_FRAMES) - 1}, got {args.frame_ids!r}")
    frames = [NEGATION_FRAMES[i] for i in ids]
    try:
        engine = Engine.from_pretrained(args.model, dtype="float32", threads=args.threads)
        sets = generalization_sets(quick=args.quick)
    except (ModelNotFoundError, DataUnavailableError, ValueError) as e:
        ap.exit(2, f"frame_twins: {e}\n")
    records = []
    for split in SPLITS:
        exs = [e for e in (with_frame_twins(x, frames) for x in sets[split]) if e]
        records += [{**r, "split": split} for r in records_from_logits(engine, exs, 4, progress=True, calibrated=False)]
    if args.out:
        with open(args.out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
    print(f"model {engine.name}, float32, frames {ids}, uncalibrated (T = 1)\n")
    print(report(records, len(frames)))


if __name__ == "__main__":
    main()
