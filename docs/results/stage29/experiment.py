"""Stage 29 Y: choice questions read through per-option yes/no branches, scored from ONE pass of a model over the
generalization suite's validation half (rule: selection_rule.md here, "variant family Y").

    python docs/results/stage29/experiment.py --out runs/stage29y                 # the validation half, 1 thread
    python docs/results/stage29/experiment.py --out runs/x --splits realistic      # one split (a check)

Each request of the half is answered once, with every choice question Q (not a "cannot tell" one) followed by one
sibling yes/no branch per option o, ``{Q} Is the answer "{o}"?`` (branches do not see each other, so Q's own logits
are the model's). With d_o = z_yes − z_no the branch's log-odds, raw logits are combined and re-scored with the
model's own temperatures (``kevlike.eval.heldout.rescore``):

- ``orig``: Q's logits as they are (reproduces the model's records; a check of the script);
- ``Y``: Q's logits replaced by (d_o);
- ``E``: Q's logits replaced by log_softmax(z) + log_softmax(d).

Writes ``OUT/{orig,Y,E}_validation_records.jsonl`` (records as ``kevlike eval`` writes them, with ``split`` and
``half``) and ``OUT/cost.json`` (branches and tokens of the requests with and without the yes/no branches); judge
each with ``kevlike compare OUT/Y_validation_records.jsonl --baseline
docs/results/stage28/h33_validation_records.jsonl.gz --half validation --by-split``.
"""
from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import torch
from tqdm import tqdm

from kevlike.data.sources import Example
from kevlike.eval.generalization import generalization_sets, half_key, half_of, with_halves
from kevlike.eval.heldout import rescore
from kevlike.metrics import records_from_logits
from kevlike.model.engine import Engine
from kevlike.request.schema import validate_request

FRAME = '{q} Is the answer "{o}"?'
TWIN = "__opt{}"


def with_option_questions(ex: Example) -> Example:
    """``ex`` with one yes/no branch per option after each answerable choice question (target: yes for the gold)."""
    req, targets = copy.deepcopy(ex.request), dict(ex.targets)
    questions = {}
    for qid, q in req["questions"].items():
        questions[qid] = q
        if q.get("type") == "choice" and qid not in getattr(ex, "cannot_tell", ()):
            for i, o in enumerate(q["criteria"]):
                questions[qid + TWIN.format(i)] = {"type": "noul", "instructions": FRAME.format(q=q["instructions"], o=o),
                                                   "criteria": None}
                targets[qid + TWIN.format(i)] = [1.0, 0.0] if ex.targets[qid][i] == max(ex.targets[qid]) else [0.0, 1.0]
    req["questions"] = questions
    return Example(req, targets, ex.source, {}, cannot_tell=getattr(ex, "cannot_tell", ()))


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
    sets = generalization_sets(splits=tuple(args.splits.split(",")) if args.splits else None)
    sets.pop("bigbench", None)
    variants = {name: [] for name in ("orig", "Y", "E")}
    cost = {"requests": 0, "branches": 0, "branches_with_y": 0, "tokens": 0, "tokens_with_y": 0}
    for split, exs in sets.items():
        exs = [e for e in exs if half_of(half_key(split, e)) == "validation"]
        recs = []
        for i in tqdm(range(0, len(exs), args.batch_size), desc=split, unit="batch"):
            chunk = exs[i:i + args.batch_size]
            twinned = [with_option_questions(e) for e in chunk]
            recs += records_from_logits(engine, twinned, args.batch_size, calibrated=False)
            for e, t in zip(chunk, twinned):
                cost["requests"] += 1
                cost["branches"] += len(e.request["questions"])
                cost["branches_with_y"] += len(t.request["questions"])
                cost["tokens"] += engine.encode(validate_request(e.request)).n_tokens
                cost["tokens_with_y"] += engine.encode(validate_request(t.request)).n_tokens
        own, d = [], {}
        for r in recs:
            base, _, i = r["question"].partition("__opt")
            if i:
                d.setdefault(len(own) - 1, []).append(r["logits"][0] - r["logits"][1])
            else:
                own.append(r)
        own = with_halves(split, exs, [{**r, "split": split} for r in own])
        for k, r in enumerate(own):
            variants["orig"].append(r)
            if k not in d:
                variants["Y"].append(r)
                variants["E"].append(r)
                continue
            z, dz = torch.tensor(r["logits"]), torch.tensor(d[k])
            assert dz.shape == z.shape, (r["source"], r["question"])
            variants["Y"].append({**r, "logits": dz.tolist()})
            variants["E"].append({**r, "logits": (z.log_softmax(-1) + dz.log_softmax(-1)).tolist()})
    for name, recs in variants.items():
        with open(out / f"{name}_validation_records.jsonl", "w") as f:
            for r in rescore(recs, engine.temperatures):
                f.write(json.dumps(r) + "\n")
        print(f"{name}: {len(recs)} records -> {out / f'{name}_validation_records.jsonl'}")
    (out / "cost.json").write_text(json.dumps(cost, indent=1) + "\n")
    print(json.dumps(cost))


if __name__ == "__main__":
    main()
