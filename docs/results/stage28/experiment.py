"""Stage 28 B and C: negation twins for yes/no questions and contextual calibration, scored from ONE pass of a model
over the generalization suite's validation half (rule: selection_rule.md here).

    python docs/results/stage28/experiment.py --out runs/stage28bc              # ~50 min, 1 thread, Zen 4
    python docs/results/stage28/experiment.py --out runs/x --splits realistic   # one split (a check)

Each request of the half is answered twice in the same batched forward: once with every yes/no question Q (not a
"cannot tell" one) followed by three sibling branches, Q wrapped in three of the model's training negation frames
(``NEGATION_FRAMES``, kevlike/data/families.py; branches do not see each other, so Q's own logits are the
incumbent's), and once with its state replaced by the content-free ``N/A`` (Zhao et al. 2021, "Calibrate before
use", ICML). Raw logits are then combined and re-scored with the model's own temperatures
(``kevlike.eval.heldout.rescore``):

- ``orig``: Q's logits as they are (reproduces the incumbent's records; a check of the script);
- ``N1``: z' = ½ (z + flip(z_1)), z_1 the logits of 'Is the answer to "{q}" no?' (yes/no questions only);
- ``N3``: z' = ½ (z + mean over the three frames of flip(z_f));
- ``CF50`` / ``CF100``: z' = z − α z_cf for every question type, α = 0.5 / 1.

Writes ``OUT/{orig,N1,N3,CF50,CF100}_validation_records.jsonl`` (records as ``kevlike eval`` writes them, with
``split`` and ``half``); judge each with ``kevlike compare OUT/N1_validation_records.jsonl --baseline
docs/results/stage27/f33n_validation_records.jsonl.gz --half validation --by-split``.
"""
from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import torch
from tqdm import tqdm

from kevlike.data.families import NEGATION_FRAMES
from kevlike.data.sources import Example
from kevlike.eval.generalization import generalization_sets, half_key, half_of, with_halves
from kevlike.eval.heldout import rescore
from kevlike.metrics import records_from_logits
from kevlike.model.engine import Engine

FRAMES = ('Is the answer to "{q}" no?', 'Would replying yes to "{q}" be wrong?',
          'Is it false that the answer to "{q}" is yes?')
CONTENT_FREE = "N/A"
TWIN = "__neg{}"


def with_twins(ex: Example) -> Example:
    """``ex`` with three negation-frame branches after each answerable yes/no question (targets flipped)."""
    req, targets = copy.deepcopy(ex.request), dict(ex.targets)
    questions = {}
    for qid, q in req["questions"].items():
        questions[qid] = q
        if q.get("type") == "noul" and qid not in getattr(ex, "cannot_tell", ()):
            for i, frame in enumerate(FRAMES):
                questions[qid + TWIN.format(i)] = {**q, "instructions": frame.format(q=q["instructions"])}
                targets[qid + TWIN.format(i)] = list(reversed(ex.targets[qid]))
    req["questions"] = questions
    return Example(req, targets, ex.source, {}, cannot_tell=getattr(ex, "cannot_tell", ()))


def content_free(ex: Example) -> Example:
    return Example({**copy.deepcopy(ex.request), "state": CONTENT_FREE}, dict(ex.targets), ex.source, {},
                   cannot_tell=getattr(ex, "cannot_tell", ()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="kevlike-default")
    ap.add_argument("--out", required=True)
    ap.add_argument("--splits", default=None, help="comma-separated split names (default: all but bigbench)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=4)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    engine = Engine.from_pretrained(args.model, dtype="float32", threads=args.threads)
    splits = tuple(args.splits.split(",")) if args.splits else None
    sets = generalization_sets(splits=splits)
    sets.pop("bigbench", None)
    variants = {name: [] for name in ("orig", "N1", "N3", "CF50", "CF100")}
    for split, exs in sets.items():
        exs = [e for e in exs if half_of(half_key(split, e)) == "validation"]
        recs, cf_recs = [], []
        for i in tqdm(range(0, len(exs), args.batch_size), desc=split, unit="batch"):
            chunk = exs[i:i + args.batch_size]
            recs += records_from_logits(engine, [with_twins(e) for e in chunk], args.batch_size, calibrated=False)
            cf_recs += records_from_logits(engine, [content_free(e) for e in chunk], args.batch_size,
                                           calibrated=False)
        twins = {}
        own = []
        for r in recs:
            base, _, i = r["question"].partition("__neg")
            if i:
                twins.setdefault(len(own) - 1, []).append(torch.tensor(r["logits"]).flip(0))
            else:
                own.append(r)
        own = [{**r, "split": split} for r in own]
        own = with_halves(split, exs, own)
        for k, r in enumerate(own):
            z = torch.tensor(r["logits"])
            zc = torch.tensor(cf_recs[k]["logits"])
            assert cf_recs[k]["question"] == r["question"]
            tw = twins.get(k)
            variants["orig"].append(r)
            variants["N1"].append({**r, "logits": (0.5 * (z + tw[0])).tolist()} if tw else r)
            variants["N3"].append({**r, "logits": (0.5 * (z + torch.stack(tw).mean(0))).tolist()} if tw else r)
            variants["CF50"].append({**r, "logits": (z - 0.5 * zc).tolist()})
            variants["CF100"].append({**r, "logits": (z - zc).tolist()})
    for name, recs in variants.items():
        with open(out / f"{name}_validation_records.jsonl", "w") as f:
            for r in rescore(recs, engine.temperatures):
                f.write(json.dumps(r) + "\n")
        print(f"{name}: {len(recs)} records -> {out / f'{name}_validation_records.jsonl'}")


if __name__ == "__main__":
    main()
